// Package gossip makes sq-server processes one cluster (docs/cluster.md,
// docs/architecture.md §7).
//
// Membership and failure detection come from hashicorp/memberlist on the
// gossip address (SWIM: Das, Gupta and Motivala, "SWIM: Scalable
// Weakly-consistent Infection-style Process Group Membership Protocol",
// 2002). Each member gossips its cluster id and gRPC address; a member of
// another cluster is refused.
//
// The cluster metadata (nodes, topics, placement, partition leaders and
// epochs) is the state machine of package gossip/meta, replicated with
// hashicorp/raft (Ongaro and Ousterhout, "In Search of an Understandable
// Consensus Algorithm", 2014): log and stable store in raft-boltdb
// (<data-dir>/cluster/raft/raft.db), file snapshots beside it. The Raft
// leader is the controller: every change of the metadata is prepared
// there (ids, placement, leader decisions) and committed through the log;
// other nodes forward their changes to it over gRPC (Cluster.Propose).
// Gossip alone never changes a leader: the controller reads memberlist's
// view and commits its decisions.
//
// Replication (Kafka's design: KIP-101 and KIP-279 leader epochs, KIP-497
// in-sync set changes through the controller): the Replicator makes the
// node's engine the leader or a follower of each partition it holds a
// replica of, as the metadata says, and copies the followed partitions
// from their leaders over the data plane; the leaders' in-sync set
// changes are committed as meta.OpSetISR, and the controller elects new
// leaders from the in-sync set. The Broker serves the followers' fetches.
//
// Joining: a node without seeds and without Raft state bootstraps a
// one-voter cluster and imports its data directory's topics once; a node
// with seeds calls Cluster.Join on them (over gRPC), and the controller
// registers it and adds it to Raft, as a voter while there are fewer than
// five; a restarted node rejoins with its Raft state and identity
// (<data-dir>/cluster/node.json).
package gossip
