package control

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/api/sqv1"
	"github.com/seedqueue/sq/engine"
)

// TopicDeleter is implemented by engines that delete topics
// (*engine.Engine does).
type TopicDeleter interface {
	DeleteTopic(name string) error
}

// TopicAlterer is implemented by engines that change a topic's config
// (*engine.Engine does).
type TopicAlterer interface {
	AlterTopicConfig(name string, change engine.TopicConfigChange) (engine.TopicInfo, error)
}

// AlterTopicConfig implements sq.v1.Topics: the fields set in the request
// change, the others keep their value. The request is checked (name,
// values) before the engine is asked; segment_bytes is fixed at create.
func (t *topicsService) AlterTopicConfig(_ context.Context, req *sqv1.AlterTopicConfigRequest) (*sqv1.AlterTopicConfigResponse, error) {
	if err := engine.ValidateTopicName(req.Name); err != nil {
		return nil, err
	}
	cfg := engine.TopicConfig{SyncPolicy: req.GetSyncPolicy(), SegmentBytes: req.GetSegmentBytes(), RetentionBytes: req.GetRetentionBytes(),
		RetentionMs: req.GetRetentionMs(), MaxRecordBytes: req.GetMaxRecordBytes(), SegmentMs: req.GetSegmentMs(),
		MinInsyncReplicas: req.GetMinInsyncReplicas(), LocalRetentionMs: req.GetLocalRetentionMs(), LocalRetentionBytes: req.GetLocalRetentionBytes()}
	if err := checkConfig(cfg); err != nil {
		return nil, err
	}
	if req.SyncPolicy != nil {
		if _, err := engine.ParseSyncPolicy(*req.SyncPolicy); err != nil {
			return nil, api.WrapError(api.CodeInvalidConfig, err, "")
		}
	}
	if err := checkBareMinInsync(t.s.eng(), req.GetMinInsyncReplicas()); err != nil {
		return nil, err
	}
	a, ok := t.s.eng().(TopicAlterer)
	if !ok {
		if _, err := t.s.eng().DescribeTopic(req.Name); err != nil {
			return nil, err
		}
		return nil, status.Error(codes.Unimplemented, "AlterTopicConfig: changing a topic's config is not available in this build")
	}
	ti, err := a.AlterTopicConfig(req.Name, engine.TopicConfigChange{SyncPolicy: req.SyncPolicy, SegmentBytes: req.SegmentBytes,
		RetentionBytes: req.RetentionBytes, RetentionMs: req.RetentionMs, MaxRecordBytes: req.MaxRecordBytes, SegmentMs: req.SegmentMs,
		MinInsyncReplicas: req.MinInsyncReplicas, UncleanLeaderElection: req.UncleanLeaderElection,
		LocalRetentionMs: req.LocalRetentionMs, LocalRetentionBytes: req.LocalRetentionBytes})
	if err != nil {
		return nil, err
	}
	return &sqv1.AlterTopicConfigResponse{Topic: t.s.topicInfoTo(ti)}, nil
}

// DeleteTopic implements sq.v1.Topics.
func (t *topicsService) DeleteTopic(_ context.Context, req *sqv1.DeleteTopicRequest) (*sqv1.DeleteTopicResponse, error) {
	d, ok := t.s.eng().(TopicDeleter)
	if !ok {
		return nil, status.Error(codes.Unimplemented, "DeleteTopic: topic deletion is not available in this build")
	}
	if err := engine.ValidateTopicName(req.Name); err != nil {
		return nil, err
	}
	if err := d.DeleteTopic(req.Name); err != nil {
		return nil, err
	}
	return &sqv1.DeleteTopicResponse{}, nil
}

// TopicRestorer serves a topic's history from tiered storage on a node
// that does not hold it (sq-server sets it with --s3-bucket;
// docs/tiering.md). id is zero when the request names none.
type TopicRestorer func(ctx context.Context, name string, id api.TopicID) (engine.TopicInfo, error)

// SetTopicRestorer installs r as RestoreTopic's implementation (nil: the
// RPC answers FailedPrecondition, tiered storage is off).
func (s *Server) SetTopicRestorer(r TopicRestorer) {
	if r == nil {
		s.restorer.Store(nil)
		return
	}
	s.restorer.Store(&r)
}

// RestoreTopic implements sq.v1.Topics.
func (t *topicsService) RestoreTopic(ctx context.Context, req *sqv1.RestoreTopicRequest) (*sqv1.RestoreTopicResponse, error) {
	if err := engine.ValidateTopicName(req.Name); err != nil {
		return nil, err
	}
	var id api.TopicID
	if req.TopicId != "" {
		var err error
		if id, err = api.ParseTopicID(req.TopicId); err != nil {
			return nil, api.NewError(api.CodeInvalidRequest, "topic_id %q: %v", req.TopicId, err)
		}
	}
	r := t.s.restorer.Load()
	if r == nil {
		return nil, status.Error(codes.FailedPrecondition, "tiered storage is off on this node (start sq-server with --s3-bucket)")
	}
	ti, err := (*r)(ctx, req.Name, id)
	if err != nil {
		return nil, err
	}
	return &sqv1.RestoreTopicResponse{Topic: t.s.topicInfoTo(ti)}, nil
}

// TopicPartitioner is implemented by engines that add partitions to a
// topic (*engine.Engine does).
type TopicPartitioner interface {
	CreatePartitions(name string, total int) (engine.TopicInfo, error)
}

// CreatePartitions implements sq.v1.Topics: the topic grows to
// total_count partitions (KIP-195). The name is checked before the engine
// is asked; the engine checks the count against the topic's current one
// and the maximum (INVALID_CONFIG naming them), as on the data plane.
func (t *topicsService) CreatePartitions(_ context.Context, req *sqv1.CreatePartitionsRequest) (*sqv1.CreatePartitionsResponse, error) {
	if err := engine.ValidateTopicName(req.Name); err != nil {
		return nil, err
	}
	p, ok := t.s.eng().(TopicPartitioner)
	if !ok {
		if _, err := t.s.eng().DescribeTopic(req.Name); err != nil {
			return nil, err
		}
		return nil, status.Error(codes.Unimplemented, "CreatePartitions: adding partitions is not available in this build")
	}
	ti, err := p.CreatePartitions(req.Name, int(req.TotalCount))
	if err != nil {
		return nil, err
	}
	return &sqv1.CreatePartitionsResponse{Topic: t.s.topicInfoTo(ti)}, nil
}
