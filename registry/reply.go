package registry

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/lockyard/lockyard/internal/core"
)

// The mutex protocol's outcomes, and the decoding of its scripts' replies
// as a Client returns them (RESP types: an integer is an int64, an array a
// []any). The protocol returns decoded values, so nothing above it sees a
// raw reply.

// grant is the outcome of an obtain: acquired with a fencing token (0
// without fencing), or not, with how long the caller sleeps before it tries
// again by itself and after how many release messages its turn may have
// come (lua/obtain.lua).
type grant struct {
	ok    bool
	fence int64
	// sleep is how long to wait before the next try; negative when the
	// store does not say (pollDelay then decides).
	sleep time.Duration
	// after: the number of release messages after which the caller's turn
	// may have come; negative when unknown (every message may be it).
	after int
}

// unknown is a failed grant that says nothing about when to try again.
var unknown = grant{sleep: -1, after: -1}

// passOutcome says what a pass did.
type passOutcome int

const (
	passDeclined passOutcome = iota // no pass under Redlock: release as usual
	passKept                        // the key is kept, renewed, for the next local holder
	passReleased                    // released for another waiter's turn; this instance is queued
	passFreed                       // released with nobody in line (force)
	passGone                        // the key was gone or another holder's: nothing changed
)

// passReply is the reply of a pass: fence is the next holder's fencing
// token when the key was kept; after passReleased, sleep and after are
// those of a failed obtain (grant), for the next local holder's wait.
type passReply struct {
	outcome passOutcome
	fence   int64
	sleep   time.Duration
	after   int
}

// replyInts returns the reply v, an array of n integers (n in 1..3).
func replyInts(v any, n ...int) ([3]int64, error) {
	var out [3]int64
	x, ok := v.([]any)
	if ok && len(x) >= 1 && len(x) <= 3 && slices.Contains(n, len(x)) {
		for i, e := range x {
			if out[i], ok = e.(int64); !ok {
				break
			}
		}
		if ok {
			return out, nil
		}
	}
	return out, fmt.Errorf("lockyard: unexpected reply %v (%T), want %v integers", v, v, n)
}

// decodeGrant decodes obtain.lua's {1, fence}, or {0 or 2, sleep, after}
// (not acquired: another holder has the key, or it is another waiter's
// turn); and a plain 1, granted without a fencing token (the uncontended
// path of semacquire.lua and rwacquire.lua, which builds no table).
func decodeGrant(v any) (grant, error) {
	if n, ok := v.(int64); ok && n == 1 {
		return grant{ok: true}, nil
	}
	x, err := replyInts(v, 2, 3)
	switch {
	case err != nil:
		return unknown, err
	case x[0] == 1:
		return grant{ok: true, fence: x[1]}, nil
	}
	return grant{sleep: time.Duration(x[1]) * time.Millisecond, after: int(x[2])}, nil
}

// decodePass decodes pass.lua's {1, fence}, {2, sleep, after}, {3} or {0}.
func decodePass(v any) (passReply, error) {
	x, err := replyInts(v, 1, 2, 3)
	switch {
	case err != nil:
		return passReply{}, err
	case x[0] == 1:
		return passReply{outcome: passKept, fence: x[1]}, nil
	case x[0] == 2:
		return passReply{outcome: passReleased, sleep: time.Duration(x[1]) * time.Millisecond, after: int(x[2])}, nil
	case x[0] == 3:
		return passReply{outcome: passFreed}, nil
	}
	return passReply{outcome: passGone}, nil
}

// decodeRelease decodes release.lua's 2 (deleted; registries wait), 1
// (deleted) or 0 (gone or another holder's).
func decodeRelease(v any, err error) (done, others bool, _ error) {
	if err != nil {
		return false, false, err
	}
	n, err := core.ReplyInt(v)
	return n >= 1, n == 2, err
}

// releaseOn runs c, a call of the release script s (release.lua,
// semrelease.lua), on one node. While the key's Cluster slot migrates,
// Redis refuses a script on several keys of the slot that the node does
// not all have (TRYAGAIN), which a release's wait-queue keys seldom all
// exist for, until the migration ends: s then runs again on the key alone,
// which the node that has it serves (by ASK), and gives it back without
// the queue, rather than leave it to its TTL.
func releaseOn(ctx context.Context, one *core.ClientExec, s *Script, c Call) (done, others bool, err error) {
	done, others, err = decodeRelease(one.One(ctx, s, c))
	if core.IsTryAgain(err) {
		c.Keys = c.Keys[:1]
		done, others, err = decodeRelease(one.One(ctx, s, c))
	}
	return done, others, err
}
