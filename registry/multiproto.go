package registry

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/lockyard/lockyard/internal/core"
)

// The multi-key lock's scripts (lua/multi*.lua): each runs on the keys of
// one Cluster slot (all the keys, on a server that is no Cluster), which
// are the mutex's keys, queues and turns.
var (
	//go:embed lua/multiacquire.lua
	multiAcquireSrc string
	//go:embed lua/multirelease.lua
	multiReleaseSrc string
	//go:embed lua/multirenew.lua
	multiRenewSrc string
	//go:embed lua/multileave.lua
	multiLeaveSrc string
	//go:embed lua/multitake.lua
	multiTakeSrc string
	//go:embed lua/multidrop.lua
	multiDropSrc string

	multiAcquireScript = core.NewScript("multiacquire", preludeSrc+multiAcquireSrc)
	multiReleaseScript = core.NewScript("multirelease", preludeSrc+multiReleaseSrc)
	multiRenewScript   = core.NewScript("multirenew", multiRenewSrc)
	multiLeaveScript   = core.NewScript("multileave", preludeSrc+multiLeaveSrc)
	multiTakeScript    = core.NewScript("multitake", preludeSrc+multiTakeSrc)
	multiDropScript    = core.NewScript("multidrop", multiDropSrc)
)

// multiProto is the protocol of AcquireAll's leases, on one Client. It
// runs each script on a group of lock keys that one node holds, and learns
// from the server whether it is a Cluster: the first CROSSSLOT reply makes
// it split every later acquisition by slot (cluster).
type multiProto struct {
	one     *core.ClientExec
	s       scripts
	cluster atomic.Bool
}

// multiGrant is multiacquire.lua's reply: fences (one per key) when
// acquired; else the sleep, the messages to wait for (grant), and how many
// of the keys blocked it.
type multiGrant struct {
	ok      bool
	fences  []int64
	held    bool // another holder has one of the keys (not only a turn)
	sleep   time.Duration
	after   int
	blocked int
	// afters: per key, for a queued caller, the release messages of that
	// key after which its turn at it may have come, 0 for a key it does not
	// wait for; for one in no line, 1 for each key another holder has.
	afters []int64
	// since is a queued caller's place in line, which it keeps (multiacquire.lua's ARGV[14]).
	since string
	// gathered: the attempt kept the turns of the keys it could take.
	gathered bool
}

// acquire runs multiacquire.lua on the lock keys lks of one group.
// gather (its ARGV[13]): 1, the caller keeps the turns it has, and takes
// those of the other keys as they free; 0, it does not; "#I", I a key's
// place in lks from 1: it does once that key is no longer kept from it.
func (p *multiProto) acquire(ctx context.Context, lks []string, token string, ttl time.Duration, h hint, gather any, since string) (multiGrant, error) {
	s := &p.s
	if !h.waits { // in no line: the quick script first
		v, err := p.one.One(ctx, multiTakeScript, Call{Keys: p.takeKeys(lks), Args: []any{token, s.ttlOf(ttl), s.fenceArg, s.idleArg, h.spread.Milliseconds()}})
		if err != nil {
			return multiGrant{}, err
		}
		if v == int64(1) { // acquired, without fencing
			return multiGrant{ok: true, fences: make([]int64, len(lks))}, nil
		}
		if g, ok, err := decodeMulti(v, len(lks)); ok || err != nil {
			return g, err
		}
	}
	keys := make([]string, 0, 6*len(lks))
	for _, lk := range lks {
		keys = append(keys, s.lockKeys(lk, true)...)
	}
	c := Call{Keys: keys, Args: []any{token, s.ttlOf(ttl), h.waiter, s.mode(h), s.idleArg, h.spread.Milliseconds(),
		s.fenceArg, s.layout.Channel(""), s.windowArg, s.aheadArg, s.slackArg, ceilMillis(h.rtt), gather, since}}
	v, err := p.one.One(ctx, multiAcquireScript, c)
	if err != nil {
		return multiGrant{}, err
	}
	g, ok, err := decodeMulti(v, len(lks))
	if !ok && err == nil {
		err = fmt.Errorf("lockyard: unexpected reply %v to multiacquire", v)
	}
	return g, err
}

// takeKeys returns multitake.lua's KEYS for lks: the lock keys, their
// turns, their wait queues, and with fencing their fence counters.
func (p *multiProto) takeKeys(lks []string) []string {
	s := &p.s
	per := 3
	if s.fencing {
		per = 4
	}
	keys := make([]string, per*len(lks))
	n := len(lks)
	for i, lk := range lks {
		keys[i], keys[n+i], keys[2*n+i] = lk, s.layout.TurnKey(lk), s.layout.QueueKey(lk)
		if per == 4 {
			keys[3*n+i] = s.layout.FenceKey(lk)
		}
	}
	return keys
}

