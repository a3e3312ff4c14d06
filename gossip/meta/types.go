package meta

import (
	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/engine"
	"github.com/seedqueue/sq/internal/acl"
	"github.com/seedqueue/sq/internal/authn"
)

// Node is a member of the cluster as the metadata log records it: its id
// and the addresses of its listeners (host:port, as other nodes and
// clients reach them), registered when it joins and updated when it
// rejoins with new addresses.
type Node struct {
	ID string `json:"id"`
	// DataDirID is the random id of the node's data directory, made at its
	// first start: the same node id alive with another data directory is
	// refused at join.
	DataDirID  string `json:"data_dir_id"`
	GRPCAddr   string `json:"grpc_addr"`
	DataAddr   string `json:"data_addr"`
	GossipAddr string `json:"gossip_addr"`
	RaftAddr   string `json:"raft_addr"`
	HTTPAddr   string `json:"http_addr"`
}

// Partition is one partition's placement: its replica set, its leader and
// leader epoch, and its in-sync replica set.
type Partition struct {
	// Replicas are node ids; the first is the preferred leader.
	Replicas []string `json:"replicas"`
	// Leader is the node id of the leader; "" when the partition has none.
	Leader string `json:"leader"`
	// LeaderEpoch is bumped by every leadership change (docs/cluster.md).
	LeaderEpoch uint32 `json:"leader_epoch"`
	// ISR is the in-sync replica set (node ids).
	ISR []string `json:"isr"`
	// HasData is set (through the log) before the first record is
	// appended to the partition, and for partitions imported with records.
	// A partition that never held a record may move to any live replica
	// (even one outside the ISR, or a node that takes a removed node's
	// place): no record can be lost. One that holds data moves only to a
	// member of its ISR, or, with unclean.leader.election.enable, to any
	// live replica.
	HasData bool `json:"has_data,omitempty"`
}

// Topic is a topic as the metadata log records it.
type Topic struct {
	Name string      `json:"name"`
	ID   api.TopicID `json:"id"`
	// Config is the resolved configuration (no zero fields, its
	// ReplicationFactor included): every node creates the topic's files
	// with the same values.
	Config engine.TopicConfig `json:"config"`
	// CreatedMs is the creation time, Unix ms, as the controller saw it.
	CreatedMs  int64       `json:"created_ms"`
	Partitions []Partition `json:"partitions"`
}

// State is the cluster metadata: the state machine that every node
// applies from the Raft log in the same order, so every node holds the
// same State at the same applied index. A State returned by an accessor is
// immutable; Apply works on a copy (see Clone).
type State struct {
	// Nodes by node id.
	Nodes map[string]Node `json:"nodes"`
	// Topics by name.
	Topics map[string]*Topic `json:"topics"`
	// DeletedIDs are the ids of deleted topics, oldest first, bounded by
	// MaxDeletedIDs: a node that was away during a delete removes its local
	// copy of a topic whose id is listed here.
	DeletedIDs []api.TopicID `json:"deleted_ids"`
	// Imported is set once a node's pre-cluster topics were imported (the
	// first start of a node that bootstrapped the cluster).
	Imported bool `json:"imported"`
	// Groups maps a consumer group's name to the id of the node that
	// coordinates it (assign-group). Omitted from the encoding when empty,
	// so the Hash of a cluster without groups does not change.
	Groups map[string]string `json:"groups,omitempty"`
	// Removed are the nodes removed with remove-node, oldest first, bounded
	// by MaxRemovedNodes: a data directory listed here cannot register
	// again (its node must start on an empty data directory), and a
	// removed node that learns of its removal stops.
	Removed []RemovedNode `json:"removed,omitempty"`
	// NextProducerID is the first producer id not yet reserved by
	// allocate-producer-ids. Omitted from the encoding when zero, so the
	// Hash of a cluster that never reserved one does not change.
	NextProducerID int64 `json:"next_producer_id,omitempty"`
	// DrainedNodes are the drained nodes by id (drain-node): no candidates
	// for leadership until undrain-node (or, for a shutdown drain, their
	// next register-node). Omitted from the encoding when empty, so the
	// Hash of a cluster that never drained a node does not change.
	DrainedNodes map[string]Drain `json:"drained,omitempty"`
	// Quotas are the client byte-rate quotas by principal, and the default
	// quota under DefaultQuotaEntity (quotas.go). Omitted from the encoding
	// when empty, so the Hash of a cluster without quotas does not change.
	Quotas map[string]Quota `json:"quotas,omitempty"`
	// ACLs are the access control bindings (create-acls, delete-acls),
	// sorted by acl.Compare without duplicates. Omitted from the encoding
	// when empty, so the Hash of a cluster without ACLs does not change.
	ACLs []acl.Binding `json:"acls,omitempty"`
	// Users are the SCRAM credentials of the users by name (upsert-user,
	// users.go). Omitted from the encoding when empty, so the Hash of a
	// cluster without users does not change.
	Users map[string]authn.Credential `json:"users,omitempty"`
}

