package core

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"time"
)

// Client is registry.Client, the seam between a registry and Redis,
// documented there; the executors (exec.go, quorum.go) run every call on it.
type Client interface {
	// Eval runs s with keys and args: EVALSHA, then EVAL if the server
	// replies NOSCRIPT. In Redis Cluster every key lies in one slot.
	Eval(ctx context.Context, s *Script, keys []string, args []any) (any, error)
	// EvalWait runs s as Eval does, then WAIT replicas timeout on the same
	// connection, and returns the script's reply and WAIT's (the number of
	// replicas that acknowledged the script's writes). If the script
	// fails, acked is 0 and err is the script's error.
	EvalWait(ctx context.Context, s *Script, keys []string, args []any, replicas int, timeout time.Duration) (reply any, acked int, err error)
	// EvalBatch runs s once per call, pipelined (the registry's renewals),
	// and returns one Result per call, in order. A call whose reply was not
	// read (a broken connection) carries the network error.
	EvalBatch(ctx context.Context, s *Script, calls []Call) []Result
	// PSubscribe subscribes to the channels matching pattern and returns
	// once the server has confirmed the subscription. In Redis Cluster, a
	// subscription on any node receives every node's PUBLISH.
	PSubscribe(ctx context.Context, pattern string) (Subscription, error)
}

// Call is registry.Call: one script invocation of a batch.
type Call struct {
	Keys []string
	Args []any
}

// Result is registry.Result: the reply, or error, of one Call.
type Result struct {
	Reply any
	Err   error
}

// Subscription is registry.Subscription: a live pattern subscription.
type Subscription interface {
	// Receive blocks until a message or a pong arrives, ctx ends, or the
	// connection fails. It returns the message's channel, or "" for a
	// pong. After an error the subscription is unusable.
	Receive(ctx context.Context) (channel string, err error)
	// Ping sends a PING whose pong Receive returns. It may run
	// concurrently with Receive.
	Ping(ctx context.Context) error
	// Close ends the subscription and frees its connection; a Receive in
	// progress returns an error. It is safe to call more than once.
	Close() error
}

// ChannelSubscriber is registry.ChannelSubscriber: an optional method of
// a Client, a subscription to channels that change while it lives.
type ChannelSubscriber interface {
	// SubscribeChannels subscribes to channels (at least one) on a
	// connection of its own, and returns once the server has confirmed
	// them.
	SubscribeChannels(ctx context.Context, channels ...string) (ChannelSubscription, error)
}

// ChannelSubscription is registry.ChannelSubscription: a Subscription to
// channels, which Subscribe and Unsubscribe change. Receive returns the
// messages and pongs, not the server's confirmations of (un)subscribes;
// an error reply (a refused channel: NOPERM) ends it as a broken
// connection does. Subscribe, Unsubscribe and Ping are called by one
// goroutine at a time, concurrently with Receive, and send without
// waiting for a reply: the server takes them in order, so the pong of a
// Ping sent after a Subscribe comes once the server has taken it.
type ChannelSubscription interface {
	Subscription
	Subscribe(ctx context.Context, channels ...string) error
	Unsubscribe(ctx context.Context, channels ...string) error
}

// ReplyError is registry.ReplyError: an error reply of the server.
type ReplyError struct{ Err error }

// Error returns the server's reply, such as "NOPERM ...".
func (e *ReplyError) Error() string { return e.Err.Error() }

// Unwrap returns the client's own error value.
func (e *ReplyError) Unwrap() error { return e.Err }

// Script is registry.Script: a Lua script as a Client runs it.
type Script struct {
	name, src, hash string
}

func NewScript(name, src string) *Script {
	sum := sha1.Sum([]byte(src))
	return &Script{name: name, src: src, hash: hex.EncodeToString(sum[:])}
}

// Name returns the script's operation: obtain, release, renew or pass.
func (s *Script) Name() string { return s.name }

// Source returns the Lua source, for EVAL.
func (s *Script) Source() string { return s.src }

// Hash returns the SHA1 of the source in hex, for EVALSHA.
func (s *Script) Hash() string { return s.hash }

// SetNXClient is registry.SetNXClient: a plain SET NX PX.
type SetNXClient interface {
	SetNX(ctx context.Context, key, value string, ttl time.Duration) (bool, error)
}

// SetNXGetClient is registry.SetNXGetClient: a plain SET NX GET PX.
type SetNXGetClient interface {
	SetNXGet(ctx context.Context, key, value string, ttl time.Duration) (old string, existed bool, err error)
}

// CommandClient is registry.CommandClient: plain commands, pipelined (the
// native compare-and-set and compare-and-delete of Redis 8.4+ and Valkey).
type CommandClient interface {
	// Pipeline sends cmds pipelined, each routed by its first key (the
	// second element of a command that has keys): in Cluster, to that
	// key's master, one pipeline per node. It returns one Result per
	// command, in order.
	Pipeline(ctx context.Context, cmds [][]any) []Result
	// PipelineOn sends cmds pipelined, in order, on one connection of the
	// node that serves key (in Cluster, the master of key's slot), keyless
	// commands (PUBLISH) included, and returns one Result per command.
	PipelineOn(ctx context.Context, key string, cmds [][]any) []Result
}

// infoClient is the optional Info method of a Client.
type infoClient interface {
	Info(ctx context.Context, section string) (string, error)
}
