package core

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
)

// Errors returned by the registry and its locks. Callers test for them with
// errors.Is; the returned errors wrap them with the key and the cause.
var (
	// ErrLockLost means the Redis key expired or was taken by another holder
	// before this holder released it, or its validity deadline passed.
	ErrLockLost = errors.New("lockyard: lock lost")
	// ErrNotOwner means the calling goroutine does not hold the lock (for
	// RenewLock: this registry does not hold it).
	ErrNotOwner = errors.New("lockyard: not the lock owner")
	// ErrInvalidKey means the key is empty, longer than MaxKeyLen, or (for a
	// registry key) begins with '{', which is reserved for fence counters;
	// or that the registry uses the key for another kind (Obtain of a key
	// that is a Semaphore, or the reverse).
	ErrInvalidKey = errors.New("lockyard: invalid key")
	// ErrCacheFull means the lock cache is at capacity and every cached lock
	// is held or waited for.
	ErrCacheFull = errors.New("lockyard: lock cache full")
	// ErrClosed means the registry was closed.
	ErrClosed = errors.New("lockyard: registry closed")
	// ErrInvalidConfig means New was given a nil pool or client, or an
	// option with a value out of range.
	ErrInvalidConfig = errors.New("lockyard: invalid configuration")
	// ErrReplicaAck means that, with WithReplicaAck, fewer replicas than
	// required acknowledged an obtained lock in time; the lock was released
	// again. LockContext retries it until its ctx ends. From RenewLock it
	// means the renewal was not acknowledged: the lock is still held, but
	// its validity did not move.
	ErrReplicaAck = errors.New("lockyard: too few replicas acknowledged the lock")
	// ErrNotObtained means another holder has the lock: an attempt that did
	// not wait (TryLockContext) found it taken, locally or in Redis.
	ErrNotObtained = errors.New("lockyard: lock not obtained")
	// ErrReleaseFailed means the release of a held lock failed in Redis (the
	// server was down, say): whatever the lock guarded has run, but its key
	// was not deleted and expires by its TTL. ExecuteLocked joins it to fn's
	// result, so a caller can tell a failed fn from a failed release.
	ErrReleaseFailed = errors.New("lockyard: release failed")
	// ErrNoQuorum means a Redlock registry could not reach a majority of its
	// nodes: too many were down, slow or failing. LockContext retries it
	// until its ctx ends.
	ErrNoQuorum = errors.New("lockyard: no quorum of Redis nodes")
	// ErrWrongKind means the key is used as another kind in Redis: a lock
	// acquired on a semaphore's key, a semaphore on a lock's, or either on
	// a key that holds some other value. The message names both kinds.
	ErrWrongKind = errors.New("lockyard: key of another kind")
)

// Join is errors.Join on one line: the messages are joined by "; ", so
// that an error of two causes (a failed release and the loss it implies,
// say) stays one line in a log or a command's output. Nil errors are left
// out; Join of none is nil, of one that error.
func Join(errs ...error) error {
	var j joinError
	for _, e := range errs {
		if e != nil {
			j.errs = append(j.errs, e)
		}
	}
	switch len(j.errs) {
	case 0:
		return nil
	case 1:
		return j.errs[0]
	}
	return &j
}

type joinError struct{ errs []error }

func (e *joinError) Error() string {
	var b strings.Builder
	for i, err := range e.errs {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(err.Error())
	}
	return b.String()
}

func (e *joinError) Unwrap() []error { return e.errs }

// KeyGone is the ErrLockLost of a lock whose key was found gone or
// another holder's.
func KeyGone(key string) error {
	return fmt.Errorf("%w: %q expired or was taken by another holder", ErrLockLost, key)
}

// keyError is the error of an operation on one lock: "lockyard: OP "KEY":
// CAUSE". CAUSE drops its own "lockyard: " prefix, so that the message reads
// "lockyard: waiting for "k": registry closed", not "...: lockyard: registry
// closed"; errors.Is and errors.As see the cause as it is.
type keyError struct {
	op, key string
	err     error
}

func WrapKey(op, key string, err error) error { return &keyError{op: op, key: key, err: err} }

func (e *keyError) Error() string {
	return "lockyard: " + e.op + " " + strconv.Quote(e.key) + ": " + strings.TrimPrefix(e.err.Error(), "lockyard: ")
}

func (e *keyError) Unwrap() error { return e.err }

// transientPrefixes are Redis error replies that go away by themselves
// (server loading, busy script, failover, cluster reconfiguration).
var transientPrefixes = []string{"LOADING", "BUSY", "TRYAGAIN", "MASTERDOWN", "CLUSTERDOWN", "READONLY", "NOREPLICAS", "MOVED", "ASK"}

