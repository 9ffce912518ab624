// Package goredis runs lockyard registries on go-redis v9: a single node
// (redis.NewClient), a Sentinel-managed master (redis.NewFailoverClient) or
// Redis Cluster (redis.NewClusterClient), through one constructor:
//
//	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: true, MaxRetries: -1})
//	reg, err := registry.NewWithClient(goredis.NewClient(rdb), "orders", registry.WithHashTag())
//
// It is a module of its own, so that users of the redigo default never
// download go-redis.
//
// # go-redis options
//
// lockyard retries failed attempts itself (with backoff, counting each in
// Stats.RedisErrors, and reporting the last error when a LockContext
// deadline ends). go-redis's own retries hide all that: with its defaults,
// a TryLock against a server that is down takes seconds, and LockContext
// reports only "context deadline exceeded". Set:
//
//	rdb := redis.NewClient(&redis.Options{
//		Addr:                  addr,
//		ContextTimeoutEnabled: true,            // honour lockyard's deadlines (without it go-redis ignores them)
//		MaxRetries:            -1,              // no command retries: lockyard retries
//		DialTimeout:           time.Second,     // a dead host fails an attempt in 1s, not 5s
//		DialerRetries:         1,               // go-redis v9.15+: one dial per attempt, not 5 (100ms apart)
//	})
//	redis.SetLogger(myLogger)                   // go-redis logs redials to stderr by default
//
// go-redis's retries are safe, though, if you keep them: every lockyard
// script is idempotent for its token. TestServerDownRecommendedOptions
// shows the behaviour with these options. The module requires go-redis
// v9.0.0 or later and Go 1.24.
//
// In Cluster every key a script touches lies in the lock key's slot, braces
// or not (see registry.WithHashTag for the other key form); go-redis
// follows MOVED and ASK redirections, and a subscription on any node
// receives every release.
// registry.WithReplicaAck runs WAIT on the connection of the key's master.
package goredis

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockyard/lockyard/registry"
)

// Client is a registry.Client over a go-redis UniversalClient.
type Client struct {
	rdb redis.UniversalClient
}

var (
	_ registry.Client         = (*Client)(nil)
	_ registry.SetNXClient    = (*Client)(nil)
	_ registry.SetNXGetClient = (*Client)(nil)
	_ registry.CommandClient  = (*Client)(nil)
)

// NewClient returns a registry.Client that runs the registry's commands on
// rdb. Closing rdb is the caller's job, after the registries are closed.
func NewClient(rdb redis.UniversalClient) *Client { return &Client{rdb: rdb} }

// Eval runs s as EVALSHA, then EVAL on NOSCRIPT; go-redis routes it by its
// first key.
func (c *Client) Eval(ctx context.Context, s *registry.Script, keys []string, args []any) (any, error) {
	v, err := c.rdb.EvalSha(ctx, s.Hash(), keys, args...).Result()
	if isNoScript(err) {
		v, err = c.rdb.Eval(ctx, s.Source(), keys, args...).Result()
	}
	return v, replyError(err)
}

// SetNX sends SET key value NX PX ttl (registry.SetNXClient): the
// registry's obtain when it expects the key to be free.
func (c *Client) SetNX(ctx context.Context, key, value string, ttl time.Duration) (bool, error) {
	ok, err := c.rdb.SetNX(ctx, key, value, ttl).Result()
	return ok, replyError(err)
}

// SetNXGet sends SET key value NX GET PX ttl (registry.SetNXGetClient):
// a TryLock's obtain when the registry expects the key to be free. It
// returns the value the key held, and whether it held one.
func (c *Client) SetNXGet(ctx context.Context, key, value string, ttl time.Duration) (string, bool, error) {
	old, err := c.rdb.SetArgs(ctx, key, value, redis.SetArgs{Mode: "NX", Get: true, TTL: ttl}).Result()
	if errors.Is(err, redis.Nil) {
		return "", false, nil // it was absent, and is set
	}
	return old, err == nil, replyError(err)
}

