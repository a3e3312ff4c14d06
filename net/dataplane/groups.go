package dataplane

import (
	"sort"
	"time"

	"capnproto.org/go/capnp/v3"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/engine"
)

// GroupBroker is the consumer-group part of a broker (docs/architecture.md §6).
// *engine.Engine implements it. A Broker that does not answers the group
// frames with INVALID_REQUEST.
type GroupBroker interface {
	// JoinGroup adds or updates a member and returns its assignment.
	JoinGroup(group, memberID, clientID string, topics []string, sessionTimeout time.Duration) (engine.JoinResult, error)
	// Heartbeat keeps a member alive, records the partitions it owns (nil:
	// unchanged) and returns its assignment.
	Heartbeat(group, memberID string, generation int32, owned engine.GroupAssignment) (engine.JoinResult, error)
	// LeaveGroup removes a member.
	LeaveGroup(group, memberID string) error
	// ListGroups returns every group.
	ListGroups() []engine.GroupSummary
	// DescribeGroup returns members, assignment and per-partition lag.
	DescribeGroup(group string) (engine.GroupDescription, error)
	// ResetOffsets sets a memberless group's committed offsets of a topic.
	ResetOffsets(group, topic string, mode engine.ResetMode, value int64) ([]engine.OffsetCommit, error)
	// DeleteGroup removes a memberless group and its offsets.
	DeleteGroup(group string) error
}

var _ GroupBroker = (*engine.Engine)(nil)

// groupReq holds the decoded fields of a group frame.
type groupReq struct {
	group, memberID, clientID string
	topics                    []string
	sessionMs                 uint32
	generation                int32
	owned                     engine.GroupAssignment
	topic                     string
	mode                      engine.ResetMode
	value                     int64
}

// parseExt decodes the frames served by this file and subscribe.go. ok is
// false for a member neither serves.
func parseExt(f api.Frame, req *request) (ok bool, err error) {
	g := &groupReq{}
	switch f.Which() {
	case api.Frame_Which_joinGroupRequest:
		var r api.JoinGroupRequest
		if r, err = f.JoinGroupRequest(); err == nil {
			g.sessionMs = r.SessionTimeoutMs()
			err = firstErr(
				func() (e error) { g.group, e = r.Group(); return },
				func() (e error) { g.memberID, e = r.MemberId(); return },
				func() (e error) { g.clientID, e = r.ClientId(); return },
				func() (e error) { g.topics, e = textList(r.HasTopics(), r.Topics); return },
			)
		}
	case api.Frame_Which_heartbeatRequest:
		var r api.HeartbeatRequest
		if r, err = f.HeartbeatRequest(); err == nil {
			g.generation = r.Generation()
			err = firstErr(
				func() (e error) { g.group, e = r.Group(); return },
				func() (e error) { g.memberID, e = r.MemberId(); return },
				func() (e error) {
					if !r.HasOwned() {
						return nil
					}
					l, e := r.Owned()
					if e == nil {
						g.owned, e = assignmentFromWire(l)
					}
					return e
				},
			)
		}
	case api.Frame_Which_leaveGroupRequest:
		var r api.LeaveGroupRequest
		if r, err = f.LeaveGroupRequest(); err == nil {
			err = firstErr(
				func() (e error) { g.group, e = r.Group(); return },
				func() (e error) { g.memberID, e = r.MemberId(); return },
			)
		}
	case api.Frame_Which_listGroupsRequest:
		_, err = f.ListGroupsRequest()
	case api.Frame_Which_describeGroupRequest:
		var r api.DescribeGroupRequest
		if r, err = f.DescribeGroupRequest(); err == nil {
			g.group, err = r.Group()
		}
	case api.Frame_Which_resetOffsetsRequest:
		var r api.ResetOffsetsRequest
		if r, err = f.ResetOffsetsRequest(); err == nil {
			g.mode, g.value = engine.ResetMode(r.Mode()), r.Value()
			err = firstErr(
				func() (e error) { g.group, e = r.Group(); return },
				func() (e error) { g.topic, e = r.Topic(); return },
			)
		}
	case api.Frame_Which_deleteGroupRequest:
		var r api.DeleteGroupRequest
		if r, err = f.DeleteGroupRequest(); err == nil {
			g.group, err = r.Group()
		}
	default:
		return parseSubscribeFrames(f, req)
	}
	req.ext = g
	return true, err
}

func firstErr(fns ...func() error) error {
	for _, fn := range fns {
		if err := fn(); err != nil {
			return err
		}
	}
	return nil
}

