package registry

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"strings"
)

// MaxKeyLen is the longest lock key, and registry key, accepted in bytes.
// Redis allows longer keys, but each cached lock keeps its key in memory and
// every command carries it; longer keys get ErrInvalidKey.
const MaxKeyLen = 4096

// checkKey returns an error wrapping ErrInvalidKey for an unusable lock key.
// Every other string, including ones with NUL bytes or invalid UTF-8, is a
// valid, binary-safe key.
func checkKey(key string) error {
	switch {
	case key == "":
		return fmt.Errorf("%w: empty key", ErrInvalidKey)
	case len(key) > MaxKeyLen:
		return fmt.Errorf("%w: key of %d bytes exceeds MaxKeyLen (%d)", ErrInvalidKey, len(key), MaxKeyLen)
	}
	return nil
}

// checkRegistryKey is checkKey plus the reservation of a leading '{' for
// fence counter keys, so that no lock key of any registry can equal one.
func checkRegistryKey(registryKey string) error {
	if err := checkKey(registryKey); err != nil {
		return fmt.Errorf("registry key: %w", err)
	}
	if registryKey[0] == '{' {
		return fmt.Errorf("%w: registry key must not begin with '{' (reserved for fence counters)", ErrInvalidKey)
	}
	return nil
}

// lockKey returns the Redis key of the lock on key: registryKey:key, or
// registryKey:{key} with WithHashTag.
func (r *Registry) lockKey(key string) string {
	if r.cfg.hashTag {
		return r.prefix + ":{" + key + "}"
	}
	return r.prefix + ":" + key
}

// userKeyOf returns the key whose lock key is registryKey:suffix, or ""
// if suffix is not one of this registry's forms.
func (r *Registry) userKeyOf(suffix string) string {
	if !r.cfg.hashTag {
		return suffix
	}
	if len(suffix) < 3 || suffix[0] != '{' || suffix[len(suffix)-1] != '}' {
		return ""
	}
	return suffix[1 : len(suffix)-1]
}

// checkHashTag returns an error wrapping ErrInvalidKey if, with
// WithHashTag, the lock key's hash tag would be empty ("{}" as the first
// braces, as for a key beginning with '}'): Redis Cluster would then hash
// the whole key, and the fence counter and wait marker could land in
// another slot.
func (r *Registry) checkHashTag(key string) error {
	if !r.cfg.hashTag {
		return nil
	}
	lk := r.lockKey(key)
	if i := strings.IndexByte(lk, '{'); lk[i+1] == '}' {
		return fmt.Errorf("%w: lock key %q has an empty hash tag", ErrInvalidKey, lk)
	}
	return nil
}

// fenceKey returns the fencing counter key of the lock. By default it is
// "{registryKey:key}:fence": its hash tag is the whole lock key, so in Redis
// Cluster both share a slot whenever the lock key has no braces of its own.
// No lock key starts with '{' (see checkRegistryKey), so it never collides
// with one. With WithHashTag it is "registryKey:{key}:fence", whose hash tag
// is the lock key's.
func (l *RedisLock) fenceKey() string {
	if l.reg.cfg.hashTag {
		return l.key + ":fence"
	}
	return "{" + l.key + "}:fence"
}

// waitKey returns the key of the lock's wait marker: "{registryKey:key}:wait",
// or "registryKey:{key}:wait" with WithHashTag. A registry that fails to
// obtain the lock writes its id there, so that the holder's registry stops
// passing the lock among its own goroutines (pass.lua).
func (l *RedisLock) waitKey() string {
	if l.reg.cfg.hashTag {
		return l.key + ":wait"
	}
	return "{" + l.key + "}:wait"
}

// channelName returns the Spring-compatible release channel of a lock key:
// "registryKey-channel:registryKey:key".
func channelName(registryKey, lockKey string) string {
	return registryKey + "-channel:" + lockKey
}

// channelPattern returns the PSUBSCRIBE pattern matching every release
// channel of the registry, with glob characters in registryKey escaped.
func channelPattern(registryKey string) string {
	var b strings.Builder
	for i := 0; i < len(registryKey); i++ {
		switch c := registryKey[i]; c {
		case '*', '?', '[', ']', '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteString("-channel:*")
	return b.String()
}

// newToken returns a lock value unique to one acquisition: the registry's
// client id (a random UUID, which also shows who holds a key), ':', and the
// registry's acquisition counter seq in 16 hex digits. Uniqueness is what
// compare-and-delete needs; anyone who could guess a value can read it in
// Redis anyway. (A counter costs no getrandom call per acquisition.)
func newToken(clientID string, seq uint64) string {
	buf := make([]byte, 0, len(clientID)+1+16)
	buf = append(buf, clientID...)
	buf = append(buf, ':')
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], seq)
	buf = hex.AppendEncode(buf, n[:])
	return string(buf)
}
