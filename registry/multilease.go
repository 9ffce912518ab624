package registry

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/lockyard/lockyard/internal/core"
)

// A multi-key lease's end: every key it still holds is given back, one
// script per group (multirelease.lua gives each key's turn as release.lua
// does), and the keys found lost are named.

// The multi-key lock as what its Lease holds (leased).
func (m *multiLock) leaseKey() string  { return m.lks[0] }
func (m *multiLock) holds(*Lease) bool { return true }

// endLease releases every key that m still holds, even when one was
// lost: then ErrLockLost names the lost keys.
func (m *multiLock) endLease(ctx context.Context, le *Lease) error {
	r := m.eng
	h := m.h
	r.obs.released(kindMulti, m.lks[0], h, m.since)
	done := make([]bool, len(m.groups)) // a group's outcome is known: a retry skips it
	var lost []string
	err := r.release(ctx, m.lks[0], h, nil, func(ctx context.Context) (bool, error) {
		for i, g := range m.groups {
			if done[i] {
				continue
			}
			held, err := m.proto.release(ctx, m.keysOf(g), m.token)
			if err != nil {
				return false, err
			}
			done[i] = true
			for j, ok := range held {
				if !ok {
					lost = append(lost, m.lks[g[j]])
				}
			}
		}
		return len(lost) == 0, nil
	}, func() error { return lostKeys(lost) })
	return h.End(err)
}

// endLeaseAfter leaves every key to expire d from now (one renewal of
// all), and tells each key's waiters once they have expired (nudge.lua).
// It is the engine's expireAfter, but for a key lost among the others:
// those are still left to expire, their waiters still told, and the lost
// ones named.
func (m *multiLock) endLeaseAfter(ctx context.Context, le *Lease, d time.Duration) error {
	r := m.eng
	h := m.h
	r.obs.released(kindMulti, m.lks[0], h, m.since)
	h.Retire()
	h.Renewing.Lock()
	var lost []string
	_, _, err := r.core.Retried(context.WithoutCancel(ctx), func(ctx context.Context) (bool, error) {
		var err error
		lost, err = m.renewAll(ctx, d)
		return err == nil, err
	})
	h.Renewing.Unlock()
	if err != nil {
		return h.End(core.Join(r.releaseFailed(m.lks[0], err), h.LostAtRelease()))
	}
	if len(lost) < len(m.lks) {
		r.nudgeAfter(d, func(ctx context.Context) (time.Duration, error) {
			left := time.Duration(-1)
			for _, lk := range m.lks {
				if slices.Contains(lost, lk) {
					continue
				}
				v, err := m.proto.one.One(ctx, nudgeScript, m.proto.s.nudge(lk, m.token, 0))
				if err != nil {
					return -1, err
				}
				if n, err := core.ReplyInt(v); err == nil && n >= 0 {
					left = max(left, time.Duration(n)*time.Millisecond)
				}
			}
			return left, nil
		})
	}
	if len(lost) > 0 {
		return h.End(lostKeys(lost))
	}
	return h.End(h.LostAtRelease())
}

// lostKeys is the loss of lks, found lost at a release.
func lostKeys(lks []string) error {
	q := make([]string, len(lks))
	for i, lk := range lks {
		q[i] = strconv.Quote(lk)
	}
	return fmt.Errorf("%w: %s expired or was taken by another holder (the other keys are given back)", ErrLockLost, strings.Join(q, ", "))
}
