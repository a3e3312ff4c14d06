package gossip

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/api/sqv1"
	"github.com/seedqueue/sq/engine"
)

// remoteGroups is the group service of another node, the coordinator of
// the groups it is used for, reached with the gRPC Groups and Messaging
// calls; every call carries GroupForwardedHeader and is bounded by
// timeout. A catalog error of the coordinator comes back as the same
// *api.Error; a failure to reach it is COORDINATOR_NOT_AVAILABLE.
type remoteGroups struct {
	conn    grpc.ClientConnInterface
	node    string
	timeout time.Duration
}

var _ engine.GroupService = (*remoteGroups)(nil)

// ctx returns a forwarded call's context.
func (r *remoteGroups) ctx() (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(context.Background(), r.timeout)
	return metadata.AppendToOutgoingContext(ctx, GroupForwardedHeader, "1"), cancel
}

// callError converts a forwarded call's error: the *api.Error of a
// catalog status (code, message, range, leader), else
// COORDINATOR_NOT_AVAILABLE naming the node.
func (r *remoteGroups) callError(what string, err error) error {
	if err == nil {
		return nil
	}
	st, ok := status.FromError(err)
	if ok {
		for _, d := range st.Details() {
			info, ok := d.(*errdetails.ErrorInfo)
			if !ok || info.Domain != "seedqueue.io" {
				continue
			}
			c, cerr := strconv.Atoi(info.Metadata["code"])
			if cerr != nil {
				continue
			}
			code := api.Code(c)
			e := &api.Error{Code: code, Message: strings.TrimPrefix(st.Message(), code.String()+": ")}
			if s, ok := info.Metadata["range_start"]; ok {
				e.RangeStart, _ = strconv.ParseUint(s, 10, 64)
				e.RangeEnd, _ = strconv.ParseUint(info.Metadata["range_end"], 10, 64)
				e.HasRange = true
			}
			e.LeaderID, e.LeaderAddr = info.Metadata["leader_id"], info.Metadata["leader_address"]
			return e
		}
	}
	return api.WrapError(api.CodeCoordinatorNotAvailable, err, "%s at the group coordinator, node %s", what, r.node)
}

// entryError turns the text of a per-entry error ("NAME: message") back
// into a catalog error (UNKNOWN for a name this build does not know).
func entryError(text string) error {
	if text == "" {
		return nil
	}
	name, msg, _ := strings.Cut(text, ": ")
	for _, e := range api.Catalog {
		if e.Name != "" && e.Name == name {
			return api.NewError(e.Code, "%s", msg)
		}
	}
	return api.NewError(api.CodeUnknown, "%s", text)
}

// maxMs is the largest duration in milliseconds an int32 field carries.
const maxMs = 1<<31 - 1

func assignmentFrom(in []*sqv1.TopicPartitions) engine.GroupAssignment {
	out := engine.GroupAssignment{}
	for _, tp := range in {
		ps := make([]int, len(tp.Partitions))
		for i, p := range tp.Partitions {
			ps[i] = int(p)
		}
		out[tp.Topic] = append(out[tp.Topic], ps...)
	}
	return out
}

func joinResult(memberID string, generation int32, a []*sqv1.TopicPartitions, hbMs, sessionMs int32) engine.JoinResult {
	return engine.JoinResult{MemberID: memberID, Generation: generation, Assignment: assignmentFrom(a),
		HeartbeatInterval: time.Duration(hbMs) * time.Millisecond, SessionTimeout: time.Duration(sessionMs) * time.Millisecond}
}

// JoinGroup implements engine.GroupService.
func (r *remoteGroups) JoinGroup(group, memberID, clientID string, topics []string, sessionTimeout time.Duration) (engine.JoinResult, error) {
	ctx, cancel := r.ctx()
	defer cancel()
	resp, err := sqv1.NewGroupsClient(r.conn).JoinGroup(ctx, &sqv1.JoinGroupRequest{Group: group, MemberId: memberID, ClientId: clientID,
		Topics: topics, SessionTimeoutMs: int32(min(max(sessionTimeout.Milliseconds(), 0), maxMs))})
	if err != nil {
		return engine.JoinResult{}, r.callError("join", err)
	}
	return joinResult(resp.MemberId, resp.Generation, resp.Assignment, resp.HeartbeatIntervalMs, resp.SessionTimeoutMs), nil
}

