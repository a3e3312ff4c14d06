package sdk

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/api/batch"
)

// Durability is what a publish acknowledgement guarantees (docs/architecture.md §3.3).
type Durability uint8

const (
	// DurabilityNone: not known to be written (never in a successful Ack).
	DurabilityNone Durability = iota
	// DurabilityWritten: written to the log file (page cache); lost on
	// power loss. Topics with sync policy "none" or an interval.
	DurabilityWritten
	// DurabilitySynced: fdatasync'd; survives power loss. Sync policy
	// "every-batch".
	DurabilitySynced
	// DurabilityReplicated: held by every member of the partition's
	// in-sync replica set, at least min.insync.replicas of them, each
	// under its own sync policy (docs/cluster.md): a publish with AcksAll
	// to a replicated partition. Ack.Replicas says how many held it.
	DurabilityReplicated
)

// String returns "none", "written", "synced" or "replicated".
func (d Durability) String() string {
	switch d {
	case DurabilityWritten:
		return "written"
	case DurabilitySynced:
		return "synced"
	case DurabilityReplicated:
		return "replicated"
	default:
		return "none"
	}
}

// Header is one record header: a key (UTF-8 by convention, as Kafka's) and
// an opaque value. Both planes carry the key's bytes unchanged, even when
// they are not UTF-8 (bytes on gRPC, Text on Cap'n Proto).
type Header struct {
	Key   string
	Value []byte
}

// Message is one record read from a partition. Key is nil when the record
// has no key; Value is never nil (an empty value is an empty slice).
//
// Key, Value and header values belong to the caller: they stay valid and
// unchanged after Fetch or Poll returns, and the SDK never reuses them.
// They are not copied one by one: every record of one fetch response (or
// push) points into that response's records buffer, one allocation read
// from the network and used by nothing else (capacity clipped to each
// slice's length, so an append copies). Holding any Message of a response
// keeps the whole buffer (up to the fetch's MaxBytes, 1 MiB by default)
// reachable; copy the bytes to keep a few records of a large response for
// long.
type Message struct {
	Topic     string
	Partition uint32
	Offset    uint64
	Timestamp int64 // Unix ms, set by the producer
	Key       []byte
	Value     []byte
	Headers   []Header
}

// PublishResult is the server's acknowledgement of one batch.
type PublishResult struct {
	Topic         string
	Partition     uint32
	BaseOffset    uint64 // offset of the batch's first record; record i has BaseOffset+i
	RecordCount   uint32
	LogAppendTime int64 // Unix ms, broker clock
	Durability    Durability
	// Replicas is how many replicas held the batch when it was
	// acknowledged: the in-sync set's size for DurabilityReplicated, else
	// 1 (also from a server that predates replication).
	Replicas uint32
}

// Publish appends one batch (built with batch.Builder) to a partition and
// returns the server's acknowledgement. Publish keeps a reference to
// batchBytes, which is written to the socket without a copy: do not modify
// it afterwards (when ctx ends early the write may still be in progress).
// Publish does not retry: an error wrapping ErrConnection means the batch
// may or may not have been appended. It asks for AcksAll (see Acks).
// A batch over Limits().MaxBatchBytes fails with an api.ErrMessageTooLarge
// error without being sent.
func (c *Client) Publish(ctx context.Context, topic string, partition uint32, batchBytes []byte) (PublishResult, error) {
	return c.PublishAcks(ctx, topic, partition, batchBytes, AcksAll)
}

// PublishAcks is Publish with the given Acks: AcksLeader is acknowledged
// once the partition's leader appended the batch, AcksAll once every
// in-sync replica holds it (see Acks).
func (c *Client) PublishAcks(ctx context.Context, topic string, partition uint32, batchBytes []byte, acks Acks) (PublishResult, error) {
	if lim := c.Limits(); len(batchBytes) > int(lim.MaxBatchBytes) {
		return PublishResult{}, api.NewError(api.CodeMessageTooLarge, "batch of %d bytes over the server's maxBatchBytes %d", len(batchBytes), lim.MaxBatchBytes)
	}
	if err := c.waitThrottle(ctx); err != nil {
		return PublishResult{}, err
	}
	r, err := c.roundTrip(ctx, 0, func(f api.Frame) error {
		req, err := f.NewPublishRequest()
		if err != nil {
			return err
		}
		req.SetPartition(partition)
		req.SetRecordsLength(uint32(len(batchBytes)))
		req.SetAcks(acks.wire())
		return req.SetTopic(topic)
	}, batchBytes, 0)
	if err != nil {
		return PublishResult{}, err
	}
	return decodePublish(r, topic, partition)
}

