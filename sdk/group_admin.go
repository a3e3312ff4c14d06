package sdk

import (
	"context"

	"github.com/seedqueue/sq/api"
)

// GroupSummary describes one consumer group.
type GroupSummary struct {
	Group      string
	State      string // "empty", "stable" or "rebalancing"
	Members    uint32
	Generation int32
}

// GroupMember is one member of a group with the partitions it holds.
type GroupMember struct {
	MemberID   string
	ClientID   string
	Assignment Assignment
}

// GroupPartitionLag is one partition of a group's topics.
type GroupPartitionLag struct {
	Topic           string
	TopicID         api.TopicID // the topic's current id
	Partition       uint32
	CommittedOffset int64 // -1 when the group has none
	// LogEndOffset and HighWatermark are the partition's, read from its
	// leader; 0, not values, when Lag is -1.
	LogEndOffset  uint64
	HighWatermark uint64
	// Lag is the records left: HighWatermark - max(committed, log
	// start); HW - log start when none is committed. -1 when the
	// partition's statistics are unknown (in a cluster, its leader is
	// not available).
	Lag      int64
	MemberID string // holder, "" if none
}

// GroupDescription is DescribeGroup's answer.
type GroupDescription struct {
	Summary GroupSummary
	Members []GroupMember
	Offsets []GroupPartitionLag
}

// ResetMode selects the offset ResetOffsets sets.
type ResetMode uint16

// Reset modes.
const (
	ResetEarliest ResetMode = ResetMode(api.ResetMode_earliest) // the log start
	ResetLatest   ResetMode = ResetMode(api.ResetMode_latest)   // the high watermark
	ResetToOffset ResetMode = ResetMode(api.ResetMode_offset)   // a given offset
)

func summaryFromWire(w api.GroupSummary) GroupSummary {
	s := GroupSummary{Members: w.Members(), Generation: w.Generation()}
	s.Group, _ = w.Group()
	s.State, _ = w.State()
	return s
}

// ListGroups returns every group with members or committed offsets. A
// coordinator that is moving or still loading is retried with backoff
// within the request timeout.
func (c *Client) ListGroups(ctx context.Context) ([]GroupSummary, error) {
	var res []GroupSummary
	err := retryCoordinator(ctx, c.cfg.RequestTimeout, func() error {
		var err error
		res, err = c.listGroups(ctx)
		return err
	})
	return res, err
}

func (c *Client) listGroups(ctx context.Context) ([]GroupSummary, error) {
	r, err := c.roundTrip(ctx, 0, func(f api.Frame) error {
		_, err := f.NewListGroupsRequest()
		return err
	}, nil, 0)
	if err != nil {
		return nil, err
	}
	if err := expect(r.f, api.Frame_Which_listGroupsResponse); err != nil {
		return nil, err
	}
	resp, err := r.f.ListGroupsResponse()
	if err != nil {
		return nil, err
	}
	if err := respErr(resp.Error()); err != nil {
		return nil, err
	}
	l, err := resp.Groups()
	if err != nil {
		return nil, err
	}
	out := make([]GroupSummary, l.Len())
	for i := range out {
		out[i] = summaryFromWire(l.At(i))
	}
	return out, nil
}

// DescribeGroup returns the group's members with their partitions and,
// per partition, the committed offset, log end, high watermark and lag.
// api.ErrUnknownGroup: the group has no members and no committed offsets.
// A coordinator that is moving or still loading is retried with backoff
// within the request timeout.
func (c *Client) DescribeGroup(ctx context.Context, group string) (GroupDescription, error) {
	var res GroupDescription
	err := retryCoordinator(ctx, c.cfg.RequestTimeout, func() error {
		var err error
		res, err = c.describeGroup(ctx, group)
		return err
	})
	return res, err
}

