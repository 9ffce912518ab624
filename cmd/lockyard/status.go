package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/gomodule/redigo/redis"

	"github.com/lockyard/lockyard/registry"
)

// exitFree is status's exit status when a key it was asked about is free
// (or, with no KEY, when nothing is held).
const exitFree = 1

func cmdStatus(args []string) int {
	var (
		f      common
		asJSON bool
	)
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	f.register(fs)
	fs.BoolVar(&asJSON, "json", false, "print one JSON object per key (key, kind, holders, waiters, fence) instead of a table")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: lockyard status [flags] [KEY...]")
		fmt.Fprintln(fs.Output(), "Exit status: 0 when every KEY is held (with no KEY: when any lock is), 1 when not, 64 on bad input, 69 when Redis is unavailable.")
		fs.PrintDefaults()
	}
	if code, ok := parse(fs, args); !ok {
		return code
	}
	if err := f.checkURL(); err != nil {
		return fail(fs.Name(), exitUsage, err)
	}
	ctx := context.Background()
	pool, err := f.pool(ctx)
	if err != nil {
		return fail("status", exitUnavailable, err)
	}
	defer pool.Close()
	opts := []registry.Option{registry.WithLogger(f.logger())}
	if f.hashTag {
		opts = append(opts, registry.WithHashTag())
	}
	reg, err := registry.New(pool, f.registry, opts...)
	if err != nil {
		return fail("status", exitUsage, err)
	}
	defer reg.Close()
	keys := fs.Args()
	named := len(keys) > 0
	if !named {
		if keys, err = scanKeys(ctx, pool, &f); err != nil {
			return fail("status", exitUnavailable, err)
		}
	}
	out := newStatusWriter(os.Stdout, asJSON)
	held := 0
	for _, k := range keys {
		info, err := reg.Inspect(ctx, k)
		switch {
		case errors.Is(err, registry.ErrInvalidKey):
			out.flush()
			return fail("status", exitUsage, err)
		case err != nil && !errors.Is(err, registry.ErrForeignKey):
			out.flush()
			return fail("status", exitUnavailable, err)
		}
		if len(info.Holders) > 0 {
			held++
		}
		out.key(k, info, err)
	}
	if err := out.flush(); err != nil {
		return fail("status", exitUnavailable, err)
	}
	if held == 0 || named && held < len(keys) {
		return exitFree
	}
	return 0
}

// scanKeys returns the keys of the locks held under registryKey, found
// with SCAN (never KEYS, which blocks the server).
func scanKeys(ctx context.Context, pool *redis.Pool, f *common) ([]string, error) {
	c, err := pool.GetContext(ctx)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	w := f.layout()
	pattern := w.ScanPattern()
	var keys []string
	cursor := "0"
	for {
		v, err := redis.Values(c.Do("SCAN", cursor, "MATCH", pattern, "COUNT", 1000))
		if err != nil {
			return nil, err
		}
		batch, err := redis.Strings(v[1], nil)
		if err != nil {
			return nil, err
		}
		for _, k := range batch {
			if uk, ok := w.UserKey(k); ok {
				keys = append(keys, uk)
			}
		}
		if cursor, err = redis.String(v[0], nil); err != nil || cursor == "0" {
			return keys, err
		}
	}
}

// statusWriter prints what Inspect read: a table, or one JSON object per
// key.
type statusWriter struct {
	tw  *tabwriter.Writer
	enc *json.Encoder
}

