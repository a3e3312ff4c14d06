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
// ids (Removed, the newest MaxRemovedNodes), and the access control
// bindings (ACLs, package internal/acl). Topic ids are random UUIDs
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
//	remove-node        NodeID: INVALID_REQUEST if unknown, or if it leads a
//	                   partition with data whose change in Leaders does
//	                   not name another in-sync replica (any other
//	                   replica with unclean leader election); else it
//	                   joins Removed (with its data directory id, the
//	                   newest MaxRemovedNodes), leaves every replica and
//	                   in-sync set, and each partition it led takes the
//	                   leader of its change in Leaders (decided by
//	                   LeadersForRemoval; for a partition without data, a
//	                   leader that is not a replica takes the node's place
//	                   in the replica set), or none.
//	create-topic       Topic (placed by PrepareCreate): TOPIC_EXISTS for an
//	                   existing name; checks the name, an unused id, 1 to
//	                   engine.MaxPartitions partitions, replication factor
//	                   >= 1, min.insync.replicas <= it (0 reads as the
//	                   default, MinInsync), exactly that many distinct
//	                   registered replicas.
//	delete-topic       Name, ID: the id joins DeletedIDs.
//	alter-topic        Name, ID, Config: replaces the config; the
//	                   replication factor cannot change (0 keeps it);
//	                   min.insync.replicas at most the replication factor.
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
//	set-isr            Name, ID, Partition, Epoch, ISR: the partition's
//	                   leader replaces its in-sync set; FENCED_LEADER_EPOCH
//	                   when Epoch is older than the partition's leader
//	                   epoch (UNKNOWN_LEADER_EPOCH when newer);
//	                   INVALID_REQUEST unless ISR is a non-empty set of
//	                   distinct replicas holding the leader. Stored in
//	                   replica order.
//	allocate-producer-ids
//	                   NodeID (a registered node): reserves the producer
//	                   ids [NextProducerID, NextProducerID+ProducerIDBlock)
//	                   for it (Result.ProducerIDStart) and moves
//	                   NextProducerID past them.
//	drain-node         NodeID (a registered node), Leaders, Shutdown: lists
//	                   the node in DrainedNodes and moves the partitions
//	                   it leads as LeadersForDrain decided (set-leaders
//	                   rules; only to in-sync replicas for data); with
//	                   Shutdown it also leaves the ISRs it follows, and
//	                   set-isr does not add it back until its next
//	                   register-node, which ends a shutdown drain.
//	undrain-node       NodeID (a registered node): ends its drain.
//	set-quota          Name (a principal, or DefaultQuotaEntity), Quota:
//	                   sets the kinds given (produce, fetch bytes per
//	                   second), keeps the others; INVALID_CONFIG for a
//	                   negative value, no kind, or a new entity beyond
//	                   MaxQuotas (State.Quotas; quotas.go).
//	remove-quota       Name: removes the entity's quotas; INVALID_REQUEST
//	                   when it has none.
//	create-acls        ACLs (valid acl.Bindings) added to State.ACLs, kept
//	                   sorted by acl.Compare without duplicates, at most
//	                   MaxACLs (INVALID_REQUEST otherwise; nothing added).
//	delete-acls        removes every binding one of ACLFilters selects
//	                   (Result.ACLs: those removed); INVALID_REQUEST for
//	                   an invalid filter.
//	upsert-user        Name, Credential: creates the user or replaces its
//	                   SCRAM credential (salt, iterations, StoredKey,
//	                   ServerKey; never a password); INVALID_REQUEST for a
//	                   bad name or credential or beyond MaxUsers users.
//	delete-user        Name: INVALID_REQUEST when the user does not exist.
//
// Commands that name a topic answer UNKNOWN_TOPIC for an unknown name,
// UNKNOWN_TOPIC_ID when the topic's id is another, and INVALID_REQUEST
// without an id or for a partition out of range.
//
// # Leadership and the in-sync set
//
// Records are replicated from each partition's leader to its followers
// (docs/cluster.md); the in-sync set (ISR) holds the replicas that have
// every record the partition acknowledged with acks all. It changes only
// through the log: the leader proposes set-isr, fenced by its leader
// epoch, so a deposed leader cannot shrink or grow it. Elections choose
// from it: LeadersAfterDeath gives a partition that holds data (HasData)
// whose leader is not alive the first alive ISR member in replica order
// (replica.ChooseLeader), or, only when the topic sets
// unclean.leader.election.enable, any alive replica, whose ISR then is
// itself alone; without a candidate the partition keeps its dead leader
// and answers LEADER_NOT_AVAILABLE until it returns. Each LeaderChange
// carries the epoch it was decided at; Apply skips it when the epoch
// moved, when the leader is not a replica, when nothing changes, or when
// the leader is outside the ISR of a partition with data and the topic
// does not allow unclean election; otherwise it bumps the epoch, adds the
// new leader to the ISR and removes the old one unless that would empty
// it. A partition that never held a record (mark-data, committed by its
// leader before its first append, was never applied) may move to any
// alive replica, the least loaded: no record can be lost.
// remove-node follows the same rules and is refused for a partition with
// data that no other replica may take over.
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
