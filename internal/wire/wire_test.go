package wire

import (
	"path"
	"strings"
	"testing"
)

func TestChannelPatternEscapesGlobs(t *testing.T) {
	cases := map[string]string{
		"orders":  "orders-channel:*",
		"a*b?c":   `a\*b\?c-channel:*`,
		`[x]\y`:   `\[x\]\\y-channel:*`,
		"sp ace:": "sp ace:-channel:*",
		"x?y":     `x\?y-channel:*`,
	}
	for in, want := range cases {
		if got := (Layout{Registry: in}).ChannelPattern(); got != want {
			t.Errorf("ChannelPattern(%q) = %q, want %q", in, got, want)
		}
	}
	if got := (Layout{Registry: "a*"}).TurnPattern("id?"); got != `a\*-turn[:|]id\?[:|]*` {
		t.Errorf("TurnPattern = %q", got)
	}
	if got := (Layout{Registry: "a*"}).AllTurnsPattern(); got != `a\*-turn:*` {
		t.Errorf("AllTurnsPattern = %q", got)
	}
	if got := (Layout{Registry: "a*"}).ScanPattern(); got != `a\*:*` {
		t.Errorf("ScanPattern = %q", got)
	}
}

func TestNamesOfKeys(t *testing.T) {
	for _, c := range []struct {
		hashTag                       bool
		key, lock, fence, queue, user string
	}{
		{false, "42", "orders:42", "{orders:42}:fence", "{orders:42}:queue", "42"},
		{true, "42", "orders:{42}", "orders:{42}:fence", "orders:{42}:queue", "42"},
		{false, "user:{42}", "orders:user:{42}", "{42}orders:user:{42}:fence", "{42}orders:user:{42}:queue", "user:{42}"},
		{false, "a}b", "orders:a}b", "{9278}orders:a}b:fence", "{9278}orders:a}b:queue", "a}b"},
	} {
		w := Layout{Registry: "orders", HashTag: c.hashTag}
		lk := w.LockKey(c.key)
		user, ok := w.UserKey(lk)
		if lk != c.lock || w.FenceKey(lk) != c.fence || w.QueueKey(lk) != c.queue || user != c.user || !ok {
			t.Errorf("hashTag=%v: keys %q %q %q, user key %q %v; want %q %q %q, %q", c.hashTag,
				lk, w.FenceKey(lk), w.QueueKey(lk), user, ok, c.lock, c.fence, c.queue, c.user)
		}
		for _, k := range []string{w.FenceKey(lk), w.QueueKey(lk), w.WaitersKey(lk), w.TurnKey(lk), w.PollsKey(lk)} {
			if Slot(k) != Slot(lk) {
				t.Errorf("%q: slot %d, lock key %q: %d", k, Slot(k), lk, Slot(lk))
			}
		}
		if ch := w.Channel(lk); ch != "orders-channel:"+lk {
			t.Errorf("Channel = %q", ch)
		} else if back, ok := w.LockKeyOfChannel(ch); !ok || back != lk {
			t.Errorf("LockKeyOfChannel(%q) = %q, %v", ch, back, ok)
		}
		if ch := w.TurnChannel("id1", lk); ch != "orders-turn:id1:"+lk {
			t.Errorf("TurnChannel = %q", ch)
		} else if back, ok := w.LockKeyOfTurnChannel("id1", ch); !ok || back != lk {
			t.Errorf("LockKeyOfTurnChannel(%q) = %q, %v", ch, back, ok)
		} else if _, ok := w.LockKeyOfTurnChannel("id2", ch); ok {
			t.Errorf("LockKeyOfTurnChannel of another registry id's channel %q: true", ch)
		} else if _, ok := w.LockKeyOfChannel(ch); ok {
			t.Errorf("a turn channel %q is a release channel", ch)
		}
	}
	tagged := Layout{Registry: "orders", HashTag: true}
	for _, notLock := range []string{"orders:{42}:fence", "orders:{42}:queue", "orders:{42}:turn", "other:{42}", "orders:42", "orders:{}"} {
		if k, ok := tagged.UserKey(notLock); ok {
			t.Errorf("UserKey(%q) = %q, true; want false (not a lock key of the hash-tag form)", notLock, k)
		}
	}
	if _, ok := (Layout{Registry: "orders"}).UserKey("other:42"); ok {
		t.Error("UserKey of another registry's key: true")
	}
	if _, ok := (Layout{Registry: "orders"}).LockKeyOfChannel("other-channel:other:1"); ok {
		t.Error("LockKeyOfChannel of another registry's channel: true")
	}
	if a, b := NewToken("id", 1), NewToken("id", 0xabc); a != "id:0000000000000001" || b != "id:0000000000000abc" {
		t.Errorf("tokens %q, %q: want id:<16 hex digits of the counter>", a, b)
	}
	if h := Holder(NewToken("0a-b", 7)); h != "0a-b" {
		t.Errorf("Holder = %q", h)
	}
	if h := Holder("spring-uuid"); h != "spring-uuid" {
		t.Errorf("Holder of a foreign value = %q", h)
	}
}

