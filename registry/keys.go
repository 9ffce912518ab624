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

// fenceKey returns the fencing counter key of the lock key lockKey:
// "{registryKey:key}:fence". Its hash tag is the whole lock key, so in Redis
// Cluster both share a slot whenever the lock key has no braces of its own.
// No lock key starts with '{' (see checkRegistryKey), so it never collides
// with one.
func fenceKey(lockKey string) string {
	return "{" + lockKey + "}:fence"
}

// waitKey returns the key of the wait marker of a lock key:
// "{registryKey:key}:wait". A registry that fails to obtain the lock writes
// its id there, so that the holder's registry stops passing the lock among
// its own goroutines (pass.lua). Same hash tag as fenceKey.
func waitKey(lockKey string) string {
	return "{" + lockKey + "}:wait"
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