// EvalWait pipelines the script and WAIT on one connection: the master of
// the first key's slot in Cluster, the client's node otherwise.
func (c *Client) EvalWait(ctx context.Context, s *registry.Script, keys []string, args []any, replicas int, timeout time.Duration) (any, int, error) {
	var node redis.Cmdable = c.rdb
	if cc, ok := c.rdb.(*redis.ClusterClient); ok {
		master, err := cc.MasterForKey(ctx, keys[0])
		if err != nil {
			return nil, 0, err
		}
		node = master
	}
	for _, sha := range []bool{true, false} {
		var (
			ev   *redis.Cmd
			wait *redis.Cmd
		)
		_, _ = node.Pipelined(ctx, func(p redis.Pipeliner) error {
			if sha {
				ev = p.EvalSha(ctx, s.Hash(), keys, args...)
			} else {
				ev = p.Eval(ctx, s.Source(), keys, args...)
			}
			wait = p.Do(ctx, "WAIT", replicas, timeout.Milliseconds())
			return nil
		})
		v, err := ev.Result()
		if sha && isNoScript(err) {
			continue
		}
		if err != nil {
			return nil, 0, replyError(err)
		}
		n, err := wait.Int()
		return v, n, replyError(err)
	}
	panic("unreachable")
}

// EvalBatch pipelines the calls; in Cluster go-redis splits the pipeline by
// node. Calls that found the script missing are sent again as EVAL.
func (c *Client) EvalBatch(ctx context.Context, s *registry.Script, calls []registry.Call) []registry.Result {
	out := make([]registry.Result, len(calls))
	cmds := make([]*redis.Cmd, len(calls))
	_, _ = c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, x := range calls {
			cmds[i] = p.EvalSha(ctx, s.Hash(), x.Keys, x.Args...)
		}
		return nil
	})
	var retry []int
	for i, cmd := range cmds {
		v, err := cmd.Result()
		if isNoScript(err) {
			retry = append(retry, i)
		}
		out[i] = registry.Result{Reply: v, Err: replyError(err)}
	}
	if len(retry) == 0 {
		return out
	}
	_, _ = c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, i := range retry {
			cmds[i] = p.Eval(ctx, s.Source(), calls[i].Keys, calls[i].Args...)
		}
		return nil
	})
	for _, i := range retry {
		v, err := cmds[i].Result()
		out[i] = registry.Result{Reply: v, Err: replyError(err)}
	}
	return out
}

// Info returns an INFO section (of one node in Cluster), for the
// registry's eviction-policy check.
func (c *Client) Info(ctx context.Context, section string) (string, error) {
	v, err := c.rdb.Info(ctx, section).Result()
	return v, replyError(err)
}

// PSubscribe subscribes with go-redis's PubSub, on one node in Cluster
// (non-sharded PUBLISH reaches every node), and waits for the confirmation.
func (c *Client) PSubscribe(ctx context.Context, pattern string) (registry.Subscription, error) {
	ps := c.rdb.PSubscribe(ctx, pattern)
	for {
		m, err := receive(ctx, ps)
		if err != nil {
			ps.Close()
			return nil, replyError(err)
		}
		if sub, ok := m.(*redis.Subscription); ok && sub.Kind == "psubscribe" {
			return &subscription{ps: ps}, nil
		}
	}
}

// SubscribeChannels subscribes to channels with go-redis's PubSub, on one
// node in Cluster (non-sharded PUBLISH reaches every node), and waits for
// every confirmation (registry.ChannelSubscriber): a registry then
// subscribes to the release channels of the keys its waiters wait for,
// not to every key's.
func (c *Client) SubscribeChannels(ctx context.Context, channels ...string) (registry.ChannelSubscription, error) {
	ps := c.rdb.Subscribe(ctx, channels...)
	for n := 0; n < len(channels); {
		m, err := receive(ctx, ps)
		if err != nil {
			ps.Close()
			return nil, replyError(err)
		}
		if sub, ok := m.(*redis.Subscription); ok && sub.Kind == "subscribe" {
			n++
		}
	}
	return &subscription{ps: ps}, nil
}

type subscription struct{ ps *redis.PubSub }

// Subscribe sends SUBSCRIBE on the PubSub's connection; go-redis lets it
// run while another goroutine receives (registry.ChannelSubscription).
func (s *subscription) Subscribe(ctx context.Context, channels ...string) error {
	return s.ps.Subscribe(ctx, channels...)
}

