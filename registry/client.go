package registry

import "github.com/lockyard/lockyard/internal/core"

// The Client seam. Its types are declared in the package that the lock
// kinds share (internal/core) and are the same types here: a Client
// written against this package works unchanged.

// Client is the narrow seam between a Registry and Redis: run a script
// (alone, followed by WAIT on the same connection, or pipelined in a
// batch) and pattern-subscribe:
//
//	type Client interface {
//		// Eval runs s with keys and args: EVALSHA, then EVAL if the server
//		// replies NOSCRIPT. In Redis Cluster every key lies in one slot.
//		Eval(ctx context.Context, s *Script, keys []string, args []any) (any, error)
//		// EvalWait runs s as Eval does, then WAIT replicas timeout on the same
//		// connection, and returns the script's reply and WAIT's (the number of
//		// replicas that acknowledged the script's writes). If the script
//		// fails, acked is 0 and err is the script's error.
//		EvalWait(ctx context.Context, s *Script, keys []string, args []any, replicas int, timeout time.Duration) (reply any, acked int, err error)
//		// EvalBatch runs s once per call, pipelined (the registry's renewals),
//		// and returns one Result per call, in order. A call whose reply was not
//		// read (a broken connection) carries the network error.
//		EvalBatch(ctx context.Context, s *Script, calls []Call) []Result
//		// PSubscribe subscribes to the channels matching pattern and returns
//		// once the server has confirmed the subscription. In Redis Cluster, a
//		// subscription on any node receives every node's PUBLISH.
//		PSubscribe(ctx context.Context, pattern string) (Subscription, error)
//	}
//
// NewPoolClient adapts a redigo pool (what New uses); the module
// github.com/lockyard/lockyard/goredis adapts go-redis's UniversalClient
// (single node, Sentinel, Cluster). Tests can wrap a Client to inject
// faults.
//
// Replies keep the RESP types: an integer is an int64, an array a []any.
// An error reply of the server is returned as (or wrapping) a *ReplyError;
// every other error means the command may or may not have run, and the
// registry treats it so. Every method must honour ctx: the registry always
// sets a deadline (the command timeout, or the caller's, if nearer).
//
// A Client may also have a method Info(ctx, section string) (string, error)
// returning the server's INFO section; the registry then checks the
// eviction policy once (see New). A wrapper that embeds a Client hides
// that method unless it declares its own.
type Client = core.Client

// Call is one script invocation of a batch: struct{ Keys []string; Args []any }.
type Call = core.Call

// Result is the reply, or error, of one Call: struct{ Reply any; Err error }.
type Result = core.Result

// Subscription is a live pattern subscription of a Client:
//
//	type Subscription interface {
//		// Receive blocks until a message or a pong arrives, ctx ends, or the
//		// connection fails. It returns the message's channel, or "" for a
//		// pong. After an error the subscription is unusable.
//		Receive(ctx context.Context) (channel string, err error)
//		// Ping sends a PING whose pong Receive returns. It may run
//		// concurrently with Receive.
//		Ping(ctx context.Context) error
//		// Close ends the subscription and frees its connection; a Receive in
//		// progress returns an error. It is safe to call more than once.
//		Close() error
//	}
type Subscription = core.Subscription

// ChannelSubscriber is an optional method of a Client, a subscription to
// channels that change while it lives:
//
//	type ChannelSubscriber interface {
//		// SubscribeChannels subscribes to channels (at least one) on a
//		// connection of its own, and returns once the server has confirmed
//		// them.
//		SubscribeChannels(ctx context.Context, channels ...string) (ChannelSubscription, error)
//	}
//
// A registry whose Client has it (NewPoolClient's, and so New's, and the
// go-redis and rueidis adapters') subscribes
// to the release channels of the keys that its PubSubLock waiters wait for,
// for as long as they wait and a little longer, instead of to every key's
// (PSubscribe): a release is then delivered only to the processes that wait
// for that key. A wrapper that embeds a Client hides the method unless it
// declares its own.
type ChannelSubscriber = core.ChannelSubscriber

