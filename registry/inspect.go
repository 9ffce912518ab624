package registry

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/lockyard/lockyard/internal/core"
	"github.com/lockyard/lockyard/internal/wire"
)

// ErrForeignKey means that Inspect found a key that is no lock or
// semaphore of lockyard (or Spring) at the key's Redis key: a value of
// another type, or a string without a TTL (every lock key has one).
var ErrForeignKey = errors.New("lockyard: not a lock or semaphore")

// kindOfType names the kind whose keys hold values of the Redis type typ,
// or "Redis typ" for a type that is no kind's.
func kindOfType(typ string) string {
	switch typ {
	case "string":
		return kindLock
	case "zset":
		return kindSemaphore
	case "hash":
		return kindRWLock
	}
	return "Redis " + typ
}

// wrongKind is core.WrongKind for an acquisition of kind, naming the
// other kind by the type that the acquire scripts put at the end of their
// WRONGTYPE reply ("... holds a zset").
func wrongKind(kind string, err error) error {
	var re *core.ReplyError
	if !core.IsWrongType(err) || !errors.As(err, &re) {
		return err
	}
	other := ""
	if _, typ, ok := strings.Cut(re.Error(), " key holds a "); ok && !strings.Contains(typ, " ") {
		other = kindOfType(typ)
	}
	return core.WrongKind(kind, other, err)
}

// KeyInfo is what Redis holds for a key, as Inspect read it.
type KeyInfo struct {
	Key     string       // the Redis key
	Kind    string       // "lock", "semaphore", "rwlock", or "" when nothing is held or waited for
	Holders []HolderInfo // one for a lock, up to the permits for a semaphore, the writer or the readers of an RWLock
	Waiters []WaiterInfo // registries waiting, oldest first
	Fence   int64        // the fence counter now (0 without fencing)
	// Permits is a semaphore's count of permits, as its holders were
	// made with it (Registry.Semaphore): 0 for the other kinds, and for
	// permits taken by a lockyard that does not write it in their tokens.
	Permits int
}

// HolderInfo is one holder of a key: a lock's, or one permit of a
// semaphore.
type HolderInfo struct {
	Token    string        // the value in Redis
	Registry string        // the holder's registry id (from the token)
	Label    string        // that registry's label, if it published one
	TTL      time.Duration // remaining time to live
	Mode     string        // an RWLock's holder: "read" or "write"; else ""
}

// WaiterInfo is one registry waiting for a key: one entry of its wait
// queue (a lock or semaphore instance of that registry, whose goroutines
// or leases wait behind it).
type WaiterInfo struct {
	Registry string
	Label    string
	Waiting  time.Duration // how long it has waited, by the server's clock
	Mode     string        // an RWLock's waiter: "read" or "write"; else ""
}

// inspectMost bounds the holders, and the waiters, that Inspect lists.
const inspectMost = 1000