func textList(has bool, get func() (capnp.TextList, error)) ([]string, error) {
	if !has {
		return nil, nil
	}
	l, err := get()
	if err != nil {
		return nil, err
	}
	if err := checkListLen(capnp.List(l), 8); err != nil {
		return nil, err
	}
	out := make([]string, 0, l.Len())
	for i := 0; i < l.Len(); i++ {
		s, err := l.At(i)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

func assignmentFromWire(l api.TopicPartitions_List) (engine.GroupAssignment, error) {
	if err := checkListLen(capnp.List(l), 8); err != nil {
		return nil, err
	}
	out := engine.GroupAssignment{}
	for i := 0; i < l.Len(); i++ {
		tp := l.At(i)
		t, err := tp.Topic()
		if err != nil {
			return nil, err
		}
		ps, err := tp.Partitions()
		if err != nil {
			return nil, err
		}
		if err := checkListLen(capnp.List(ps), 4); err != nil {
			return nil, err
		}
		list := make([]int, 0, ps.Len())
		for j := 0; j < ps.Len(); j++ {
			list = append(list, int(ps.At(j)))
		}
		out[t] = list
	}
	return out, nil
}

func encodeAssignment(a engine.GroupAssignment, newList func(int32) (api.TopicPartitions_List, error)) error {
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
			ps.Set(j, uint32(p))
		}
	}
	return nil
}

// dispatchExt serves the frames of this file and subscribe.go; ok false
// means req is none of them.
func (c *conn) dispatchExt(req request) (r *response, ok bool, err error) {
	switch req.kind {
	case api.Frame_Which_subscribeRequest, api.Frame_Which_grantCreditRequest, api.Frame_Which_unsubscribeRequest:
		r, err = c.dispatchSubscribe(req)
		return r, true, err
	case api.Frame_Which_joinGroupRequest, api.Frame_Which_heartbeatRequest, api.Frame_Which_leaveGroupRequest,
		api.Frame_Which_listGroupsRequest, api.Frame_Which_describeGroupRequest,
		api.Frame_Which_resetOffsetsRequest, api.Frame_Which_deleteGroupRequest:
	default:
		return nil, false, nil
	}
	gb, isGroup := c.srv.broker.(GroupBroker)
	if !isGroup {
		return c.buildError(req, api.NewError(api.CodeInvalidRequest, "this server has no group coordinator")), true, nil
	}
	g, _ := req.ext.(*groupReq)
	if g == nil {
		g = &groupReq{}
	}
	switch req.kind {
	case api.Frame_Which_joinGroupRequest:
		res, berr := gb.JoinGroup(g.group, g.memberID, g.clientID, g.topics, time.Duration(g.sessionMs)*time.Millisecond)
		r, err = c.joinResponse(req, res, berr)
	case api.Frame_Which_heartbeatRequest:
		res, berr := gb.Heartbeat(g.group, g.memberID, g.generation, g.owned)
		r, err = c.heartbeatResponse(req, res, berr)
	case api.Frame_Which_leaveGroupRequest:
		berr := gb.LeaveGroup(g.group, g.memberID)
		r, err = simpleResponse(req, berr, func(f api.Frame) (func() (api.WireError, error), error) {
			x, err := f.NewLeaveGroupResponse()
			return x.NewError, err
		})
	case api.Frame_Which_deleteGroupRequest:
		berr := gb.DeleteGroup(g.group)
		c.audit("group.delete", g.group, berr)
		r, err = simpleResponse(req, berr, func(f api.Frame) (func() (api.WireError, error), error) {
			x, err := f.NewDeleteGroupResponse()
			return x.NewError, err
		})
	case api.Frame_Which_listGroupsRequest:
		r, err = c.listGroupsResponse(req, gb.ListGroups())
	case api.Frame_Which_describeGroupRequest:
		d, berr := gb.DescribeGroup(g.group)
		r, err = c.describeGroupResponse(req, d, berr)
	case api.Frame_Which_resetOffsetsRequest:
		out, berr := gb.ResetOffsets(g.group, g.topic, g.mode, g.value)
		c.audit("group.reset-offsets", g.group+" "+g.topic, berr)
		r, err = c.resetOffsetsResponse(req, out, berr)
	}
	return r, true, err
}

func simpleResponse(req request, berr error, build func(api.Frame) (func() (api.WireError, error), error)) (*response, error) {
	r, f, err := newResponse(req)
	if err != nil {
		return nil, err
	}
	newErr, err := build(f)
	if err != nil {
		return r, err
	}
	return r, setErr(berr, newErr)
}

