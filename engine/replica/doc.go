// Package replica holds the decisions of partition replication, free of
// I/O, goroutines and clock reads (time is passed in), so that the engine
// and the deterministic simulator (engine/replica/sim, cmd/sq-sim) run the
// same code, as etcd-io/raft keeps its quorum logic apart from its
// transport and storage. docs/architecture.md §7 describes how the engine
// uses it; docs/cluster.md states the guarantees.
//
// The decisions:
//
//   - The leader-epoch cache (EpochCache), Kafka's leader-epoch-checkpoint:
//     for each leader epoch the offset of its first batch. A leader
//     answers a follower's OffsetForLeaderEpoch with EndOffsetFor (KIP-101,
//     KIP-279); the follower truncates to TruncationOffset before it
//     fetches, so it never keeps a suffix the leader does not have.
//   - The leader's view (LeaderState): the high watermark is the minimum
//     durable log end offset over the maximal in-sync set (KIP-497: the
//     committed ISR plus the additions in flight, the leader included); it
//     never moves back, whatever the set's size (min.insync.replicas
//     bounds acks-all acknowledgements, not visibility). ISRChange proposes Kafka's ISR rules: a
//     follower not caught up for replica.lag.time.max.ms leaves, a
//     follower at or past the high watermark and the start of the leader's
//     epoch joins, the leader never leaves; one proposal at a time, which
//     takes effect only once committed in the metadata log (SetISR).
//   - A follower's high watermark (FollowerHighWatermark): the leader's,
//     capped by its own log end offset (KAFKA-14704).
//   - The election (ChooseLeader): the first eligible ISR member in replica
//     order; any eligible replica only with unclean leader election.
//
// Offsets are record offsets; an end offset is exclusive (the first offset
// not held). Nothing here is safe for concurrent use.
package replica
