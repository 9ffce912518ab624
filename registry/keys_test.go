package registry

import (
	"errors"
	"strings"
	"testing"
)

func TestChannelPatternEscapesGlobs(t *testing.T) {
	cases := map[string]string{
		"orders":  "orders-channel:*",
		"a*b?c":   `a\*b\?c-channel:*`,
		`[x]\y`:   `\[x\]\\y-channel:*`,
		"sp ace:": "sp ace:-channel:*",
	}
	for in, want := range cases {
		if got := channelPattern(in); got != want {
			t.Errorf("channelPattern(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestNamesOfKeys(t *testing.T) {
	if got := channelName("orders", "orders:42"); got != "orders-channel:orders:42" {
		t.Errorf("channelName = %q", got)
	}
	for _, c := range []struct {
		hashTag                 bool
		lock, fence, wait, user string
	}{
		{false, "orders:42", "{orders:42}:fence", "{orders:42}:wait", "42"},
		{true, "orders:{42}", "orders:{42}:fence", "orders:{42}:wait", "42"},
	} {
		r := &Registry{prefix: "orders", cfg: config{hashTag: c.hashTag}}
		l := newRedisLock(r, "42")
		if l.Key() != c.lock || l.fenceKey() != c.fence || l.waitKey() != c.wait || l.userKey() != c.user {
			t.Errorf("hashTag=%v: keys %q %q %q, user key %q; want %q %q %q, %q", c.hashTag,
				l.Key(), l.fenceKey(), l.waitKey(), l.userKey(), c.lock, c.fence, c.wait, c.user)
		}
	}
	if a, b := newToken("id", 1), newToken("id", 0xabc); a != "id:0000000000000001" || b != "id:0000000000000abc" {
		t.Errorf("tokens %q, %q: want id:<16 hex digits of the counter>", a, b)
	}
}

// slot is Redis Cluster's key slot: CRC16 (XMODEM) of the hash tag, or of
// the whole key when it has none, modulo 16384.
func slot(key string) uint16 {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc % 16384
}

func TestSlot(t *testing.T) {
	// Values from CLUSTER KEYSLOT on Redis 7.
	for key, want := range map[string]uint16{"foo": 12182, "{user1000}.following": 3443, "{}x": 10595, "a{}b{c}": 7353} {
		if got := slot(key); got != want {
			t.Errorf("slot(%q) = %d, want %d", key, got, want)
		}
	}
}

// FuzzHashTagSlot: with WithHashTag, every accepted key's lock key, fence
// counter and wait marker share one Cluster slot, and the user key comes
// back from the lock key.
func FuzzHashTagSlot(f *testing.F) {
	for _, k := range []string{"42", "}x", "a}b", "{x}", "{", "}", "{}", "x{y}z", "\x00"} {
		f.Add("orders", k)
		f.Add("app{eu}", k)
		f.Add("a{}b", k)
	}
	f.Fuzz(func(t *testing.T, prefix, key string) {
		if checkRegistryKey(prefix) != nil || checkKey(key) != nil {
			return
		}
		r := &Registry{prefix: prefix, cfg: config{hashTag: true}}
		if err := r.checkHashTag(key); err != nil {
			if !errors.Is(err, ErrInvalidKey) {
				t.Fatalf("checkHashTag(%q) = %v, want ErrInvalidKey", key, err)
			}
			return
		}
		l := newRedisLock(r, key)
		if s := slot(l.Key()); slot(l.fenceKey()) != s || slot(l.waitKey()) != s {
			t.Fatalf("prefix %q key %q: slots %d %d %d", prefix, key, s, slot(l.fenceKey()), slot(l.waitKey()))
		}
		if l.userKey() != key {
			t.Fatalf("userKey = %q, want %q", l.userKey(), key)
		}
	})
}