// DefaultFetchMaxBytes is FetchRequest.MaxBytes when zero: 1 MiB.
const DefaultFetchMaxBytes = 1 << 20

// FetchRequest reads one partition from Offset.
type FetchRequest struct {
	Topic string
	// TopicID, when set, is the topic's id from its metadata (TopicInfo.ID):
	// the fetch fails with api.ErrUnknownTopicID when the topic was deleted
	// (and maybe created again) since. Zero: the topic is found by name.
	TopicID   api.TopicID
	Partition uint32
	Offset    uint64        // first offset wanted
	MaxBytes  uint32        // soft cap on the response's batches; default 1 MiB. At least one whole batch is returned (KIP-74).
	MaxWait   time.Duration // long poll: wait up to this long for data when none is readable; 0 answers at once. Millisecond resolution.
}

// FetchResult is one partition's fetch response, decoded.
type FetchResult struct {
	Topic          string
	Partition      uint32
	HighWatermark  uint64 // first offset not yet readable
	LogStartOffset uint64 // first offset still stored
	// Messages are the records at or above the requested offset, in offset
	// order (records before it, in a batch that starts earlier, are dropped).
	Messages []Message
	// NextOffset is the offset to fetch next: after the last record
	// returned, or the requested offset when none was.
	NextOffset uint64
}

// Fetch reads records of one partition. It checks every batch's CRC
// (failures wrap batch.ErrCorrupt) and fails with api.ErrOffsetOutOfRange
// (an *api.Error with the valid range) when Offset is outside
// [LogStartOffset, HighWatermark], api.ErrUnknownTopic,
// api.ErrUnknownTopicID (req.TopicID is not the topic's id any more) or
// api.ErrUnknownPartition.
func (c *Client) Fetch(ctx context.Context, req FetchRequest) (FetchResult, error) {
	if req.MaxBytes == 0 {
		req.MaxBytes = DefaultFetchMaxBytes
	}
	waitMs := uint32(min(req.MaxWait.Milliseconds(), int64(^uint32(0))))
	// The response's tail may hold several batches up to MaxBytes, or one
	// batch over it of at most maxBatchBytes.
	maxTail := max(req.MaxBytes, c.Limits().MaxBatchBytes)
	if err := c.waitThrottle(ctx); err != nil {
		return FetchResult{}, err
	}
	r, err := c.roundTrip(ctx, req.MaxWait, func(f api.Frame) error {
		fr, err := f.NewFetchRequest()
		if err != nil {
			return err
		}
		fr.SetPartition(req.Partition)
		fr.SetOffset(req.Offset)
		fr.SetMaxBytes(req.MaxBytes)
		fr.SetMaxWaitMs(waitMs)
		if !req.TopicID.IsZero() {
			if err := fr.SetTopicId(req.TopicID.Bytes()); err != nil {
				return err
			}
		}
		return fr.SetTopic(req.Topic)
	}, nil, maxTail)
	if err != nil {
		return FetchResult{}, err
	}
	if err := expect(r.f, api.Frame_Which_fetchResponse); err != nil {
		return FetchResult{}, err
	}
	resp, err := r.f.FetchResponse()
	if err != nil {
		return FetchResult{}, err
	}
	if err := respErr(resp.Error()); err != nil {
		return FetchResult{}, err
	}
	res := FetchResult{
		Topic:          req.Topic,
		Partition:      req.Partition,
		HighWatermark:  resp.HighWatermark(),
		LogStartOffset: resp.LogStartOffset(),
		NextOffset:     req.Offset,
	}
	res.Messages, res.NextOffset, err = decodeBatches(r.tail, req.Topic, req.Partition, req.Offset)
	return res, err
}

