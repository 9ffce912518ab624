package registry

import (
	"fmt"

	"github.com/lockyard/lockyard/internal/core"
)

// NewRedlock returns a registry whose locks live on a majority of
// independent Redis masters, one Client each (the Redlock algorithm): an
// obtain runs on every node in parallel, each bounded by a short node
// timeout (the acquisition's TTL/100, at least 50ms, at most the command
// timeout),
// and succeeds only on a majority, within the validity time (expireAfter
// minus the time the obtain took minus the drift margin); otherwise it is
// undone on every node. Releases run on every node; renewals need a
// majority too. A registry key of one Redlock registry must not be used by
// single-node registries on the same servers.
//
// The number of clients must be odd and at least 3, with no duplicates.
// WithReplicaAck is refused: the nodes are meant to be masters without
// replicas. With WithFencing the token is the highest counter of the
// majority, which the obtain then writes to every node (a majority must
// take it), so that any later majority (which shares a node with it)
// counts above it. This holds while the nodes keep their data: a node that
// restarts empty can break it (see docs/SCALING.md for what Redlock does and does not give).
// Local hand-off among goroutines still passes a hold without a command,
// but never through the pass script.
func NewRedlock(clients []Client, registryKey string, opts ...Option) (*Registry, error) {
	if err := checkNodes(clients); err != nil {
		return nil, err
	}
	// The options are checked before the registry key, as they always were.
	if cfg, err := newConfig(opts); err != nil {
		return nil, err
	} else if cfg.ackReplicas > 0 {
		return nil, fmt.Errorf("%w: WithReplicaAck does not apply to Redlock nodes", ErrInvalidConfig)
	}
	return build(registryKey, opts, func(cfg config, _ *core.Counters) core.Executor {
		return &core.QuorumExec{
			Clients:     append([]Client(nil), clients...),
			Timeout:     cfg.commandTimeout,
			NodeTimeout: core.NodeTimeout(cfg.commandTimeout, cfg.expireAfter),
		}
	})
}

// checkNodes checks the clients of a Redlock registry: an odd number, at
// least 3, none nil, none twice.
func checkNodes(clients []Client) error {
	n := len(clients)
	if n < 3 || n%2 == 0 {
		return fmt.Errorf("%w: Redlock needs an odd number of nodes, at least 3; got %d", ErrInvalidConfig, n)
	}
	seen := make(map[Client]bool, n)
	for i, c := range clients {
		if isNil(c) {
			return fmt.Errorf("%w: nil client %d", ErrInvalidConfig, i)
		}
		if seen[c] {
			return fmt.Errorf("%w: client %d appears twice", ErrInvalidConfig, i)
		}
		seen[c] = true
	}
	return nil
}
