package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"strconv"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/lockyard/lockyard/internal/wire"
)

// common are the flags every command takes.
type common struct {
	url      string
	registry string
	hashTag  bool
	verbose  bool
}

// defaultURL is the Redis URL when neither --redis nor REDIS_URL says.
const defaultURL = "redis://127.0.0.1:6379"

func (c *common) register(fs *flag.FlagSet) {
	fs.StringVar(&c.url, "redis", "", "Redis `URL`: redis://[user:password@]host:port[/db] or rediss:// (TLS) (default $REDIS_URL, else "+defaultURL+")")
	fs.StringVar(&c.registry, "registry", "lockyard", "registry key: locks are REGISTRY:KEY")
	fs.BoolVar(&c.hashTag, "hash-tag", false, "locks are REGISTRY:{KEY}, as registries with WithHashTag (Redis Cluster) make them")
	fs.BoolVar(&c.verbose, "v", false, "log progress to stderr")
}

// redisURL returns the URL to use: --redis, else $REDIS_URL, else the
// default.
func (c *common) redisURL() string {
	if c.url != "" {
		return c.url
	}
	if u := os.Getenv("REDIS_URL"); u != "" {
		return u
	}
	return defaultURL
}

// checkURL rejects a Redis URL that cannot name a server (a usage error,
// not an unavailable server): another scheme, no host, a port that is not
// a number, or no scheme at all ("localhost:6379", "/abc").
func (c *common) checkURL() error {
	raw := c.redisURL()
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return fmt.Errorf("redis URL %s: %w", redactURL(raw), errors.Unwrap(err))
	case u.Scheme != "redis" && u.Scheme != "rediss":
		return fmt.Errorf("redis URL %s: want redis:// or rediss://", redactURL(raw))
	case u.Hostname() == "":
		return fmt.Errorf("redis URL %s: no host", redactURL(raw))
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return fmt.Errorf("redis URL %s: port %q is not a number from 1 to 65535", redactURL(raw), p)
		}
	}
	return nil
}

// layout returns the registry's key layout, shared with the library.
func (c *common) layout() wire.Layout {
	return wire.Layout{Registry: c.registry, HashTag: c.hashTag}
}

// logger logs to stderr in slog's text format: warnings, or from info with -v.
func (c *common) logger() *slog.Logger {
	level := slog.LevelWarn
	if c.verbose {
		level = slog.LevelInfo
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
}

// pool returns a pool for the URL, after checking with a PING that the
// server answers (and accepts the credentials).
func (c *common) pool(ctx context.Context) (*redis.Pool, error) {
	raw := c.redisURL()
	dial := func(ctx context.Context) (redis.Conn, error) {
		return redis.DialURLContext(ctx, raw, redis.DialConnectTimeout(5*time.Second),
			redis.DialReadTimeout(10*time.Second), redis.DialWriteTimeout(10*time.Second))
	}
	p := &redis.Pool{DialContext: dial, MaxIdle: 4, IdleTimeout: time.Minute}
	conn, err := p.GetContext(ctx)
	if err == nil {
		_, err = conn.Do("PING")
		conn.Close()
	}
	if err != nil {
		p.Close()
		return nil, fmt.Errorf("redis %s: %w", redactURL(raw), err)
	}
	return p, nil
}

// redactURL hides the password of a Redis URL.
func redactURL(s string) string {
	if u, err := url.Parse(s); err == nil {
		return u.Redacted()
	}
	return "(unparsable URL)"
}

// parse parses args with fs, printing usage errors; ok is false on error.
func parse(fs *flag.FlagSet, args []string) (code int, ok bool) {
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(os.Stdout)
			fs.Usage()
			return 0, false
		}
		fmt.Fprintf(os.Stderr, "lockyard %s: %v\n", fs.Name(), err)
		return exitUsage, false
	}
	return 0, true
}

// fail prints err for the command name and returns code.
func fail(name string, code int, err error) int {
	fmt.Fprintf(os.Stderr, "lockyard %s: %v\n", name, err)
	return code
}
