package control

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/api/sqv1"
	"github.com/seedqueue/sq/engine"
)

// GroupAdmin is the consumer-group administration of the engine
// (*engine.Engine implements it). An Engine without it answers the Groups
// RPCs with Unimplemented.
type GroupAdmin interface {
	ListGroups() []engine.GroupSummary
	DescribeGroup(name string) (engine.GroupDescription, error)
	ResetOffsets(name, topic string, mode engine.ResetMode, value int64) ([]engine.OffsetCommit, error)
	DeleteGroup(name string) error
}

// groupsService implements sq.v1.Groups.
type groupsService struct {
	sqv1.UnimplementedGroupsServer
	s *Server
}

// localGrouper is implemented by a cluster node's engine (the cluster
// layer's broker): LocalGroups serves the groups this node coordinates
// from its own storage, never forwarding (docs/cluster.md).
type localGrouper interface {
	LocalGroups() engine.GroupService
}

// groupForwardedHeader is the request metadata key of a group call that
// another node forwarded to this one, the group's coordinator
// (docs/cluster.md): it is served by LocalGroups, never forwarded again.
const groupForwardedHeader = "sq-group-forwarded"

// groupEngine returns what serves the group calls of ctx's request: the
// engine, or its LocalGroups for a call forwarded by another node.
func (s *Server) groupEngine(ctx context.Context) any {
	if l, ok := s.eng().(localGrouper); ok && headerSet(ctx, groupForwardedHeader) {
		return l.LocalGroups()
	}
	return s.eng()
}

// groupOffsets is the offsets part of the group calls.
type groupOffsets interface {
	CommitOffsets(group, memberID string, generation int32, offsets []engine.OffsetCommit) ([]engine.OffsetCommit, error)
	FetchOffsets(group, topic string) ([]engine.OffsetCommit, error)
}

// offsetsEngine returns what serves the commits and offset fetches of
// ctx's request (groupEngine).
func (s *Server) offsetsEngine(ctx context.Context) groupOffsets {
	return s.groupEngine(ctx).(groupOffsets)
}

// headerSet reports whether the call carries header key with value "1".
func headerSet(ctx context.Context, key string) bool {
	md, ok := metadata.FromIncomingContext(ctx)
	if !ok {
		return false
	}
	for _, v := range md.Get(key) {
		if v == "1" {
			return true
		}
	}
	return false
}

func (s *Server) groupAdmin(ctx context.Context, what string) (GroupAdmin, error) {
	if g, ok := s.groupEngine(ctx).(GroupAdmin); ok {
		return g, nil
	}
	return nil, status.Errorf(codes.Unimplemented, "%s: consumer-group administration is not available in this build", what)
}

// groupNames returns the groups the engine lists (none when it cannot):
// in a cluster, those this node coordinates.
func (s *Server) groupNames() []string {
	g, ok := s.metricsGroups().(GroupAdmin)
	if !ok {
		return nil
	}
	var out []string
	for _, gs := range g.ListGroups() {
		out = append(out, gs.Group)
	}
	return out
}

// metricsGroups returns what the group metrics read: the engine, or in
// a cluster its LocalGroups, so that only a group's coordinator exports
// its lag.
func (s *Server) metricsGroups() any {
	if l, ok := s.eng().(localGrouper); ok {
		return l.LocalGroups()
	}
	return s.eng()
}

// ListGroups implements sq.v1.Groups.
func (g *groupsService) ListGroups(ctx context.Context, _ *sqv1.ListGroupsRequest) (*sqv1.ListGroupsResponse, error) {
	ga, err := g.s.groupAdmin(ctx, "ListGroups")
	if err != nil {
		return nil, err
	}
	out := &sqv1.ListGroupsResponse{}
	for _, gs := range ga.ListGroups() {
		out.Groups = append(out.Groups, &sqv1.GroupSummary{Group: gs.Group, State: gs.State, MemberCount: int32(gs.Members), Generation: gs.Generation})
	}
	return out, nil
}

// DescribeGroup implements sq.v1.Groups.
func (g *groupsService) DescribeGroup(ctx context.Context, req *sqv1.DescribeGroupRequest) (*sqv1.DescribeGroupResponse, error) {
	ga, err := g.s.groupAdmin(ctx, "DescribeGroup")
	if err != nil {
		return nil, err
	}
	if req.Group == "" {
		return nil, invalid("describe group without a group")
	}
	d, err := ga.DescribeGroup(req.Group)
	if err != nil {
		return nil, err
	}
	out := &sqv1.DescribeGroupResponse{Group: d.Summary.Group, State: d.Summary.State, Generation: d.Summary.Generation}
	for _, m := range d.Members {
		gm := &sqv1.GroupMember{MemberId: m.MemberID, ClientId: m.ClientID}
		for topic, parts := range m.Assignment {
			for _, p := range parts {
				gm.Assignment = append(gm.Assignment, &sqv1.TopicPartition{Topic: topic, Partition: int32(p)})
			}
		}
		out.Members = append(out.Members, gm)
	}
	for _, l := range d.Offsets {
		out.Offsets = append(out.Offsets, &sqv1.GroupOffset{Topic: l.Topic, Partition: int32(l.Partition),
			CommittedOffset: l.CommittedOffset, HighWatermark: l.HighWatermark, Lag: l.Lag,
			LogEndOffset: l.LogEndOffset, MemberId: l.MemberID, TopicId: l.TopicID.Bytes()})
	}
	return out, nil
}

// ResetOffsets implements sq.v1.Groups.
func (g *groupsService) ResetOffsets(ctx context.Context, req *sqv1.ResetOffsetsRequest) (*sqv1.ResetOffsetsResponse, error) {
	ga, err := g.s.groupAdmin(ctx, "ResetOffsets")
	if err != nil {
		return nil, err
	}
	if req.Group == "" {
		return nil, invalid("reset offsets without a group")
	}
	if err := engine.ValidateTopicName(req.Topic); err != nil {
		return nil, err
	}
	var mode engine.ResetMode
	switch req.To {
	case "earliest":
		mode = engine.ResetEarliest
	case "latest":
		mode = engine.ResetLatest
	case "offset":
		mode = engine.ResetOffset
		if req.Offset > 1<<62 {
			return nil, api.NewError(api.CodeInvalidRequest, "offset %d too large", req.Offset)
		}
	default:
		return nil, invalid("to %q: want earliest, latest or offset", req.To)
	}
	res, err := ga.ResetOffsets(req.Group, req.Topic, mode, int64(req.Offset))
	if err != nil {
		return nil, err
	}
	out := &sqv1.ResetOffsetsResponse{}
	for _, o := range res {
		out.Offsets = append(out.Offsets, &sqv1.GroupOffset{Topic: o.Topic, Partition: int32(o.Partition), CommittedOffset: int64(o.Offset), Metadata: o.Metadata,
			TopicId: o.TopicID.Bytes()})
	}
	return out, nil
}

// DeleteGroup implements sq.v1.Groups.
func (g *groupsService) DeleteGroup(ctx context.Context, req *sqv1.DeleteGroupRequest) (*sqv1.DeleteGroupResponse, error) {
	ga, err := g.s.groupAdmin(ctx, "DeleteGroup")
	if err != nil {
		return nil, err
	}
	if req.Group == "" {
		return nil, invalid("delete group without a group")
	}
	if err := ga.DeleteGroup(req.Group); err != nil {
		return nil, err
	}
	return &sqv1.DeleteGroupResponse{}, nil
}