// RemovedNode is a node removed from the cluster: its id and the id of
// its data directory (Node.DataDirID; empty for a node registered without
// one).
type RemovedNode struct {
	ID        string `json:"id"`
	DataDirID string `json:"data_dir_id"`
}

// MaxDeletedIDs bounds State.DeletedIDs; the oldest ids are dropped first.
const MaxDeletedIDs = 4096

// MaxRemovedNodes bounds State.Removed; the oldest removals are dropped
// first (a data directory removed longer ago than that many removals may
// register again).
const MaxRemovedNodes = 1024

// Op names a Command's operation.
type Op string

// The operations of the metadata log. Each is applied deterministically by
// State.Apply; a refused command (a topic that exists, say) changes
// nothing and returns its catalog error in the Result.
const (
	// OpRegisterNode adds Command.Node or replaces its addresses and
	// DataDirID; refused for a data directory listed in State.Removed.
	OpRegisterNode Op = "register-node"
	// OpRemoveNode removes node Command.NodeID from the nodes and from every
	// replica set and in-sync set, and lists it in State.Removed; the
	// partitions it led take the leaders given in Command.Leaders (decided
	// by the controller before proposing).
	OpRemoveNode Op = "remove-node"
	// OpCreateTopic adds Command.Topic (placement decided by the
	// controller).
	OpCreateTopic Op = "create-topic"
	// OpDeleteTopic deletes topic Command.Name whose id is Command.ID.
	OpDeleteTopic Op = "delete-topic"
	// OpAlterTopic replaces the config of topic Command.Name (id
	// Command.ID) with Command.Config.
	OpAlterTopic Op = "alter-topic"
	// OpCreatePartitions appends Command.NewPartitions to topic
	// Command.Name (id Command.ID).
	OpCreatePartitions Op = "create-partitions"
	// OpSetLeaders applies Command.Leaders: each names a partition, its new
	// leader and the epoch it had when decided (a stale change is skipped).
	OpSetLeaders Op = "set-leaders"
	// OpMarkData sets HasData of partition Command.Partition of topic
	// Command.Name (id Command.ID). With Command.NodeID set it is refused
	// with NOT_LEADER unless that node leads the partition.
	OpMarkData Op = "mark-data"
	// OpImport adds Command.Topics (a bootstrapping node's pre-cluster
	// topics) and sets State.Imported; refused once Imported is set.
	OpImport Op = "import"
	// OpAssignGroup makes node Command.NodeID the coordinator of consumer
	// group Command.Name unless the group already has one (first writer
	// wins); Result.Coordinator is the group's coordinator afterwards.
	OpAssignGroup Op = "assign-group"
	// OpSetISR replaces the in-sync set of partition Command.Partition of
	// topic Command.Name (id Command.ID) with Command.ISR, proposed by the
	// partition's leader: applied only while the partition's leader epoch
	// is Command.Epoch (FENCED_LEADER_EPOCH for an older one,
	// UNKNOWN_LEADER_EPOCH for a newer one) and when Command.ISR is a
	// non-empty set of distinct replicas that holds the leader
	// (INVALID_REQUEST otherwise). The ISR is stored in replica order.
	OpSetISR Op = "set-isr"
	// OpUnassignGroup removes consumer group Command.Name's coordinator
	// when it is node Command.NodeID (the node that deleted the group): a
	// group deleted and used again is assigned anew, and the metadata does
	// not keep every group ever used. Anything else is a no-op.
	OpUnassignGroup Op = "unassign-group"
	// OpAllocateProducerIDs reserves the next ProducerIDBlock producer
	// ids for node Command.NodeID (a registered node):
	// Result.ProducerIDStart is the first (producerids.go).
	OpAllocateProducerIDs Op = "allocate-producer-ids"
	// OpDrainNode drains node Command.NodeID (a registered node): it is
	// listed in State.DrainedNodes (an operator drain, or with
	// Command.Shutdown its controlled shutdown), the partitions it leads
	// take the leaders of Command.Leaders (decided by LeadersForDrain;
	// applied as set-leaders, skipping changes of partitions it no longer
	// leads), and with Shutdown it leaves the in-sync sets of the
	// partitions it follows (drain.go).
	OpDrainNode Op = "drain-node"
	// OpUndrainNode ends the drain of node Command.NodeID (a registered
	// node); leadership does not move back by itself.
	OpUndrainNode Op = "undrain-node"
	// OpSetQuota sets the byte-rate quotas of principal Command.Name (or
	// DefaultQuotaEntity) from Command.Quota; a zero kind keeps its value
	// (quotas.go).
	OpSetQuota Op = "set-quota"
	// OpRemoveQuota removes the quotas of principal Command.Name (or
	// DefaultQuotaEntity).
	OpRemoveQuota Op = "remove-quota"
	// OpCreateACLs adds Command.ACLs (valid bindings; one already present
	// is kept once) to State.ACLs (acl.go).
	OpCreateACLs Op = "create-acls"
	// OpDeleteACLs removes from State.ACLs every binding one of
	// Command.ACLFilters selects; Result.ACLs are the bindings removed.
	OpDeleteACLs Op = "delete-acls"
)

