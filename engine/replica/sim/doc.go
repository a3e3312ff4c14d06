// Package sim is a deterministic simulator of one partition replicated
// over 3 or 5 nodes, in the manner of TigerBeetle's VOPR and FoundationDB's
// simulation: every decision of replication (high watermark, ISR changes,
// truncation point, election) is made by package replica, exactly as the
// engine makes it, while a seeded random source (math/rand/v2's PCG)
// drives a simulated clock, network and disks. The same seed replays the
// same run step for step, so a failing seed is a reproducible bug report
// (cmd/sq-sim -seed S, make sim SEED=S).
//
// The model:
//
//   - Each node has a log of batches (value, epoch), a durable prefix (a
//     crash loses the rest; each node syncs every batch or, by a coin flip
//     of the seed, at sync steps), a leader-epoch cache, a high watermark and its
//     checkpoint, and its copy of the partition's metadata. A restarted
//     node never leads an epoch it knew before its crash.
//   - The controller holds the metadata (version, leader epoch, leader,
//     ISR). It commits set-isr proposals from the leader of the current
//     epoch based on the current version, and elects with
//     replica.ChooseLeader when the leader crashed, restarted or is cut
//     off from it (the old leader leaves the ISR). It sends the metadata
//     to every node after each change, and to one node on each tick.
//   - Followers send offsetForLeaderEpoch, truncating to
//     replica.TruncationOffset, until replica.TruncationComplete, then fetch (follower id, fetch offset,
//     durable offset); the leader answers with batches, its high
//     watermark and its epoch, and runs replica.LeaderState.
//   - The network delays (1-20 ms, sometimes up to 500 ms), reorders,
//     drops and duplicates messages, and partitions the nodes (one node
//     alone, or a minority apart from the controller's majority).
//   - Producers publish with acks=all and record the acknowledged values
//     and offsets; consumers read from a node that believes it leads, up
//     to its high watermark.
//
// The invariants, checked after every step (Step returns a *Failure with
// the seed and step): no acknowledged value is lost (the controller's
// leader holds it at its offset, and every replica below its high
// watermark); no two replicas hold different values at one offset below
// the lower of their high watermarks; no replica's high watermark is above
// its log end offset; the high watermark a consumer sees never moves back;
// a consumer's reads are monotonic and gap-free.
//
// Config.Break breaks one rule on purpose; the tests show that the checker
// then fails.
package sim