func TestSlot(t *testing.T) {
	// Values from CLUSTER KEYSLOT on Redis 7.
	for key, want := range map[string]uint16{"foo": 12182, "{user1000}.following": 3443, "{}x": 10595, "a{}b{c}": 7353} {
		if got := Slot(key); got != want {
			t.Errorf("slot(%q) = %d, want %d", key, got, want)
		}
	}
}

// FuzzLayout: in both forms the user key comes back from the lock key and
// from its release channel; the lock key and its side keys (fence counter,
// wait queue, turn) share one Cluster slot: always in the default form,
// and with HashTag whenever the first braces of the lock key hold a
// non-empty tag (WithHashTag refuses the other keys); no side key is a
// lock key; glob escaping keeps the pattern literal.
func FuzzLayout(f *testing.F) {
	for _, k := range []string{"42", "}x", "a}b", "{x}", "{", "}", "{}", "x{y}z", "\x00", "*?[]\\"} {
		f.Add("orders", k)
		f.Add("app{eu}", k)
		f.Add("a{}b", k)
		f.Add("a*[", k)
	}
	f.Fuzz(func(t *testing.T, prefix, key string) {
		if prefix == "" || key == "" {
			return
		}
		for _, tag := range []bool{false, true} {
			w := Layout{Registry: prefix, HashTag: tag}
			lk := w.LockKey(key)
			if got, ok := w.UserKey(lk); !ok || got != key {
				t.Fatalf("hashTag=%v: UserKey(%q) = %q, %v; want %q", tag, lk, got, ok, key)
			}
			if got, ok := w.LockKeyOfChannel(w.Channel(lk)); !ok || got != lk {
				t.Fatalf("LockKeyOfChannel(Channel(%q)) = %q, %v", lk, got, ok)
			}
			if got, ok := w.LockKeyOfTurnChannel("0a-b", w.TurnChannel("0a-b", lk)); !ok || got != lk {
				t.Fatalf("LockKeyOfTurnChannel(TurnChannel(%q)) = %q, %v", lk, got, ok)
			}
			g := Grant{Key: lk, Seq: uint64(len(key)), Fence: int64(len(prefix)) << 40, Permits: len(key)%5 + 1}
			grant := w.GrantChannel("0a-b", g)
			if got, ok := w.GrantOfChannel("0a-b", grant); !ok || got != g {
				t.Fatalf("GrantOfChannel(%q) = %+v, %v; want %+v", grant, got, ok, g)
			}
			rw := Grant{Key: lk, Seq: uint64(len(prefix)), Fence: int64(len(key)), Behind: len(key)%2 == 1, Attempt: uint64(len(key) * 7)} // a read-write lock's
			if ch := w.GrantChannel("0a-b", rw); !strings.Contains(ch, "@") {
				t.Fatalf("GrantChannel(%+v) = %q: no read-write lock's grant", rw, ch)
			} else if got, ok := w.GrantOfChannel("0a-b", ch); !ok || got != rw {
				t.Fatalf("GrantOfChannel(%q) = %+v, %v; want %+v", ch, got, ok, rw)
			}
			for _, ch := range []string{w.TurnChannel("0a-b", lk), w.TurnPrefix() + "0a-b|:" + lk, w.ProbeChannel("0a-b", lk), w.GrantChannel("0a-bc", g)} {
				if _, ok := w.GrantOfChannel("0a-b", ch); ok {
					t.Fatalf("GrantOfChannel(%q): a grant channel", ch)
				}
			}
			if _, ok := w.LockKeyOfTurnChannel("0a-b", grant); ok {
				t.Fatalf("LockKeyOfTurnChannel(%q): a turn channel", grant)
			}
			for _, k := range []string{w.FenceKey(lk), w.QueueKey(lk), w.WaitersKey(lk), w.TurnKey(lk), w.PollsKey(lk)} {
				if _, isLock := w.UserKey(k); isLock && prefix[0] != '{' {
					t.Fatalf("hashTag=%v: side key %q of %q is a lock key", tag, k, lk)
				}
				if i := strings.IndexByte(lk, '{'); tag && lk[i+1] == '}' {
					continue
				}
				if Slot(k) != Slot(lk) {
					t.Fatalf("hashTag=%v prefix %q key %q: %q in slot %d, the lock key in %d", tag, prefix, key, k, Slot(k), Slot(lk))
				}
			}
		}
		if un := unescape(GlobEscape(prefix)); un != prefix {
			t.Fatalf("GlobEscape(%q) unescapes to %q", prefix, un)
		}
	})
}

