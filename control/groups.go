package control

import (
	"context"

	"google.golang.org/grpc/codes"
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

func (s *Server) groupAdmin(what string) (GroupAdmin, error) {
	if g, ok := s.eng().(GroupAdmin); ok {
		return g, nil
	}
	return nil, status.Errorf(codes.Unimplemented, "%s: consumer-group administration is not available in this build", what)
}

// groupNames returns the groups the engine lists (none when it cannot).
func (s *Server) groupNames() []string {
	g, ok := s.eng().(GroupAdmin)
	if !ok {
		return nil
	}
	var out []string
	for _, gs := range g.ListGroups() {
		out = append(out, gs.Group)
	}
	return out
}

// ListGroups implements sq.v1.Groups.
func (g *groupsService) ListGroups(context.Context, *sqv1.ListGroupsRequest) (*sqv1.ListGroupsResponse, error) {
	ga, err := g.s.groupAdmin("ListGroups")
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
func (g *groupsService) DescribeGroup(_ context.Context, req *sqv1.DescribeGroupRequest) (*sqv1.DescribeGroupResponse, error) {
	ga, err := g.s.groupAdmin("DescribeGroup")
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
func (g *groupsService) ResetOffsets(_ context.Context, req *sqv1.ResetOffsetsRequest) (*sqv1.ResetOffsetsResponse, error) {
	ga, err := g.s.groupAdmin("ResetOffsets")
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
func (g *groupsService) DeleteGroup(_ context.Context, req *sqv1.DeleteGroupRequest) (*sqv1.DeleteGroupResponse, error) {
	ga, err := g.s.groupAdmin("DeleteGroup")
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
