package control

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/seedqueue/sq/api/sqv1"
)

// groupsService implements sq.v1.Groups.
type groupsService struct {
	sqv1.UnimplementedGroupsServer
	s *Server
}

// groupNames returns the groups the engine lists (none when it cannot).
func (s *Server) groupNames() []string { return nil }

func groupsUnavailable(what string) error {
	return status.Errorf(codes.Unimplemented, "%s: consumer-group administration is not available in this build", what)
}

// ListGroups implements sq.v1.Groups.
func (g *groupsService) ListGroups(context.Context, *sqv1.ListGroupsRequest) (*sqv1.ListGroupsResponse, error) {
	return nil, groupsUnavailable("ListGroups")
}

// DescribeGroup implements sq.v1.Groups.
func (g *groupsService) DescribeGroup(context.Context, *sqv1.DescribeGroupRequest) (*sqv1.DescribeGroupResponse, error) {
	return nil, groupsUnavailable("DescribeGroup")
}

// ResetOffsets implements sq.v1.Groups.
func (g *groupsService) ResetOffsets(context.Context, *sqv1.ResetOffsetsRequest) (*sqv1.ResetOffsetsResponse, error) {
	return nil, groupsUnavailable("ResetOffsets")
}

// DeleteGroup implements sq.v1.Groups.
func (g *groupsService) DeleteGroup(context.Context, *sqv1.DeleteGroupRequest) (*sqv1.DeleteGroupResponse, error) {
	return nil, groupsUnavailable("DeleteGroup")
}
