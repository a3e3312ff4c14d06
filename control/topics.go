package control

import (
	"context"
	"strings"

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
	}
}

func topicConfigTo(c engine.TopicConfig) *sqv1.TopicConfig {
	return &sqv1.TopicConfig{
		SyncPolicy: c.SyncPolicy, SegmentBytes: c.SegmentBytes, RetentionBytes: c.RetentionBytes,
		RetentionMs: c.RetentionMs, MaxRecordBytes: c.MaxRecordBytes, SegmentMs: c.SegmentMs,
	}
}

func (s *Server) topicInfoTo(t engine.TopicInfo) *sqv1.TopicInfo {
	out := &sqv1.TopicInfo{Name: t.Name, PartitionCount: int32(t.PartitionCount), Config: topicConfigTo(t.Config), TopicId: t.ID.Bytes()}
	for _, p := range t.Partitions {
		pi := &sqv1.PartitionInfo{
			Partition: int32(p.Partition), LogEndOffset: p.LogEndOffset, HighWatermark: p.HighWatermark,
			LogStartOffset: p.LogStartOffset, SizeBytes: p.SizeBytes, SegmentCount: int32(p.SegmentCount),
			Leader: s.opts.NodeID,
		}
		if p.Err != nil {
			pi.Error = strings.ToValidUTF8(api.AsError(p.Err).WireText(), "\uFFFD") // a proto3 string; a name may hold any bytes
		}
		out.Partitions = append(out.Partitions, pi)
	}
	return out
}

// checkConfig refuses negative values the engine would read as "unset"
// or "unlimited" only where that is not their meaning: -1 is unlimited for
// the retentions, anything lower is invalid.
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
	if req.ReplicationFactor < 0 || req.ReplicationFactor > 1 {
		return nil, api.NewError(api.CodeInvalidConfig, "replication_factor %d: only 1 is supported until replication exists", req.ReplicationFactor)
	}
	cfg := topicConfigFrom(req.Config)
	if err := checkConfig(cfg); err != nil {
		return nil, err
	}
	ti, err := t.s.eng().CreateTopic(req.Name, int(req.Partitions), cfg)
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
func (t *topicsService) DescribeTopic(_ context.Context, req *sqv1.DescribeTopicRequest) (*sqv1.DescribeTopicResponse, error) {
	ti, err := t.s.eng().DescribeTopic(req.Name)
	if err != nil {
		return nil, err
	}
	return &sqv1.DescribeTopicResponse{Topic: t.s.topicInfoTo(ti)}, nil
}
