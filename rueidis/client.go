// Package rueidislock runs lockyard registries on rueidis: a single node,
// a Sentinel-managed master or Redis Cluster, through one constructor:
//
//	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: addrs, DisableCache: true})
//	reg, err := registry.NewWithClient(rueidislock.NewClient(c), "orders", registry.WithHashTag())
//
// It is a module of its own (github.com/lockyard/lockyard/rueidis), so
// that users of the redigo default never download rueidis. Its package is
// named rueidislock so that it does not shadow rueidis itself; it is not
// rueidis's own github.com/redis/rueidis/rueidislock, a lock of its own,
// which a program using both imports under another name.
//
// The registry's scripts share rueidis's auto-pipelined connections:
// concurrent Lock, Unlock and renewal calls of many goroutines go out
// together, on a few connections per node (ClientOption.PipelineMultiplex).
// EvalBatch is one DoMulti. Only EvalWait (registry.WithReplicaAck) and PSubscribe take a
// connection of their own from rueidis's blocking pool (see below).
//
// # rueidis options
//
//	c, err := rueidis.NewClient(rueidis.ClientOption{
//		InitAddress:       []string{addr},
//		DisableCache:      true,        // lockyard reads no key through client-side caching
//		ForceSingleClient: true,        // one node: no cluster probe; while it is down NewClient returns a client and the dial error
//		Dialer:            net.Dialer{Timeout: time.Second}, // a dead host fails a subscription in 1s, not 5s
//	})
//
// For throughput under load, MaxFlushDelay (rueidis suggests 20µs) lets
// each flush collect more commands: fewer system calls on both sides for a
// little latency (bench scenario 4, README "Performance").
//
// DisableCache spares each connection a CLIENT TRACKING command and the
// invalidation bookkeeping; nothing breaks without it on Redis 6 or later.
// rueidis does not retry the registry's scripts (it retries only commands
// it knows to be read-only, not EVALSHA or EVAL), so lockyard's own retries and
// Stats.RedisErrors see every failure; it does follow Cluster MOVED and
// ASK redirections of Eval and EvalBatch. Every command honours ctx, but
// for one: PSubscribe on a single node or Sentinel dials its connection
// bounded by Dialer.Timeout only (rueidis's Dedicate takes no context).
// With Sentinel (Sentinel.MasterSet), rueidis follows a new master on the
// sentinels' +switch-master event only, unless Sentinel.TopologyRefreshInterval
// is set (rueidis recommends 5s).
// The module requires rueidis v1.0.79 or later, RESP3 (Redis 6 or later:
// with AlwaysRESP2 rueidis moves a subscription to a connection of its own,
// and Ping then checks another connection) and Go 1.25.
//
// # WAIT
//
// EvalWait sends the script and WAIT in one DoMulti. WAIT blocks its
// connection, so rueidis runs such a DoMulti on one connection of its
// blocking pool, never on the shared one. In Cluster it runs on a
// dedicated connection to the master of the first key's slot: rueidis's
// cluster DoMulti would follow a MOVED of the script alone, to another
// node, and WAIT would then count the replicas of the wrong one. A MOVED
// is returned instead, as go-redis's adapter does, and the registry tries
// again once rueidis has refreshed its slots.
//
// In Cluster the scripts are routed by their first key, the lock key;
// every other key they touch lies in its slot, braces or not (see
// internal/wire). A subscription on any node receives every release.
package rueidislock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"github.com/lockyard/lockyard/registry"
)

// Client is a registry.Client over a rueidis.Client.
type Client struct {
	c       rueidis.Client
	cluster bool
}

var (
	_ registry.Client         = (*Client)(nil)
	_ registry.SetNXClient    = (*Client)(nil)
	_ registry.SetNXGetClient = (*Client)(nil)
	_ registry.CommandClient  = (*Client)(nil)
)

