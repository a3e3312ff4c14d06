package sdk

import (
	"context"
	"errors"
	"sort"
	"time"

	"capnproto.org/go/capnp/v3"
	"google.golang.org/grpc"

	"github.com/seedqueue/sq/api"
)

// Assignment is a set of partitions per topic, each list sorted.
type Assignment map[string][]uint32

// GroupMembership is the coordinator's answer to JoinGroup and Heartbeat
// (docs/architecture.md §6).
type GroupMembership struct {
	MemberID   string
	Generation int32
	// Assignment holds the partitions the member may consume now.
	Assignment        Assignment
	HeartbeatInterval time.Duration
	SessionTimeout    time.Duration // JoinGroup only: the timeout in force
}

// JoinGroup joins group (memberID "" on the first join) subscribed to
// topics. sessionTimeout 0 takes the server default (10 s); the server
// clamps others to its bounds. It fails with api.ErrFencedGeneration when
// memberID is no longer a member, api.ErrUnknownTopic, or as a request does.
func (c *Client) JoinGroup(ctx context.Context, group, memberID string, topics []string, sessionTimeout time.Duration) (GroupMembership, error) {
	r, err := c.roundTrip(ctx, 0, func(f api.Frame) error {
		req, err := f.NewJoinGroupRequest()
		if err != nil {
			return err
		}
		req.SetSessionTimeoutMs(uint32(min(sessionTimeout.Milliseconds(), int64(^uint32(0)))))
		if err := setTexts(req.NewTopics, topics); err != nil {
			return err
		}
		if err := req.SetGroup(group); err != nil {
			return err
		}
		if err := req.SetClientId(c.cfg.ClientID); err != nil {
			return err
		}
		return req.SetMemberId(memberID)
	}, nil, 0)
	if err != nil {
		return GroupMembership{}, err
	}
	if err := expect(r.f, api.Frame_Which_joinGroupResponse); err != nil {
		return GroupMembership{}, err
	}
	resp, err := r.f.JoinGroupResponse()
	if err != nil {
		return GroupMembership{}, err
	}
	if err := respErr(resp.Error()); err != nil {
		return GroupMembership{}, err
	}
	m := GroupMembership{
		Generation:        resp.Generation(),
		HeartbeatInterval: time.Duration(resp.HeartbeatIntervalMs()) * time.Millisecond,
		SessionTimeout:    time.Duration(resp.SessionTimeoutMs()) * time.Millisecond,
	}
	m.MemberID, _ = resp.MemberId()
	if resp.HasAssignment() {
		l, err := resp.Assignment()
		if err != nil {
			return GroupMembership{}, err
		}
		m.Assignment, err = assignmentFromWire(l)
		if err != nil {
			return GroupMembership{}, err
		}
	}
	return m, nil
}

// Heartbeat keeps a member alive and reports the partitions it still owns
// (revoked partitions it has released are left out). It returns the
// member's current assignment and generation; api.ErrFencedGeneration
// means the member was removed and must drop its partitions and join
// again.
func (c *Client) Heartbeat(ctx context.Context, group, memberID string, generation int32, owned Assignment) (GroupMembership, error) {
	r, err := c.roundTrip(ctx, 0, func(f api.Frame) error {
		req, err := f.NewHeartbeatRequest()
		if err != nil {
			return err
		}
		req.SetGeneration(generation)
		if err := req.SetGroup(group); err != nil {
			return err
		}
		if err := req.SetMemberId(memberID); err != nil {
			return err
		}
		return assignmentToWire(owned, req.NewOwned)
	}, nil, 0)
	if err != nil {
		return GroupMembership{}, err
	}
	if err := expect(r.f, api.Frame_Which_heartbeatResponse); err != nil {
		return GroupMembership{}, err
	}
	resp, err := r.f.HeartbeatResponse()
	if err != nil {
		return GroupMembership{}, err
	}
	if err := respErr(resp.Error()); err != nil {
		return GroupMembership{}, err
	}
	m := GroupMembership{MemberID: memberID, Generation: resp.Generation(),
		HeartbeatInterval: time.Duration(resp.HeartbeatIntervalMs()) * time.Millisecond}
	if resp.HasAssignment() {
		l, err := resp.Assignment()
		if err != nil {
			return GroupMembership{}, err
		}
		if m.Assignment, err = assignmentFromWire(l); err != nil {
			return GroupMembership{}, err
		}
	}
	return m, nil
}

