package registry

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/lockyard/lockyard/internal/core"
)

// Pool hands out Redis connections. *redis.Pool (redigo) satisfies it. The
// connections must implement redis.ConnWithTimeout and
// redis.ConnWithContext, as redigo's do: a command bounded by a deadline
// runs in the calling goroutine, and so does each read of the pub/sub
// subscriber, which a ReceiveContext whose deadline has passed ends (it
// must fail at once and break the connection, as redigo's does).
type Pool interface {
	GetContext(ctx context.Context) (redis.Conn, error)
}

// New returns a registry of locks whose Redis keys are registryKey + ":" +
// key, on the Redis that pool connects to: New(pool, ...) is
// NewWithClient(NewPoolClient(pool), ...). It does not contact Redis. It
// fails with ErrInvalidConfig for a nil pool or an option out of range, and
// with ErrInvalidKey for an empty or over-long registryKey or one that
// begins with '{'.
func New(pool Pool, registryKey string, opts ...Option) (*Registry, error) {
	if isNil(pool) {
		return nil, fmt.Errorf("%w: nil pool", ErrInvalidConfig)
	}
	return NewWithClient(NewPoolClient(pool), registryKey, opts...)
}

// poolClient is the Client over a redigo pool; it is the only part of the
// registry that imports redigo.
type poolClient struct {
	pool    Pool
	nilPool bool // every call fails
}

// NewPoolClient returns the Client that New builds from pool: each call
// takes a pooled connection and runs its commands in the calling goroutine,
// bounded by ctx's deadline. A nil pool makes every call fail with
// ErrInvalidConfig.
func NewPoolClient(pool Pool) Client { return &poolClient{pool: pool, nilPool: isNil(pool)} }

var _ CommandClient = (*poolClient)(nil)

// conn returns a pooled connection and the time left until ctx's deadline
// (0: none). A cancellation of ctx is seen here, before any command is
// sent; a command in flight then completes or times out. (Waiting for a
// cancellation during the read would cost a goroutine per command.)
func (p *poolClient) conn(ctx context.Context) (redis.Conn, time.Duration, error) {
	if p.nilPool {
		return nil, 0, fmt.Errorf("%w: nil pool", ErrInvalidConfig)
	}
	if err := ctx.Err(); err != nil {
		return nil, 0, err
	}
	var timeout time.Duration
	if dl, ok := ctx.Deadline(); ok {
		if timeout = time.Until(dl); timeout <= 0 {
			return nil, 0, context.DeadlineExceeded
		}
	}
	c, err := p.pool.GetContext(ctx)
	if err != nil {
		return nil, 0, err
	}
	return c, timeout, nil
}

func (p *poolClient) Eval(ctx context.Context, s *Script, keys []string, args []any) (any, error) {
	c, timeout, err := p.conn(ctx)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return evalConn(c, timeout, s, keys, args)
}

// SetNX sends SET key value NX PX ttl.
func (p *poolClient) SetNX(ctx context.Context, key, value string, ttl time.Duration) (bool, error) {
	c, timeout, err := p.conn(ctx)
	if err != nil {
		return false, err
	}
	defer c.Close()
	v, err := doTimeout(c, timeout, "SET", []any{key, value, "NX", "PX", ttl.Milliseconds()})
	if err = replyError(err); err != nil {
		return false, err
	}
	return v != nil, nil
}

// SetNXGet sends SET key value NX GET PX ttl.
func (p *poolClient) SetNXGet(ctx context.Context, key, value string, ttl time.Duration) (string, bool, error) {
	c, timeout, err := p.conn(ctx)
	if err != nil {
		return "", false, err
	}
	defer c.Close()
	v, err := doTimeout(c, timeout, "SET", []any{key, value, "NX", "GET", "PX", ttl.Milliseconds()})
	if err = replyError(err); err != nil || v == nil {
		return "", false, err
	}
	old, err := redis.String(v, nil)
	return old, true, err
}

func (p *poolClient) EvalWait(ctx context.Context, s *Script, keys []string, args []any, replicas int, timeout time.Duration) (any, int, error) {
	c, left, err := p.conn(ctx)
	if err != nil {
		return nil, 0, err
	}
	defer c.Close()
	deadline := time.Now().Add(left)
	v, err := evalConn(c, left, s, keys, args)
	if err != nil {
		return nil, 0, err
	}
	if left > 0 {
		left = max(time.Until(deadline), time.Millisecond)
	}
	n, err := redis.Int(doTimeout(c, left, "WAIT", []any{replicas, timeout.Milliseconds()}))
	return v, n, replyError(err)
}

func (p *poolClient) EvalBatch(ctx context.Context, s *Script, calls []Call) []Result {
	out := make([]Result, len(calls))
	c, _, err := p.conn(ctx)
	if err != nil {
		return failAll(out, err)
	}
	defer c.Close()
	var retry []int
	sendBatch(ctx, c, calls, out, allIndexes(len(calls)), func(x Call) error {
		return c.Send("EVALSHA", evalArgs(s.Hash(), x.Keys, x.Args)...)
	})
	for i, res := range out {
		if core.IsNoScript(res.Err) {
			retry = append(retry, i)
		}
	}
	if len(retry) > 0 {
		sendBatch(ctx, c, calls, out, retry, func(x Call) error {
			return c.Send("EVAL", evalArgs(s.Source(), x.Keys, x.Args)...)
		})
	}
	return out
}