// NewClient returns a registry.Client that runs the registry's commands on
// c. Closing c is the caller's job, after the registries are closed.
func NewClient(c rueidis.Client) *Client {
	return &Client{c: c, cluster: c.Mode() == rueidis.ClientModeCluster}
}

// Eval runs s as EVALSHA, then EVAL on NOSCRIPT, auto-pipelined with the
// other goroutines' commands; in Cluster rueidis routes it by its first
// key.
func (c *Client) Eval(ctx context.Context, s *registry.Script, keys []string, args []any) (any, error) {
	v, err := c.c.Do(ctx, evalCmd(c.c.B(), "EVALSHA", s.Hash(), keys, args)).ToAny()
	if isNoScript(err) {
		v, err = c.c.Do(ctx, evalCmd(c.c.B(), "EVAL", s.Source(), keys, args)).ToAny()
	}
	return v, replyError(err)
}

// SetNX sends SET key value NX PX ttl (registry.SetNXClient), the
// registry's obtain when it expects the key to be free, auto-pipelined as
// Eval is.
func (c *Client) SetNX(ctx context.Context, key, value string, ttl time.Duration) (bool, error) {
	err := c.c.Do(ctx, c.c.B().Set().Key(key).Value(value).Nx().PxMilliseconds(ttl.Milliseconds()).Build()).Error()
	if rueidis.IsRedisNil(err) {
		return false, nil // the key exists
	}
	return err == nil, replyError(err)
}

// SetNXGet sends SET key value NX GET PX ttl (registry.SetNXGetClient), a
// TryLock's obtain when the registry expects the key to be free,
// auto-pipelined as Eval is. It returns the value the key held, and
// whether it held one.
func (c *Client) SetNXGet(ctx context.Context, key, value string, ttl time.Duration) (string, bool, error) {
	old, err := c.c.Do(ctx, c.c.B().Set().Key(key).Value(value).Nx().Get().PxMilliseconds(ttl.Milliseconds()).Build()).ToString()
	if rueidis.IsRedisNil(err) {
		return "", false, nil // it was absent, and is set
	}
	return old, err == nil, replyError(err)
}

// EvalWait sends the script and WAIT together on one connection: one of
// rueidis's blocking pool (WAIT is a blocking command) on a single node or
// Sentinel's master, a dedicated connection to the master of the first
// key's slot in Cluster.
func (c *Client) EvalWait(ctx context.Context, s *registry.Script, keys []string, args []any, replicas int, timeout time.Duration) (any, int, error) {
	for _, sha := range []bool{true, false} {
		b := c.c.B()
		ev := evalCmd(b, "EVAL", s.Source(), keys, args)
		if sha {
			ev = evalCmd(b, "EVALSHA", s.Hash(), keys, args)
		}
		wait := b.Wait().Numreplicas(int64(replicas)).Timeout(timeout.Milliseconds()).Build()
		res := c.evalWait(ctx, ev, wait)
		v, err := res[0].ToAny()
		if sha && isNoScript(err) {
			continue
		}
		if err != nil {
			return nil, 0, replyError(err)
		}
		n, err := res[1].AsInt64()
		if err != nil {
			return v, 0, replyError(err)
		}
		return v, int(n), nil
	}
	panic("unreachable")
}

// evalWait runs ev and wait on one connection.
func (c *Client) evalWait(ctx context.Context, ev, wait rueidis.Completed) []rueidis.RedisResult {
	if !c.cluster {
		// mux.DoMulti sends a multi holding a blocking command on one
		// connection of the blocking pool.
		return c.c.DoMulti(ctx, ev, wait)
	}
	// The cluster client's DoMulti would send WAIT (no key) to the
	// script's node, but follow a MOVED or ASK of the script alone; a
	// dedicated client follows none.
	dc, release := c.c.Dedicate()
	res := dc.DoMulti(ctx, ev, wait)
	for _, r := range res {
		if r.NonRedisError() != nil {
			// A reply may be in flight (WAIT's, after a deadline): the
			// connection goes, rather than back to the pool.
			dc.Close()
			return res
		}
	}
	release()
	return res
}