// ownedTo converts a heartbeat's owned partitions. nil stays nil
// (unchanged); an empty, non-nil set, "owns nothing", is sent as one
// entry of the subscribed topic with no partitions, which the coordinator
// reads alike (the gRPC plane cannot send an empty non-nil list).
func ownedTo(owned engine.GroupAssignment, anyTopic string) []*sqv1.TopicPartitions {
	if owned == nil {
		return nil
	}
	topics := make([]string, 0, len(owned))
	for t := range owned {
		topics = append(topics, t)
	}
	sort.Strings(topics)
	out := make([]*sqv1.TopicPartitions, 0, len(topics))
	for _, t := range topics {
		tp := &sqv1.TopicPartitions{Topic: t, Partitions: make([]int32, len(owned[t]))}
		for i, p := range owned[t] {
			tp.Partitions[i] = int32(p)
		}
		out = append(out, tp)
	}
	if len(out) == 0 {
		out = append(out, &sqv1.TopicPartitions{Topic: anyTopic})
	}
	return out
}

// Heartbeat implements engine.GroupService.
func (r *remoteGroups) Heartbeat(group, memberID string, generation int32, owned engine.GroupAssignment) (engine.JoinResult, error) {
	ctx, cancel := r.ctx()
	defer cancel()
	// Any valid topic name carries "owns nothing": no partition of it is
	// listed.
	resp, err := sqv1.NewGroupsClient(r.conn).Heartbeat(ctx, &sqv1.HeartbeatRequest{Group: group, MemberId: memberID, Generation: generation,
		Owned: ownedTo(owned, "none")})
	if err != nil {
		return engine.JoinResult{}, r.callError("heartbeat", err)
	}
	res := joinResult(memberID, resp.Generation, resp.Assignment, resp.HeartbeatIntervalMs, 0)
	return res, nil
}

// LeaveGroup implements engine.GroupService.
func (r *remoteGroups) LeaveGroup(group, memberID string) error {
	ctx, cancel := r.ctx()
	defer cancel()
	_, err := sqv1.NewGroupsClient(r.conn).LeaveGroup(ctx, &sqv1.LeaveGroupRequest{Group: group, MemberId: memberID})
	return r.callError("leave", err)
}

func offsetsTo(in []engine.OffsetCommit) []*sqv1.OffsetEntry {
	out := make([]*sqv1.OffsetEntry, len(in))
	for i, o := range in {
		out[i] = &sqv1.OffsetEntry{Topic: o.Topic, Partition: int32(o.Partition), Offset: o.Offset, Metadata: o.Metadata}
		if !o.TopicID.IsZero() {
			out[i].TopicId = o.TopicID.Bytes()
		}
	}
	return out
}

func offsetsFrom(in []*sqv1.OffsetEntry) []engine.OffsetCommit {
	out := make([]engine.OffsetCommit, len(in))
	for i, o := range in {
		id, _ := api.TopicIDFromBytes(o.TopicId)
		out[i] = engine.OffsetCommit{Topic: o.Topic, TopicID: id, Partition: int(o.Partition), Offset: o.Offset, Metadata: o.Metadata, Err: entryError(o.Error)}
	}
	return out
}

// CommitOffsets implements engine.GroupService: a member's commit with
// Groups.CommitGroupOffsets, a standalone one (no member id, generation
// -1) with Messaging.CommitOffsets.
func (r *remoteGroups) CommitOffsets(group, memberID string, generation int32, offsets []engine.OffsetCommit) ([]engine.OffsetCommit, error) {
	ctx, cancel := r.ctx()
	defer cancel()
	switch {
	case memberID != "":
		resp, err := sqv1.NewGroupsClient(r.conn).CommitGroupOffsets(ctx, &sqv1.CommitGroupOffsetsRequest{Group: group, MemberId: memberID,
			Generation: generation, Offsets: offsetsTo(offsets)})
		if err != nil {
			return nil, r.callError("commit", err)
		}
		return offsetsFrom(resp.Offsets), nil
	case generation < 0:
		resp, err := sqv1.NewMessagingClient(r.conn).CommitOffsets(ctx, &sqv1.CommitOffsetsRequest{Group: group, Offsets: offsetsTo(offsets)})
		if err != nil {
			return nil, r.callError("commit", err)
		}
		return offsetsFrom(resp.Offsets), nil
	}
	return nil, api.NewError(api.CodeFencedGeneration, "group %q has no member %q", group, memberID)
}

// FetchOffsets implements engine.GroupService.
func (r *remoteGroups) FetchOffsets(group, topic string) ([]engine.OffsetCommit, error) {
	ctx, cancel := r.ctx()
	defer cancel()
	resp, err := sqv1.NewMessagingClient(r.conn).FetchOffsets(ctx, &sqv1.FetchOffsetsRequest{Group: group, Topic: topic})
	if err != nil {
		return nil, r.callError("fetch offsets", err)
	}
	return offsetsFrom(resp.Offsets), nil
}