// Pipeline sends cmds pipelined on one pooled connection, in order
// (CommandClient).
func (p *poolClient) Pipeline(ctx context.Context, cmds [][]any) []Result {
	return p.PipelineOn(ctx, "", cmds)
}

// PipelineOn is Pipeline: the pool's node serves every key.
func (p *poolClient) PipelineOn(ctx context.Context, _ string, cmds [][]any) []Result {
	out := make([]Result, len(cmds))
	for _, cmd := range cmds { // before anything is sent
		if _, ok := commandName(cmd); !ok {
			return failAll(out, fmt.Errorf("%w: a command must begin with its name, got %v", ErrInvalidConfig, cmd))
		}
	}
	c, _, err := p.conn(ctx)
	if err != nil {
		return failAll(out, err)
	}
	defer c.Close()
	idx := allIndexes(len(cmds))
	for _, cmd := range cmds {
		name, _ := commandName(cmd)
		if err := c.Send(name, cmd[1:]...); err != nil {
			failIdx(out, idx, err)
			return out
		}
	}
	receive(ctx, c, out, idx)
	return out
}

// commandName returns the name of cmd, its first element.
func commandName(cmd []any) (string, bool) {
	if len(cmd) == 0 {
		return "", false
	}
	name, ok := cmd[0].(string)
	return name, ok && name != ""
}

// sendBatch pipelines send for calls[i], i in idx, on c and stores the
// replies in out. A broken connection fails every reply not yet read.
func sendBatch(ctx context.Context, c redis.Conn, calls []Call, out []Result, idx []int, send func(Call) error) {
	for _, i := range idx {
		if err := send(calls[i]); err != nil {
			failIdx(out, idx, err)
			return
		}
	}
	receive(ctx, c, out, idx)
}

// receive flushes c and reads the replies of the commands sent for out[i],
// i in idx, into them, bounded by ctx's deadline. A broken connection
// fails every reply not yet read.
func receive(ctx context.Context, c redis.Conn, out []Result, idx []int) {
	if err := c.Flush(); err != nil {
		failIdx(out, idx, err)
		return
	}
	cwt, inline := c.(redis.ConnWithTimeout)
	dl, bounded := ctx.Deadline()
	for k, i := range idx {
		var (
			v   any
			err error
		)
		if inline && bounded { // in this goroutine: ReceiveContext would start one per reply
			v, err = cwt.ReceiveWithTimeout(max(time.Until(dl), time.Millisecond))
		} else {
			v, err = redis.ReceiveContext(c, ctx)
		}
		var re redis.Error
		if err != nil && !errors.As(err, &re) {
			failIdx(out, idx[k:], err) // the rest is unknown
			return
		}
		out[i] = Result{Reply: v, Err: replyError(err)}
	}
}

func allIndexes(n int) []int {
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	return idx
}

func failIdx(out []Result, idx []int, err error) {
	for _, i := range idx {
		out[i] = Result{Err: err}
	}
}

func failAll(out []Result, err error) []Result {
	for i := range out {
		out[i] = Result{Err: err}
	}
	return out
}

func (p *poolClient) Info(ctx context.Context, section string) (string, error) {
	c, timeout, err := p.conn(ctx)
	if err != nil {
		return "", err
	}
	defer c.Close()
	v, err := redis.String(doTimeout(c, timeout, "INFO", []any{section}))
	return v, replyError(err)
}

// evalConn runs s on c as EVALSHA, then EVAL if the server lacks it, each
// bounded by what is left of timeout (0: no bound).
func evalConn(c redis.Conn, timeout time.Duration, s *Script, keys []string, args []any) (any, error) {
	deadline := time.Now().Add(timeout)
	v, err := doTimeout(c, timeout, "EVALSHA", evalArgs(s.Hash(), keys, args))
	if err = replyError(err); !core.IsNoScript(err) {
		return v, err
	}
	if timeout > 0 {
		timeout = max(time.Until(deadline), time.Millisecond)
	}
	v, err = doTimeout(c, timeout, "EVAL", evalArgs(s.Source(), keys, args))
	return v, replyError(err)
}

// evalArgs returns the arguments of EVAL or EVALSHA.
func evalArgs(script string, keys []string, args []any) []any {
	out := make([]any, 0, 2+len(keys)+len(args))
	out = append(out, script, len(keys))
	for _, k := range keys {
		out = append(out, k)
	}
	return append(out, args...)
}

// replyError wraps a redigo error reply in a ReplyError.
func replyError(err error) error {
	if err == nil {
		return nil // before re, which escapes: no allocation on the common path
	}
	var re redis.Error
	if errors.As(err, &re) {
		return &ReplyError{Err: err}
	}
	return err
}

