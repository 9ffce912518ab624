package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"log/slog"
	"math"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/lockyard/lockyard/registry"
)

// runFlags are the flags of lockyard run.
type runFlags struct {
	common
	ttl       time.Duration
	wait      optDuration // unset: wait until the lock is free, as flock(1)
	nonblock  bool
	pubsub    bool
	fencing   bool
	onLost    string
	killAfter time.Duration
	minHold   time.Duration
	permits   int // 0: a lock; N: one of N permits of a semaphore
	// permitsSet: --permits was given (0 is then bad input, not the lock).
	permitsSet bool
	// keys: the keys before a "--", when there are several (AcquireAll).
	keys []string
	// shared, exclusive: -s and -x, the read side or the write side of
	// the read-write lock on KEY (as flock(1)).
	shared, exclusive bool
}

// optDuration is a duration flag that knows whether it was set.
type optDuration struct {
	d   time.Duration
	set bool
}

func (o *optDuration) String() string {
	if !o.set {
		return ""
	}
	return o.d.String()
}

// Set takes a Go duration (1m30s, 500ms) or, as flock(1) -w does, a bare
// number of seconds (10, 0.5).
func (o *optDuration) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil {
		secs, ferr := strconv.ParseFloat(s, 64)
		if ferr != nil || math.IsNaN(secs) || math.IsInf(secs, 0) || math.Abs(secs) > registry.MaxDuration.Seconds() {
			return fmt.Errorf("%q is neither a duration (10s, 1m30s) nor a number of seconds", s)
		}
		d = time.Duration(secs * float64(time.Second))
	}
	o.d, o.set = d, true
	return nil
}

const runUsage = `usage: lockyard run [flags] KEY [--] COMMAND [ARGS...]
       lockyard run [flags] KEY1 KEY2... -- COMMAND [ARGS...]

Runs COMMAND while holding the lock on KEY, renewed every ttl/3. With
several keys before a "--" it holds the lock on each of them, taken all at
once (Registry.AcquireAll: all or none, in one script where the keys share
a node; at most 64 keys). With
--permits N it holds one of N permits of the semaphore on KEY instead: at most
N copies run at once across hosts; with -s (--shared) it holds the read side
of the read-write lock on KEY, beside other -s holders, and with -x
(--exclusive) its write side, alone. Everything below holds for a permit or
a side as for the lock. Like flock(1),
it waits until the lock is free; -n fails at once, -w/--wait gives up after a
while (a duration, or a number of seconds as flock's -w). With one key the
"--" is optional (flags end at KEY); it is needed when an argument of
COMMAND is "--" (a "--" that is not right after the first word ends a list
of keys: lockyard run KEY -- git log -- PATH).

Signals: SIGINT, SIGTERM, SIGHUP and SIGQUIT are forwarded to COMMAND, and the
lock is released once it exits; while run still waits for the lock they end
the wait. If the lock is lost, COMMAND gets the --on-lost signal, and SIGKILL
--kill-after later. If run itself dies (even by SIGKILL; Linux), nothing
renews the lock any more: COMMAND gets the --on-lost signal at once and
SIGKILL within --kill-after or half the TTL, whichever is shorter (whatever
--kill-after says), before the key can lapse. Both go to COMMAND's process,
not its children: a script should exec its last command.

Environment of COMMAND:
  LOCKYARD_KEY    the lock's Redis key: REGISTRY:KEY, or REGISTRY:{KEY} with --hash-tag
  LOCKYARD_TOKEN  the fencing token with --fencing, else 0
  LOCKYARD_KEYS   with several keys, their Redis keys, one per line (LOCKYARD_KEY is the first)
  LOCKYARD_TOKENS with several keys, their fencing tokens, separated by spaces, in that order

Exit status: COMMAND's own (128+N if signal N killed it), or
  64   usage error (bad flag, --ttl, --wait, --permits, -s with -x or --permits,
       several keys with --permits, -s or -x, a key given twice, or REDIS_URL)
  65   KEY is another kind in Redis (a semaphore's key taken as a lock, a read-write lock's, ...),
       or its permits are held with another --permits
  69   Redis unavailable or refused the command
  75   the lock was not acquired (-n, or --wait ran out)
  76   the lock was lost while COMMAND ran (COMMAND got the --on-lost signal)
  126  COMMAND could not be executed
  127  COMMAND was not found
  128+N  a signal N ended the wait for the lock

Flags:
`

