package core

import (
	"errors"
	"testing"
)

// IsUnsupported tells a command the server cannot run as sent from a
// failure of one call.
func TestIsUnsupported(t *testing.T) {
	for msg, want := range map[string]bool{
		"ERR unknown command 'DELEX', with args beginning with: 'k' ": true,
		"ERR unknown subcommand 'DOCS'. Try COMMAND HELP.":            true,
		"ERR syntax error": true,
		"NOPERM User u has no permissions to run the 'delex' command":                    true,
		"NOPERM No permissions to access a key":                                          false,
		"NOPERM No permissions to access a channel":                                      false,
		"WRONGTYPE Operation against a key holding the wrong kind of value":              false,
		"MOVED 3999 127.0.0.1:6381":                                                      false,
		"READONLY You can't write against a read only replica.":                          false,
		"LOADING Redis is loading the dataset in memory":                                 false,
		"ERR Key should be of string type if conditions are specified (miniredis DELEX)": false,
	} {
		if got := IsUnsupported(&ReplyError{Err: errors.New(msg)}); got != want {
			t.Errorf("IsUnsupported(%q) = %v, want %v", msg, got, want)
		}
	}
	if IsUnsupported(errors.New("ERR unknown command")) || IsUnsupported(nil) {
		t.Error("an error that is not the server's reply is not a refusal")
	}
}

// IsTryAgain tells the Cluster's TRYAGAIN reply (a multi-key command on a
// slot in migration) from other transient replies and from network errors.
func TestIsTryAgain(t *testing.T) {
	for msg, want := range map[string]bool{
		"TRYAGAIN Multiple keys request during rehashing of slot": true,
		"ASK 3999 127.0.0.1:6381":                                 false,
		"MOVED 3999 127.0.0.1:6381":                               false,
		"LOADING Redis is loading the dataset in memory":          false,
	} {
		if got := IsTryAgain(&ReplyError{Err: errors.New(msg)}); got != want {
			t.Errorf("IsTryAgain(%q) = %v, want %v", msg, got, want)
		}
	}
	if IsTryAgain(errors.New("TRYAGAIN from a client, not the server")) || IsTryAgain(nil) {
		t.Error("only the server's reply is TRYAGAIN")
	}
}

// Join keeps both causes for errors.Is on one line, drops nils, and is
// nil of none (a release after an outage gave a two-line error).
func TestJoinOneLine(t *testing.T) {
	a, b := errors.New("release failed"), ErrLockLost
	err := Join(a, nil, b)
	if err.Error() != "release failed; lockyard: lock lost" || !errors.Is(err, a) || !errors.Is(err, b) {
		t.Fatalf("Join = %q, want both causes on one line", err)
	}
	if Join(nil, nil) != nil || Join(nil, a) != a {
		t.Fatal("Join of no error, or of one, is not nil, or that error")
	}
}
