package control

import (
	"context"
	"strings"

	"google.golang.org/grpc/metadata"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/api/sqv1"
	"github.com/seedqueue/sq/engine"
)

// topicsService implements sq.v1.Topics.
type topicsService struct {
	sqv1.UnimplementedTopicsServer
	s *Server
}

// topicConfigFrom converts a request config (nil: every default).
func topicConfigFrom(c *sqv1.TopicConfig) engine.TopicConfig {
	if c == nil {
		return engine.TopicConfig{}
	}
	return engine.TopicConfig{
		SyncPolicy: c.SyncPolicy, SegmentBytes: c.SegmentBytes, RetentionBytes: c.RetentionBytes,
		RetentionMs: c.RetentionMs, MaxRecordBytes: c.MaxRecordBytes, SegmentMs: c.SegmentMs,
		MinInsyncReplicas: c.MinInsyncReplicas, UncleanLeaderElection: c.UncleanLeaderElection,
		LocalRetentionMs: c.LocalRetentionMs, LocalRetentionBytes: c.LocalRetentionBytes,
	}
}

func topicConfigTo(c engine.TopicConfig) *sqv1.TopicConfig {
	return &sqv1.TopicConfig{
		SyncPolicy: c.SyncPolicy, SegmentBytes: c.SegmentBytes, RetentionBytes: c.RetentionBytes,
		RetentionMs: c.RetentionMs, MaxRecordBytes: c.MaxRecordBytes, SegmentMs: c.SegmentMs,
		MinInsyncReplicas: c.MinInsyncReplicas, UncleanLeaderElection: c.UncleanLeaderElection,
		LocalRetentionMs: c.LocalRetentionMs, LocalRetentionBytes: c.LocalRetentionBytes,
	}
}

// topicInfoTo converts an engine topic with its placement: the
// replication factor and each partition's leader, leader epoch, replicas
// and in-sync replicas as the cluster layer filled them in. A bare engine
// leaves them empty: its replication factor reads as 1 and this node leads
// every partition, its only replica.
func (s *Server) topicInfoTo(t engine.TopicInfo) *sqv1.TopicInfo {
	out := &sqv1.TopicInfo{Name: t.Name, PartitionCount: int32(t.PartitionCount), Config: topicConfigTo(t.Config), TopicId: t.ID.Bytes(),
		ReplicationFactor: max(t.Config.ReplicationFactor, 1)}
	for _, p := range t.Partitions {
		pi := &sqv1.PartitionInfo{
			Partition: int32(p.Partition), LogEndOffset: p.LogEndOffset, HighWatermark: p.HighWatermark,
			LogStartOffset: p.LogStartOffset, SizeBytes: p.SizeBytes, SegmentCount: int32(p.SegmentCount),
			Leader: p.Leader, LeaderEpoch: p.LeaderEpoch, Replicas: p.Replicas, Isr: p.ISR,
		}
		if r := p.Remote; r != nil {
			pi.Remote = &sqv1.RemoteLogStats{LogStartOffset: r.LogStartOffset, EndOffset: r.EndOffset, Segments: int32(r.Segments),
				Bytes: r.Bytes, LagSegments: int32(r.LagSegments), LagBytes: r.LagBytes}
		}
		if pi.Leader == "" && len(p.Replicas) == 0 {
			pi.Leader, pi.Replicas, pi.Isr = s.opts.NodeID, []string{s.opts.NodeID}, []string{s.opts.NodeID}
		}
		if p.Err != nil {
			pi.Error = strings.ToValidUTF8(api.AsError(p.Err).WireText(), "\uFFFD") // a proto3 string; a name may hold any bytes
		}
		out.Partitions = append(out.Partitions, pi)
	}
	return out
}

// localDescriber is implemented by a cluster node's engine (the cluster
// layer's broker): DescribeLocal describes a topic with this node's own
// statistics only.
type localDescriber interface {
	DescribeLocal(name string) (engine.TopicInfo, error)
}

// describeLocalHeader is the request metadata key with which one node asks
// another for its own statistics of a topic while describing it
// (docs/cluster.md): the answer never asks further nodes.
const describeLocalHeader = "sq-describe-local"

// describeLocal reports whether the call carries describeLocalHeader "1".
func describeLocal(ctx context.Context) bool {
	md, ok := metadata.FromIncomingContext(ctx)
	if !ok {
		return false
	}
	v := md.Get(describeLocalHeader)
	return len(v) == 1 && v[0] == "1"
}

// clusterNodes is implemented by an engine that is part of a cluster (the
// cluster layer's broker): it lists the cluster's nodes. An engine without
// it is a bare single node.
type clusterNodes interface {
	Nodes() []api.Node
}

// checkBareReplicationFactor refuses, on a bare engine (one that does not
// implement clusterNodes), a replication factor above 1 with
// INVALID_CONFIG: a single node outside a cluster holds one replica of
// each partition. In a cluster the cluster layer checks the factor against
// its nodes (docs/cluster.md). The data plane makes the same check.
func checkBareReplicationFactor(eng any, rf int32) error {
	if _, ok := eng.(clusterNodes); ok || rf <= 1 {
		return nil
	}
	return api.NewError(api.CodeInvalidConfig, "replication factor %d exceeds the 1 node(s) of this cluster", rf)
}