func newStatusWriter(w io.Writer, asJSON bool) *statusWriter {
	if asJSON {
		return &statusWriter{enc: json.NewEncoder(w)}
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tSTATE\tTTL\tFENCE\tHOLDER\tLABEL")
	return &statusWriter{tw: tw}
}

// jsonKey is the JSON form of a KeyInfo (--json), with durations in ms.
type jsonKey struct {
	Name    string       `json:"name"` // the key as given (or found)
	Key     string       `json:"key"`  // the Redis key
	Kind    string       `json:"kind"`
	Holders []jsonHolder `json:"holders"`
	Waiters []jsonWaiter `json:"waiters"`
	Fence   int64        `json:"fence"`
	Permits int          `json:"permits,omitempty"` // a semaphore's count of permits (registry.KeyInfo.Permits)
	Error   string       `json:"error,omitempty"`   // a key that is no lock or semaphore
}

type jsonHolder struct {
	Token    string `json:"token"`
	Registry string `json:"registry"`
	Label    string `json:"label"`
	TTLMs    int64  `json:"ttl_ms"`
	Mode     string `json:"mode,omitempty"`
}

type jsonWaiter struct {
	Registry  string `json:"registry"`
	Label     string `json:"label"`
	WaitingMs int64  `json:"waiting_ms"`
	Mode      string `json:"mode,omitempty"`
}

// key prints what Inspect read of key k: info, or err (ErrForeignKey).
// Keys, holders and labels are printed as they are when they are
// printable, quoted with Go escapes (%q) otherwise, so that no key can
// break the table or send control sequences to the terminal.
func (s *statusWriter) key(k string, info registry.KeyInfo, err error) {
	if s.enc != nil {
		j := jsonKey{Name: k, Key: info.Key, Kind: info.Kind, Holders: []jsonHolder{}, Waiters: []jsonWaiter{}, Fence: info.Fence, Permits: info.Permits}
		if err != nil {
			j.Error = err.Error()
		}
		for _, h := range info.Holders {
			j.Holders = append(j.Holders, jsonHolder{h.Token, h.Registry, h.Label, h.TTL.Milliseconds(), h.Mode})
		}
		for _, w := range info.Waiters {
			j.Waiters = append(j.Waiters, jsonWaiter{w.Registry, w.Label, w.Waiting.Milliseconds(), w.Mode})
		}
		_ = s.enc.Encode(j)
		return
	}
	name, fence := printable(k), fenceString(info.Fence)
	if err != nil {
		reason := err.Error()
		if i := strings.LastIndex(reason, " holds "); i >= 0 {
			reason = reason[i+1:]
		}
		fmt.Fprintf(s.tw, "%s\tnot a lock (%s)\t-\t%s\t-\t-\n", name, reason, fence)
		return
	}
	switch info.Kind {
	case "":
		fmt.Fprintf(s.tw, "%s\tfree\t-\t%s\t-\t-\n", name, fence)
	case "rwlock":
		for _, h := range info.Holders {
			fmt.Fprintf(s.tw, "%s\t%s\t%s\t%s\t%s\t%s\n", name, h.Mode, ttlString(h.TTL), fence, printable(h.Registry), label(h.Label))
		}
		if len(info.Holders) == 0 {
			fmt.Fprintf(s.tw, "%s\tfree\t-\t%s\t-\t-\n", name, fence)
		}
	case "semaphore":
		for _, h := range info.Holders {
			fmt.Fprintf(s.tw, "%s\tpermit\t%s\t%s\t%s\t%s\n", name, ttlString(h.TTL), fence, printable(h.Registry), label(h.Label))
		}
		held := strconv.Itoa(len(info.Holders))
		if info.Permits > 0 {
			held += "/" + strconv.Itoa(info.Permits)
		}
		fmt.Fprintf(s.tw, "%s\tsemaphore: %s held, %d waiting\t-\t%s\t-\t-\n", name, held, len(info.Waiters), fence)
	default:
		if len(info.Holders) == 0 {
			fmt.Fprintf(s.tw, "%s\tfree\t-\t%s\t-\t-\n", name, fence)
		}
		for _, h := range info.Holders {
			fmt.Fprintf(s.tw, "%s\theld\t%s\t%s\t%s\t%s\n", name, ttlString(h.TTL), fence, printable(h.Registry), label(h.Label))
		}
	}
	for _, w := range info.Waiters {
		what := "waiting"
		if w.Mode != "" {
			what += " to " + w.Mode
		}
		fmt.Fprintf(s.tw, "%s\t%s\t%s\t-\t%s\t%s\n", name, what, "for "+w.Waiting.Round(time.Millisecond).String(), printable(w.Registry), label(w.Label))
	}
}

func (s *statusWriter) flush() error {
	if s.tw != nil {
		return s.tw.Flush()
	}
	return nil
}

// printable returns s as it is if it is valid UTF-8 of printable
// characters without spaces, and quoted with Go escapes otherwise.
func printable(s string) string {
	if s == "" || !utf8.ValidString(s) {
		return strconv.Quote(s)
	}
	for _, r := range s {
		if !unicode.IsPrint(r) || unicode.IsSpace(r) {
			return strconv.Quote(s)
		}
	}
	return s
}

// label is a holder's or waiter's label for the table: "-" when none.
func label(s string) string {
	if s == "" {
		return "-"
	}
	return printable(s)
}

// ttlString prints a TTL; a negative one (no TTL) as "none".
func ttlString(ttl time.Duration) string {
	if ttl < 0 {
		return "none"
	}
	return ttl.Round(time.Millisecond).String()
}

func fenceString(n int64) string {
	if n == 0 {
		return "-"
	}
	return strconv.FormatInt(n, 10)
}
