package control

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/seedqueue/sq/api/sqv1"
	"github.com/seedqueue/sq/engine"
)

// TopicDeleter is implemented by engines that delete topics
// (*engine.Engine does).
type TopicDeleter interface {
	DeleteTopic(name string) error
}

// AlterTopicConfig implements sq.v1.Topics.
func (t *topicsService) AlterTopicConfig(context.Context, *sqv1.AlterTopicConfigRequest) (*sqv1.AlterTopicConfigResponse, error) {
	return nil, status.Error(codes.Unimplemented, "AlterTopicConfig: changing a topic's config is not available in this build")
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