// LeaveGroup removes a member at once, so that its partitions move without
// waiting for its session timeout.
func (c *Client) LeaveGroup(ctx context.Context, group, memberID string) error {
	r, err := c.roundTrip(ctx, 0, func(f api.Frame) error {
		req, err := f.NewLeaveGroupRequest()
		if err != nil {
			return err
		}
		if err := req.SetGroup(group); err != nil {
			return err
		}
		return req.SetMemberId(memberID)
	}, nil, 0)
	if err != nil {
		return err
	}
	if err := expect(r.f, api.Frame_Which_leaveGroupResponse); err != nil {
		return err
	}
	resp, err := r.f.LeaveGroupResponse()
	if err != nil {
		return err
	}
	return respErr(resp.Error())
}

// CommitGroupOffsets stores committed offsets as member memberID of
// generation generation (from its latest JoinGroup or Heartbeat). A stale
// generation or an unknown member fails the whole request with
// api.ErrFencedGeneration; per-entry errors are in the result, as for
// CommitOffsets.
func (c *Client) CommitGroupOffsets(ctx context.Context, group, memberID string, generation int32, offsets []OffsetCommit) ([]OffsetCommit, error) {
	return c.commitOffsets(ctx, group, memberID, generation, offsets)
}

func setTexts(newList func(int32) (capnp.TextList, error), in []string) error {
	l, err := newList(int32(len(in)))
	if err != nil {
		return err
	}
	for i, s := range in {
		if err := l.Set(i, s); err != nil {
			return err
		}
	}
	return nil
}

func assignmentFromWire(l api.TopicPartitions_List) (Assignment, error) {
	out := Assignment{}
	for i := 0; i < l.Len(); i++ {
		w := l.At(i)
		t, err := w.Topic()
		if err != nil {
			return nil, err
		}
		ps, err := w.Partitions()
		if err != nil {
			return nil, err
		}
		list := make([]uint32, ps.Len())
		for j := range list {
			list[j] = ps.At(j)
		}
		sort.Slice(list, func(a, b int) bool { return list[a] < list[b] })
		out[t] = list
	}
	return out, nil
}

func assignmentToWire(a Assignment, newList func(int32) (api.TopicPartitions_List, error)) error {
	topics := make([]string, 0, len(a))
	for t := range a {
		topics = append(topics, t)
	}
	sort.Strings(topics)
	l, err := newList(int32(len(topics)))
	if err != nil {
		return err
	}
	for i, t := range topics {
		w := l.At(i)
		if err := w.SetTopic(t); err != nil {
			return err
		}
		ps, err := w.NewPartitions(int32(len(a[t])))
		if err != nil {
			return err
		}
		for j, p := range a[t] {
			ps.Set(j, p)
		}
	}
	return nil
}

// Waits between the attempts of a group call whose coordinator is not
// available (retryCoordinator), doubling from the first to the last.
const (
	coordinatorRetryBackoff    = 50 * time.Millisecond
	coordinatorRetryBackoffMax = time.Second
)

// coordinatorRetriable reports whether a group call failed because the
// group's coordinator is not available for a moment: COORDINATOR_NOT_AVAILABLE
// (the coordinator node is down, or the node forwarding the call does not
// know the coordinator yet) or NO_QUORUM (a new group's coordinator cannot
// be recorded without a Raft majority). docs/cluster.md.
func coordinatorRetriable(err error) bool {
	return errors.Is(err, api.ErrCoordinatorNotAvailable) || errors.Is(err, api.ErrNoQuorum)
}

// retryCoordinator runs call, and runs it again while it fails with
// coordinatorRetriable, waiting coordinatorRetryBackoff doubling up to
// coordinatorRetryBackoffMax (with jitter) between attempts, within
// budget (the request timeout of one call) from the first attempt and
// while ctx lives. It returns call's last error. The consumers' joins,
// heartbeats and commits go through it, so a coordinator moving or
// restarting within the budget is not an error to the application.
func retryCoordinator(ctx context.Context, budget time.Duration, call func() error) error {
	deadline := time.Now().Add(budget)
	for n := 1; ; n++ {
		err := call()
		if err == nil || !coordinatorRetriable(err) {
			return err
		}
		d := backoff(n, coordinatorRetryBackoff, coordinatorRetryBackoffMax)
		if time.Now().Add(d).After(deadline) {
			return err
		}
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
}

// retryUnary is unary through retryCoordinator, with the request timeout
// as the budget.
func retryUnary[Req, Resp any](ctx context.Context, timeout time.Duration, call func(context.Context, Req, ...grpc.CallOption) (Resp, error), req Req) (Resp, error) {
	var resp Resp
	err := retryCoordinator(ctx, timeout, func() error {
		var err error
		resp, err = unary(ctx, timeout, call, req)
		return err
	})
	return resp, err
}