// Unsubscribe sends UNSUBSCRIBE (registry.ChannelSubscription).
func (s *subscription) Unsubscribe(ctx context.Context, channels ...string) error {
	return s.ps.Unsubscribe(ctx, channels...)
}

func (s *subscription) Receive(ctx context.Context) (string, error) {
	for {
		m, err := receive(ctx, s.ps)
		if err != nil {
			return "", replyError(err)
		}
		switch m := m.(type) {
		case *redis.Message:
			if m.Channel != "" {
				return m.Channel, nil
			}
		case *redis.Pong:
			return "", nil
		}
	}
}

func (s *subscription) Ping(ctx context.Context) error { return s.ps.Ping(ctx) }

// Close closes the PubSub; a second call is a no-op.
func (s *subscription) Close() error {
	if err := s.ps.Close(); err != nil && !errors.Is(err, redis.ErrClosed) {
		return err
	}
	return nil
}

// receive reads the next pub/sub event. go-redis bounds the read by a
// timeout, not by ctx: the timeout is ctx's deadline, and a cancellation
// closes ps, which ends the read.
func receive(ctx context.Context, ps *redis.PubSub) (any, error) {
	var timeout time.Duration
	if dl, ok := ctx.Deadline(); ok {
		if timeout = time.Until(dl); timeout <= 0 {
			return nil, context.DeadlineExceeded
		}
	}
	stop := context.AfterFunc(ctx, func() { ps.Close() })
	defer stop()
	m, err := ps.ReceiveTimeout(ctx, timeout)
	if err != nil && ctx.Err() != nil {
		return nil, errors.Join(ctx.Err(), err)
	}
	return m, err
}

// replyError wraps a go-redis error reply in a registry.ReplyError; every
// other error (network, pool, context) is returned as it is.
func replyError(err error) error {
	var re redis.Error
	if errors.As(err, &re) && !errors.Is(err, redis.Nil) {
		return &registry.ReplyError{Err: err}
	}
	return err
}

func isNoScript(err error) bool {
	return err != nil && redis.HasErrorPrefix(err, "NOSCRIPT")
}

// Pipeline sends cmds pipelined (registry.CommandClient); in Cluster
// go-redis routes each by its first key and splits the pipeline by node.
func (c *Client) Pipeline(ctx context.Context, cmds [][]any) []registry.Result {
	return pipeline(ctx, c.rdb, cmds)
}

// PipelineOn sends cmds pipelined, in order, on one connection: of the
// master of key's slot in Cluster (keyless commands, such as PUBLISH,
// included), of the client's node otherwise.
func (c *Client) PipelineOn(ctx context.Context, key string, cmds [][]any) []registry.Result {
	var node redis.Cmdable = c.rdb
	if cc, ok := c.rdb.(*redis.ClusterClient); ok {
		master, err := cc.MasterForKey(ctx, key)
		if err != nil {
			return failed(make([]registry.Result, len(cmds)), replyError(err))
		}
		node = master
	}
	return pipeline(ctx, node, cmds)
}

// failed sets every result of out to err.
func failed(out []registry.Result, err error) []registry.Result {
	for i := range out {
		out[i] = registry.Result{Err: err}
	}
	return out
}

// pipeline sends cmds in one go-redis pipeline on node. A nil reply is a
// nil Reply, not redis.Nil.
func pipeline(ctx context.Context, node redis.Cmdable, cmds [][]any) []registry.Result {
	out := make([]registry.Result, len(cmds))
	for _, cmd := range cmds { // before anything is sent
		if len(cmd) == 0 || cmd[0] == "" {
			return failed(out, fmt.Errorf("%w: a command must begin with its name, got %v", registry.ErrInvalidConfig, cmd))
		}
		if _, ok := cmd[0].(string); !ok {
			return failed(out, fmt.Errorf("%w: a command must begin with its name, got %v", registry.ErrInvalidConfig, cmd))
		}
	}
	rs := make([]*redis.Cmd, len(cmds))
	_, _ = node.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, cmd := range cmds {
			rs[i] = p.Do(ctx, cmd...)
		}
		return nil
	})
	for i, cmd := range rs {
		v, err := cmd.Result()
		if errors.Is(err, redis.Nil) {
			v, err = nil, nil
		}
		out[i] = registry.Result{Reply: v, Err: replyError(err)}
	}
	return out
}