// EvalBatch pipelines the calls in one DoMulti; in Cluster rueidis splits
// it by node and follows redirections per call. Calls that found the
// script missing are sent again as EVAL.
func (c *Client) EvalBatch(ctx context.Context, s *registry.Script, calls []registry.Call) []registry.Result {
	out := make([]registry.Result, len(calls))
	if len(calls) == 0 {
		return out
	}
	b := c.c.B()
	multi := make([]rueidis.Completed, len(calls))
	for i, x := range calls {
		multi[i] = evalCmd(b, "EVALSHA", s.Hash(), x.Keys, x.Args)
	}
	var retry []int
	for i, r := range c.c.DoMulti(ctx, multi...) {
		v, err := r.ToAny()
		if isNoScript(err) {
			retry = append(retry, i)
		}
		out[i] = registry.Result{Reply: v, Err: replyError(err)}
	}
	if len(retry) == 0 {
		return out
	}
	multi = multi[:0] // DoMulti recycled the commands: build them again
	for _, i := range retry {
		multi = append(multi, evalCmd(b, "EVAL", s.Source(), calls[i].Keys, calls[i].Args))
	}
	for k, r := range c.c.DoMulti(ctx, multi...) {
		v, err := r.ToAny()
		out[retry[k]] = registry.Result{Reply: v, Err: replyError(err)}
	}
	return out
}

// Pipeline sends cmds in one DoMulti (registry.CommandClient), each routed
// by its first key; in Cluster rueidis splits it by node.
func (c *Client) Pipeline(ctx context.Context, cmds [][]any) []registry.Result {
	return c.multi(ctx, "", cmds)
}

// PipelineOn sends cmds in one DoMulti on the node of key, in order: each
// keyless command (PUBLISH, COMMAND) is given key's slot, so that rueidis
// sends it on the connection of the others.
func (c *Client) PipelineOn(ctx context.Context, key string, cmds [][]any) []registry.Result {
	return c.multi(ctx, key, cmds)
}

// multi builds cmds (a command's first key is its second element, unless
// it has none: keyless) and runs them in one DoMulti;
// with on set, keyless ones are given on's slot.
func (c *Client) multi(ctx context.Context, on string, cmds [][]any) []registry.Result {
	out := make([]registry.Result, len(cmds))
	if len(cmds) == 0 {
		return out
	}
	b := c.c.B()
	multi := make([]rueidis.Completed, len(cmds))
	for i, cmd := range cmds {
		name := ""
		if len(cmd) > 0 {
			name, _ = cmd[0].(string)
		}
		if name == "" {
			for j := range out {
				out[j] = registry.Result{Err: fmt.Errorf("%w: a command must begin with its name, got %v", registry.ErrInvalidConfig, cmd)}
			}
			return out
		}
		args := make([]string, len(cmd)-1)
		for j, a := range cmd[1:] {
			args[j] = str(a)
		}
		if len(args) > 0 && !keyless[strings.ToUpper(name)] {
			multi[i] = b.Arbitrary(name).Keys(args[0]).Args(args[1:]...).Build()
			continue
		}
		multi[i] = b.Arbitrary(name).Args(args...).Build()
		if on != "" || c.cluster {
			multi[i] = multi[i].SetSlot(on) // one node: that of on, or any
		}
	}
	for i, r := range c.c.DoMulti(ctx, multi...) {
		v, err := r.ToAny()
		if rueidis.IsRedisNil(err) {
			v, err = nil, nil // a nil reply (SET IFEQ that found another value)
		}
		out[i] = registry.Result{Reply: v, Err: replyError(err)}
	}
	return out
}

