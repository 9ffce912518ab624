package registry

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/lockyard/lockyard/internal/core"
)

// MaxLabelLen bounds the length of a label (WithLabel), in bytes.
const MaxLabelLen = 256

// A registry publishes its label before its first attempt in Redis, at
// its label key (wire.Layout.LabelKey: one per registry, not per
// acquisition), and again every labelEvery until Close, each time for
// labelTTL: the label of a registry that is gone expires labelTTL after
// its last publication at most.
const (
	labelTTL   = 10 * time.Minute
	labelEvery = labelTTL / 3
)

// WithLabel sets the label that Inspect and `lockyard status` show for this registry's holds and waits
// (default: host name and process id). It is written once per registry, not per acquisition, and expires with it.
//
// The label is published just before the registry's first attempt in
// Redis (one more command, once, which that attempt waits for at most
// 200ms), then renewed every few minutes by a goroutine that Close stops;
// it expires ten minutes after the last renewal. It must be
// valid UTF-8, 1 to MaxLabelLen bytes; another value makes New fail with
// ErrInvalidConfig. An ACL that refuses the label key (see
// docs/SECURITY.md) only leaves the label out.
func WithLabel(label string) Option {
	return func(c *config) error {
		if label == "" || len(label) > MaxLabelLen || !utf8.ValidString(label) {
			return fmt.Errorf("%w: label must be valid UTF-8 of 1 to %d bytes, got %q", ErrInvalidConfig, MaxLabelLen, label)
		}
		c.label = label
		return nil
	}
}

// defaultLabel is "HOST/PID" (or "PID" when the host name is unknown).
func defaultLabel() string {
	pid := strconv.Itoa(os.Getpid())
	if host, err := os.Hostname(); err == nil && host != "" {
		return host + "/" + pid
	}
	return pid
}

// labelWait bounds the first publication of a label, which the first
// attempt of the registry waits for (before its obtain is sent, so that
// it never shortens a hold's validity); a publication that did not make
// it in time is tried again in the background a second later.
const labelWait = 200 * time.Millisecond

// publishLabel publishes the registry's label the first time it is
// called, within labelWait, and starts the goroutine that renews it. The
// caller is about to make its first attempt in Redis.
func (r *Registry) publishLabel(ctx context.Context) {
	if r.labelled.Load() || !r.labelled.CompareAndSwap(false, true) {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, labelWait)
	ok := r.writeLabel(ctx)
	cancel()
	r.core.BG.Spawn(func() {
		for {
			d := labelEvery
			if !ok {
				d = time.Second
			}
			if r.core.BG.Sleep(context.Background(), d, nil) != nil {
				return
			}
			ok = r.writeLabel(r.core.BG.Ctx)
		}
	})
}

// writeLabel sets the label key for labelTTL, and reports whether it did.
// A failure is logged at debug level: labels are advisory.
func (r *Registry) writeLabel(ctx context.Context) bool {
	call := core.Call{Keys: []string{r.layout.LabelKey(r.core.ClientID)}, Args: []any{r.cfg.label, labelTTL.Milliseconds()}}
	ok := true
	for _, res := range r.core.Exec.Eval(ctx, 0, labelScript, call) {
		if res.Err != nil {
			ok = false
			r.core.Log.Debug("lockyard: label not published", "err", res.Err)
		}
	}
	return ok
}
