package sdk

import (
	"context"
	"fmt"

	"capnproto.org/go/capnp/v3"

	"github.com/seedqueue/sq/api"
)

// TopicConfig holds per-topic settings. In CreateTopic a zero or empty field
// means "server default"; DescribeTopic returns the effective values.
type TopicConfig struct {
	SyncPolicy     string // "every-batch", "none", or an interval "N"/"Nms" (milliseconds)
	SegmentBytes   int64  // segment file size in bytes
	RetentionBytes int64  // per-partition retention in bytes; -1 unlimited
	RetentionMs    int64  // retention in milliseconds; -1 unlimited
	MaxRecordBytes int32  // largest key+value+headers of one record, bytes
	SegmentMs      int64  // roll the active segment after this many milliseconds
	// ReplicationFactor is the number of replicas of each partition (topic
	// setting replication.factor, docs/cluster.md), at most the cluster's
	// node count. CreateTopic sends it; 0 takes the server's default
	// (--default-replication-factor, min(3, live nodes)). A server outside
	// a cluster refuses a factor above 1 with api.ErrInvalidConfig. In an
	// answer it repeats TopicInfo.ReplicationFactor.
	ReplicationFactor uint32
	// MinInsyncReplicas is the topic setting min.insync.replicas: in a
	// cluster, a publish with acks all is refused (NOT_ENOUGH_REPLICAS)
	// while fewer replicas are in sync. 1 to ReplicationFactor; 0 in
	// CreateTopic: the server's default (2 when the replication factor is 3
	// or more, else 1).
	MinInsyncReplicas int32
	// UncleanLeaderElection is the topic setting
	// unclean.leader.election.enable: when no in-sync replica is alive,
	// another replica may lead, losing what only the in-sync set held.
	UncleanLeaderElection bool
	// LocalRetentionMs is the topic setting local.retention.ms (Kafka
	// KIP-405): with tiered storage, how long records stay on the
	// broker's local disk once uploaded; RetentionMs still bounds the
	// whole log. LocalRetentionDefault (-2) means the same as RetentionMs
	// (the default); -1 unlimited (only when RetentionMs is -1); else
	// milliseconds, at most RetentionMs. 0 in CreateTopic: the server's
	// default (sq-server --local-retention-ms); 0 in an answer: a server
	// that does not know the setting. It takes effect with tiered storage;
	// api.ErrInvalidConfig when it does not fit RetentionMs.
	LocalRetentionMs int64
	// LocalRetentionBytes is the topic setting local.retention.bytes
	// (KIP-405): with tiered storage, the local disk bound of each
	// partition; RetentionBytes still bounds the whole log. -2 the same as
	// RetentionBytes (the default), -1 unlimited (only when RetentionBytes
	// is -1), else bytes, at most RetentionBytes; 0 as LocalRetentionMs.
	LocalRetentionBytes int64
}

// LocalRetentionDefault is the value of TopicConfig.LocalRetentionMs and
// LocalRetentionBytes that means "the same as RetentionMs /
// RetentionBytes" (Kafka's -2).
const LocalRetentionDefault = -2

// PartitionInfo describes one partition of a topic (DescribeTopic only).
type PartitionInfo struct {
	Partition      uint32
	LogStartOffset uint64 // first offset still stored on the leader's disk (older ones may be in Remote)
	HighWatermark  uint64 // first offset not yet readable
	LogEndOffset   uint64 // offset the next appended record gets
	SizeBytes      int64  // bytes on disk
	SegmentCount   uint32
	// Err is set when the partition's statistics are not values: the
	// partition is failed (*api.Error, PARTITION_FAILED), or, in a
	// cluster, its leader is not available (LEADER_NOT_AVAILABLE,
	// retriable). The offsets, size and segment count are then unknown.
	Err error
	// Leader is the node id of the partition's leader from the cluster
	// metadata (empty: none, or a server that predates clustering), and
	// LeaderEpoch its leader epoch, bumped at every leadership change.
	Leader      string
	LeaderEpoch uint32
	// Replicas is the replica set (node ids; the first is the preferred
	// leader) and ISR the in-sync replica set.
	Replicas []string
	ISR      []string
	// Remote is the partition's remote log and upload lag when the server
	// runs with tiered storage (docs/tiering.md), the leader's in a
	// cluster; nil when tiered storage is off, for a failed partition
	// whose leader did not answer, or from a server that predates it.
	Remote *RemoteStats
}

