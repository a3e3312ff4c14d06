package engine

import (
	"sync"

	"github.com/seedqueue/sq/api"
)

// TopicConfig holds per-topic settings, persisted in meta/topics/<name>.json.
// In a create request zero fields mean "the server default"; DescribeTopic
// returns the effective values.
type TopicConfig struct {
	// SyncPolicy is "every-batch", "none", or an interval "N"/"Nms" in
	// milliseconds (see ParseSyncPolicy). Empty means the server default.
	SyncPolicy string `json:"sync_policy"`
	// SegmentBytes is the size at which the active segment rolls. Default
	// Options.DefaultSegmentBytes (1 GiB).
	SegmentBytes int64 `json:"segment_bytes"`
	// RetentionBytes bounds the partition size; -1 means unlimited (default).
	RetentionBytes int64 `json:"retention_bytes"`
	// RetentionMs bounds record age by broker append time; -1 unlimited.
	// Default 7 days.
	RetentionMs int64 `json:"retention_ms"`
	// MaxRecordBytes bounds key+value+headers of one record; default and
	// maximum Options.MaxRecordBytes.
	MaxRecordBytes int32 `json:"max_record_bytes"`
	// SegmentMs rolls the active segment after this age; default 7 days.
	SegmentMs int64 `json:"segment_ms"`
	// ReplicationFactor is the number of replicas of each partition (topic
	// setting replication.factor). The engine keeps it as given and checks
	// only that it is not negative; the cluster layer resolves 0 to the
	// server's default and checks it against the nodes (docs/cluster.md).
	// 0 on a node outside a cluster reads as 1.
	ReplicationFactor int32 `json:"replication_factor,omitempty"`
	// MinInsyncReplicas is the topic setting min.insync.replicas: in a
	// cluster, a publish with acks all is refused with NOT_ENOUGH_REPLICAS
	// while the partition's in-sync set has fewer members. 0 resolves, in
	// the cluster layer, to 2 when ReplicationFactor >= 3 and to 1
	// otherwise; it may not exceed ReplicationFactor (docs/cluster.md).
	MinInsyncReplicas int32 `json:"min_insync_replicas,omitempty"`
	// UncleanLeaderElection is the topic setting
	// unclean.leader.election.enable: when no member of a partition's
	// in-sync set is alive, the controller may make another replica the
	// leader, losing what only the in-sync set held. Default false.
	UncleanLeaderElection bool `json:"unclean_leader_election,omitempty"`
	// LocalRetentionMs is the topic setting local.retention.ms (Kafka
	// KIP-405): with tiered storage, how long a partition's records stay
	// on local disk, by broker append time, once their segment is
	// uploaded; RetentionMs still bounds the whole log, remote included.
	// LocalRetentionDefault (-2, the default) means the same as
	// RetentionMs; -1 unlimited, allowed only when RetentionMs is -1
	// too; otherwise a positive duration in ms, at most RetentionMs when
	// that is limited. 0 in a create request or a change: the server's
	// default (Options.LocalRetentionMs). Stored and described only: it
	// takes effect with tiered storage (docs/architecture.md §8). Its
	// JSON key local_retention_ms is left out at -2 (MarshalJSON).
	LocalRetentionMs int64 `json:"-"`
	// LocalRetentionBytes is the topic setting local.retention.bytes
	// (KIP-405): with tiered storage, the local disk bound of each
	// partition; RetentionBytes still bounds the whole log. -2 (the
	// default) means the same as RetentionBytes, -1 unlimited (only when
	// RetentionBytes is -1), otherwise a positive size in bytes, at most
	// RetentionBytes when that is limited. 0 in a create request or a
	// change: the server's default (Options.LocalRetentionBytes). Its
	// JSON key local_retention_bytes is left out at -2.
	LocalRetentionBytes int64 `json:"-"`
}

