package registry

import (
	"fmt"
	"strings"

	"github.com/lockyard/lockyard/internal/wire"
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

// checkLockKey is checkKey in layout: with WithHashTag, also an error wrapping
// ErrInvalidKey if the lock key's hash tag would be empty ("{}" as the
// first braces, as for a key beginning with '}'): Redis Cluster would then
// hash the whole key, and the fence counter and wait marker could land in
// another slot.
func checkLockKey(layout wire.Layout, key string) error {
	if err := checkKey(key); err != nil || !layout.HashTag {
		return err
	}
	lk := layout.LockKey(key)
	if i := strings.IndexByte(lk, '{'); lk[i+1] == '}' {
		return fmt.Errorf("%w: lock key %q has an empty hash tag", ErrInvalidKey, lk)
	}
	return nil
}