// RemoteStats describes a partition's remote log (tiered storage) and
// what is not uploaded yet.
type RemoteStats struct {
	// LogStartOffset is the first offset of the remote log and EndOffset
	// the offset after its last uploaded segment; both 0 while Segments
	// is 0.
	LogStartOffset, EndOffset uint64
	// Segments is the number of uploaded segments and Bytes their size in
	// bytes (their batches; the indexes are not counted).
	Segments uint32
	Bytes    int64
	// LagSegments is the number of sealed segments below the high
	// watermark not uploaded yet and LagBytes their size in bytes, as of
	// the leader's last upload pass.
	LagSegments uint32
	LagBytes    int64
}

// TopicInfo describes one topic. PartitionInfos is filled by DescribeTopic
// and CreateTopic only; Metadata and ListTopics leave it empty.
type TopicInfo struct {
	Name string
	// ID is the topic's unique id (KIP-516), made when it was created: a
	// topic deleted and created again under the same name has a new one.
	// Zero from a server that predates topic ids.
	ID             api.TopicID
	Partitions     uint32 // partition count; partitions are numbered 0..Partitions-1
	Config         TopicConfig
	PartitionInfos []PartitionInfo
	// ReplicationFactor is the number of replicas of each partition
	// (topic setting replication.factor); 0 from a server that predates
	// clustering.
	ReplicationFactor uint32
}

// Metadata is the server's answer to a metadata request.
type Metadata struct {
	NodeID      string
	DataAddress string // the data-plane address clients should use
	// Topics lists the topics asked for; each one's PartitionInfos carry
	// only Partition, Leader, LeaderEpoch, Replicas and ISR (none from a
	// server that predates clustering).
	Topics []TopicInfo
	// Brokers lists every node of the cluster (the answering node alone
	// when not clustered; none from a server that predates clustering):
	// a partition's Leader is looked up here by node id.
	Brokers   []api.Node
	ClusterID string
}

// CreateTopic creates topic name with the given partition count (>= 1) and
// config (cfg.ReplicationFactor 0: the server's default). It fails with
// api.ErrTopicExists, api.ErrInvalidTopicName or api.ErrInvalidConfig
// (test with errors.Is), or ErrConnection.
func (c *Client) CreateTopic(ctx context.Context, name string, partitions uint32, cfg TopicConfig) (TopicInfo, error) {
	r, err := c.roundTrip(ctx, 0, func(f api.Frame) error {
		req, err := f.NewCreateTopicRequest()
		if err != nil {
			return err
		}
		req.SetPartitions(partitions)
		req.SetReplicationFactor(cfg.ReplicationFactor)
		if err := req.SetName(name); err != nil {
			return err
		}
		wc, err := req.NewConfig()
		if err != nil {
			return err
		}
		return topicConfigToWire(wc, cfg)
	}, nil, 0)
	if err != nil {
		return TopicInfo{}, err
	}
	if err := expect(r.f, api.Frame_Which_createTopicResponse); err != nil {
		return TopicInfo{}, err
	}
	resp, err := r.f.CreateTopicResponse()
	if err != nil {
		return TopicInfo{}, err
	}
	if err := respErr(resp.Error()); err != nil {
		return TopicInfo{}, err
	}
	if !resp.HasTopic() {
		return TopicInfo{Name: name, Partitions: partitions, Config: cfg}, nil
	}
	t, err := resp.Topic()
	if err != nil {
		return TopicInfo{}, err
	}
	return topicFromWire(t)
}

// DescribeTopic returns the topic's effective config and per-partition
// state. It fails with api.ErrUnknownTopic when the topic does not exist.
func (c *Client) DescribeTopic(ctx context.Context, name string) (TopicInfo, error) {
	r, err := c.roundTrip(ctx, 0, func(f api.Frame) error {
		req, err := f.NewDescribeTopicRequest()
		if err != nil {
			return err
		}
		return req.SetName(name)
	}, nil, 0)
	if err != nil {
		return TopicInfo{}, err
	}
	if err := expect(r.f, api.Frame_Which_describeTopicResponse); err != nil {
		return TopicInfo{}, err
	}
	resp, err := r.f.DescribeTopicResponse()
	if err != nil {
		return TopicInfo{}, err
	}
	if err := respErr(resp.Error()); err != nil {
		return TopicInfo{}, err
	}
	t, err := resp.Topic()
	if err != nil {
		return TopicInfo{}, err
	}
	return topicFromWire(t)
}