// keyless names the commands without a key that a registry may pipeline;
// every other command's second element is its first key.
var keyless = map[string]bool{"PUBLISH": true, "COMMAND": true, "PING": true, "INFO": true, "TIME": true, "ECHO": true}

// Info returns an INFO section (of one node in Cluster), for the
// registry's eviction-policy check.
func (c *Client) Info(ctx context.Context, section string) (string, error) {
	cmd := c.c.B().Info().Build()
	if section != "" {
		cmd = c.c.B().Info().Section(section).Build()
	}
	v, err := c.c.Do(ctx, cmd).ToString()
	// RESP3 sends INFO as a verbatim string, which rueidis keeps whole.
	return strings.TrimPrefix(v, "txt:"), replyError(err)
}

// PSubscribe subscribes on a dedicated connection (any node in Cluster:
// non-sharded PUBLISH reaches every node), whose messages rueidis hands to
// a hook, and returns once the server has confirmed the subscription.
func (c *Client) PSubscribe(ctx context.Context, pattern string) (registry.Subscription, error) {
	s, err := c.subscribe(ctx, func(b rueidis.Builder) rueidis.Completed { return b.Psubscribe().Pattern(pattern).Build() })
	if err != nil {
		return nil, err // not a nil *subscription in the interface
	}
	return s, nil
}

// SubscribeChannels subscribes to channels on a dedicated connection, as
// PSubscribe does, and returns once the server has confirmed them
// (registry.ChannelSubscriber): a registry then subscribes to the release
// channels of the keys its waiters wait for, not to every key's.
func (c *Client) SubscribeChannels(ctx context.Context, channels ...string) (registry.ChannelSubscription, error) {
	s, err := c.subscribe(ctx, func(b rueidis.Builder) rueidis.Completed { return b.Subscribe().Channel(channels...).Build() })
	if err != nil {
		return nil, err
	}
	return s, nil
}

// subscribe dedicates a connection, hooks its messages, and sends the
// subscribe command that cmd builds.
func (c *Client) subscribe(ctx context.Context, cmd func(rueidis.Builder) rueidis.Completed) (*subscription, error) {
	dc, _ := c.c.Dedicate()
	s := &subscription{dc: dc, events: make(chan string, 256), done: make(chan struct{})}
	s.fail = dc.SetPubSubHooks(rueidis.PubSubHooks{OnMessage: s.onMessage})
	if err := dc.Do(ctx, cmd(dc.B())).Error(); err != nil {
		s.Close()
		return nil, replyError(err)
	}
	return s, nil
}

// errClosed is Receive's error after Close.
var errClosed = errors.New("lockyard/rueidis: subscription closed")

// subscription is a registry.Subscription on a dedicated rueidis client.
// rueidis calls onMessage from the connection's reader goroutine; Ping
// adds the pong to the same queue once PING is answered.
type subscription struct {
	dc     rueidis.DedicatedClient
	events chan string   // channels of messages, "" for a pong
	done   chan struct{} // closed by Close
	fail   <-chan error  // rueidis's: an error, then closed, when the connection ends
	once   sync.Once

	// mu guards err.
	mu  sync.Mutex
	err error // the connection's end, once seen
}

// onMessage queues the message's channel. While the queue is full it
// blocks the connection's reader, as a client that is not reading does,
// until Close.
func (s *subscription) onMessage(m rueidis.PubSubMessage) {
	if m.Channel == "" {
		return
	}
	select {
	case s.events <- m.Channel:
	case <-s.done:
	}
}