// decodeMulti decodes the reply of multiacquire.lua or multitake.lua on n
// keys; ok is false for multitake.lua's {3}: multiacquire.lua decides.
func decodeMulti(v any, n int) (g multiGrant, ok bool, err error) {
	raw, _ := v.([]any)
	if len(raw) == 6+n { // a queued waiter's reply ends with its place in line, and whether it gathered
		g.gathered = raw[5+n] == int64(1)
		switch x := raw[4+n].(type) {
		case string:
			g.since = x
		case []byte:
			g.since = string(x)
		default:
			return g, false, fmt.Errorf("lockyard: unexpected reply %v to a multi-key acquisition", v)
		}
		v = raw[:4+n]
	}
	x, err := replyList(v)
	switch {
	case err != nil:
		return g, false, err
	case x[0] == 1 && len(x) == n+1:
		return multiGrant{ok: true, fences: x[1:]}, true, nil
	case (x[0] == 0 || x[0] == 2) && (len(x) == 4 || len(x) == 4+n):
		return multiGrant{held: x[0] == 0, sleep: time.Duration(x[1]) * time.Millisecond, after: int(x[2]), blocked: int(x[3]), afters: x[4:], since: g.since, gathered: g.gathered}, true, nil
	case x[0] == 3 && len(x) == 1:
		return g, false, nil
	}
	return g, false, fmt.Errorf("lockyard: unexpected reply %v to a multi-key acquisition", v)
}

// release runs multirelease.lua on lks: which of them token held, and so
// released.
func (p *multiProto) release(ctx context.Context, lks []string, token string) ([]bool, error) {
	s := &p.s
	n := len(lks)
	keys := make([]string, 2*n, 5*n)
	for i, lk := range lks {
		keys[i], keys[n+i] = lk, s.layout.QueueKey(lk)
	}
	v, err := p.one.One(ctx, multiDropScript, Call{Keys: keys, Args: []any{token, s.layout.Channel("")}})
	switch {
	case err != nil:
		return nil, err
	case v == int64(1): // every key released
		out := make([]bool, n)
		for i := range out {
			out[i] = true
		}
		return out, nil
	case v == int64(-1): // someone is in line: the turns are given
		keys = keys[:0]
		for _, lk := range lks {
			keys = append(keys, s.lockKeys(lk, false)...)
		}
		if v, err = p.one.One(ctx, multiReleaseScript, Call{Keys: keys, Args: []any{token, s.layout.Channel(""), s.windowArg, s.aheadArg, s.slackArg}}); err != nil {
			return nil, err
		}
	}
	return perKey(v, len(lks), "multirelease")
}

// renew runs multirenew.lua on lks: which of them token still held, and
// so renewed.
func (p *multiProto) renew(ctx context.Context, lks []string, token string, ttl time.Duration) ([]bool, error) {
	v, err := p.one.One(ctx, multiRenewScript, Call{Keys: lks, Args: []any{token, p.s.ttlOf(ttl)}})
	if err != nil {
		return nil, err
	}
	return perKey(v, len(lks), "multirenew")
}

// perKey decodes the reply of script on n keys, one integer per key, 1 for
// each key that the token held.
func perKey(v any, n int, script string) ([]bool, error) {
	x, err := replyList(v)
	if err == nil && len(x) != n {
		err = fmt.Errorf("lockyard: unexpected reply %v to %s", v, script)
	}
	if err != nil {
		return nil, err
	}
	out := make([]bool, len(x))
	for i, k := range x {
		out[i] = k == 1
	}
	return out, nil
}

// leave runs multileave.lua: waiter leaves the line of each of lks.
func (p *multiProto) leave(ctx context.Context, lks []string, waiter string) error {
	s := &p.s
	keys := make([]string, 0, 5*len(lks))
	for _, lk := range lks {
		keys = append(keys, s.lockKeys(lk, false)...)
	}
	_, err := p.one.One(ctx, multiLeaveScript, Call{Keys: keys, Args: []any{waiter, s.layout.Channel(""), s.windowArg, s.aheadArg, s.slackArg}})
	return err
}

// replyList returns the reply v, an array of integers.
func replyList(v any) ([]int64, error) {
	x, ok := v.([]any)
	if !ok || len(x) == 0 {
		return nil, fmt.Errorf("lockyard: unexpected reply %v (%T), want integers", v, v)
	}
	out := make([]int64, len(x))
	for i, e := range x {
		if out[i], ok = e.(int64); !ok {
			return nil, fmt.Errorf("lockyard: unexpected reply %v (%T), want integers", v, v)
		}
	}
	return out, nil
}

// isCrossSlot reports whether err is a Cluster's refusal of a script
// whose keys lie in more than one slot.
func isCrossSlot(err error) bool {
	var re *core.ReplyError
	return errors.As(err, &re) && strings.HasPrefix(re.Error(), "CROSSSLOT")
}