func cmdRun(args []string) int {
	var f runFlags
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	f.register(fs)
	fs.DurationVar(&f.ttl, "ttl", 30*time.Second, "lock time to live, at least 50ms; renewed every ttl/3 while the command runs")
	fs.Var(&f.wait, "wait", "give up waiting for the lock after this `duration` or number of seconds (exit 75; default: wait until it is free; 0: as -n)")
	fs.Var(&f.wait, "w", "the same as --wait")
	fs.DurationVar(&f.minHold, "min-hold", 0, "keep the lock at least this long from when it was taken, even if the command ends sooner (with -n, a job run on many hosts at the same minute runs once)")
	fs.BoolVar(&f.nonblock, "n", false, "fail at once (exit 75) if the lock is held, as flock -n")
	fs.BoolVar(&f.nonblock, "nonblock", false, "the same as -n")
	fs.DurationVar(&f.killAfter, "kill-after", 10*time.Second, "if the command still runs this long after the --on-lost signal, send it SIGKILL, as timeout(1) --kill-after (0: never)")
	fs.BoolVar(&f.pubsub, "pubsub", false, "wait with pub/sub wake-ups instead of polling")
	fs.BoolVar(&f.fencing, "fencing", false, "take a fencing token, passed to the command as $LOCKYARD_TOKEN")
	fs.IntVar(&f.permits, "permits", 0, "hold one of `N` permits of the semaphore on KEY instead of the lock: at most N commands run at once (all callers of KEY should agree on N)")
	fs.BoolVar(&f.shared, "s", false, "hold the read side of the read-write lock on KEY, beside other readers (as flock -s)")
	fs.BoolVar(&f.shared, "shared", false, "the same as -s")
	fs.BoolVar(&f.exclusive, "x", false, "hold the write side of the read-write lock on KEY, alone (as flock -x)")
	fs.BoolVar(&f.exclusive, "exclusive", false, "the same as -x")
	fs.StringVar(&f.onLost, "on-lost", "TERM", "signal sent to the command if the lock is lost, or on Linux if lockyard dies (TERM, INT, KILL, HUP, or none)")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), runUsage)
		fs.PrintDefaults()
	}
	if code, ok := parse(fs, args); !ok {
		return code
	}
	fs.Visit(func(fl *flag.Flag) { f.permitsSet = f.permitsSet || fl.Name == "permits" })
	rest := fs.Args()
	keys := rest[:min(len(rest), 1)]
	if i := slices.Index(rest, "--"); i >= 1 {
		keys, rest = rest[:i], rest[i:] // KEY... -- COMMAND
		rest[0] = keys[0]               // the slot of the "--", for the single-key path below
	}
	if len(rest) < 2 {
		return fail("run", exitUsage, errors.New("need KEY [--] COMMAND [ARGS...], or KEY1 KEY2... -- COMMAND [ARGS...]"))
	}
	f.keys = keys
	lostSig, err := parseSignal(f.onLost)
	if err != nil {
		return fail("run", exitUsage, err)
	}
	if err := f.check(); err != nil {
		return fail("run", exitUsage, err)
	}
	return f.run(rest[0], rest[1:], lostSig)
}