// Inspect reads what Redis holds for key now, without taking it or waiting: advisory, since it may change as soon
// as it is read. Works for a lock, a semaphore and a read-write lock, from any process.
//
// It runs one read-only script in the key's Cluster slot (lua/inspect.lua),
// and one pipelined read of the labels of the registries it names (see
// WithLabel); a label that cannot be read is left empty. A lock held by
// Spring's RedisLockRegistry is listed with the whole value as its
// Registry. Waiters are those of lockyard registries, which keep a wait
// queue (Spring's do not); listing them, and a semaphore's holders, needs
// TIME (see docs/SECURITY.md). A key that holds something else (another
// type, or a string without a TTL) gives an error matching ErrForeignKey.
// On a Redlock registry it reads every node, and reports the holders that
// a majority of them agree on (ErrNoQuorum when none do).
func (r *Registry) Inspect(ctx context.Context, key string) (KeyInfo, error) {
	if r.core.BG.IsClosed() {
		return KeyInfo{}, ErrClosed
	}
	if err := checkLockKey(r.layout, key); err != nil {
		return KeyInfo{}, err
	}
	lk := r.layout.LockKey(key)
	call := core.Call{Keys: []string{lk, r.layout.QueueKey(lk), r.layout.WaitersKey(lk), r.layout.FenceKey(lk), r.layout.ReadersKey(lk)},
		Args: []any{inspectMost, r.cfg.turnWindow.Milliseconds()}}
	info, typ, err := agree(lk, r.core.Exec.Eval(ctx, 0, inspectScript, call))
	if err != nil {
		return info, core.WrapKey("inspecting", key, err)
	}
	switch {
	case typ == "string" && info.Holders[0].TTL < 0:
		info.Holders = nil // no lock: every lock key has a TTL
		return info, fmt.Errorf("%w: %q holds a string without a TTL", ErrForeignKey, lk)
	case typ == "string":
		info.Kind = "lock"
	case typ == "zset!": // its permits are dated by the server's clock
		return info, fmt.Errorf("lockyard: inspecting %q: a semaphore's permits can be read only with TIME (see docs/SECURITY.md)", key)
	case typ == "zset" && len(info.Holders)+len(info.Waiters) > 0:
		info.Kind = "semaphore"
		for _, h := range info.Holders {
			if n, ok := wire.PermitCount(h.Token); ok {
				info.Permits = n
				break
			}
		}
	case typ == "zset": // every permit expired, not yet pruned
	case typ == "hash:r!":
		return info, fmt.Errorf("lockyard: inspecting %q: a read-write lock's readers can be read only with TIME (see docs/SECURITY.md)", key)
	case typ == "hash:w" || typ == "hash:r":
		info.Kind = kindRWLock
	case typ != "none":
		return info, fmt.Errorf("%w: %q holds a %s", ErrForeignKey, lk, typ)
	case len(info.Waiters) > 0: // waited for, free for a moment: the kind its waiters say, or that this registry knows it as
		info.Kind = kindLock
		if e, ok := r.cache.peek(key); ok {
			info.Kind = e.kind()
		}
		if info.Waiters[0].Mode != "" { // an RWLock's waiters wait for a side
			info.Kind = kindRWLock
		}
	}
	r.readLabels(ctx, &info)
	return info, nil
}

// agree decodes the replies of inspect.lua for the lock key lk, one per
// node, into what a majority of the nodes agree on: their holders' tokens
// (a Redlock registry's lock is held where a majority holds it; with one
// node, its reply). It returns the key's type ("zset!": a semaphore read
// without TIME).
func agree(lk string, results []core.Result) (KeyInfo, string, error) {
	type view struct {
		info KeyInfo
		typ  string
	}
	votes := map[string][]view{}
	var firstErr error
	for _, res := range results {
		v := view{info: KeyInfo{Key: lk}}
		err := res.Err
		if err == nil {
			v.typ, err = decodeInspect(res.Reply, &v.info)
		}
		if err != nil {
			firstErr = cmp.Or(firstErr, err)
			continue
		}
		tokens := v.typ
		for _, h := range v.info.Holders {
			tokens += " " + h.Token
		}
		votes[tokens] = append(votes[tokens], v)
	}
	for _, vs := range votes {
		if len(vs) > len(results)/2 {
			return vs[0].info, vs[0].typ, nil
		}
	}
	switch {
	case len(results) == 1: // one node: its error
	case len(votes) == 0:
		firstErr = fmt.Errorf("%w: no node answered for %q: %w", ErrNoQuorum, lk, firstErr)
	default:
		firstErr = core.Join(fmt.Errorf("%w: the nodes disagree on who holds %q", ErrNoQuorum, lk), firstErr)
	}
	return KeyInfo{Key: lk}, "", firstErr
}