// ListTopics returns every topic (PartitionInfos left empty).
func (c *Client) ListTopics(ctx context.Context) ([]TopicInfo, error) {
	r, err := c.roundTrip(ctx, 0, func(f api.Frame) error {
		_, err := f.NewListTopicsRequest()
		return err
	}, nil, 0)
	if err != nil {
		return nil, err
	}
	if err := expect(r.f, api.Frame_Which_listTopicsResponse); err != nil {
		return nil, err
	}
	resp, err := r.f.ListTopicsResponse()
	if err != nil {
		return nil, err
	}
	if err := respErr(resp.Error()); err != nil {
		return nil, err
	}
	list, err := resp.Topics()
	if err != nil {
		return nil, err
	}
	return topicsFromWire(list)
}

// Metadata returns the named topics with their partition counts, or every
// topic when none is named. A named topic that does not exist is either
// absent from the result or reported as api.ErrUnknownTopic, as the server
// chooses; Producer treats both as UNKNOWN_TOPIC. A name that breaks the
// topic-name rules (1 to 249 characters of [a-zA-Z0-9._-], not "." or "..",
// not starting with "__") fails it with api.ErrInvalidTopicName.
func (c *Client) Metadata(ctx context.Context, topics ...string) (Metadata, error) {
	r, err := c.roundTrip(ctx, 0, func(f api.Frame) error {
		req, err := f.NewMetadataRequest()
		if err != nil {
			return err
		}
		if len(topics) == 0 {
			return nil
		}
		tl, err := req.NewTopics(int32(len(topics)))
		if err != nil {
			return err
		}
		for i, t := range topics {
			if err := tl.Set(i, t); err != nil {
				return err
			}
		}
		return nil
	}, nil, 0)
	if err != nil {
		return Metadata{}, err
	}
	if err := expect(r.f, api.Frame_Which_metadataResponse); err != nil {
		return Metadata{}, err
	}
	resp, err := r.f.MetadataResponse()
	if err != nil {
		return Metadata{}, err
	}
	if err := respErr(resp.Error()); err != nil {
		return Metadata{}, err
	}
	var md Metadata
	md.NodeID, _ = resp.NodeId()
	md.DataAddress, _ = resp.DataAddress()
	list, err := resp.Topics()
	if err != nil {
		return Metadata{}, err
	}
	if md.Topics, err = topicsFromWire(list); err != nil {
		return Metadata{}, err
	}
	md.ClusterID, _ = resp.ClusterId()
	bl, err := resp.Brokers()
	if err != nil {
		return Metadata{}, err
	}
	for i := 0; i < bl.Len(); i++ {
		b := bl.At(i)
		n := api.Node{Alive: b.Alive()}
		n.ID, _ = b.NodeId()
		n.DataAddr, _ = b.DataAddress()
		n.GRPCAddr, _ = b.GrpcAddress()
		md.Brokers = append(md.Brokers, n)
	}
	return md, nil
}

// respErr converts a response's error field into an error (nil when unset).
func respErr(we api.WireError, err error) error {
	if err != nil {
		return fmt.Errorf("sdk: decode response error: %w", err)
	}
	return api.FromWire(we)
}

func topicConfigToWire(w api.TopicConfig, cfg TopicConfig) error {
	w.SetSegmentBytes(cfg.SegmentBytes)
	w.SetRetentionBytes(cfg.RetentionBytes)
	w.SetRetentionMs(cfg.RetentionMs)
	w.SetMaxRecordBytes(cfg.MaxRecordBytes)
	w.SetSegmentMs(cfg.SegmentMs)
	w.SetMinInsyncReplicas(cfg.MinInsyncReplicas)
	w.SetUncleanLeaderElection(cfg.UncleanLeaderElection)
	w.SetLocalRetentionMs(cfg.LocalRetentionMs)
	w.SetLocalRetentionBytes(cfg.LocalRetentionBytes)
	if cfg.SyncPolicy == "" {
		return nil
	}
	return w.SetSyncPolicy(cfg.SyncPolicy)
}