// LeaderChange is one leadership decision of the controller.
type LeaderChange struct {
	Topic     string      `json:"topic"`
	ID        api.TopicID `json:"id"`
	Partition int         `json:"partition"`
	// Leader is the new leader's node id ("" leaves the partition without
	// a leader). For a partition that holds data (HasData) it must be a
	// member of the ISR, or any replica when the topic allows unclean
	// leader election (the ISR then becomes {Leader}); Apply skips it
	// otherwise.
	Leader string `json:"leader"`
	// Epoch is the partition's leader epoch when the change was decided:
	// Apply skips the change when the epoch has moved since, and otherwise
	// sets the epoch to Epoch+1.
	Epoch uint32 `json:"epoch"`
	// Restart marks the change a restarted leader proposes for a
	// partition it still leads in the metadata: Leader is the current
	// leader, and Apply bumps the epoch (the ISR unchanged) instead of
	// skipping the change. A leader back from a crash may have lost the
	// unsynced end of its log, which its followers may hold; under a new
	// epoch its followers truncate to its log (KIP-101), where under the
	// old one new records would take the same offsets unnoticed.
	Restart bool `json:"restart,omitempty"`
}

// Command is one entry of the metadata log, encoded with Encode. Only the
// fields of its Op are set.
type Command struct {
	Op            Op                  `json:"op"`
	Node          *Node               `json:"node,omitempty"`
	NodeID        string              `json:"node_id,omitempty"`
	Topic         *Topic              `json:"topic,omitempty"`
	Topics        []*Topic            `json:"topics,omitempty"`
	Name          string              `json:"name,omitempty"`
	ID            api.TopicID         `json:"id,omitzero"`
	Config        *engine.TopicConfig `json:"config,omitempty"`
	NewPartitions []Partition         `json:"new_partitions,omitempty"`
	Partition     int                 `json:"partition,omitempty"`
	Leaders       []LeaderChange      `json:"leaders,omitempty"`
	// Epoch is the partition's leader epoch a set-isr was proposed at.
	Epoch uint32 `json:"epoch,omitempty"`
	// ISR is the in-sync set of a set-isr (node ids).
	ISR []string `json:"isr,omitempty"`
	// Shutdown marks a drain-node made by the node's controlled shutdown.
	Shutdown bool `json:"shutdown,omitempty"`
	// Quota is the quotas of a set-quota.
	Quota *Quota `json:"quota,omitempty"`
	// ACLs are the bindings of a create-acls.
	ACLs []acl.Binding `json:"acls,omitempty"`
	// ACLFilters select the bindings a delete-acls removes.
	ACLFilters []acl.Filter `json:"acl_filters,omitempty"`
	// Credential is the credential of an upsert-user.
	Credential *authn.Credential `json:"credential,omitempty"`
}

// Result is the outcome of applying one Command.
type Result struct {
	// Err is the catalog error of a refused command; nil when applied.
	Err *api.Error `json:"err,omitempty"`
	// Topic is the topic after a create, alter, create-partitions or
	// import of one topic.
	Topic *Topic `json:"topic,omitempty"`
	// Moved counts the partitions whose leader changed.
	Moved int `json:"moved,omitempty"`
	// Coordinator is the group's coordinator after an assign-group: the
	// node it names, or the one the group already had.
	Coordinator string `json:"coordinator,omitempty"`
	// ProducerIDStart is the first id of the block an
	// allocate-producer-ids reserved: [ProducerIDStart,
	// ProducerIDStart+ProducerIDBlock).
	ProducerIDStart int64 `json:"producer_id_start,omitempty"`
	// ACLs are the bindings a delete-acls removed.
	ACLs []acl.Binding `json:"acls,omitempty"`
}