// check rejects a --ttl or --wait that cannot work.
func (f *runFlags) check() error {
	switch {
	case f.ttl < registry.MinExpireAfter || f.ttl > registry.MaxDuration:
		return fmt.Errorf("--ttl %v out of range [%v, %v]: a shorter lock would be lost as it is taken", f.ttl, registry.MinExpireAfter, registry.MaxDuration)
	case f.wait.d < 0:
		return fmt.Errorf("--wait %v is negative", f.wait.d)
	case f.nonblock && f.wait.set && f.wait.d > 0:
		return fmt.Errorf("-n and --wait %v: choose one", f.wait.d)
	case f.killAfter < 0:
		return fmt.Errorf("--kill-after %v is negative", f.killAfter)
	case f.shared && f.exclusive:
		return fmt.Errorf("-s and -x: choose one side of the read-write lock")
	case (f.shared || f.exclusive) && f.permitsSet:
		return fmt.Errorf("--permits with -s or -x: a key is a semaphore or a read-write lock, not both")
	case f.permitsSet && f.permits < 1:
		return fmt.Errorf("--permits %d: a semaphore has at least 1 permit (without --permits, run takes the lock)", f.permits)
	case len(f.keys) > 1 && (f.permitsSet || f.shared || f.exclusive):
		return fmt.Errorf("several keys with --permits, -s or -x: only locks are taken several at once")
	case f.minHold < 0 || f.minHold > registry.MaxDuration:
		return fmt.Errorf("--min-hold %v out of range [0, %v]", f.minHold, registry.MaxDuration)
	}
	return f.checkURL()
}

// parseSignal returns the signal named s, or nil for "none".
func parseSignal(s string) (os.Signal, error) {
	switch s {
	case "TERM", "SIGTERM":
		return syscall.SIGTERM, nil
	case "INT", "SIGINT":
		return syscall.SIGINT, nil
	case "KILL", "SIGKILL":
		return syscall.SIGKILL, nil
	case "HUP", "SIGHUP":
		return syscall.SIGHUP, nil
	case "none":
		return nil, nil
	}
	return nil, fmt.Errorf("unknown --on-lost signal %q", s)
}

// forwarded are the signals that run passes on to the command (and that
// end a wait for the lock).
var forwarded = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT}

func (f *runFlags) run(key string, argv []string, lostSig os.Signal) int {
	log := f.logger()
	// Signals that arrive while waiting for the lock end the wait; once
	// the command runs they are forwarded to it.
	// A signal that lockyard started with ignored (nohup, SIGINT and
	// SIGQUIT in a background job) stays ignored, for the command too:
	// Notify would turn it back on.
	sigs := make(chan os.Signal, 4)
	for _, s := range forwarded {
		if !signal.Ignored(s) {
			signal.Notify(sigs, s)
		}
	}
	defer signal.Stop(sigs)

	ctx := context.Background()
	pool, err := f.pool(ctx)
	if err != nil {
		return fail("run", exitUnavailable, err)
	}
	defer pool.Close()
	opts := []registry.Option{registry.WithExpireAfter(f.ttl), registry.WithAutoRenew(), registry.WithLogger(log)}
	if f.pubsub {
		opts = append(opts, registry.WithLockType(registry.PubSubLock))
	}
	if f.fencing {
		opts = append(opts, registry.WithFencing())
	}
	if f.hashTag {
		opts = append(opts, registry.WithHashTag())
	}
	reg, err := registry.New(pool, f.registry, opts...)
	if err != nil {
		return fail("run", exitUsage, err)
	}
	defer reg.Close()
	take, err := f.taker(reg, key)
	if err != nil {
		return fail("run", exitUsage, err)
	}
	lk := f.layout().LockKey(key)
	if len(f.keys) > 1 {
		lk = fmt.Sprintf("%s and %d more", lk, len(f.keys)-1)
	}
	le, code := f.acquire(take, lk, sigs)
	if le == nil {
		return code
	}
	taken := time.Now()
	log.Info("lockyard: lock acquired", "token", le.Token())
	code, lost := f.exec(le, argv, lostSig, sigs, log)
	var uerr error
	if left := f.minHold - time.Since(taken); left > 0 && !lost {
		uerr = le.ReleaseAfter(context.Background(), left) // --min-hold: the key stays until then
	} else {
		uerr = le.Release(context.Background())
	}
	switch {
	case lost || errors.Is(uerr, registry.ErrLockLost):
		fmt.Fprintf(os.Stderr, "lockyard run: the lock on %s was lost while the command ran\n", le.Key())
		return exitLost
	case uerr != nil:
		log.Warn("lockyard: release failed; the lock expires by its TTL", "key", le.Key(), "err", uerr)
	default:
		log.Info("lockyard: lock released")
	}
	return code
}