// PartitionInfo describes one partition's offsets and size.
type PartitionInfo struct {
	Partition      int
	LogStartOffset uint64
	HighWatermark  uint64
	LogEndOffset   uint64
	SizeBytes      int64
	SegmentCount   int
	// Err is non-nil when the partition is failed (corruption or an I/O
	// error); it names the file and position where known.
	Err error
	// Leader, LeaderEpoch, Replicas and ISR are the partition's placement
	// in a cluster (node ids; docs/cluster.md), filled in by the cluster
	// layer from the metadata log. The engine itself leaves them empty: a
	// single node leads every partition.
	Leader      string
	LeaderEpoch uint32
	Replicas    []string
	ISR         []string
	// Remote is the partition's remote log and upload lag when tiered
	// storage is on (docs/tiering.md), nil when it is off and for the
	// internal topics.
	Remote *RemoteStats
}

// TopicInfo describes a topic. Partitions holds one PartitionInfo per
// partition from DescribeTopic and is nil from ListTopics.
type TopicInfo struct {
	Name string
	// ID is the topic's unique id (KIP-516): a topic deleted and created
	// again under the same name has a new one.
	ID             api.TopicID
	PartitionCount int
	Config         TopicConfig
	// CreatedMs is the topic's creation time, Unix ms: the engine's clock
	// at CreateTopic, or the time given to CreateTopicSpec.
	CreatedMs  int64
	Partitions []PartitionInfo
}

// Durability is what an acknowledged append guarantees (values match
// api.Durability).
type Durability uint8

const (
	// DurabilityWritten: written to the segment file (page cache) only.
	DurabilityWritten Durability = 1
	// DurabilitySynced: covered by an fdatasync.
	DurabilitySynced Durability = 2
	// DurabilityReplicated: held by every member of the partition's
	// in-sync set (at least min.insync.replicas of them), each under its
	// own sync policy; the high watermark has passed the batch.
	DurabilityReplicated Durability = 3
)

// AppendResult is the outcome of one acknowledged batch append.
type AppendResult struct {
	BaseOffset    uint64 // offset of the batch's first record
	RecordCount   uint32
	LogAppendTime int64 // Unix ms, broker clock
	Durability    Durability
	// Replicas is how many replicas held the batch when it was
	// acknowledged: 1 outside a cluster and with acks leader, the in-sync
	// set's size with acks all.
	Replicas int32
}

// FetchResult holds whole batches read from a partition's mapped segments.
// Bufs alias the mappings: they stay valid until Release, which must be
// called exactly once.
type FetchResult struct {
	// TopicID is the id of the topic the batches were read from.
	TopicID        api.TopicID
	HighWatermark  uint64
	LogStartOffset uint64
	// LeaderEpoch is the partition's leader epoch on the leader that served
	// a FetchReplica; 0 from Fetch and on a single node.
	LeaderEpoch uint32
	Bufs        [][]byte
	release     func()
	once        sync.Once
}

// Bytes returns the total length of Bufs.
func (r *FetchResult) Bytes() int {
	n := 0
	for _, b := range r.Bufs {
		n += len(b)
	}
	return n
}

// Release returns the mappings behind Bufs; Bufs must not be used after.
func (r *FetchResult) Release() {
	r.once.Do(func() {
		if r.release != nil {
			r.release()
		}
	})
}

// OffsetCommit is one committed offset of a consumer group: the next offset
// the group will read in (Topic, Partition). Err is set per entry in
// CommitOffsets results.
type OffsetCommit struct {
	Topic string
	// TopicID, when set in a commit, must be the topic's current id
	// (UNKNOWN_TOPIC_ID otherwise); the zero id commits by name. Results
	// and FetchOffsets carry the id of the topic the offset belongs to.
	TopicID   api.TopicID
	Partition int
	Offset    uint64
	Metadata  string
	Err       error
}

// Limits are the data-plane size limits (docs/architecture.md §4).
type Limits struct {
	MaxRecordBytes int // key + value + headers of one record
	MaxBatchBytes  int // one batch
}
