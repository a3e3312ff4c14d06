package gossip

import (
	"context"
	"sync"

	"github.com/seedqueue/sq/gossip/meta"
)

// brokerProducerIDs is the block of producer ids this node hands out:
// [next, end), reserved through the metadata log.
type brokerProducerIDs struct {
	mu        sync.Mutex
	next, end int64
}

// InitProducerID returns a new producer id and its epoch (always 0) for an
// idempotent producer (docs/cluster.md): unique in the cluster, because
// every node hands out ids only from blocks of meta.ProducerIDBlock that
// the metadata log reserved for it (allocate-producer-ids), proposing a
// new block when its block is used up. A block is not persisted on the
// node: after a restart the node reserves a new one, and what was left of
// the old one is never used. Concurrent calls share one proposal; a call
// waits at most BrokerOptions.ProposeTimeout for it (ctx may end it
// earlier). Errors: NO_QUORUM (retriable) when the metadata log cannot
// commit, ctx's error, or the refusal of the command (INVALID_REQUEST
// when this node is not registered).
func (b *Broker) InitProducerID(ctx context.Context) (int64, int16, error) {
	ids := &b.producerIDs
	ids.mu.Lock()
	defer ids.mu.Unlock()
	if ids.next == ids.end {
		pctx, cancel := context.WithTimeout(ctx, b.opts.ProposeTimeout)
		defer cancel()
		res, err := b.c.Propose(pctx, meta.Command{Op: meta.OpAllocateProducerIDs, NodeID: b.self})
		if err != nil {
			return 0, 0, err
		}
		if res.Err != nil {
			return 0, 0, res.Err
		}
		ids.next, ids.end = res.ProducerIDStart, res.ProducerIDStart+meta.ProducerIDBlock
		b.log.Info("producer ids reserved", "from", ids.next, "to", ids.end-1)
	}
	id := ids.next
	ids.next++
	return id, 0, nil
}