// ListGroups implements engine.GroupService: the groups the node
// coordinates, none when it does not answer (listGroups has the error).
func (r *remoteGroups) ListGroups() []engine.GroupSummary {
	out, _ := r.listGroups()
	return out
}

func (r *remoteGroups) listGroups() ([]engine.GroupSummary, error) {
	ctx, cancel := r.ctx()
	defer cancel()
	resp, err := sqv1.NewGroupsClient(r.conn).ListGroups(ctx, &sqv1.ListGroupsRequest{})
	if err != nil {
		return nil, r.callError("list groups", err)
	}
	out := make([]engine.GroupSummary, len(resp.Groups))
	for i, g := range resp.Groups {
		out[i] = engine.GroupSummary{Group: g.Group, State: g.State, Members: int(g.MemberCount), Generation: g.Generation}
	}
	return out, nil
}

// DescribeGroup implements engine.GroupService.
func (r *remoteGroups) DescribeGroup(group string) (engine.GroupDescription, error) {
	ctx, cancel := r.ctx()
	defer cancel()
	resp, err := sqv1.NewGroupsClient(r.conn).DescribeGroup(ctx, &sqv1.DescribeGroupRequest{Group: group})
	if err != nil {
		return engine.GroupDescription{}, r.callError("describe group", err)
	}
	d := engine.GroupDescription{Summary: engine.GroupSummary{Group: resp.Group, State: resp.State, Members: len(resp.Members), Generation: resp.Generation}}
	for _, m := range resp.Members {
		info := engine.GroupMemberInfo{MemberID: m.MemberId, ClientID: m.ClientId, Assignment: engine.GroupAssignment{}}
		for _, tp := range m.Assignment {
			info.Assignment[tp.Topic] = append(info.Assignment[tp.Topic], int(tp.Partition))
		}
		for _, ps := range info.Assignment {
			sort.Ints(ps)
		}
		d.Members = append(d.Members, info)
	}
	for _, o := range resp.Offsets {
		id, _ := api.TopicIDFromBytes(o.TopicId)
		d.Offsets = append(d.Offsets, engine.GroupPartitionLag{Topic: o.Topic, TopicID: id, Partition: int(o.Partition),
			CommittedOffset: o.CommittedOffset, LogEndOffset: o.LogEndOffset, HighWatermark: o.HighWatermark, Lag: o.Lag, MemberID: o.MemberId})
	}
	return d, nil
}

// resetTo names a reset mode as the gRPC plane does.
func resetTo(mode engine.ResetMode) string {
	switch mode {
	case engine.ResetEarliest:
		return "earliest"
	case engine.ResetLatest:
		return "latest"
	case engine.ResetOffset:
		return "offset"
	}
	return fmt.Sprintf("mode-%d", int(mode))
}

// ResetOffsets implements engine.GroupService.
func (r *remoteGroups) ResetOffsets(group, topic string, mode engine.ResetMode, value int64) ([]engine.OffsetCommit, error) {
	if mode == engine.ResetOffset && value < 0 {
		return nil, api.NewError(api.CodeOffsetOutOfRange, "offset %d is negative", value)
	}
	ctx, cancel := r.ctx()
	defer cancel()
	resp, err := sqv1.NewGroupsClient(r.conn).ResetOffsets(ctx, &sqv1.ResetOffsetsRequest{Group: group, Topic: topic, To: resetTo(mode), Offset: uint64(max(value, 0))})
	if err != nil {
		return nil, r.callError("reset offsets", err)
	}
	out := make([]engine.OffsetCommit, len(resp.Offsets))
	for i, o := range resp.Offsets {
		id, _ := api.TopicIDFromBytes(o.TopicId)
		out[i] = engine.OffsetCommit{Topic: o.Topic, TopicID: id, Partition: int(o.Partition), Offset: uint64(max(o.CommittedOffset, 0)), Metadata: o.Metadata}
	}
	return out, nil
}

// DeleteGroup implements engine.GroupService.
func (r *remoteGroups) DeleteGroup(group string) error {
	ctx, cancel := r.ctx()
	defer cancel()
	_, err := sqv1.NewGroupsClient(r.conn).DeleteGroup(ctx, &sqv1.DeleteGroupRequest{Group: group})
	return r.callError("delete group", err)
}
