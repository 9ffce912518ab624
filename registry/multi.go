package registry

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/lockyard/lockyard/internal/core"
	"github.com/lockyard/lockyard/internal/wire"
)

// MaxKeys is the most keys that AcquireAll and TryAcquireAll take at once.
const MaxKeys = 64

// kindMulti names the kind of AcquireAll's leases (Event.Kind).
const kindMulti = "multi"

// AcquireAll waits until this registry holds every key of keys in Redis,
// or ctx ends, and returns one Lease that holds them all. The keys are
// the mutex's: a multi-key lease of {a, b} excludes the RedisLock of a,
// the leases of a (Acquire) and a Spring client of a, in any registry and
// process, and they exclude it. Its rules are those of Acquire: ttl <= 0
// means expireAfter, transient Redis errors are retried until ctx ends,
// and on error nothing is held.
//
// Where the keys lie on one node (one Redis, a Sentinel master, or keys
// of one Cluster slot, which a shared hash tag gives: "{acct}:1",
// "{acct}:2"), they are taken by one script, all or none, in one round
// trip when all are free. A waiter first tries whenever every key that a
// holder kept from it has been released; after 100 ms it waits its
// turn in the line of every key, as a RedisLock does, so that single-key
// lockers cannot keep it out by keeping its keys busy in turn. It gathers:
// it keeps the turns of the keys it could take while the others free, for
// 20 ms; after a vain gathering it lets them go until the key that kept it
// out longest frees, then gathers for twice as long (up to a second), so a
// key held long does not idle the others.
//
// Across Cluster slots the keys are taken in one global order, by slot
// and then by key, one script per slot's group, so that no two callers
// deadlock; the groups already taken are held while a later one is waited
// for (renewed every third of the TTL, as a held lock is), and given back
// if the wait fails. That is not atomic: a reader of the keys may see the
// first groups taken before the last. A caller that holds a key of a
// later group with a RedisLock or a lease and then waits for a key of an
// earlier one does not follow that order: it and AcquireAll wait for each
// other until one of them gives up, as two nested locks taken in opposite
// orders do. Take such keys together, with AcquireAll. The registry
// learns that the server is a Cluster from its first CROSSSLOT reply,
// which never reaches the caller.
//
// A multi-key lease is no owner in the local queue of its keys' RedisLocks:
// it waits for their holders in Redis, as another registry would, so a
// goroutine that holds the RedisLock of one of the keys must not call
// AcquireAll on it (it would wait for itself until ctx ends).
//
// Errors: ErrInvalidKey for no key, more than MaxKeys, a duplicate, a bad
// key, or a key that this registry caches as another kind (nothing is
// sent); ErrWrongKind, naming the key, when one is another kind in Redis;
// ErrInvalidConfig under Redlock or WithReplicaAck.
func (r *Registry) AcquireAll(ctx context.Context, keys []string, ttl time.Duration) (*Lease, error) {
	return r.acquireAll(ctx, keys, ttl, true)
}

// TryAcquireAll makes one attempt at every key: ErrNotObtained if another
// holder has one of them (or a waiter's turn keeps one), and then nothing
// is held. Other errors are those of AcquireAll.
func (r *Registry) TryAcquireAll(ctx context.Context, keys []string, ttl time.Duration) (*Lease, error) {
	return r.acquireAll(ctx, keys, ttl, false)
}

// Keys returns the full Redis keys of the lease, in the order they were
// asked for: one, Key, for a lease of Acquire or a semaphore.
func (le *Lease) Keys() []string {
	if m, ok := le.of.(*multiLock); ok {
		return slices.Clone(m.lks)
	}
	return []string{le.Key()}
}

// Tokens returns the fencing token of each key of the lease (WithFencing),
// in the order of Keys: each is larger than the token of every earlier
// hold of its key. They are 0 once the lease is released, or without
// WithFencing. Token returns the first.
func (le *Lease) Tokens() []int64 {
	m, ok := le.of.(*multiLock)
	if !ok {
		return []int64{le.Token()}
	}
	out := make([]int64, len(m.lks))
	if le.current() {
		copy(out, m.fences)
	}
	return out
}

// acquireAll is AcquireAll (waits) and TryAcquireAll.
func (r *Registry) acquireAll(ctx context.Context, keys []string, ttl time.Duration, waits bool) (*Lease, error) {
	m, ttl, err := r.newMulti(keys, ttl)
	if err != nil {
		return nil, err
	}
	if r.core.BG.IsClosed() {
		return nil, ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return nil, core.WrapKey("trying", m.desc, err)
	}
	start := r.core.Now()
	if waits {
		r.obs.waiting(kindMulti, m.lks[0])
	}
	waited, err := m.obtain(ctx, ttl, waits)
	if waits {
		r.obs.waited(err)
	} else {
		r.obs.tried(err)
	}
	if err != nil {
		return nil, err
	}
	wait := time.Duration(r.core.Now() - start)
	if !waits {
		wait = -1
	}
	m.since = r.obs.acquired(kindMulti, m.lks[0], m.h, waited, wait)
	return &Lease{of: m, h: m.h, since: m.since}, nil
}