func (s *subscription) Receive(ctx context.Context) (string, error) {
	select {
	case <-s.done:
		return "", s.closedErr()
	default:
	}
	select {
	case ch := <-s.events:
		return ch, nil
	case err, ok := <-s.fail:
		s.mu.Lock()
		defer s.mu.Unlock()
		switch {
		case ok && err != nil:
			s.err = err
		case s.err == nil:
			s.err = errors.New("lockyard/rueidis: subscription connection closed")
		}
		return "", s.err // later Receives find fail closed: s.err again
	case <-s.done:
		return "", s.closedErr()
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// closedErr is Receive's error once the subscription is closed: the
// server's refusal that closed it (send), else errClosed.
func (s *subscription) closedErr() error {
	if err := s.failed(); err != nil {
		return err
	}
	return errClosed
}

// failed returns the connection's end, once a Receive has seen it, or the
// server's refusal that ended the subscription (send).
func (s *subscription) failed() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Ping sends PING on the subscription's connection (RESP3 answers it
// there with a plain PONG) and queues the pong for Receive.
func (s *subscription) Ping(ctx context.Context) error {
	if err := s.send(ctx, s.dc.B().Ping().Build()); err != nil {
		return err
	}
	select {
	case s.events <- "":
		return nil
	case <-s.done:
		return errClosed
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Subscribe adds channels to the subscription; rueidis returns once the
// server has confirmed them (registry.ChannelSubscription).
func (s *subscription) Subscribe(ctx context.Context, channels ...string) error {
	return s.send(ctx, s.dc.B().Subscribe().Channel(channels...).Build())
}

// Unsubscribe drops channels from the subscription
// (registry.ChannelSubscription).
func (s *subscription) Unsubscribe(ctx context.Context, channels ...string) error {
	return s.send(ctx, s.dc.B().Unsubscribe().Channel(channels...).Build())
}

// send sends cmd on the subscription's connection, unless it has ended.
// The server's refusal (NOPERM for a channel) ends the subscription, as a
// broken connection does (registry.ChannelSubscription): Receive returns
// it.
func (s *subscription) send(ctx context.Context, cmd rueidis.Completed) error {
	if err := s.failed(); err != nil {
		return err
	}
	err := replyError(s.dc.Do(ctx, cmd).Error())
	var re *registry.ReplyError
	if errors.As(err, &re) {
		s.mu.Lock()
		if s.err == nil {
			s.err = err
		}
		s.mu.Unlock()
		s.Close()
	}
	return err
}

// Close ends a Receive in progress, then closes the connection (rueidis
// waits for the answer to a last PING, at most a second); a second call
// is a no-op.
func (s *subscription) Close() error {
	s.once.Do(func() {
		close(s.done) // first: a hook blocked on a full queue returns
		s.dc.Close()
	})
	return nil
}

// evalCmd builds EVAL or EVALSHA. Only the first key sets the slot:
// rueidis's builder panics on keys of different slots, which the server
// refuses with CROSSSLOT instead.
func evalCmd(b rueidis.Builder, cmd, script string, keys []string, args []any) rueidis.Completed {
	a := b.Arbitrary(cmd, script, strconv.Itoa(len(keys)))
	if len(keys) > 0 {
		a = a.Keys(keys[0]).Args(keys[1:]...)
	}
	for _, x := range args {
		a = a.Args(str(x))
	}
	return a.Build()
}

// str formats a script argument as redigo and go-redis do.
func str(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case []byte:
		return string(v)
	case int64:
		return strconv.FormatInt(v, 10)
	case int:
		return strconv.Itoa(v)
	case int32:
		return strconv.FormatInt(int64(v), 10)
	case uint64:
		return strconv.FormatUint(v, 10)
	case float64:
		return strconv.FormatFloat(v, 'g', -1, 64)
	case bool:
		if v {
			return "1"
		}
		return "0"
	case nil:
		return ""
	}
	return fmt.Sprint(v)
}

// replyError wraps a rueidis error reply in a registry.ReplyError; every
// other error (network, pool, context, and rueidis.Nil) is returned as it
// is.
func replyError(err error) error {
	if _, ok := rueidis.IsRedisErr(err); ok {
		return &registry.ReplyError{Err: err}
	}
	return err
}

func isNoScript(err error) bool {
	re, ok := rueidis.IsRedisErr(err)
	return ok && re.IsNoScript()
}
