package registry_test

import (
	"context"
	"errors"
	"testing"

	"github.com/lockyard/lockyard/registry"
)

// scriptSeen records the scripts a Client wrapper is asked to run.
type scriptSeen struct {
	registry.Client
	scripts []*registry.Script
}

func (c *scriptSeen) Eval(ctx context.Context, s *registry.Script, keys []string, args []any) (any, error) {
	c.scripts = append(c.scripts, s)
	return c.Client.Eval(ctx, s, keys, args)
}

// The Client seam's types, now aliases of the core's, are used as they
// were declared here: a wrapper implements Client, Call and Result are
// built by field, a ReplyError wraps and unwraps, and a Script reports its
// name, source and hash.
func TestClientSeamAPI(t *testing.T) {
	b := realBackend()
	c := &scriptSeen{Client: registry.NewPoolClient(b.pool(t))}
	var _ registry.Client = c
	r, err := registry.NewWithClient(c, prefix(t))
	mustNil(t, err)
	t.Cleanup(func() { r.Close() })
	l := obtain(t, r, "k")
	mustNil(t, l.LockContext(bg(t)))
	l.Unlock()
	if len(c.scripts) == 0 {
		t.Fatal("no script ran through the wrapper")
	}
	for _, s := range c.scripts {
		if s.Name() == "" || s.Source() == "" || len(s.Hash()) != 40 {
			t.Errorf("script %q: source of %d bytes, hash %q", s.Name(), len(s.Source()), s.Hash())
		}
	}
	label := c.scripts[0] // published before the first attempt; without ARGV it only reads
	if label.Name() != "label" {
		t.Fatalf("first script %q, want label", label.Name())
	}
	res := c.EvalBatch(bg(t), label, []registry.Call{{Keys: []string{prefix(t) + "-none"}}})
	var r0 registry.Result = res[0]
	if len(res) != 1 || r0.Err != nil || r0.Reply != nil {
		t.Fatalf("EvalBatch of a read of a missing key: %+v", res)
	}
	cause := errors.New("WRONGTYPE x")
	re := &registry.ReplyError{Err: cause}
	if re.Error() != "WRONGTYPE x" || !errors.Is(re, cause) || errors.Unwrap(re) != cause {
		t.Errorf("ReplyError: %q", re.Error())
	}
}