// decodeBatches decodes the whole batches in buf, keeping records at or
// above from, and returns them with the offset after the last batch. A
// partial batch at the end of buf is ignored.
//
// buf is the response's records tail, read into a buffer of its own that
// nothing else reuses: the Messages' keys, values and header values alias
// it (capacity clipped to their length) instead of being copied, so a
// fetch costs one buffer and one Message slice, not an allocation or a
// copy per record.
func decodeBatches(buf []byte, topic string, partition uint32, from uint64) ([]Message, uint64, error) {
	var (
		msgs = make([]Message, 0, countRecords(buf, from))
		next = from
		it   batch.Iter
	)
	for len(buf) > 0 {
		b, rest, h, err := batch.Split(buf, 0)
		if errors.Is(err, batch.ErrShort) {
			break
		}
		if err != nil {
			return nil, from, fmt.Errorf("sdk: fetch %s/%d at %d: %w", topic, partition, from, err)
		}
		buf = rest
		if h.NextOffset() <= next {
			continue
		}
		if _, err := batch.CheckHeader(b); err != nil {
			return nil, from, fmt.Errorf("sdk: fetch %s/%d batch at %d: %w", topic, partition, h.BaseOffset, err)
		}
		if err := it.Reset(b); err != nil {
			return nil, from, fmt.Errorf("sdk: fetch %s/%d batch at %d: %w", topic, partition, h.BaseOffset, err)
		}
		msgs = appendRecords(msgs, &it, topic, partition, from)
		if err := it.Err(); err != nil {
			return nil, from, fmt.Errorf("sdk: fetch %s/%d batch at %d: %w", topic, partition, h.BaseOffset, err)
		}
		next = h.NextOffset()
	}
	return msgs, next, nil
}

// appendRecords appends a Message per record of it at or above from.
func appendRecords(msgs []Message, it *batch.Iter, topic string, partition uint32, from uint64) []Message {
	for it.Next() {
		r := it.Record()
		if r.Offset < from {
			continue
		}
		msgs = append(msgs, Message{
			Topic:     topic,
			Partition: partition,
			Offset:    r.Offset,
			Timestamp: r.Timestamp,
			Key:       r.Key[:len(r.Key):len(r.Key)],
			Value:     r.Value[:len(r.Value):len(r.Value)],
		})
		if len(r.Headers) > 0 {
			hs := make([]Header, len(r.Headers))
			for i, rh := range r.Headers {
				hs[i] = Header{Key: rh.Key, Value: rh.Value[:len(rh.Value):len(rh.Value)]}
			}
			msgs[len(msgs)-1].Headers = hs
		}
	}
	return msgs
}

// minWireRecord is the smallest encoding of a record in a batch's list:
// its element of 2 data words and 3 pointers.
const minWireRecord = 40

// countRecords returns the records the whole batches of buf hold past
// from, as their headers say, bounded by what buf can hold: the capacity
// of the Message slice, so it is allocated once.
func countRecords(buf []byte, from uint64) int {
	n, bound := 0, len(buf)/minWireRecord+1
	for len(buf) > 0 {
		_, rest, h, err := batch.Split(buf, 0)
		if err != nil {
			break
		}
		buf = rest
		if h.NextOffset() > from {
			n += int(h.RecordCount)
		}
	}
	return min(n, bound)
}

// OffsetCommit is one committed offset of a consumer group.
type OffsetCommit struct {
	Topic string
	// TopicID, when set in a commit, is the topic's id from its metadata:
	// an old id fails the entry with api.ErrUnknownTopicID, so an offset
	// read from a deleted topic never becomes the committed offset of a
	// topic created again under the name. Zero commits by name. Results
	// and FetchOffsets carry the id of the topic the offset belongs to
	// (zero from a server that predates topic ids).
	TopicID   api.TopicID
	Partition uint32
	Offset    uint64 // the next offset the group will read
	Metadata  string // opaque to the server; valid UTF-8 (else INVALID_REQUEST)
	Err       error  // per-entry result of CommitOffsets; nil on success
}