func topicsFromWire(list api.TopicInfo_List) ([]TopicInfo, error) {
	out := make([]TopicInfo, 0, list.Len())
	for i := 0; i < list.Len(); i++ {
		t, err := topicFromWire(list.At(i))
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, nil
}

func topicFromWire(t api.TopicInfo) (TopicInfo, error) {
	var ti TopicInfo
	var err error
	if ti.Name, err = t.Name(); err != nil {
		return TopicInfo{}, err
	}
	ti.Partitions = t.Partitions()
	ti.ReplicationFactor = t.ReplicationFactor()
	ti.Config.ReplicationFactor = ti.ReplicationFactor
	if ti.ID, err = wireTopicID(t.HasTopicId(), t.TopicId); err != nil {
		return TopicInfo{}, err
	}
	if t.HasConfig() {
		wc, err := t.Config()
		if err != nil {
			return TopicInfo{}, err
		}
		ti.Config.SyncPolicy, _ = wc.SyncPolicy()
		ti.Config.SegmentBytes = wc.SegmentBytes()
		ti.Config.RetentionBytes = wc.RetentionBytes()
		ti.Config.RetentionMs = wc.RetentionMs()
		ti.Config.MaxRecordBytes = wc.MaxRecordBytes()
		ti.Config.SegmentMs = wc.SegmentMs()
		ti.Config.MinInsyncReplicas = wc.MinInsyncReplicas()
		ti.Config.UncleanLeaderElection = wc.UncleanLeaderElection()
		ti.Config.LocalRetentionMs = wc.LocalRetentionMs()
		ti.Config.LocalRetentionBytes = wc.LocalRetentionBytes()
	}
	if !t.HasPartitionInfos() {
		return ti, nil
	}
	pl, err := t.PartitionInfos()
	if err != nil {
		return TopicInfo{}, err
	}
	ti.PartitionInfos = make([]PartitionInfo, pl.Len())
	for i := range ti.PartitionInfos {
		p := pl.At(i)
		ti.PartitionInfos[i] = PartitionInfo{
			Partition:      p.Partition(),
			LogStartOffset: p.LogStartOffset(),
			HighWatermark:  p.HighWatermark(),
			LogEndOffset:   p.LogEndOffset(),
			SizeBytes:      p.SizeBytes(),
			SegmentCount:   p.SegmentCount(),
			Err:            respErr(p.Error()),
			LeaderEpoch:    p.LeaderEpoch(),
		}
		pi := &ti.PartitionInfos[i]
		pi.Leader, _ = p.Leader()
		if pi.Replicas, err = textList(p.Replicas()); err != nil {
			return TopicInfo{}, err
		}
		if pi.ISR, err = textList(p.Isr()); err != nil {
			return TopicInfo{}, err
		}
		if p.HasRemote() {
			r, err := p.Remote()
			if err != nil {
				return TopicInfo{}, err
			}
			pi.Remote = &RemoteStats{LogStartOffset: r.LogStartOffset(), EndOffset: r.EndOffset(), Segments: r.Segments(),
				Bytes: r.Bytes(), LagSegments: r.LagSegments(), LagBytes: r.LagBytes()}
		}
	}
	return ti, nil
}

// textList reads a Cap'n Proto list of text (nil when empty).
func textList(l capnp.TextList, err error) ([]string, error) {
	if err != nil {
		return nil, err
	}
	var out []string
	for i := 0; i < l.Len(); i++ {
		s, err := l.At(i)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

// wireTopicID reads an optional topic id field of a response: absent or
// empty is the zero id (a server that predates ids); any length but 16
// wraps ErrUnexpectedResponse.
func wireTopicID(has bool, get func() ([]byte, error)) (api.TopicID, error) {
	if !has {
		return api.TopicID{}, nil
	}
	b, err := get()
	if err != nil {
		return api.TopicID{}, err
	}
	id, err := api.TopicIDFromBytes(b)
	if err != nil {
		return api.TopicID{}, fmt.Errorf("%w: %w", ErrUnexpectedResponse, err)
	}
	return id, nil
}
