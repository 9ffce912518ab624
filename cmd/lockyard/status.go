package main

import (
	"context"
	_ "embed"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/gomodule/redigo/redis"

	"github.com/lockyard/lockyard/internal/wire"
)

func cmdStatus(args []string) int {
	var f common
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	f.register(fs)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: lockyard status [flags] [KEY...]")
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
	c, err := pool.GetContext(ctx)
	if err != nil {
		return fail("status", exitUnavailable, err)
	}
	defer c.Close()
	keys := fs.Args()
	if len(keys) == 0 {
		if keys, err = scanKeys(c, &f); err != nil {
			return fail("status", exitUnavailable, err)
		}
	}
	if err := printStatus(os.Stdout, c, &f, keys); err != nil {
		return fail("status", exitUnavailable, err)
	}
	return 0
}

// scanKeys returns the keys of the locks held under registryKey, found
// with SCAN (never KEYS, which blocks the server).
func scanKeys(c redis.Conn, f *common) ([]string, error) {
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

// printStatus prints one line per key: whether it is held, its remaining
// TTL, its fencing counter and the holder's registry id. A key that is not
// a lock (not a string, or a string without a TTL: every lock key has one)
// is marked so (with the commands of the least-privilege ACL: GET, PTTL). Keys and holders are printed as they are when they are
// printable, quoted with Go escapes (%q) otherwise, so that no key can
// break the table or send control sequences to the terminal.
func printStatus(w io.Writer, c redis.Conn, f *common, keys []string) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tSTATE\tTTL\tFENCE\tHOLDER")
	layout := f.layout()
	for _, k := range keys {
		lk := layout.LockKey(k)
		c.Send("GET", lk)
		c.Send("PTTL", lk)
		c.Send("GET", layout.FenceKey(lk))
		v, err := redis.Values(c.Do(""))
		if err != nil {
			return err
		}
		token, err := redis.String(v[0], nil)
		pttl, _ := redis.Int64(v[1], nil)
		var re redis.Error
		switch {
		case errors.Is(err, redis.ErrNil):
			fmt.Fprintf(tw, "%s\tfree\t-\t%s\t-\n", printable(k), fence(v[2]))
		case errors.As(err, &re): // WRONGTYPE: a semaphore, or a hash, a list, ...
			if ok, err := printSemaphore(tw, c, layout, k, fence(v[2])); err != nil || ok {
				if err != nil {
					return err
				}
				continue
			}
			fmt.Fprintf(tw, "%s\tnot a lock (not a string)\t%s\t%s\t-\n", printable(k), ttlString(pttl), fence(v[2]))
		case err != nil:
			return err
		case pttl < 0:
			fmt.Fprintf(tw, "%s\tnot a lock (no TTL)\tnone\t%s\t-\n", printable(k), fence(v[2]))
		default:
			fmt.Fprintf(tw, "%s\theld\t%s\t%s\t%s\n", printable(k), ttlString(pttl), fence(v[2]), printable(wire.Holder(token)))
		}
	}
	return tw.Flush()
}

// printSemaphore prints the permits of the semaphore on k, one line each
// (its TTL by the server's clock, and its holder), and how many wait, if
// k's key is a sorted set (a semaphore: wire.Layout); it reports whether
// it was one.
func printSemaphore(w io.Writer, c redis.Conn, layout wire.Layout, k, fence string) (bool, error) {
	lk := layout.LockKey(k)
	c.Send("TYPE", lk)
	c.Send("TIME")
	c.Send("ZRANGE", lk, 0, -1, "WITHSCORES")
	c.Send("ZCARD", layout.QueueKey(lk))
	v, err := redis.Values(c.Do(""))
	if err != nil {
		return false, err
	}
	if t, _ := redis.String(v[0], nil); t != "zset" {
		return false, nil
	}
	tv, err := redis.Int64s(v[1], nil)
	if err != nil || len(tv) != 2 {
		return false, fmt.Errorf("TIME: %v", err)
	}
	now := tv[0]*1000 + tv[1]/1000
	permits, err := redis.Strings(v[2], nil)
	if err != nil {
		return false, err
	}
	held := 0
	for i := 0; i+1 < len(permits); i += 2 {
		expiry, err := strconv.ParseInt(permits[i+1], 10, 64)
		if err != nil || expiry <= now {
			continue // expired: pruned by the next attempt
		}
		held++
		fmt.Fprintf(w, "%s\tpermit\t%s\t%s\t%s\n", printable(k), ttlString(expiry-now), fence, printable(wire.Holder(permits[i])))
	}
	waiting, _ := redis.Int(v[3], nil)
	fmt.Fprintf(w, "%s\tsemaphore: %d held, %d waiting\t-\t%s\t-\n", printable(k), held, waiting, fence)
	return true, nil
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

func ttlString(pttl int64) string {
	if pttl < 0 {
		return "none"
	}
	return (time.Duration(pttl) * time.Millisecond).String()
}

func fence(v any) string {
	n, err := redis.Int64(v, nil)
	if err != nil {
		return "-"
	}
	return fmt.Sprint(n)
}

func cmdRelease(args []string) int {
	var f common
	var force bool
	fs := flag.NewFlagSet("release", flag.ContinueOnError)
	f.register(fs)
	fs.BoolVar(&force, "force", false, "required: remove the lock whoever holds it")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: lockyard release --force [flags] KEY")
		fs.PrintDefaults()
	}
	if code, ok := parse(fs, args); !ok {
		return code
	}
	if !force || fs.NArg() != 1 {
		return fail("release", exitUsage, errors.New("need --force and exactly one KEY: this removes a lock that someone else may hold"))
	}
	if err := f.checkURL(); err != nil {
		return fail(fs.Name(), exitUsage, err)
	}
	ctx := context.Background()
	pool, err := f.pool(ctx)
	if err != nil {
		return fail("release", exitUnavailable, err)
	}
	defer pool.Close()
	c, err := pool.GetContext(ctx)
	if err != nil {
		return fail("release", exitUnavailable, err)
	}
	defer c.Close()
	w := f.layout()
	lk := w.LockKey(fs.Arg(0))
	v, err := redis.Values(forceRelease.Do(c, lk, w.Channel(lk)))
	if err != nil {
		return fail("release", exitUnavailable, err)
	}
	token, _ := redis.String(v[0], nil)
	if token == "" {
		fmt.Printf("%s was not held: nothing removed\n", printable(lk))
		return 0
	}
	pttl, _ := redis.Int64(v[1], nil)
	fmt.Printf("removed %s (holder %s, %s left); waiters were notified\n", printable(lk), printable(wire.Holder(token)), ttlString(pttl))
	return 0
}

// forceRelease deletes a lock key whatever its value and publishes the
// release, in one step; it returns the value and TTL it removed.
var forceRelease = redis.NewScript(1, forceReleaseSrc)

//go:embed forcerelease.lua
var forceReleaseSrc string
