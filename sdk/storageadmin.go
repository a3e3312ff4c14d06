package sdk

import (
	"context"
	"errors"
	"time"

	"github.com/seedqueue/sq/api"
)

// Special timestamps of ListOffsets (as Kafka's ListOffsets, KIP-79).
const (
	// ListLatest asks ListOffsets for the high watermark.
	ListLatest int64 = -1
	// ListEarliest asks ListOffsets for the log start offset.
	ListEarliest int64 = -2
)

// DeleteTopic deletes topic name and all its data. The name can be reused
// at once; consumers reading it get api.ErrUnknownTopic. It fails with
// api.ErrUnknownTopic when the topic does not exist, api.ErrInvalidTopicName,
// or ErrConnection.
func (c *Client) DeleteTopic(ctx context.Context, name string) error {
	r, err := c.roundTrip(ctx, 0, func(f api.Frame) error {
		req, err := f.NewDeleteTopicRequest()
		if err != nil {
			return err
		}
		return req.SetName(name)
	}, nil, 0)
	if err != nil {
		return err
	}
	if err := expect(r.f, api.Frame_Which_deleteTopicResponse); err != nil {
		return err
	}
	resp, err := r.f.DeleteTopicResponse()
	if err != nil {
		return err
	}
	return respErr(resp.Error())
}

// CreatePartitions grows topic name to total partitions (the new total,
// as Kafka's CreatePartitions, KIP-195) and returns the topic with every
// partition. Existing partitions keep their records and committed
// offsets; producers and consumers see the new partitions at their next
// metadata refresh, consumer groups at their next heartbeat. It fails with
// api.ErrInvalidConfig when total is not above the current count or is
// above the server's maximum (10000), api.ErrUnknownTopic,
// api.ErrInvalidTopicName, api.ErrInvalidRequest from a server that does
// not add partitions (test with errors.Is), or ErrConnection.
func (c *Client) CreatePartitions(ctx context.Context, name string, total uint32) (TopicInfo, error) {
	r, err := c.roundTrip(ctx, 0, func(f api.Frame) error {
		req, err := f.NewCreatePartitionsRequest()
		if err != nil {
			return err
		}
		req.SetTotalCount(total)
		return req.SetName(name)
	}, nil, 0)
	if err != nil {
		return TopicInfo{}, err
	}
	if err := expect(r.f, api.Frame_Which_createPartitionsResponse); err != nil {
		return TopicInfo{}, err
	}
	resp, err := r.f.CreatePartitionsResponse()
	if err != nil {
		return TopicInfo{}, err
	}
	if err := respErr(resp.Error()); err != nil {
		return TopicInfo{}, err
	}
	t, err := resp.Topic()
	if err != nil {
		return TopicInfo{}, err
	}
	return topicFromWire(t)
}

// ListOffsets looks up an offset of a partition by broker append time:
// timestamp is Unix ms, ListLatest (-1, the high watermark) or ListEarliest
// (-2, the log start offset). For a time it returns the first offset of the
// first batch the broker appended at or after it, and that batch's append
// time (Unix ms); when there is none, the high watermark and -1. Append
// times are the broker's, never the producer's record timestamps. It fails
// with api.ErrUnknownTopic, api.ErrUnknownPartition or ErrConnection.
func (c *Client) ListOffsets(ctx context.Context, topic string, partition uint32, timestamp int64) (offset uint64, appendTime int64, err error) {
	r, err := c.roundTrip(ctx, 0, func(f api.Frame) error {
		req, err := f.NewListOffsetsRequest()
		if err != nil {
			return err
		}
		req.SetPartition(partition)
		req.SetTimestamp(timestamp)
		return req.SetTopic(topic)
	}, nil, 0)
	if err != nil {
		return 0, -1, err
	}
	if err := expect(r.f, api.Frame_Which_listOffsetsResponse); err != nil {
		return 0, -1, err
	}
	resp, err := r.f.ListOffsetsResponse()
	if err != nil {
		return 0, -1, err
	}
	if err := respErr(resp.Error()); err != nil {
		return 0, -1, err
	}
	return resp.Offset(), resp.Timestamp(), nil
}

// StartAtTime starts at the first record the broker appended at or after
// t (millisecond resolution; times before 1970 count as 1970), looked up
// with ListOffsets when the partition is assigned: a partition with no
// record that late starts at its high watermark.
func StartAtTime(t time.Time) StartPosition {
	return StartPosition(max(t.UnixMilli(), 0) + 1)
}

// Time returns the time of a StartAtTime position in Unix ms and true, or
// 0 and false for the other positions.
func (s StartPosition) Time() (int64, bool) {
	if s > 0 {
		return int64(s) - 1, true
	}
	return 0, false
}

// timeStarts resolves a StartAtTime position for the partitions without a
// committed offset: the offset of each, by ListOffsets. It returns nil
// when StartFrom is not a time.
func (c *Consumer) timeStarts(ctx context.Context, partitions []uint32, committed map[uint32]uint64) (map[uint32]uint64, error) {
	ms, ok := c.cfg.StartFrom.Time()
	if !ok {
		return nil, nil
	}
	out := map[uint32]uint64{}
	for _, p := range partitions {
		if _, ok := committed[p]; ok {
			continue
		}
		off, ts, err := c.listOffsets(ctx, p, ms)
		if err != nil {
			return nil, err
		}
		c.log.Debug("sdk: start by time", "topic", c.cfg.Topic, "partition", p, "time_ms", ms, "offset", off, "append_time_ms", ts)
		out[p] = off
	}
	return out, nil
}

// listOffsets asks partition p's leader for the offset at time ms. After a
// NOT_LEADER it asks again, up to three times in all, the leader the
// answer named or the metadata, read again, names.
func (c *Consumer) listOffsets(ctx context.Context, p uint32, ms int64) (uint64, int64, error) {
	for attempt := 1; ; attempt++ {
		off, ts, err := c.core.client(ctx, c.cfg.Topic, p).ListOffsets(ctx, c.cfg.Topic, p, ms)
		if err == nil || attempt == 3 || !errors.Is(err, api.ErrNotLeader) {
			return off, ts, err
		}
		c.core.notePartitionError(c.cfg.Topic, p, err)
	}
}