// unescape undoes GlobEscape, failing on an unescaped glob character.
func unescape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) {
			i++
		} else if strings.IndexByte("*?[]", s[i]) >= 0 {
			return "<unescaped " + string(s[i]) + ">"
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// A label key begins with '{' in either layout, so that no lock key (whose
// registry key may not begin with '{') equals it, and lies in one slot per
// registry key.
func TestLabelKey(t *testing.T) {
	for _, hashTag := range []bool{false, true} {
		w := Layout{Registry: "orders", HashTag: hashTag}
		if got := w.LabelKey("id-1"); got != "{orders:}:label:id-1" {
			t.Errorf("LabelKey = %q", got)
		}
		if Slot(w.LabelKey("a")) != Slot(w.LabelKey("b")) {
			t.Error("labels of one registry key in different slots")
		}
		if _, ok := w.UserKey(w.LabelKey("a")); ok {
			t.Error("a label key reads as a lock key")
		}
	}
}

// A permit's token carries its count after '#', and Holder still names its
// registry; tokens without a count (a lock's, an older lockyard's permit,
// a Spring value) have none.
func TestPermitCount(t *testing.T) {
	tok := NewPermitToken("id", 3, CountSuffix(12))
	if n, ok := PermitCount(tok); !ok || n != 12 || Holder(tok) != "id" {
		t.Fatalf("%q: count %d %v, holder %q; want 12 and id", tok, n, ok, Holder(tok))
	}
	for _, tok := range []string{NewToken("id", 3), "spring-uuid", "a#b:0000000000000001", "id:00#x", "id:00#0", "id:00#-2", "id:00#+2", "id:00#007", "#"} {
		if n, ok := PermitCount(tok); ok {
			t.Errorf("%q: count %d, want none", tok, n)
		}
	}
}

// A registry's turn pattern matches its turn, grant and probe channels;
// the pattern of every registry's turns (an ACL's fallback) matches the
// turns and grants but no probe, so that such a subscriber never answers
// a probe for another registry (lua/prelude.lua, deliver).
func TestTurnPatternsAndProbes(t *testing.T) {
	w := Layout{Registry: "orders"}
	lk := w.LockKey("k")
	matches := func(pattern, ch string) bool {
		ok, err := path.Match(pattern, ch)
		if err != nil {
			t.Fatalf("path.Match(%q): %v", pattern, err)
		}
		return ok
	}
	own, wide := w.TurnPattern("0a-b"), w.AllTurnsPattern()
	for _, ch := range []string{w.TurnChannel("0a-b", lk), w.GrantChannel("0a-b", Grant{Key: lk, Seq: 3, Permits: 2}), w.GrantChannel("0a-b", Grant{Key: lk, Seq: 3, Attempt: 1})} {
		if !matches(own, ch) || !matches(wide, ch) {
			t.Errorf("%q: own pattern %v, every registry's %v; want both", ch, matches(own, ch), matches(wide, ch))
		}
	}
	probe := w.ProbeChannel("0a-b", lk)
	if !matches(own, probe) || matches(wide, probe) {
		t.Errorf("probe %q: own pattern %v, every registry's %v; want only its own", probe, matches(own, probe), matches(wide, probe))
	}
	if matches(w.TurnPattern("0a-bc"), probe) || matches(w.TurnPattern("0a"), probe) {
		t.Errorf("probe %q heard by another registry", probe)
	}
	if _, ok := w.LockKeyOfTurnChannel("0a-b", probe); ok {
		t.Errorf("probe %q taken for a turn", probe)
	}
	if _, ok := w.GrantOfChannel("0a-b", probe); ok {
		t.Errorf("probe %q taken for a grant", probe)
	}
}
