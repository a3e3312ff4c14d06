package gossip

import (
	"context"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/engine"
)

// ReplicaSource is the leader side of replication in a node's storage:
// an *engine.Engine opened with Options.Replication implements it (and so
// does any type that embeds one).
type ReplicaSource interface {
	FetchReplica(ctx context.Context, r engine.ReplicaFetch) (*engine.FetchResult, error)
	EndOffsetForEpoch(topic string, id api.TopicID, partition int, epoch uint32) (uint32, uint64, error)
}

// routeReplica is the gate of a follower's request to this node as the
// leader of topic/partition (of the topic with id) at leader epoch
// epoch: the gate of route (NOT_LEADER with the leader's address,
// LEADER_NOT_AVAILABLE, UNKNOWN_TOPIC_ID, ...), then the metadata's leader
// epoch: FENCED_LEADER_EPOCH for an older epoch, UNKNOWN_LEADER_EPOCH for
// a newer one (this node has not applied it yet). It returns the
// storage's ReplicaSource.
func (b *Broker) routeReplica(topic string, id api.TopicID, partition int, epoch uint32) (ReplicaSource, error) {
	t, err := b.route(topic, id, partition)
	if err != nil {
		return nil, err
	}
	switch cur := t.parts[partition].epoch; {
	case epoch < cur:
		return nil, api.NewError(api.CodeFencedLeaderEpoch, "%s/%d: leader epoch %d is older than the current %d", topic, partition, epoch, cur)
	case epoch > cur:
		return nil, api.NewError(api.CodeUnknownLeaderEpoch, "%s/%d: leader epoch %d is newer than %d, the latest this node applied", topic, partition, epoch, cur)
	}
	src, ok := b.Storage.(ReplicaSource)
	if !ok {
		return nil, api.NewError(api.CodeInvalidRequest, "node %s does not replicate partitions (its storage has no replication)", b.self)
	}
	return src, nil
}

// FetchReplica serves a follower's replica fetch (dataplane.ReplicaBroker)
// when this node leads the partition at the follower's leader epoch:
// routeReplica's errors, then the storage's (engine.Engine.FetchReplica).
func (b *Broker) FetchReplica(ctx context.Context, r engine.ReplicaFetch) (*engine.FetchResult, error) {
	src, err := b.routeReplica(r.Topic, r.TopicID, r.Partition, r.LeaderEpoch)
	if err != nil {
		return nil, err
	}
	return src.FetchReplica(ctx, r)
}

// EndOffsetForEpoch answers a follower's offsetForLeaderEpoch
// (dataplane.ReplicaBroker, KIP-279) when this node leads the partition:
// route's errors, then the storage's (engine.Engine.EndOffsetForEpoch).
// A follower asks with the latest epoch of its own log, older than the
// partition's current one, so only the leadership is checked here.
func (b *Broker) EndOffsetForEpoch(ctx context.Context, topic string, id api.TopicID, partition int, epoch uint32) (uint32, uint64, error) {
	if _, err := b.route(topic, id, partition); err != nil {
		return 0, 0, err
	}
	src, ok := b.Storage.(ReplicaSource)
	if !ok {
		return 0, 0, api.NewError(api.CodeInvalidRequest, "node %s does not replicate partitions (its storage has no replication)", b.self)
	}
	return src.EndOffsetForEpoch(topic, id, partition, epoch)
}
