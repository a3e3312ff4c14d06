package sdk

import (
	"fmt"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/api/sqv1"
)

// Acks is when a partition's leader acknowledges a published batch (Kafka's
// producer setting acks): ProducerConfig.Acks and GrpcProducerConfig.Acks.
// Outside a cluster, and for a partition with a single replica, both values
// acknowledge once the leader has appended the batch under the topic's sync
// policy (docs/architecture.md §4.1).
type Acks uint8

const (
	// AcksAll (the default, Kafka's acks=all) acknowledges a batch once
	// the partition's high watermark has passed it: every member of the
	// in-sync replica set holds it, and the set has at least
	// min.insync.replicas members (Ack.Durability is DurabilityReplicated
	// and Ack.Replicas the set's size). With fewer in-sync replicas the
	// publish fails with NOT_ENOUGH_REPLICAS, which the producer retries
	// (Retries, DeliveryTimeout); a batch so refused is never exposed to
	// consumers. An acknowledged batch survives the loss of all but one of
	// the replicas that held it.
	AcksAll Acks = 0
	// AcksLeader (Kafka's acks=1) acknowledges a batch once the leader has
	// appended it under the topic's sync policy, without waiting for the
	// followers: faster, but a failover before the followers copied the
	// batch loses it.
	AcksLeader Acks = 1
)

// String returns "all" or "leader".
func (a Acks) String() string {
	switch a {
	case AcksAll:
		return "all"
	case AcksLeader:
		return "leader"
	default:
		return fmt.Sprintf("Acks(%d)", uint8(a))
	}
}

// ParseAcks returns the Acks named s: "all" or "leader".
func ParseAcks(s string) (Acks, error) {
	switch s {
	case "all":
		return AcksAll, nil
	case "leader":
		return AcksLeader, nil
	}
	return 0, fmt.Errorf("acks %q: want all or leader", s)
}

// valid reports whether a is one of the named values.
func (a Acks) valid() bool { return a == AcksAll || a == AcksLeader }

// wire returns a as the Cap'n Proto enum.
func (a Acks) wire() api.Acks {
	if a == AcksLeader {
		return api.Acks_leader
	}
	return api.Acks_all
}

// proto returns a as the protobuf enum.
func (a Acks) proto() sqv1.Acks {
	if a == AcksLeader {
		return sqv1.Acks_ACKS_LEADER
	}
	return sqv1.Acks_ACKS_ALL
}

// acks refuses an Acks that is not AcksAll or AcksLeader.
func (c *configCheck) acks(a Acks) {
	if !a.valid() {
		c.add("Acks", "is %d: want sdk.AcksAll (the default) or sdk.AcksLeader", uint8(a))
	}
}