func (c *Client) describeGroup(ctx context.Context, group string) (GroupDescription, error) {
	r, err := c.roundTrip(ctx, 0, func(f api.Frame) error {
		req, err := f.NewDescribeGroupRequest()
		if err != nil {
			return err
		}
		return req.SetGroup(group)
	}, nil, 0)
	if err != nil {
		return GroupDescription{}, err
	}
	if err := expect(r.f, api.Frame_Which_describeGroupResponse); err != nil {
		return GroupDescription{}, err
	}
	resp, err := r.f.DescribeGroupResponse()
	if err != nil {
		return GroupDescription{}, err
	}
	if err := respErr(resp.Error()); err != nil {
		return GroupDescription{}, err
	}
	var d GroupDescription
	if s, err := resp.Summary(); err == nil {
		d.Summary = summaryFromWire(s)
	}
	ml, err := resp.Members()
	if err != nil {
		return GroupDescription{}, err
	}
	for i := 0; i < ml.Len(); i++ {
		w := ml.At(i)
		m := GroupMember{}
		m.MemberID, _ = w.MemberId()
		m.ClientID, _ = w.ClientId()
		if l, err := w.Assignment(); err == nil {
			m.Assignment, _ = assignmentFromWire(l)
		}
		d.Members = append(d.Members, m)
	}
	ol, err := resp.Offsets()
	if err != nil {
		return GroupDescription{}, err
	}
	for i := 0; i < ol.Len(); i++ {
		w := ol.At(i)
		o := GroupPartitionLag{Partition: w.Partition(), CommittedOffset: w.CommittedOffset(),
			LogEndOffset: w.LogEndOffset(), HighWatermark: w.HighWatermark(), Lag: w.Lag()}
		o.Topic, _ = w.Topic()
		o.MemberID, _ = w.MemberId()
		o.TopicID, _ = wireTopicID(w.HasTopicId(), w.TopicId)
		d.Offsets = append(d.Offsets, o)
	}
	return d, nil
}

// ResetOffsets sets the group's committed offset of every partition of
// topic (mode ResetToOffset uses offset). The server refuses it with
// api.ErrInvalidRequest while the group has members, and an offset
// outside a partition's range with api.ErrOffsetOutOfRange.
func (c *Client) ResetOffsets(ctx context.Context, group, topic string, mode ResetMode, offset int64) ([]OffsetCommit, error) {
	r, err := c.roundTrip(ctx, 0, func(f api.Frame) error {
		req, err := f.NewResetOffsetsRequest()
		if err != nil {
			return err
		}
		req.SetMode(api.ResetMode(mode))
		req.SetValue(offset)
		if err := req.SetGroup(group); err != nil {
			return err
		}
		return req.SetTopic(topic)
	}, nil, 0)
	if err != nil {
		return nil, err
	}
	if err := expect(r.f, api.Frame_Which_resetOffsetsResponse); err != nil {
		return nil, err
	}
	resp, err := r.f.ResetOffsetsResponse()
	if err != nil {
		return nil, err
	}
	if err := respErr(resp.Error()); err != nil {
		return nil, err
	}
	l, err := resp.Offsets()
	if err != nil {
		return nil, err
	}
	return offsetsFromWire(l)
}

// DeleteGroup deletes a group and its committed offsets; refused with
// api.ErrInvalidRequest while the group has members, and
// api.ErrUnknownGroup for a group with no members and no committed offsets.
// A coordinator that is moving or still loading is retried with backoff
// within the request timeout.
func (c *Client) DeleteGroup(ctx context.Context, group string) error {
	return retryCoordinator(ctx, c.cfg.RequestTimeout, func() error { return c.deleteGroup(ctx, group) })
}

func (c *Client) deleteGroup(ctx context.Context, group string) error {
	r, err := c.roundTrip(ctx, 0, func(f api.Frame) error {
		req, err := f.NewDeleteGroupRequest()
		if err != nil {
			return err
		}
		return req.SetGroup(group)
	}, nil, 0)
	if err != nil {
		return err
	}
	if err := expect(r.f, api.Frame_Which_deleteGroupResponse); err != nil {
		return err
	}
	resp, err := r.f.DeleteGroupResponse()
	if err != nil {
		return err
	}
	return respErr(resp.Error())
}