// doTimeout runs one command bounded by timeout (0: no bound): in the
// calling goroutine when c implements redis.ConnWithTimeout (redigo's
// connections do), otherwise through redis.DoContext.
func doTimeout(c redis.Conn, timeout time.Duration, cmd string, args []any) (any, error) {
	if cwt, ok := c.(redis.ConnWithTimeout); ok && timeout > 0 {
		return cwt.DoWithTimeout(timeout, cmd, args...)
	}
	ctx, cancel := context.Background(), context.CancelFunc(func() {})
	if timeout > 0 {
		ctx, cancel = context.WithTimeout(ctx, timeout)
	}
	defer cancel()
	return redis.DoContext(c, ctx, cmd, args...)
}

// PSubscribe subscribes on a connection of its own, taken from the pool.
func (p *poolClient) PSubscribe(ctx context.Context, pattern string) (Subscription, error) {
	s, err := p.subscribe(ctx, "psubscribe", 1, func(psc redis.PubSubConn) error { return psc.PSubscribe(pattern) })
	if err != nil {
		return nil, err // not a nil *poolSub in the interface
	}
	return s, nil
}

// SubscribeChannels subscribes to channels on a connection of its own,
// taken from the pool (ChannelSubscriber).
func (p *poolClient) SubscribeChannels(ctx context.Context, channels ...string) (ChannelSubscription, error) {
	s, err := p.subscribe(ctx, "subscribe", len(channels), func(psc redis.PubSubConn) error {
		return psc.Subscribe(redis.Args{}.AddFlat(channels)...)
	})
	if err != nil {
		return nil, err // not a nil *poolSub in the interface
	}
	return s, nil
}

// subscribe sends a subscription on a connection of its own, taken from
// the pool, and returns once the server has confirmed n of kind.
func (p *poolClient) subscribe(ctx context.Context, kind string, n int, send func(redis.PubSubConn) error) (*poolSub, error) {
	c, _, err := p.conn(ctx)
	if err != nil {
		return nil, err
	}
	s := &poolSub{psc: redis.PubSubConn{Conn: c}}
	if err := send(s.psc); err != nil {
		s.Close()
		return nil, err
	}
	for n > 0 {
		switch m := s.psc.ReceiveContext(ctx).(type) {
		case error:
			s.Close()
			return nil, replyError(m)
		case redis.Subscription:
			if m.Kind == kind {
				n--
			}
		}
	}
	return s, nil
}

// poolSub is a Subscription on a redigo connection. The subscriber
// receives with receiveWithin where the connection can bound a read by a
// duration (redis.ConnWithTimeout, as a pool's connections do): in the
// subscriber's goroutine, where Receive's redis.ReceiveContext starts a
// goroutine for each reply, and serve a context and a timer.
type poolSub struct{ psc redis.PubSubConn }

func (s *poolSub) Receive(ctx context.Context) (string, error) {
	for {
		if ch, done, err := pubsubReply(s.psc.ReceiveContext(ctx)); done {
			return ch, err
		}
	}
}

// canReceiveWithin reports whether receiveWithin can bound a read
// (boundedReceiver).
func (s *poolSub) canReceiveWithin() bool {
	_, ok := s.psc.Conn.(redis.ConnWithTimeout)
	return ok
}

// receiveWithin is Receive bounded by d rather than by a context, in the
// calling goroutine (boundedReceiver). A read that times out breaks the
// connection, as Receive's does when its context ends.
func (s *poolSub) receiveWithin(d time.Duration) (string, error) {
	for {
		if ch, done, err := pubsubReply(s.psc.ReceiveWithTimeout(d)); done {
			return ch, err
		}
	}
}

// abort breaks the connection at once, without a command or a read
// (boundedReceiver): a receiveWithin in progress in another goroutine
// returns an error. redigo's ReceiveContext, given a deadline already past,
// closes the connection (conn.fatal) before it would start a read.
func (s *poolSub) abort() {
	ctx, cancel := context.WithDeadline(context.Background(), time.Unix(0, 1))
	defer cancel()
	_, _ = redis.ReceiveContext(s.psc.Conn, ctx)
}

// pubsubReply reads one reply of a PubSubConn as Receive returns it: a
// message's channel, "" for a pong, or an error. done is false for what
// Receive skips: the server's confirmations of (un)subscribes, and a
// message without a channel.
func pubsubReply(m any) (ch string, done bool, err error) {
	switch m := m.(type) {
	case error:
		return "", true, replyError(m)
	case redis.Message:
		return m.Channel, m.Channel != "", nil
	case redis.Pong:
		return "", true, nil
	}
	return "", false, nil
}

// Ping sends a PING; redigo lets one goroutine send while another receives.
func (s *poolSub) Ping(context.Context) error { return s.psc.Ping("") }

func (s *poolSub) Close() error { return s.psc.Close() }

// Subscribe sends SUBSCRIBE (ChannelSubscription).
func (s *poolSub) Subscribe(_ context.Context, channels ...string) error {
	return s.psc.Subscribe(redis.Args{}.AddFlat(channels)...)
}

// Unsubscribe sends UNSUBSCRIBE (ChannelSubscription).
func (s *poolSub) Unsubscribe(_ context.Context, channels ...string) error {
	return s.psc.Unsubscribe(redis.Args{}.AddFlat(channels)...)
}
