package reentrant

// Revocation: an owner's holds taken from it (the registry revokes the
// local mutex of a lock whose hold was lost while goroutines queue behind
// it). The revoked owner learns it at its next Leave or Unlock
// (ErrRevoked).

// Revoke takes m from its sole owner, if it has exactly one, that owner is
// not finishing its last hold (see Leave), and ok, called with m's
// internal lock held, agrees; m then goes to the waiters that fit. The
// owner's holds are recorded: each of its later Leave or Unlock calls
// returns ErrRevoked. It is for an owner that will not unlock in time (a
// goroutine that exited holding m, or whose hold of what m guards expired).
// ok must not call m's methods.
func (m *Mutex) Revoke(ok func() bool) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.owners) != 1 {
		return false
	}
	return m.revoke(0, ok)
}

// RevokeOwner is Revoke for who, one of m's owners.
func (m *Mutex) RevokeOwner(who Owner, ok func() bool) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	i := m.find(who)
	if i < 0 {
		return false
	}
	return m.revoke(i, ok)
}

// revoke takes m's part from owners[i] if it is not leaving and ok agrees.
// mu must be held.
func (m *Mutex) revoke(i int, ok func() bool) bool {
	o := m.owners[i]
	if o.leaving || !ok() {
		return false
	}
	if m.revoked == nil {
		m.revoked = make(map[Owner]int)
	}
	if m.revoked[o.who] == 0 {
		m.nrev.Add(1)
	}
	m.revoked[o.who] += o.depth
	m.drop(i)
	m.wake()
	return true
}

// AnyRevoked reports whether some owner has holds that Revoke took and
// that it has not yet unlocked: without a lock, so that the common case
// (none) costs one atomic load.
func (m *Mutex) AnyRevoked() bool { return m.nrev.Load() > 0 }

// Revoked reports whether who has holds that Revoke took and that it has
// not yet unlocked.
func (m *Mutex) Revoked(who Owner) bool {
	if m.nrev.Load() == 0 {
		return false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.revoked[who] > 0
}
