package reentrant

// The owners and the queue, under mu: granting, dropping, and waking the
// waiters at the head of the queue in order.

// notOwner returns ErrRevoked, consuming one revoked hold, if who has one,
// else ErrNotOwner. mu must be held.
func (m *Mutex) notOwner(who Owner) error {
	n := m.revoked[who]
	switch {
	case n == 0:
		return ErrNotOwner
	case n == 1:
		delete(m.revoked, who)
		m.nrev.Add(-1)
	default:
		m.revoked[who] = n - 1
	}
	return ErrRevoked
}

// indexFrom is how many owners m holds before it indexes them (find): a
// scan of a few is cheaper than a map.
const indexFrom = 16

// grant makes who an owner of weight w, once. mu must be held.
func (m *Mutex) grant(who Owner, w int64) {
	m.owners = append(m.owners, holding{who: who, weight: w, depth: 1})
	switch {
	case m.index != nil:
		m.index[who] = len(m.owners) - 1
	case len(m.owners) > indexFrom:
		m.index = make(map[Owner]int, 2*len(m.owners))
		for i, o := range m.owners {
			m.index[o.who] = i
		}
	}
	m.held += w
	m.setSole()
}

// drop removes owners[i] and gives its part back. mu must be held.
func (m *Mutex) drop(i int) {
	m.held -= m.owners[i].weight
	last := len(m.owners) - 1
	if m.index != nil {
		delete(m.index, m.owners[i].who)
		if i != last {
			m.index[m.owners[last].who] = i
		}
		if last <= indexFrom/2 {
			m.index = nil
		}
	}
	m.owners[i] = m.owners[last]
	m.owners[last] = holding{}
	m.owners = m.owners[:last]
	m.setSole()
}

// setSole updates sole. mu must be held.
func (m *Mutex) setSole() {
	if len(m.owners) == 1 {
		m.sole.Store(int64(m.owners[0].who))
	} else {
		m.sole.Store(0)
	}
}

// wake grants m to the waiters at the head of the queue, in order, while
// each fits; the first that does not fit stops it, so that it is not
// starved by smaller requests behind it. mu must be held.
func (m *Mutex) wake() {
	for len(m.waiters) > 0 {
		next := m.waiters[0]
		if m.free() < next.weight {
			return
		}
		m.waiters[0] = nil
		m.waiters = m.waiters[1:]
		m.grant(next.who, next.weight)
		close(next.ready)
	}
}

// remove deletes w from the queue. mu must be held.
func (m *Mutex) remove(w *waiter) {
	for i, x := range m.waiters {
		if x == w {
			copy(m.waiters[i:], m.waiters[i+1:])
			m.waiters[len(m.waiters)-1] = nil
			m.waiters = m.waiters[:len(m.waiters)-1]
			return
		}
	}
}