// CommitOffsets stores committed offsets for group as a standalone consumer
// (no member id, generation -1: accepted only while the group has no
// members, docs/architecture.md §6). It returns one entry per input with its Err set when
// that offset was refused (for example OFFSET_OUT_OF_RANGE beyond the high
// watermark); the error return is for the request as a whole. A
// coordinator that is moving or still loading (COORDINATOR_NOT_AVAILABLE,
// NO_QUORUM) is retried with backoff within the request timeout; a
// commit is idempotent, so a retry after an unknown outcome is safe.
func (c *Client) CommitOffsets(ctx context.Context, group string, offsets []OffsetCommit) ([]OffsetCommit, error) {
	var res []OffsetCommit
	err := retryCoordinator(ctx, c.cfg.RequestTimeout, func() error {
		var err error
		res, err = c.commitOffsets(ctx, group, "", -1, offsets)
		return err
	})
	return res, err
}

func (c *Client) commitOffsets(ctx context.Context, group, memberID string, generation int32, offsets []OffsetCommit) ([]OffsetCommit, error) {
	r, err := c.roundTrip(ctx, 0, func(f api.Frame) error {
		req, err := f.NewCommitOffsetsRequest()
		if err != nil {
			return err
		}
		if err := req.SetGroup(group); err != nil {
			return err
		}
		if err := req.SetMemberId(memberID); err != nil {
			return err
		}
		req.SetGeneration(generation)
		list, err := req.NewOffsets(int32(len(offsets)))
		if err != nil {
			return err
		}
		for i, o := range offsets {
			w := list.At(i)
			w.SetPartition(o.Partition)
			w.SetOffset(o.Offset)
			if err := w.SetTopic(o.Topic); err != nil {
				return err
			}
			if !o.TopicID.IsZero() {
				if err := w.SetTopicId(o.TopicID.Bytes()); err != nil {
					return err
				}
			}
			if o.Metadata != "" {
				if err := w.SetMetadata(o.Metadata); err != nil {
					return err
				}
			}
		}
		return nil
	}, nil, 0)
	if err != nil {
		return nil, err
	}
	if err := expect(r.f, api.Frame_Which_commitOffsetsResponse); err != nil {
		return nil, err
	}
	resp, err := r.f.CommitOffsetsResponse()
	if err != nil {
		return nil, err
	}
	if err := respErr(resp.Error()); err != nil {
		return nil, err
	}
	list, err := resp.Offsets()
	if err != nil {
		return nil, err
	}
	return offsetsFromWire(list)
}

// FetchOffsets returns the committed offsets of group for topic (every
// topic when topic is empty). A partition without a committed offset is
// absent from the result. A coordinator that is moving or still loading
// is retried as in CommitOffsets.
func (c *Client) FetchOffsets(ctx context.Context, group, topic string) ([]OffsetCommit, error) {
	var res []OffsetCommit
	err := retryCoordinator(ctx, c.cfg.RequestTimeout, func() error {
		var err error
		res, err = c.fetchOffsets(ctx, group, topic)
		return err
	})
	return res, err
}

func (c *Client) fetchOffsets(ctx context.Context, group, topic string) ([]OffsetCommit, error) {
	r, err := c.roundTrip(ctx, 0, func(f api.Frame) error {
		req, err := f.NewFetchOffsetsRequest()
		if err != nil {
			return err
		}
		if err := req.SetGroup(group); err != nil {
			return err
		}
		return req.SetTopic(topic)
	}, nil, 0)
	if err != nil {
		return nil, err
	}
	if err := expect(r.f, api.Frame_Which_fetchOffsetsResponse); err != nil {
		return nil, err
	}
	resp, err := r.f.FetchOffsetsResponse()
	if err != nil {
		return nil, err
	}
	if err := respErr(resp.Error()); err != nil {
		return nil, err
	}
	list, err := resp.Offsets()
	if err != nil {
		return nil, err
	}
	return offsetsFromWire(list)
}

func offsetsFromWire(list api.OffsetCommit_List) ([]OffsetCommit, error) {
	out := make([]OffsetCommit, list.Len())
	for i := range out {
		w := list.At(i)
		t, err := w.Topic()
		if err != nil {
			return nil, err
		}
		md, _ := w.Metadata()
		id, err := wireTopicID(w.HasTopicId(), w.TopicId)
		if err != nil {
			return nil, err
		}
		out[i] = OffsetCommit{Topic: t, TopicID: id, Partition: w.Partition(), Offset: w.Offset(), Metadata: md, Err: respErr(w.Error())}
	}
	return out, nil
}
