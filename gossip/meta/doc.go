// Package meta is the cluster metadata of SQ: the state machine that
// every node applies from the Raft log (docs/cluster.md,
// docs/architecture.md §7). It is pure: no goroutines, clocks, disks or
// network; the time of a creation is passed in by the controller. Every
// decision depends only on its inputs, so the nodes that apply the same
// log hold the same State, which State.Hash checks.
//
// # The model
//
// As in Raft (D. Ongaro and J. Ousterhout, "In Search of an
// Understandable Consensus Algorithm", USENIX ATC 2014), each node keeps
// a replicated log of commands and applies the committed ones in order to
// a deterministic state machine, here State.Apply. As in Kafka's KRaft
// (KIP-631, "The Quorum-based Kafka Controller"), the Raft leader is the
// controller: it alone decides placement and leadership, writes its
// decision as a command, and every node, the controller included, learns
// it only by applying that command. Gossip never changes a leader.
//
// A State holds the registered nodes (id, data directory id, addresses),
// the topics by name (id, resolved config, creation time, partitions) with
// each partition's replicas, leader, leader epoch, in-sync replicas and
// HasData flag, the ids of deleted topics (DeletedIDs, the newest
// MaxDeletedIDs), whether the bootstrapping node's pre-cluster topics
// were imported, the coordinator of every consumer group (Groups, chosen
// by ChooseCoordinator), the next producer id not yet reserved
// (NextProducerID), and the removed nodes with their data directory
// ids (Removed, the newest MaxRemovedNodes). Topic ids are random UUIDs
// made by the controller (KIP-516, "Topic Identifiers"): a command on a
// topic names it and carries its id, so a command decided before a delete and create again
// is refused with UNKNOWN_TOPIC_ID instead of touching the new topic. Ids
// are never reused while listed.
//
// # Commands
//
// A Command is encoded by Encode as one byte, CommandVersion (1), then
// JSON; Decode refuses another version, unknown fields and unknown ops.
// Results travel the same way (EncodeResult). Apply refuses a command
// without changing anything, the error in Result.Err:
//
//	register-node      Node: adds it or replaces its addresses;
//	                   INVALID_REQUEST for a data directory id listed in
//	                   Removed.
//	remove-node        NodeID: INVALID_REQUEST if unknown or if it leads a
//	                   partition with data; else it joins Removed (with its
//	                   data directory id, the newest MaxRemovedNodes), leaves every replica and
//	                   in-sync set, and each partition it led takes the
//	                   leader of its change in Leaders (decided by
//	                   LeadersForRemoval; a leader that is not a replica
//	                   takes the node's place in the replica set), or none.
//	create-topic       Topic (placed by PrepareCreate): TOPIC_EXISTS for an
//	                   existing name; checks the name, an unused id, 1 to
//	                   engine.MaxPartitions partitions, replication factor
//	                   >= 1, exactly that many distinct registered replicas.
//	delete-topic       Name, ID: the id joins DeletedIDs.
//	alter-topic        Name, ID, Config: replaces the config; the
//	                   replication factor cannot change (0 keeps it).
//	create-partitions  Name, ID, NewPartitions (PrepareCreatePartitions).
//	set-leaders        Leaders: see below.
//	mark-data          Name, ID, Partition, optional NodeID: sets HasData; with
//	                   NodeID, NOT_LEADER (with the leader's id and data
//	                   address) unless NodeID leads the partition.
//	import             Topics: once (INVALID_REQUEST once Imported); a
//	                   replication factor of 0 reads as the replica count.
//	assign-group       Name (a group), NodeID (a registered node): makes it
//	                   the group's coordinator unless the group has one
//	                   (first writer wins, no error); Result.Coordinator
//	                   is the owner. remove-node unassigns the node's groups.
//	allocate-producer-ids
//	                   NodeID (a registered node): reserves the producer
//	                   ids [NextProducerID, NextProducerID+ProducerIDBlock)
//	                   for it (Result.ProducerIDStart) and moves
//	                   NextProducerID past them.
//
// Commands that name a topic answer UNKNOWN_TOPIC for an unknown name,
// UNKNOWN_TOPIC_ID when the topic's id is another, and INVALID_REQUEST
// without an id or for a partition out of range.
//
// # Leadership in part 1
//
// Records are not replicated yet: a partition's data lives on its leader
// only. So leadership moves only for partitions that never held data:
// before its first append a leader commits mark-data (with its NodeID, so
// a node that lost leadership meanwhile is refused), and from then on
// set-leaders skips the partition and remove-node of its leader is
// refused. LeadersAfterDeath moves the partitions of a dead leader that
// hold no data to the least-loaded alive replica; the others wait, and
// answer LEADER_NOT_AVAILABLE, until their leader returns. Each
// LeaderChange carries the epoch it was decided at; Apply skips it when
// the epoch moved, when the leader is not a replica, or when nothing
// changes, and otherwise bumps the epoch. The new leader joins the
// in-sync set: a partition without data is in sync everywhere.
//
// # Placement
//
// Place spreads replicas round-robin over the sorted node ids and gives
// each partition the least-loaded leader, counting the partitions the
// nodes already lead (LeaderCounts), so leadership stays balanced across
// topics. The replication factor defaults to min(3, live nodes)
// (DefaultReplicationFactor) and cannot exceed the live nodes.
//
// # Hash and snapshots
//
// Hash is the hex SHA-256 of the canonical JSON of a State: encoding/json
// sorts map keys, slices keep their order, and empty slices are written
// as null whatever their history. Marshal writes the version byte and
// that JSON for Raft snapshots; UnmarshalState reads it back with the
// same Hash.
package meta