// newMulti checks keys and ttl (0: expireAfter), and returns the
// multi-key lock of keys, not yet acquired.
func (r *Registry) newMulti(keys []string, ttl time.Duration) (*multiLock, time.Duration, error) {
	switch {
	case r.multi == nil:
		return nil, 0, fmt.Errorf("%w: AcquireAll needs one Redis master, not Redlock", ErrInvalidConfig)
	case r.cfg.ackReplicas > 0:
		return nil, 0, fmt.Errorf("%w: AcquireAll does not wait for replicas (WithReplicaAck)", ErrInvalidConfig)
	case len(keys) == 0:
		return nil, 0, fmt.Errorf("%w: no keys", ErrInvalidKey)
	case len(keys) > MaxKeys:
		return nil, 0, fmt.Errorf("%w: %d keys, more than MaxKeys (%d)", ErrInvalidKey, len(keys), MaxKeys)
	}
	if ttl <= 0 {
		ttl = r.cfg.expireAfter
	} else if err := checkDuration("ttl", ttl, MinExpireAfter); err != nil {
		return nil, 0, err
	}
	m := &multiLock{eng: &r.engine, proto: r.multi, names: slices.Clone(keys), lks: make([]string, len(keys))}
	seen := make(map[string]struct{}, len(keys))
	for i, k := range keys {
		if err := checkLockKey(r.layout, k); err != nil {
			return nil, 0, err
		}
		if _, dup := seen[k]; dup {
			return nil, 0, fmt.Errorf("%w: key %q given twice", ErrInvalidKey, k)
		}
		seen[k] = struct{}{}
		if e, ok := r.cache.peek(k); ok && e.kind() != kindLock {
			return nil, 0, fmt.Errorf("%w: %q is cached as a %s, not a lock", ErrInvalidKey, k, e.kind())
		}
		m.lks[i] = r.layout.LockKey(k)
	}
	m.desc = describeKeys(m.lks)
	m.wake = core.NewWaker(r.cfg.lockType == PubSubLock)
	if m.wake != nil {
		m.keys, m.counts = make([]*keyWake, len(keys)), make([]signaler, len(keys))
		for i := range keys {
			m.keys[i] = &keyWake{parent: m.wake, pending: &m.pending}
			m.counts[i] = m.keys[i]
		}
	}
	return m, ttl, nil
}

// describeKeys names lks in errors and logs (which quote it): the first
// three, and how many more.
func describeKeys(lks []string) string {
	var b strings.Builder
	for i, lk := range lks[:min(len(lks), 3)] {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(lk)
	}
	if len(lks) > 3 {
		fmt.Fprintf(&b, " and %d more", len(lks)-3)
	}
	return b.String()
}

// multiLock is one multi-key acquisition: its keys, its groups (the keys
// that one script takes), its one token and its hold, which the watchdog
// renews (it is the hold's Renewer) and whose loss is any key's.
type multiLock struct {
	eng   *engine
	proto *multiProto
	names []string // the keys as asked for
	lks   []string // their lock keys, in the same order
	desc  string   // the keys, for errors and logs
	// groups are the indexes of lks that one script takes, in the global
	// order (slot, then lock key): one group on a server that is no
	// Cluster, one per slot on a Cluster.
	groups [][]int
	token  string
	fences []int64 // per key, in the order of lks
	h      *core.Hold
	since  int64 // when it was acquired, on the registry clock (observe.go)
	waiter core.Waiter
	wake   *core.Waker
	// keys count each key's release messages for the waiter (nil without
	// wake: a SpinLock registry's waiter polls); counts is the same, as
	// what the engine's watchers signal.
	keys    []*keyWake
	counts  []signaler
	pending atomic.Int32 // keyWake.pending
	// gather is until when (registry clock) its attempts keep the turns of
	// the free keys (multiacquire.go).
	gather int64
}

// group sorts the keys in the global order, and groups them by slot on a
// Cluster.
func (m *multiLock) group() {
	order := make([]int, len(m.lks))
	slots := make([]uint16, len(m.lks))
	for i, lk := range m.lks {
		order[i], slots[i] = i, wire.Slot(lk)
	}
	slices.SortFunc(order, func(a, b int) int {
		return cmp.Or(cmp.Compare(slots[a], slots[b]), strings.Compare(m.lks[a], m.lks[b]))
	})
	m.groups = m.groups[:0]
	if !m.proto.cluster.Load() {
		m.groups = append(m.groups, order)
		return
	}
	for len(order) > 0 {
		n := 1
		for n < len(order) && slots[order[n]] == slots[order[0]] {
			n++
		}
		m.groups = append(m.groups, order[:n:n])
		order = order[n:]
	}
}

// keysOf returns the lock keys of group g.
func (m *multiLock) keysOf(g []int) []string {
	out := make([]string, len(g))
	for i, k := range g {
		out[i] = m.lks[k]
	}
	return out
}

// The multi-key lock as the kind of its hold.
func (m *multiLock) KindName() string    { return kindMulti }
func (m *multiLock) HoldLost(*core.Hold) {}

var _ core.Renewer = (*multiLock)(nil)

// Renew resets the TTL of every key to ttl, and reports whether the token
// held them all (lk and token are the hold's: the lock's own).
func (m *multiLock) Renew(ctx context.Context, _, _ string, ttl time.Duration) (bool, error) {
	lost, err := m.renewAll(ctx, ttl)
	return err == nil && len(lost) == 0, err
}

// renewAll resets the TTL of every key that the token still holds to ttl,
// and returns those it no longer held.
func (m *multiLock) renewAll(ctx context.Context, ttl time.Duration) (lost []string, err error) {
	for _, g := range m.groups {
		held, err := m.proto.renew(ctx, m.keysOf(g), m.token, ttl)
		if err != nil {
			return nil, err
		}
		for i, ok := range held {
			if !ok {
				lost = append(lost, m.lks[g[i]])
			}
		}
	}
	return lost, nil
}

// RenewBatch renews the lock's one hold (the watchdog batches holds by
// their Renewer: each multi-key lock is its own).
func (m *multiLock) RenewBatch(ctx context.Context, calls []core.RenewCall) []core.RenewReply {
	out := make([]core.RenewReply, len(calls))
	for i, c := range calls {
		out[i].OK, out[i].Err = m.Renew(ctx, c.Key, c.Token, c.TTL)
	}
	return out
}
