package control

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/seedqueue/sq/api/sqv1"
)

// AlterTopicConfig implements sq.v1.Topics.
func (t *topicsService) AlterTopicConfig(context.Context, *sqv1.AlterTopicConfigRequest) (*sqv1.AlterTopicConfigResponse, error) {
	return nil, status.Error(codes.Unimplemented, "AlterTopicConfig: changing a topic's config is not available in this build")
}

// DeleteTopic implements sq.v1.Topics.
func (t *topicsService) DeleteTopic(context.Context, *sqv1.DeleteTopicRequest) (*sqv1.DeleteTopicResponse, error) {
	return nil, status.Error(codes.Unimplemented, "DeleteTopic: topic deletion is not available in this build")
}
