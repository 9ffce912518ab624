package registry

import (
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
	if got := fenceKey("orders:42"); got != "{orders:42}:fence" {
		t.Errorf("fenceKey = %q", got)
	}
	if a, b := newToken("id", 1), newToken("id", 0xabc); a != "id:0000000000000001" || b != "id:0000000000000abc" {
		t.Errorf("tokens %q, %q: want id:<16 hex digits of the counter>", a, b)
	}
}