// taker is how run takes its lease: Acquire (wait) or TryAcquire of the
// lock on a key, or of a permit of the semaphore on it.
type taker func(ctx context.Context, wait bool) (*registry.Lease, error)

// taker checks key and returns how to take a lease of it: the lock, or
// with --permits a permit.
func (f *runFlags) taker(reg *registry.Registry, key string) (taker, error) {
	if f.permits > 0 {
		s, err := reg.Semaphore(key, f.permits)
		if err != nil {
			return nil, err
		}
		return func(ctx context.Context, wait bool) (*registry.Lease, error) {
			if wait {
				return s.Acquire(ctx, 0)
			}
			return s.TryAcquire(ctx, 0)
		}, nil
	}
	if f.shared || f.exclusive {
		l, err := reg.RWLock(key)
		if err != nil {
			return nil, err
		}
		acquire, try := l.AcquireRead, l.TryAcquireRead
		if f.exclusive {
			acquire, try = l.AcquireWrite, l.TryAcquireWrite
		}
		return func(ctx context.Context, wait bool) (*registry.Lease, error) {
			if wait {
				return acquire(ctx, 0)
			}
			return try(ctx, 0)
		}, nil
	}
	if len(f.keys) > 1 {
		keys := f.keys
		if len(keys) > registry.MaxKeys {
			return nil, fmt.Errorf("%d keys: at most %d", len(keys), registry.MaxKeys)
		}
		for i, k := range keys {
			if slices.Contains(keys[:i], k) {
				return nil, fmt.Errorf("key %q given twice", k)
			}
			if _, err := reg.Obtain(k); err != nil {
				return nil, err
			}
		}
		return func(ctx context.Context, wait bool) (*registry.Lease, error) {
			if wait {
				return reg.AcquireAll(ctx, keys, 0)
			}
			return reg.TryAcquireAll(ctx, keys, 0)
		}, nil
	}
	if _, err := reg.Obtain(key); err != nil {
		return nil, err
	}
	return func(ctx context.Context, wait bool) (*registry.Lease, error) {
		if wait {
			return reg.Acquire(ctx, key, 0)
		}
		return reg.TryAcquire(ctx, key, 0)
	}, nil
}

// acquire takes the lease on lk: at once with -n or --wait 0, within
// --wait, or whenever it is free. A signal ends the wait. It returns the
// lease, or nil and the exit status.
func (f *runFlags) acquire(take taker, lk string, sigs <-chan os.Signal) (*registry.Lease, int) {
	if f.nonblock || (f.wait.set && f.wait.d == 0) {
		le, err := take(context.Background(), false)
		switch {
		case errors.Is(err, registry.ErrNotObtained):
			if f.permits > 0 {
				fmt.Fprintf(os.Stderr, "lockyard run: every permit of %s is held\n", lk)
			} else {
				fmt.Fprintf(os.Stderr, "lockyard run: %s is held by another holder\n", lk)
			}
			return nil, exitNotAcquired
		case err != nil:
			return nil, fail("run", exitFor(err), err)
		}
		return le, 0
	}
	ctx, cancel := context.WithCancel(context.Background())
	if f.wait.set {
		ctx, cancel = context.WithTimeout(context.Background(), f.wait.d)
	}
	defer cancel()
	stop, done := make(chan struct{}), make(chan struct{})
	var sig os.Signal
	go func() {
		defer close(done)
		select {
		case sig = <-sigs:
			cancel()
		case <-stop:
		}
	}()
	le, err := take(ctx, true)
	close(stop)
	<-done
	switch {
	case sig != nil:
		// Interrupted while waiting: give the lock back if it was taken
		// meanwhile, and exit as a shell does for a command the signal
		// killed.
		if err == nil {
			_ = le.Release(context.Background())
		}
		fmt.Fprintf(os.Stderr, "lockyard run: %v while waiting for %s\n", sig, lk)
		if s, ok := sig.(syscall.Signal); ok {
			return nil, 128 + int(s)
		}
		return nil, exitNotAcquired
	case err == nil:
		return le, 0
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		fmt.Fprintf(os.Stderr, "lockyard run: %s not acquired within %v: %v\n", lk, f.wait.d, err)
		return nil, exitNotAcquired
	}
	return nil, fail("run", exitFor(err), err)
}

