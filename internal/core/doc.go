// Package core is what every kind of lock shares: the acquisition, and
// the parts of a registry that serve acquisitions of any kind.
//
//   - Hold (hold.go) is one acquisition in Redis, a token at a key: its
//     validity, its one guard timer, and its one loss path (Lose), which
//     tells the kind that owns it (a Holder) last.
//   - The watchdog (watchdog.go, renewal.go) renews holds, never locks,
//     in pipelined batches per kind: each kind renews through its Renewer.
//   - Executor (exec.go, quorum.go) runs a kind's script calls on one
//     Client or on the nodes of a Redlock registry, with the quorum rules
//     (Tally, MajorityDone); it knows no kind of lock.
//   - Core (core.go) bundles them with the clock, the token source, the
//     Counters behind registry.Stats, the group of background goroutines
//     that Close stops, and the log.
//   - Waker and Core.Await (waker.go, wait.go) are how a waiter sleeps
//     until release messages say its turn may have come; Backoff,
//     PollDelay and Core.Retried are the shared retry rules; errors.go
//     classifies Redis errors and holds the sentinel errors that package
//     registry exports.
//
// A kind of lock (package registry: RedisLock and its Lease, Semaphore)
// is a protocol (its scripts, their calls and replies) plus its local
// queue; it builds holds with NewHold and hands them to the watchdog. The
// Client seam (client.go) is declared here and aliased by package
// registry, which documents it.
package core
