package engine

import (
	"context"
	"time"

	"github.com/seedqueue/sq/api"
)

// Acks is how many replicas must hold a published batch before it is
// acknowledged (the producer setting acks, as Kafka's). Outside a cluster
// both values acknowledge after the local append under the sync policy.
type Acks uint8

const (
	// AcksAll (the default): in a cluster, the batch is acknowledged once
	// the partition's high watermark has passed it, that is once every
	// member of the in-sync set holds it durably under its own sync policy,
	// and only while the in-sync set has at least min.insync.replicas
	// members (NOT_ENOUGH_REPLICAS otherwise). docs/cluster.md.
	AcksAll Acks = 0
	// AcksLeader: acknowledged once the leader has appended the batch under
	// its sync policy; a failover before the followers copy it loses it.
	AcksLeader Acks = 1
)

// String returns "all" or "leader".
func (a Acks) String() string {
	if a == AcksLeader {
		return "leader"
	}
	return "all"
}

type acksKey struct{}

// WithAcks returns ctx carrying acks for the Append or AppendAsync it is
// passed to (the data plane sets it from the publish request). A context
// without it means AcksAll.
func WithAcks(ctx context.Context, acks Acks) context.Context {
	return context.WithValue(ctx, acksKey{}, acks)
}

// AcksFrom returns the Acks carried by ctx (WithAcks), AcksAll when none.
func AcksFrom(ctx context.Context) Acks {
	if a, ok := ctx.Value(acksKey{}).(Acks); ok {
		return a
	}
	return AcksAll
}

// ReplicaFetch is a follower's fetch from a partition's leader (the
// data plane's replicaFetch request, docs/cluster.md): it reads batches
// from FetchOffset up to the leader's log end offset (not only below the
// high watermark), and it tells the leader how far the follower's log
// is: FetchOffset is the follower's log end offset and DurableOffset its
// durable log end offset (what its sync policy has made durable; at most
// FetchOffset).
type ReplicaFetch struct {
	Topic   string
	TopicID api.TopicID
	// Partition is the partition index.
	Partition int
	// FollowerID is the node id of the fetching replica.
	FollowerID string
	// LeaderEpoch is the leader epoch the follower believes current:
	// older than the leader's is FENCED_LEADER_EPOCH, newer
	// UNKNOWN_LEADER_EPOCH.
	LeaderEpoch uint32
	// FetchOffset is the first offset wanted: the follower's log end
	// offset.
	FetchOffset uint64
	// DurableOffset is the follower's durable log end offset.
	DurableOffset uint64
	// MaxBytes bounds the batches returned (at least one whole batch is
	// returned when any exists, KIP-74).
	MaxBytes int
	// MaxWait is how long to wait for a batch when none is available.
	MaxWait time.Duration
}