// ChannelSubscription is a Subscription to channels, which Subscribe and
// Unsubscribe change:
//
//	type ChannelSubscription interface {
//		Subscription
//		Subscribe(ctx context.Context, channels ...string) error
//		Unsubscribe(ctx context.Context, channels ...string) error
//	}
//
// Receive returns the messages and pongs, not the server's confirmations of
// (un)subscribes; an error reply (a refused channel: NOPERM) ends it as a
// broken connection does. Subscribe, Unsubscribe and Ping are called by one
// goroutine at a time, concurrently with Receive, and send without waiting
// for a reply: the server takes them in order, so the pong of a Ping sent
// after a Subscribe comes once the server has taken it.
type ChannelSubscription = core.ChannelSubscription

// ReplyError, struct{ Err error }, is an error reply of the Redis server,
// such as "WRONGTYPE ..." or "NOSCRIPT ...": the command reached the server
// and a script did not run to completion. Err is the client's own error
// value (redigo's redis.Error, go-redis's error reply), so errors.As with
// it works too. Its Error method returns the server's reply, and Unwrap
// returns Err.
type ReplyError = core.ReplyError

// Script is one of the registry's Lua scripts (lua/*.lua), as a Client
// runs it. Its methods: Name returns the script's operation (obtain,
// release, renew, pass, ...); Source the Lua source, for EVAL; Hash the
// SHA1 of the source in hex, for EVALSHA.
type Script = core.Script

// SetNXClient is an optional interface of a Client, SetNX(ctx, key, value
// string, ttl time.Duration) (bool, error): SET key value NX PX ttl as a
// plain command, which reports whether the key was set (false: it exists).
// A registry whose obtains need nothing but the SET (no fencing, no
// WithReplicaAck, one Client) sends it instead of the obtain script when it
// expects the key to be free: the script runs only after the SET found the
// key taken, to leave the wait marker and read the holder's TTL. The key
// and its value are the same either way. The redigo Client and the
// go-redis and rueidis adapters implement it; a Client without it runs the
// script every time.
type SetNXClient = core.SetNXClient

// SetNXGetClient is an optional interface of a Client, SetNXGet(ctx, key,
// value string, ttl time.Duration) (old string, existed bool, err error):
// SET key value NX GET PX ttl as a plain command (Redis 7.0 or later), which
// sets the key if it is absent and returns the value it held before: ("",
// false) when it set the key, (old, true) when the key held old and was
// left alone. A registry without fencing and WithReplicaAck makes a TryLock
// of a key it expects free with it: one round trip whether it succeeds or
// fails, and a client that resent it after a lost reply finds its own value
// and knows it holds the key. A Client without it, or a server that refuses
// it, makes the attempt with the obtain script instead. The redigo Client
// and the go-redis and rueidis adapters implement it.
type SetNXGetClient = core.SetNXGetClient

// CommandClient is an optional interface of a Client: plain commands,
// pipelined, which a registry uses for the native compare-and-set and
// compare-and-delete of Redis 8.4+ and Valkey (SET IFEQ, DELEX, DELIFEQ;
// see WithScriptsOnly and the README's wire format):
//
//	type CommandClient interface {
//		// Pipeline sends cmds pipelined, each routed by its first key (the
//		// second element of a command that has keys): in Cluster, to that
//		// key's master, one pipeline per node. It returns one Result per
//		// command, in order.
//		Pipeline(ctx context.Context, cmds [][]any) []Result
//		// PipelineOn sends cmds pipelined, in order, on one connection of the
//		// node that serves key (in Cluster, the master of key's slot), keyless
//		// commands (PUBLISH) included, and returns one Result per command.
//		PipelineOn(ctx context.Context, key string, cmds [][]any) []Result
//	}
//
// A command is its name (a string) followed by its arguments. Replies keep
// the RESP types, as Client's do (a nil reply is a nil Reply, not an
// error), and an error reply is a *ReplyError in its Result. The registry
// detects which commands the server has (COMMAND INFO, COMMAND DOCS) and
// runs its scripts for the rest, and when a command is refused. The redigo
// Client and the go-redis and rueidis adapters implement it; a Client
// without it runs the scripts.
type CommandClient = core.CommandClient
