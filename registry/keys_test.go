package registry

import (
	"errors"
	"strings"
	"testing"
)

// FuzzHashTagKeys: with WithHashTag, Obtain's key check accepts exactly the
// keys whose lock key has a non-empty hash tag, and such a lock's key, and
// the name it keeps, are those of the wire layout.
func FuzzHashTagKeys(f *testing.F) {
	for _, k := range []string{"42", "}x", "a}b", "{x}", "{", "}", "{}", "x{y}z", "\x00"} {
		f.Add("orders", k)
		f.Add("app{eu}", k)
		f.Add("a{}b", k)
	}
	f.Fuzz(func(t *testing.T, prefix, key string) {
		if checkRegistryKey(prefix) != nil || checkKey(key) != nil {
			return
		}
		r, err := NewWithClient(NewPoolClient(nil), prefix, WithHashTag())
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		lk := r.layout.LockKey(key)
		empty := lk[strings.IndexByte(lk, '{')+1] == '}'
		err = checkLockKey(r.layout, key)
		if empty != (err != nil) || (err != nil && !errors.Is(err, ErrInvalidKey)) {
			t.Fatalf("checkLockKey(%q) = %v; lock key %q", key, err, lk)
		}
		if err != nil {
			return
		}
		l := newRedisLock(&r.engine, r.mutex, key)
		if l.Key() != lk || l.name != key {
			t.Fatalf("lock key %q name %q; want %q, %q", l.Key(), l.name, lk, key)
		}
	})
}
