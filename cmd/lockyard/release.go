package main

import (
	"context"
	_ "embed"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/lockyard/lockyard/internal/wire"
)

func cmdRelease(args []string) int {
	var f common
	var force bool
	var holder string
	var foreign bool
	fs := flag.NewFlagSet("release", flag.ContinueOnError)
	f.register(fs)
	fs.BoolVar(&force, "force", false, "required: remove the lock whoever holds it (of a semaphore: every permit)")
	fs.BoolVar(&foreign, "foreign", false, "also remove a string without a TTL at the lock's key, which is no lock (status: \"not a lock\")")
	fs.StringVar(&holder, "holder", "", "only this holder's (a registry id, as status shows it): a semaphore's permits, or the lock if it holds it (else exit 1)")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: lockyard release --force [--holder ID] [flags] KEY")
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
	foreignArg := "0"
	if foreign {
		foreignArg = "1"
	}
	v, err := redis.Values(forceRelease.Do(c, lk, w.ReadersKey(lk), w.Channel(lk), holder, foreignArg))
	var re redis.Error
	switch {
	case errors.As(err, &re) && strings.HasPrefix(string(re), "WRONGTYPE"):
		return fail("release", exitWrongKind, err) // a key of no lockyard kind: left as it is
	case err != nil:
		return fail("release", exitUnavailable, err)
	}
	token, _ := redis.String(v[0], nil)
	if last, _ := redis.String(v[len(v)-1], nil); last == "foreign" && len(v) == 3 {
		fmt.Fprintf(os.Stderr, "lockyard release: %s holds a string without a TTL, which is no lock: nothing removed (--foreign removes it)\n", printable(lk))
		return exitWrongKind
	}
	if kept, _ := redis.String(v[len(v)-1], nil); kept == "kept" && len(v) == 3 {
		fmt.Printf("%s is held by %s, not %s: nothing removed\n", printable(lk), printable(wire.Holder(token)), printable(holder))
		return exitFree
	}
	if (token == "semaphore" || token == "rwlock") && len(v) == 3 {
		n, _ := redis.Int64(v[1], nil)
		left, _ := redis.Int64(v[2], nil)
		what := "permit(s)"
		if token == "rwlock" {
			what = "holder(s)"
		}
		fmt.Printf("took %d %s out of %s, %d left held; its waiters find them at their next try\n", n, what, printable(lk), left)
		return 0
	}
	if token == "" {
		fmt.Printf("%s was not held: nothing removed\n", printable(lk))
		return 0
	}
	pttl, _ := redis.Int64(v[1], nil)
	fmt.Printf("removed %s (holder %s, %s left); waiters were notified\n", printable(lk), printable(wire.Holder(token)), ttlString(time.Duration(pttl)*time.Millisecond))
	return 0
}

// forceRelease deletes a lock key whatever its value and publishes the
// release, in one step, and returns the value and TTL it removed; or takes
// permits out of a semaphore (every one, or one holder's), and returns how
// many.
var forceRelease = redis.NewScript(2, forceReleaseSrc)

//go:embed forcerelease.lua
var forceReleaseSrc string