// exec runs argv while the lock is held, forwarding SIGINT, SIGTERM, SIGHUP
// and SIGQUIT (but not a SIGINT or SIGQUIT that the terminal sent to the
// command as well), and signalling it with lostSig if the lock is lost. If lockyard
// dies meanwhile, the kernel sends lostSig and a reaper process SIGKILL
// (onParentDeath). It returns the command's exit status and whether the
// lock was lost.
func (f *runFlags) exec(le *registry.Lease, argv []string, lostSig os.Signal, sigs <-chan os.Signal, log *slog.Logger) (code int, lost bool) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), "LOCKYARD_KEY="+le.Key(), fmt.Sprintf("LOCKYARD_TOKEN=%d", le.Token()))
	if keys := le.Keys(); len(keys) > 1 {
		tokens := make([]string, len(keys))
		for i, t := range le.Tokens() {
			tokens[i] = strconv.FormatInt(t, 10)
		}
		cmd.Env = append(cmd.Env, "LOCKYARD_KEYS="+strings.Join(keys, "\n"), "LOCKYARD_TOKENS="+strings.Join(tokens, " "))
	}
	grace := f.ttl / 2 // the key lives at least 2/3 of its TTL past the last renewal
	if f.killAfter > 0 {
		grace = min(grace, f.killAfter)
	}
	guard := onParentDeath(cmd, lostSig, grace, log)
	defer guard.done()
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "lockyard run: %v\n", err)
		return startStatus(err), false
	}
	guard.started(cmd.Process.Pid)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	lostCh := le.Lost()
	var kill <-chan time.Time // fires --kill-after the on-lost signal
	for {
		select {
		case sig := <-sigs:
			if (sig == syscall.SIGINT || sig == syscall.SIGQUIT) && terminalForeground() {
				log.Info("lockyard: the terminal sent the signal to the command too; not forwarded", "signal", sig)
				continue
			}
			log.Info("lockyard: signal forwarded", "signal", sig)
			_ = cmd.Process.Signal(sig)
		case <-lostCh:
			lost, lostCh = true, nil
			if lostSig != nil {
				_ = cmd.Process.Signal(lostSig)
				if f.killAfter > 0 && lostSig != syscall.SIGKILL {
					t := time.NewTimer(f.killAfter)
					defer t.Stop()
					kill = t.C
				}
			}
		case <-kill:
			log.Warn("lockyard: the command outlived the lost lock by --kill-after; sending SIGKILL", "kill_after", f.killAfter)
			_ = cmd.Process.Kill()
		case err := <-done:
			return exitStatus(err), lost
		}
	}
}

// startStatus maps a command's Start error to a shell's exit status: 127
// when the command was not found, 126 when it could not be executed.
func startStatus(err error) int {
	if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
		return 127
	}
	return 126
}

// exitStatus maps a command's Wait error to a shell-style exit status.
func exitStatus(err error) int {
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ee.ExitCode()
	}
	return 1
}