// checkBareMinInsync refuses, on a bare engine, a min.insync.replicas
// above 1 with INVALID_CONFIG: its one replica cannot make a larger
// in-sync set. In a cluster the cluster layer checks it against the
// topic's replication factor.
func checkBareMinInsync(eng any, n int32) error {
	if _, ok := eng.(clusterNodes); ok || n <= 1 {
		return nil
	}
	return api.NewError(api.CodeInvalidConfig, "min_insync_replicas %d exceeds the replication factor 1 of a single node", n)
}

// checkConfig refuses negative values the engine would read as "unset"
// or "unlimited" only where that is not their meaning: -1 is unlimited for
// the retentions, anything lower is invalid, except -2 for the local
// retentions (the same as the whole log's). The engine checks the local
// retentions against the whole log's.
func checkConfig(c engine.TopicConfig) error {
	switch {
	case c.RetentionMs < -1:
		return api.NewError(api.CodeInvalidConfig, "retention_ms %d: want -1 (unlimited), 0 (default) or a positive duration in ms", c.RetentionMs)
	case c.RetentionBytes < -1:
		return api.NewError(api.CodeInvalidConfig, "retention_bytes %d: want -1 (unlimited), 0 (default) or a positive size", c.RetentionBytes)
	case c.SegmentBytes < 0:
		return api.NewError(api.CodeInvalidConfig, "segment_bytes %d: want 0 (default) or a positive size", c.SegmentBytes)
	case c.SegmentMs < 0:
		return api.NewError(api.CodeInvalidConfig, "segment_ms %d: want 0 (default) or a positive duration in ms", c.SegmentMs)
	case c.MaxRecordBytes < 0:
		return api.NewError(api.CodeInvalidConfig, "max_record_bytes %d: want 0 (default) or a positive size", c.MaxRecordBytes)
	case c.MinInsyncReplicas < 0:
		return api.NewError(api.CodeInvalidConfig, "min_insync_replicas %d: want 0 (default) or 1 to the replication factor", c.MinInsyncReplicas)
	case c.LocalRetentionMs < engine.LocalRetentionDefault:
		return api.NewError(api.CodeInvalidConfig, "local_retention_ms %d: want -2 (the same as retention_ms), -1 (unlimited), 0 (default) or a positive duration in ms", c.LocalRetentionMs)
	case c.LocalRetentionBytes < engine.LocalRetentionDefault:
		return api.NewError(api.CodeInvalidConfig, "local_retention_bytes %d: want -2 (the same as retention_bytes), -1 (unlimited), 0 (default) or a positive size", c.LocalRetentionBytes)
	}
	return nil
}

// CreateTopic implements sq.v1.Topics.
func (t *topicsService) CreateTopic(_ context.Context, req *sqv1.CreateTopicRequest) (*sqv1.CreateTopicResponse, error) {
	if err := engine.ValidateTopicName(req.Name); err != nil {
		return nil, err
	}
	if req.Partitions < 1 || req.Partitions > engine.MaxPartitions {
		return nil, api.NewError(api.CodeInvalidConfig, "partitions %d: want 1 to %d", req.Partitions, engine.MaxPartitions)
	}
	if req.ReplicationFactor < 0 {
		return nil, api.NewError(api.CodeInvalidConfig, "replication_factor %d: want 0 (the server's default) or at least 1", req.ReplicationFactor)
	}
	cfg := topicConfigFrom(req.Config)
	cfg.ReplicationFactor = req.ReplicationFactor
	if err := checkConfig(cfg); err != nil {
		return nil, err
	}
	eng := t.s.eng()
	if err := checkBareReplicationFactor(eng, cfg.ReplicationFactor); err != nil {
		return nil, err
	}
	if err := checkBareMinInsync(eng, cfg.MinInsyncReplicas); err != nil {
		return nil, err
	}
	ti, err := eng.CreateTopic(req.Name, int(req.Partitions), cfg)
	if err != nil {
		return nil, err
	}
	return &sqv1.CreateTopicResponse{Topic: t.s.topicInfoTo(ti)}, nil
}

// ListTopics implements sq.v1.Topics.
func (t *topicsService) ListTopics(context.Context, *sqv1.ListTopicsRequest) (*sqv1.ListTopicsResponse, error) {
	out := &sqv1.ListTopicsResponse{}
	for _, ti := range t.s.eng().ListTopics() {
		out.Topics = append(out.Topics, t.s.topicInfoTo(ti))
	}
	return out, nil
}

// DescribeTopic implements sq.v1.Topics.
func (t *topicsService) DescribeTopic(ctx context.Context, req *sqv1.DescribeTopicRequest) (*sqv1.DescribeTopicResponse, error) {
	describe := t.s.eng().DescribeTopic
	if l, ok := t.s.eng().(localDescriber); ok && describeLocal(ctx) {
		describe = l.DescribeLocal
	}
	ti, err := describe(req.Name)
	if err != nil {
		return nil, err
	}
	return &sqv1.DescribeTopicResponse{Topic: t.s.topicInfoTo(ti)}, nil
}
