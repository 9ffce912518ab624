// Command once shows a job that must run once across the replicas of a
// service, such as a nightly report: every replica tries at the scheduled
// time, one runs it.
//
// A replica takes the lock with TryLock, which never waits: if another
// replica holds it, the job is running there and this one skips. The lock
// only excludes replicas while the job runs, so the job also records that
// it is done for the day; a replica that starts late finds the record and
// skips too. ExecuteLocked (with a context that has a deadline) is the
// alternative when a replica should wait and then check the record.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/gomodule/redigo/redis"

	"github.com/lockyard/lockyard/registry"
)

func main() {
	if err := run(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "once:", err)
		os.Exit(1)
	}
}

const day = "2026-11-21"

// replica is one process of the service.
type replica struct {
	name string
	reg  *registry.Registry
	pool *redis.Pool
}

// nightly runs the report unless it runs elsewhere or already ran today.
// job is the report itself.
func (r *replica) nightly(ctx context.Context, job func(ctx context.Context) error) (string, error) {
	l, err := r.reg.Obtain("nightly-report")
	if err != nil {
		return "", err
	}
	if !l.TryLock() {
		return "skipped: running on another replica", nil
	}
	defer l.Unlock()
	c := r.pool.Get()
	defer c.Close()
	done, err := redis.Bool(c.Do("EXISTS", "report-done:"+day))
	if err != nil || done {
		return "skipped: already done today", err
	}
	if err := job(ctx); err != nil {
		return "", err
	}
	if _, err := c.Do("SET", "report-done:"+day, r.name, "EX", 48*3600); err != nil {
		return "", err
	}
	return "ran the report", nil
}

func run(w io.Writer) error {
	mr := miniredis.NewMiniRedis()
	if err := mr.StartAddr("127.0.0.1:0"); err != nil {
		return err
	}
	defer mr.Close()
	pool := &redis.Pool{Dial: func() (redis.Conn, error) { return redis.Dial("tcp", mr.Addr()) }}
	defer pool.Close()
	var rs []*replica
	for _, name := range []string{"replica-1", "replica-2", "replica-3"} {
		reg, err := registry.New(pool, "jobs", registry.WithExpireAfter(time.Minute), registry.WithAutoRenew())
		if err != nil {
			return err
		}
		defer reg.Close()
		rs = append(rs, &replica{name: name, reg: reg, pool: pool})
	}
	ctx := context.Background()

	// replica-1 starts the job; replica-2 tries while it runs; replica-3
	// starts after it finished.
	running, finish := make(chan struct{}), make(chan struct{})
	first := make(chan error, 1)
	go func() {
		msg, err := rs[0].nightly(ctx, func(context.Context) error {
			close(running)
			<-finish
			return nil
		})
		fmt.Fprintf(w, "%s: %s\n", rs[0].name, msg)
		first <- err
	}()
	<-running
	msg, err := rs[1].nightly(ctx, nil)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "%s: %s\n", rs[1].name, msg)
	close(finish)
	if err := <-first; err != nil {
		return err
	}
	msg, err = rs[2].nightly(ctx, func(context.Context) error { return errors.New("ran twice") })
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "%s: %s\n", rs[2].name, msg)
	return nil
}