// IsTransient reports whether retrying the call that failed with err may
// succeed: network and pool errors and the error replies above. Other Redis
// error replies (WRONGTYPE, OOM, script errors), ErrClosed and ErrInvalidConfig
// are final.
func IsTransient(err error) bool {
	if errors.Is(err, ErrClosed) || errors.Is(err, ErrInvalidConfig) {
		return false
	}
	var re *ReplyError
	if errors.As(err, &re) {
		msg := re.Error()
		for _, p := range transientPrefixes {
			if strings.HasPrefix(msg, p) {
				return true
			}
		}
		return false
	}
	return true
}

// IsAmbiguous reports whether a call that failed with err may nevertheless
// have run on the server: only an error reply proves the script did not run
// to completion; after a timeout or a broken connection the reply, not the
// request, may have been lost.
func IsAmbiguous(err error) bool {
	var re *ReplyError
	return !errors.As(err, &re)
}

// IsNoScript reports whether err is the server's NOSCRIPT reply: the script
// is not in its cache (SCRIPT FLUSH, a restart) and must be sent as EVAL.
func IsNoScript(err error) bool {
	if err == nil {
		return false // before re, which escapes: no allocation on the common path
	}
	var re *ReplyError
	return errors.As(err, &re) && strings.HasPrefix(re.Error(), "NOSCRIPT")
}

// IsTryAgain reports whether err is a Cluster's TRYAGAIN reply: a command
// on several keys of a slot that migrates, not all of which the node has,
// did not run. A command on one key would (by ASK on the node that has it).
func IsTryAgain(err error) bool {
	if err == nil {
		return false
	}
	var re *ReplyError
	return errors.As(err, &re) && strings.HasPrefix(re.Error(), "TRYAGAIN")
}

// IsWrongType reports whether err is the server's WRONGTYPE reply (or a
// script's): the key holds a value of another type than the command's.
func IsWrongType(err error) bool {
	if err == nil {
		return false
	}
	var re *ReplyError
	return errors.As(err, &re) && strings.HasPrefix(re.Error(), "WRONGTYPE")
}

// WrongKind returns err, a WRONGTYPE reply met by an acquisition of kind,
// as an error that matches ErrWrongKind (and still the reply) and names
// both kinds: the key's is other, or not known when other is "". Other
// errors are returned as they are. The caller wraps it with the key.
func WrongKind(kind, other string, err error) error {
	if !IsWrongType(err) {
		return err
	}
	what := "holds another kind of value"
	if other != "" {
		what = "is a " + other
	}
	return fmt.Errorf("%w: it %s, not a %s (%w)", ErrWrongKind, what, kind, err)
}

// IsNoPerm reports whether err is the server's NOPERM reply: the user's
// ACL does not allow the command, key or channel.
func IsNoPerm(err error) bool {
	if err == nil {
		return false
	}
	var re *ReplyError
	return errors.As(err, &re) && strings.HasPrefix(re.Error(), "NOPERM")
}

// IsSyntaxError reports whether err is the server's reply to a command it
// does not accept in this form ("ERR syntax error": SET NX GET before Redis
// 7.0).
func IsSyntaxError(err error) bool {
	if err == nil {
		return false
	}
	var re *ReplyError
	return errors.As(err, &re) && strings.Contains(strings.ToLower(re.Error()), "syntax error")
}

// IsUnsupported reports whether err is the server's reply to a command
// that it cannot run as sent, whatever the key: a command or subcommand it
// does not know ("ERR unknown command", "ERR unknown subcommand"), an
// option it does not know ("ERR syntax error": SET IFEQ before Redis 8.4
// or Valkey 8.1), or a command the user may not run ("NOPERM User u has no
// permissions to run the 'delex' command").
func IsUnsupported(err error) bool {
	if err == nil {
		return false
	}
	var re *ReplyError
	if !errors.As(err, &re) {
		return false
	}
	msg := strings.ToLower(re.Error())
	// A NOPERM for a key or a channel ("No permissions to access a key")
	// is about the call, not the command.
	return strings.HasPrefix(msg, "noperm") && strings.Contains(msg, "command") || strings.Contains(msg, "unknown command") ||
		strings.Contains(msg, "unknown subcommand") || strings.Contains(msg, "syntax error")
}

// IsStaleConn reports whether err is a network error other than a timeout:
// most likely a pooled connection the server had closed (a restart, CLIENT
// KILL), so an idempotent script is worth retrying at once on another one.
// A timeout has used up the command's time and is not retried.
func IsStaleConn(err error) bool {
	return err != nil && IsAmbiguous(err) && !isTimeout(err)
}

// isTimeout reports whether err is a network or context timeout.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}
