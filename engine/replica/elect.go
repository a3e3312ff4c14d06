package replica

import "slices"

// ChooseLeader picks a partition's next leader (Kafka's
// PartitionLeaderElectionAlgorithms.offlinePartitionLeaderElection): the
// first replica, in replica order, that is in the in-sync set isr and
// eligible (alive, reachable, its sealed segments pass their CRC), with
// clean true. When none is, and unclean (unclean.leader.election.enable)
// is set, the first eligible replica of any kind, with clean false: it may
// lack acknowledged records, and the caller makes it the only ISR member.
// Otherwise ok is false: the partition stays leaderless rather than lose
// acknowledged records. A nil eligible counts every replica eligible.
func ChooseLeader(replicas, isr []string, eligible func(id string) bool, unclean bool) (leader string, clean bool, ok bool) {
	can := func(id string) bool { return eligible == nil || eligible(id) }
	for _, id := range replicas {
		if slices.Contains(isr, id) && can(id) {
			return id, true, true
		}
	}
	if unclean {
		for _, id := range replicas {
			if can(id) {
				return id, false, true
			}
		}
	}
	return "", false, false
}

// FollowerHighWatermark returns a follower's high watermark: the leader's
// high watermark from its last fetch response, capped by the follower's
// own log end offset. A follower never exposes or records a high
// watermark above what it holds, so after a truncation it cannot serve
// offsets it no longer has (KAFKA-14704).
func FollowerHighWatermark(leaderHW, localLEO uint64) uint64 {
	return min(leaderHW, localLEO)
}
