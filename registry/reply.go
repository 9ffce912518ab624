package registry

import "fmt"

// Decoding of the scripts' replies, as a Client returns them (RESP types:
// an integer is an int64, an array a []any). Stores return decoded values,
// so nothing above them sees a raw reply.

// replyInt returns the integer reply v.
func replyInt(v any) (int64, error) {
	if n, ok := v.(int64); ok {
		return n, nil
	}
	return 0, fmt.Errorf("lockyard: unexpected reply %v (%T), want an integer", v, v)
}

// replyPair returns the reply {a, b} of two integers.
func replyPair(v any) (a, b int64, err error) {
	x, ok := v.([]any)
	if ok && len(x) == 2 {
		a, ok1 := x[0].(int64)
		b, ok2 := x[1].(int64)
		if ok1 && ok2 {
			return a, b, nil
		}
	}
	return 0, 0, fmt.Errorf("lockyard: unexpected reply %v (%T), want two integers", v, v)
}

// decodeGrant decodes obtain.lua's {1, fence}, {0, pttl} or {2, ms} (not
// acquired, and another registry's turn comes first).
func decodeGrant(v any) (grant, error) {
	ok, n, err := replyPair(v)
	switch {
	case err != nil:
		return grant{pttl: -1}, err
	case ok == 1:
		return grant{ok: true, fence: n}, nil
	}
	return grant{pttl: n, behind: ok == 2}, nil
}

// decodePass decodes pass.lua's {1, fence}, {2, 0} or {0, 0}.
func decodePass(v any) (passReply, error) {
	state, fence, err := replyPair(v)
	switch {
	case err != nil:
		return passReply{}, err
	case state == 1:
		return passReply{outcome: passKept, fence: fence}, nil
	case state == 2:
		return passReply{outcome: passReleased}, nil
	}
	return passReply{outcome: passGone}, nil
}

// decodeDone decodes the 1 (done) or 0 (the key was gone or another
// holder's) of release.lua and renew.lua.
func decodeDone(v any, err error) (bool, error) {
	if err != nil {
		return false, err
	}
	n, err := replyInt(v)
	return n >= 1, err // release.lua's 2: done, and registries wait
}

// decodeRelease decodes release.lua's 2 (deleted; registries wait), 1
// (deleted) or 0 (gone or another holder's).
func decodeRelease(v any, err error) (done, others bool, _ error) {
	if err != nil {
		return false, false, err
	}
	n, err := replyInt(v)
	return n >= 1, n == 2, err
}
