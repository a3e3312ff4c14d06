package gossip

import (
	"context"
	"time"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/gossip/meta"
)

// servingPoll is the interval of WaitServing's checks.
const servingPoll = 20 * time.Millisecond

// Serving reports whether partition of the topic with id, which this
// node follows, is served by its leader at leader epoch epoch or later:
// this node's fetcher had a replica fetch answered at epoch (the leader's
// metadata and storage both lead it then: broker_replica.go), or this
// node already follows a later epoch, or holds no replica of it any more.
func (r *Replicator) Serving(id api.TopicID, partition int, epoch uint32) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	pr := r.roles[partKey{id, partition}]
	switch {
	case pr == nil:
		return true
	case pr.epoch == ^uint32(0) || pr.epoch < epoch:
		return false
	case pr.epoch > epoch:
		return true
	}
	return pr.fetch != nil && pr.fetch.served.Load()
}

// WaitServing waits until the new leader of every change in moved (a
// drain of this node: the new epoch is Epoch+1) serves its partition
// (Serving), or ctx ends, or the new leaders of all the changes left are
// no longer alive (gossip: they stopped too, nothing more to wait for);
// it returns the changes not seen served.
func (r *Replicator) WaitServing(ctx context.Context, moved []meta.LeaderChange) []meta.LeaderChange {
	t := time.NewTicker(servingPoll)
	defer t.Stop()
	for {
		var left []meta.LeaderChange
		waiting := false
		for _, ch := range moved {
			if !r.Serving(ch.ID, ch.Partition, ch.Epoch+1) {
				left = append(left, ch)
				waiting = waiting || r.c.Alive(ch.Leader)
			}
		}
		if !waiting {
			return left
		}
		select {
		case <-ctx.Done():
			return left
		case <-t.C:
		}
		moved = left
	}
}
