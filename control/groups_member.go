package control

import (
	"context"
	"sort"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/api/sqv1"
	"github.com/seedqueue/sq/engine"
)

// GroupCoordinator is the consumer-group membership of the engine
// (*engine.Engine implements it; docs/architecture.md §6). The Groups
// membership RPCs call it exactly as the Cap'n Proto data plane does, so a
// member over gRPC and a member over Cap'n Proto share one group with the
// same assignment, fencing and session timeout. An Engine without it
// answers those RPCs with Unimplemented.
type GroupCoordinator interface {
	// JoinGroup adds or updates a member and returns its assignment.
	JoinGroup(group, memberID, clientID string, topics []string, sessionTimeout time.Duration) (engine.JoinResult, error)
	// Heartbeat keeps a member alive, records the partitions it owns
	// (nil: unchanged) and returns its assignment.
	Heartbeat(group, memberID string, generation int32, owned engine.GroupAssignment) (engine.JoinResult, error)
	// LeaveGroup removes a member.
	LeaveGroup(group, memberID string) error
}

var _ GroupCoordinator = (*engine.Engine)(nil)

func (s *Server) coordinator(ctx context.Context, what string) (GroupCoordinator, error) {
	if g, ok := s.groupEngine(ctx).(GroupCoordinator); ok {
		return g, nil
	}
	return nil, status.Errorf(codes.Unimplemented, "%s: this server has no group coordinator", what)
}

// maxMs is the largest duration in milliseconds an int32 field carries.
const maxMs = 1<<31 - 1

func msField(d time.Duration) int32 { return int32(min(d.Milliseconds(), maxMs)) }

// assignmentToProto returns a's topics in name order, each with its
// partitions.
func assignmentToProto(a engine.GroupAssignment) []*sqv1.TopicPartitions {
	topics := make([]string, 0, len(a))
	for t := range a {
		topics = append(topics, t)
	}
	sort.Strings(topics)
	out := make([]*sqv1.TopicPartitions, 0, len(topics))
	for _, t := range topics {
		tp := &sqv1.TopicPartitions{Topic: t, Partitions: make([]int32, len(a[t]))}
		for i, p := range a[t] {
			tp.Partitions[i] = int32(p)
		}
		out = append(out, tp)
	}
	return out
}

// assignmentFromProto converts owned partitions; an empty list is nil
// (unchanged). A list of more than engine.MaxOwnedEntries topic entries
// plus partitions (checked before the list is built),
// or a partition outside 0..engine.MaxPartitions-1, is INVALID_REQUEST; a
// topic name that is not one is INVALID_TOPIC_NAME.
func assignmentFromProto(in []*sqv1.TopicPartitions) (engine.GroupAssignment, error) {
	if len(in) == 0 {
		return nil, nil
	}
	size := 0
	for _, tp := range in {
		size += 1 + len(tp.Partitions)
	}
	if size > engine.MaxOwnedEntries {
		return nil, invalid("owned list of %d topic entries and partitions: want at most %d", size, engine.MaxOwnedEntries)
	}
	out := engine.GroupAssignment{}
	for _, tp := range in {
		if err := engine.ValidateTopicName(tp.Topic); err != nil {
			return nil, err
		}
		list := make([]int, 0, len(tp.Partitions))
		for _, p := range tp.Partitions {
			if p < 0 || p >= engine.MaxPartitions {
				return nil, invalid("owned partition %d of %q: want 0 to %d", p, tp.Topic, engine.MaxPartitions-1)
			}
			list = append(list, int(p))
		}
		out[tp.Topic] = append(out[tp.Topic], list...)
	}
	return out, nil
}

// JoinGroup implements sq.v1.Groups.
func (g *groupsService) JoinGroup(ctx context.Context, req *sqv1.JoinGroupRequest) (*sqv1.JoinGroupResponse, error) {
	gc, err := g.s.coordinator(ctx, "JoinGroup")
	if err != nil {
		return nil, err
	}
	if req.SessionTimeoutMs < 0 {
		return nil, invalid("session timeout %d ms: want 0 (server default) or more", req.SessionTimeoutMs)
	}
	res, err := gc.JoinGroup(req.Group, req.MemberId, req.ClientId, req.Topics, time.Duration(req.SessionTimeoutMs)*time.Millisecond)
	if err != nil {
		return nil, err
	}
	return &sqv1.JoinGroupResponse{MemberId: res.MemberID, Generation: res.Generation, Assignment: assignmentToProto(res.Assignment),
		HeartbeatIntervalMs: msField(res.HeartbeatInterval), SessionTimeoutMs: msField(res.SessionTimeout)}, nil
}

// Heartbeat implements sq.v1.Groups.
func (g *groupsService) Heartbeat(ctx context.Context, req *sqv1.HeartbeatRequest) (*sqv1.HeartbeatResponse, error) {
	gc, err := g.s.coordinator(ctx, "Heartbeat")
	if err != nil {
		return nil, err
	}
	owned, err := assignmentFromProto(req.Owned)
	if err != nil {
		return nil, err
	}
	res, err := gc.Heartbeat(req.Group, req.MemberId, req.Generation, owned)
	if err != nil {
		return nil, err
	}
	return &sqv1.HeartbeatResponse{Generation: res.Generation, Assignment: assignmentToProto(res.Assignment),
		HeartbeatIntervalMs: msField(res.HeartbeatInterval)}, nil
}

// LeaveGroup implements sq.v1.Groups.
func (g *groupsService) LeaveGroup(ctx context.Context, req *sqv1.LeaveGroupRequest) (*sqv1.LeaveGroupResponse, error) {
	gc, err := g.s.coordinator(ctx, "LeaveGroup")
	if err != nil {
		return nil, err
	}
	if err := gc.LeaveGroup(req.Group, req.MemberId); err != nil {
		return nil, err
	}
	return &sqv1.LeaveGroupResponse{}, nil
}

// CommitGroupOffsets implements sq.v1.Groups: the engine's commit with the
// member id and generation, which it fences under the group's lock.
func (g *groupsService) CommitGroupOffsets(ctx context.Context, req *sqv1.CommitGroupOffsetsRequest) (*sqv1.CommitGroupOffsetsResponse, error) {
	s := g.s
	if req.Group == "" {
		return nil, invalid("commit without a group")
	}
	if req.MemberId == "" {
		return nil, invalid("group commit without a member id (Messaging.CommitOffsets commits as a standalone consumer)")
	}
	in, err := commitsFromProto(req.Offsets)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	res, err := s.offsetsEngine(ctx).CommitOffsets(req.Group, req.MemberId, req.Generation, in)
	s.commitSpan(ctx, req.Group, len(in), start, err)
	if err != nil {
		return nil, err
	}
	return &sqv1.CommitGroupOffsetsResponse{Offsets: offsetEntries(res)}, nil
}

// commitsFromProto converts the entries of a commit request.
func commitsFromProto(offsets []*sqv1.OffsetEntry) ([]engine.OffsetCommit, error) {
	in := make([]engine.OffsetCommit, len(offsets))
	for i, o := range offsets {
		if o.Partition < 0 {
			return nil, invalid("commit of %s partition %d: want 0 or more", o.Topic, o.Partition)
		}
		id, err := api.TopicIDFromBytes(o.TopicId)
		if err != nil {
			return nil, err
		}
		in[i] = engine.OffsetCommit{Topic: o.Topic, TopicID: id, Partition: int(o.Partition), Offset: o.Offset, Metadata: o.Metadata}
	}
	return in, nil
}
