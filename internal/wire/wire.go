// Package wire is lockyard's Redis wire format, in one place: the lock key
// and its hash-tag form, the fence counter, the wait marker, the release
// channel and the subscription pattern, and the lock value (token). The
// registry and the lockyard command both use it, so they cannot drift
// apart. The default layout is Spring Integration's RedisLockRegistry's.
package wire

import (
	"encoding/binary"
	"encoding/hex"
	"strings"
)

// Layout names the Redis keys of one registry key.
//
//	                 default                 HashTag
//	lock key         R:KEY                   R:{KEY}
//	fence counter    {R:KEY}:fence           R:{KEY}:fence
//	wait marker      {R:KEY}:wait            R:{KEY}:wait
//	release channel  R-channel:LOCKKEY       R-channel:LOCKKEY
//
// The braces put every key of one lock in one Redis Cluster slot: in the
// default layout while R and KEY have no braces of their own, always with
// HashTag. No lock key begins with '{' (registry keys may not), so a fence
// counter or wait marker never equals a lock key.
type Layout struct {
	Registry string // the registry key, R
	HashTag  bool   // the R:{KEY} form (registry.WithHashTag)
}

// LockKey returns the Redis key of the lock on key.
func (w Layout) LockKey(key string) string {
	if w.HashTag {
		return w.Registry + ":{" + key + "}"
	}
	return w.Registry + ":" + key
}

// UserKey returns the key whose lock key is lk, and false if lk is not a
// lock key of this layout (another registry's, a fence counter or a wait
// marker of the hash-tag form). The result shares lk's memory.
func (w Layout) UserKey(lk string) (string, bool) {
	rest, ok := strings.CutPrefix(lk, w.Registry+":")
	if !ok {
		return "", false
	}
	if !w.HashTag {
		return rest, rest != ""
	}
	if len(rest) < 3 || rest[0] != '{' || rest[len(rest)-1] != '}' {
		return "", false
	}
	return rest[1 : len(rest)-1], true
}

// FenceKey returns the fencing counter key of the lock key lk.
func (w Layout) FenceKey(lk string) string {
	if w.HashTag {
		return lk + ":fence"
	}
	return "{" + lk + "}:fence"
}

// WaitKey returns the wait marker key of the lock key lk: a registry whose
// attempt fails writes its id there, so that the holder's registry stops
// passing the lock among its own goroutines.
func (w Layout) WaitKey(lk string) string {
	if w.HashTag {
		return lk + ":wait"
	}
	return "{" + lk + "}:wait"
}

// Channel returns the release channel of the lock key lk, on which every
// release publishes lk (Spring-compatible).
func (w Layout) Channel(lk string) string {
	return w.channelPrefix() + lk
}

func (w Layout) channelPrefix() string { return w.Registry + "-channel:" }

// LockKeyOfChannel returns the lock key that the release channel ch names,
// and false if ch is not one of this registry's release channels.
func (w Layout) LockKeyOfChannel(ch string) (string, bool) {
	return strings.CutPrefix(ch, w.channelPrefix())
}

// ChannelPattern returns the PSUBSCRIBE pattern that matches every release
// channel of the registry.
func (w Layout) ChannelPattern() string {
	return GlobEscape(w.channelPrefix()) + "*"
}

// ScanPattern returns the SCAN MATCH pattern that matches every lock key of
// the registry (and, in the hash-tag form, its fence counters and wait
// markers: UserKey tells them apart).
func (w Layout) ScanPattern() string {
	return GlobEscape(w.Registry+":") + "*"
}

// GlobEscape escapes the glob characters of s (* ? [ ] \) for PSUBSCRIBE
// and SCAN MATCH patterns.
func GlobEscape(s string) string {
	if !strings.ContainsAny(s, `*?[]\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if strings.IndexByte(`*?[]\`, s[i]) >= 0 {
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// NewToken returns a lock value unique to one acquisition: the registry's
// client id (a random UUID, which also shows who holds a key), ':', and the
// registry's acquisition counter seq in 16 hex digits. Uniqueness is what
// compare-and-delete needs; anyone who could guess a value can read it in
// Redis anyway. (A counter costs no getrandom call per acquisition.)
func NewToken(clientID string, seq uint64) string {
	buf := make([]byte, 0, len(clientID)+1+16)
	buf = append(buf, clientID...)
	buf = append(buf, ':')
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], seq)
	buf = hex.AppendEncode(buf, n[:])
	return string(buf)
}

// Holder returns the registry id of a lockyard token (the part before the
// last ':'), or the whole value of a foreign one (Spring's).
func Holder(token string) string {
	if i := strings.LastIndexByte(token, ':'); i > 0 {
		return token[:i]
	}
	return token
}
