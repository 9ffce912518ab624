// Command lockyard is a distributed flock(1) on Redis: it runs a command
// while holding a lockyard lock, and shows and removes locks.
//
//	lockyard run [flags] KEY [--] COMMAND [ARGS...]
//	lockyard status [flags] [KEY...]
//	lockyard release --force [flags] KEY
//
// The Redis server comes from --redis or REDIS_URL (redis://[user:password@]host:port[/db],
// or rediss:// for TLS); the default is redis://127.0.0.1:6379. Locks live
// under the registry key --registry (default "lockyard"), as
// registryKey:KEY, compatible with every lockyard registry and Spring's
// RedisLockRegistry on the same registry key.
//
// Like flock(1), run waits until the lock is free; -n (--nonblock) fails at
// once, and -w/--wait gives up after a while: a duration (1m30s) or, as
// flock's -w, a number of seconds (10, 0.5). --min-hold keeps the lock at
// least that long from when it was taken: with -n, a fast job started on
// many hosts at the same minute runs once. With one key the "--" before
// the command is optional (flags end at the key), unless the command has a
// "--" among its arguments: a "--" that is not right after the first word
// ends a list of keys.
//
// Exit status of run: the command's status (128+N if a signal N killed it),
// or one of:
//
//	64   usage error (a bad flag, --ttl below 50ms, a malformed REDIS_URL)
//	69   Redis unavailable or refused the command
//	75   the lock was not acquired (-n, or --wait ran out)
//	76   the lock was lost while the command ran (the command was signalled)
//	126  the command could not be executed
//	127  the command was not found
//
// The command runs with LOCKYARD_KEY set to the lock's full Redis key
// (REGISTRY:KEY, not the KEY argument) and, with --fencing, LOCKYARD_TOKEN
// to its fencing token (0 without). run KEY1 KEY2... -- COMMAND takes every
// key at once (Registry.AcquireAll), and adds LOCKYARD_KEYS (one Redis key
// per line) and LOCKYARD_TOKENS (their tokens, separated by spaces). If the lock is lost, the command gets
// the --on-lost signal (SIGTERM), and SIGKILL if it still runs
// --kill-after (10s) later, as timeout(1) does.
//
// On SIGINT, SIGTERM, SIGHUP (a dropped ssh session) or SIGQUIT run
// forwards the signal to the command and still releases the lock after it
// exits. A SIGINT or SIGQUIT that the terminal sent to its foreground
// process group (Ctrl-C, Ctrl-\) has reached the command already and is not
// sent again (Linux); a signal ignored when run started (nohup) stays
// ignored. A
// signal that arrives while run waits for the lock ends the wait, and run
// exits 128+N without starting the command. On Linux, if run itself dies
// (even by SIGKILL), nothing renews the lock any more: the kernel sends the
// command the --on-lost signal at once, and a reaper process SIGKILL within
// --kill-after or half the TTL, whichever is shorter, so that it does not
// run on after the key has lapsed (unless renewals were failing already);
// with --on-lost none, neither. Both signals go to the command's process,
// not its children: a script should exec its last command.
//
// Progress goes to stderr as log/slog text, warnings only unless -v; lock
// keys are not logged at info level.
package main

import (
	"errors"
	"fmt"
	"os"
	"runtime/debug"

	"github.com/lockyard/lockyard/registry"
)

// Exit codes other than the command's own.
const (
	exitUsage       = 64 // EX_USAGE
	exitWrongKind   = 65 // EX_DATAERR: the key is another kind (registry.ErrWrongKind), or a semaphore of another count
	exitUnavailable = 69 // EX_UNAVAILABLE
	exitNotAcquired = 75 // EX_TEMPFAIL
	exitLost        = 76
)

const usage = `usage:
  lockyard run [flags] KEY [--] COMMAND [ARGS...] run COMMAND while holding the lock on KEY (waits for it, as flock)
  lockyard status [flags] [KEY...]                who holds and who waits for each lock (all, or KEYs): TTL, fence, label; --json; exit 1 if free
  lockyard release --force [flags] KEY            remove a lock, whoever holds it
  lockyard --version                              print the version
Run "lockyard COMMAND -h" for the flags of a command (run -h also lists the exit statuses).
`

// exitFor is the exit status of a failure to acquire with err: a key of
// another kind, or a semaphore held with another count of permits
// (ErrInvalidConfig, the only one an acquisition meets in Redis), is the
// caller's data, not Redis's state.
func exitFor(err error) int {
	if errors.Is(err, registry.ErrWrongKind) || errors.Is(err, registry.ErrInvalidConfig) {
		return exitWrongKind
	}
	return exitUnavailable
}

// version returns the command's version: its module version when built by
// go install (the module at a tag), "(devel)" from a checkout, and the
// revision and Go version the binary was built with.
func version() string {
	v, rev, gov := "(unknown)", "", ""
	if bi, ok := debug.ReadBuildInfo(); ok {
		v, gov = bi.Main.Version, bi.GoVersion
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 {
				rev = " " + s.Value[:12]
			}
		}
	}
	return fmt.Sprintf("lockyard %s%s (%s)", v, rev, gov)
}

func main() { os.Exit(realMain(os.Args[1:])) }

// realMain runs the command line args and returns the exit status.
func realMain(args []string) int {
	if len(args) == 0 {
		fmt.Fprint(os.Stderr, usage)
		return exitUsage
	}
	switch args[0] {
	case "run":
		return cmdRun(args[1:])
	case "status":
		return cmdStatus(args[1:])
	case "release":
		return cmdRelease(args[1:])
	case "__reap": // internal: the reaper of a command whose lockyard died (proc_linux.go)
		return cmdReap()
	case "-h", "-help", "--help", "help":
		fmt.Print(usage)
		return 0
	case "-version", "--version", "version":
		fmt.Println(version())
		return 0
	}
	fmt.Fprintf(os.Stderr, "lockyard: unknown command %q\n%s", args[0], usage)
	return exitUsage
}