// decodeInspect decodes inspect.lua's reply into info, and returns the
// lock key's type.
func decodeInspect(v any, info *KeyInfo) (string, error) {
	bad := fmt.Errorf("lockyard: unexpected inspect reply %v", v)
	a, ok := v.([]any)
	if !ok || len(a) < 4 {
		return "", bad
	}
	typ, ok := replyString(a[0])
	fence, ok2 := a[1].(int64)
	now, ok3 := a[2].(int64)
	if !ok || !ok2 || !ok3 {
		return "", bad
	}
	if (typ == "zset" || typ == "hash:r") && now < 0 {
		typ += "!"
	}
	mode := ""
	switch typ {
	case "hash:w":
		mode = "write"
	case "hash:r":
		mode = "read"
	}
	info.Fence = fence
	rest, ok := pairs(a[3:], func(token string, ms int64) {
		ttl := time.Duration(ms) * time.Millisecond
		if ms < 0 {
			ttl = -1 // no TTL
		}
		info.Holders = append(info.Holders, HolderInfo{Token: token, Registry: wire.Holder(token), TTL: ttl, Mode: mode})
	})
	if !ok || len(rest) == 0 {
		return "", bad
	}
	rest, ok = pairs(rest, func(id string, ms int64) {
		reg, rest, _ := strings.Cut(id, "/") // registry id "/" instance number, and an RWLock's "/" side
		info.Waiters = append(info.Waiters, WaiterInfo{Registry: reg, Waiting: time.Duration(max(ms, 0)) * time.Millisecond, Mode: sideName(rest)})
	})
	if !ok || len(rest) != 0 {
		return "", bad
	}
	return typ, nil
}

// sideName names the side that an RWLock's waiter waits for, from the
// end of its id ("3/r": "read"); "" for the waiters of other kinds.
func sideName(id string) string {
	_, s, ok := strings.Cut(id, "/")
	switch {
	case !ok:
		return ""
	case s == "r":
		return "read"
	case s == "w":
		return "write"
	}
	return ""
}

// pairs reads a count n from a[0] and n (string, integer) pairs after it,
// passing each to fn, and returns what follows them.
func pairs(a []any, fn func(string, int64)) ([]any, bool) {
	n, ok := a[0].(int64)
	if !ok || n < 0 || int64(len(a)) < 1+2*n {
		return nil, false
	}
	for i := 1; i < 1+2*int(n); i += 2 {
		s, ok := replyString(a[i])
		ms, ok2 := a[i+1].(int64)
		if !ok || !ok2 {
			return nil, false
		}
		fn(s, ms)
	}
	return a[1+2*n:], true
}

// replyString returns a bulk string reply, which a Client returns as a
// string or a []byte (redigo).
func replyString(v any) (string, bool) {
	switch s := v.(type) {
	case string:
		return s, true
	case []byte:
		return string(s), true
	}
	return "", false
}

// readLabels fills in the labels of the registries that info names, in one
// pipelined read. Labels are advisory: one that cannot be read stays
// empty.
func (r *Registry) readLabels(ctx context.Context, info *KeyInfo) {
	var ids []string
	at := map[string]int{}
	add := func(id string) {
		if _, ok := at[id]; !ok {
			at[id] = len(ids)
			ids = append(ids, id)
		}
	}
	for _, h := range info.Holders {
		add(h.Registry)
	}
	for _, w := range info.Waiters {
		add(w.Registry)
	}
	if len(ids) == 0 {
		return
	}
	calls := make([]core.Call, len(ids))
	for i, id := range ids {
		calls[i] = core.Call{Keys: []string{r.layout.LabelKey(id)}}
	}
	res := r.core.Exec.EvalBatch(ctx, 0, labelScript, calls)
	label := func(id string) string { // the first node that has it (Redlock: every node has it)
		for _, node := range res {
			if len(node) == len(ids) {
				if s, _ := replyString(node[at[id]].Reply); s != "" {
					return s
				}
			}
		}
		return ""
	}
	for i := range info.Holders {
		info.Holders[i].Label = label(info.Holders[i].Registry)
	}
	for i := range info.Waiters {
		info.Waiters[i].Label = label(info.Waiters[i].Registry)
	}
}