func durMs(d time.Duration) uint32 { return clampU32(int(d / time.Millisecond)) }

func (c *conn) joinResponse(req request, res engine.JoinResult, berr error) (*response, error) {
	r, f, err := newResponse(req)
	if err != nil {
		return nil, err
	}
	j, err := f.NewJoinGroupResponse()
	if err != nil {
		return r, err
	}
	if berr == nil {
		if err := j.SetMemberId(res.MemberID); err != nil {
			return r, err
		}
		j.SetGeneration(res.Generation)
		j.SetHeartbeatIntervalMs(durMs(res.HeartbeatInterval))
		j.SetSessionTimeoutMs(durMs(res.SessionTimeout))
		if err := encodeAssignment(res.Assignment, j.NewAssignment); err != nil {
			return r, err
		}
	}
	return r, setErr(berr, j.NewError)
}

func (c *conn) heartbeatResponse(req request, res engine.JoinResult, berr error) (*response, error) {
	r, f, err := newResponse(req)
	if err != nil {
		return nil, err
	}
	h, err := f.NewHeartbeatResponse()
	if err != nil {
		return r, err
	}
	if berr == nil {
		h.SetGeneration(res.Generation)
		h.SetHeartbeatIntervalMs(durMs(res.HeartbeatInterval))
		if err := encodeAssignment(res.Assignment, h.NewAssignment); err != nil {
			return r, err
		}
	}
	return r, setErr(berr, h.NewError)
}

func encodeSummary(w api.GroupSummary, s engine.GroupSummary) error {
	if err := w.SetGroup(s.Group); err != nil {
		return err
	}
	w.SetMembers(clampU32(s.Members))
	w.SetGeneration(s.Generation)
	return w.SetState(s.State)
}

func (c *conn) listGroupsResponse(req request, groups []engine.GroupSummary) (*response, error) {
	groups = c.describableGroups(groups)
	r, f, err := newResponse(req)
	if err != nil {
		return nil, err
	}
	lg, err := f.NewListGroupsResponse()
	if err != nil {
		return r, err
	}
	l, err := lg.NewGroups(int32(len(groups)))
	if err != nil {
		return r, err
	}
	for i, g := range groups {
		if err := encodeSummary(l.At(i), g); err != nil {
			return r, err
		}
	}
	return r, nil
}

func (c *conn) describeGroupResponse(req request, d engine.GroupDescription, berr error) (*response, error) {
	r, f, err := newResponse(req)
	if err != nil {
		return nil, err
	}
	dg, err := f.NewDescribeGroupResponse()
	if err != nil {
		return r, err
	}
	if berr != nil {
		return r, setErr(berr, dg.NewError)
	}
	s, err := dg.NewSummary()
	if err != nil {
		return r, err
	}
	if err := encodeSummary(s, d.Summary); err != nil {
		return r, err
	}
	ml, err := dg.NewMembers(int32(len(d.Members)))
	if err != nil {
		return r, err
	}
	for i, m := range d.Members {
		w := ml.At(i)
		if err := firstErr(
			func() error { return w.SetMemberId(m.MemberID) },
			func() error { return w.SetClientId(m.ClientID) },
			func() error { return encodeAssignment(m.Assignment, w.NewAssignment) },
		); err != nil {
			return r, err
		}
	}
	ol, err := dg.NewOffsets(int32(len(d.Offsets)))
	if err != nil {
		return r, err
	}
	for i, o := range d.Offsets {
		w := ol.At(i)
		w.SetPartition(uint32(o.Partition))
		w.SetCommittedOffset(o.CommittedOffset)
		w.SetLogEndOffset(o.LogEndOffset)
		w.SetHighWatermark(o.HighWatermark)
		w.SetLag(o.Lag)
		if err := firstErr(
			func() error { return w.SetTopic(o.Topic) },
			func() error { return w.SetMemberId(o.MemberID) },
			func() error { return w.SetTopicId(o.TopicID.Bytes()) },
		); err != nil {
			return r, err
		}
	}
	return r, nil
}

func (c *conn) resetOffsetsResponse(req request, out []engine.OffsetCommit, berr error) (*response, error) {
	r, f, err := newResponse(req)
	if err != nil {
		return nil, err
	}
	ro, err := f.NewResetOffsetsResponse()
	if err != nil {
		return r, err
	}
	if err := encodeOffsets(out, ro.NewOffsets); err != nil {
		return r, err
	}
	return r, setErr(berr, ro.NewError)
}
