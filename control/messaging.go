package control

import (
	"context"
	"errors"
	"hash/fnv"
	"io"
	"math"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/api/batch"
	"github.com/seedqueue/sq/api/sqv1"
	"github.com/seedqueue/sq/engine"
	"github.com/seedqueue/sq/internal/longpoll"
	"github.com/seedqueue/sq/internal/quota"
)

// messagingService implements sq.v1.Messaging.
type messagingService struct {
	sqv1.UnimplementedMessagingServer
	s *Server
}

// Publish implements sq.v1.Messaging.
// A publish that takes the caller's principal over its produce byte-rate
// quota is held back for the throttle time (reported in the response and
// in ThrottleHeader), once appended.
func (m *messagingService) Publish(ctx context.Context, req *sqv1.PublishRequest) (*sqv1.PublishResponse, error) {
	res, err := m.s.publish(ctx, req)
	if d := m.s.recordQuota(ctx, quota.Produce, proto.Size(req)); d > 0 {
		setThrottleHeader(ctx, d)
		if res != nil {
			res.ThrottleTimeMs = throttleMs(d)
		}
		// A client gone meanwhile cannot read the answer; an appended
		// publish is never reported as failed.
		_ = holdFor(ctx, d)
	}
	return res, err
}

// PublishStream implements sq.v1.Messaging: each request is one batch,
// appended in order; the first error ends the stream.
//
// The one response holds a result per request and stays below
// GrpcMaxMessageBytes: a request whose result might not fit any more is
// refused with MESSAGE_TOO_LARGE before it is appended (the client ends
// the stream and opens another). A request that takes the caller's
// principal over its produce byte-rate quota holds the reading of the next
// one back for the throttle time; the response reports the sum.
func (m *messagingService) PublishStream(stream grpc.ClientStreamingServer[sqv1.PublishRequest, sqv1.PublishStreamResponse]) error {
	out := &sqv1.PublishStreamResponse{}
	size := 11 // out.ThrottleTimeMs with its tag
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return stream.SendAndClose(out)
		}
		if err != nil {
			return err
		}
		if size+publishResultMaxBytes(req.Topic) > GrpcMaxMessageBytes {
			return api.NewError(api.CodeMessageTooLarge,
				"PublishStream: the results of the %d requests appended fill the %d-byte bound of its one response; this request and the ones after it were not appended: end the stream and publish the rest on a new one",
				len(out.Results), GrpcMaxMessageBytes)
		}
		res, err := m.s.publish(stream.Context(), req)
		if err != nil {
			return err
		}
		out.Results = append(out.Results, res)
		size += protowire.SizeTag(1) + protowire.SizeBytes(proto.Size(res))
		if d := m.s.recordQuota(stream.Context(), quota.Produce, proto.Size(req)); d > 0 {
			res.ThrottleTimeMs = throttleMs(d)
			out.ThrottleTimeMs = int32(min(int64(out.ThrottleTimeMs)+int64(res.ThrottleTimeMs), math.MaxInt32))
			if err := holdFor(stream.Context(), d); err != nil {
				return err
			}
		}
	}
}

// publishResultMaxBytes bounds the encoding of one PublishResponse to
// topic inside a PublishStreamResponse: the topic, seven numeric fields of
// at most 11 bytes each with their tags, and the field's own tag and
// length.
func publishResultMaxBytes(topic string) int {
	return 3 + len(topic) + 7*11 + 4
}

// publish validates req, encodes its records as one batch (stamped with
// its producer id, epoch and base sequence when idempotent) and appends
// it. A duplicate of one of the producer's last batches is answered with
// the original's offsets, unwritten; the engine's refusals
// (OUT_OF_ORDER_SEQUENCE, UNKNOWN_PRODUCER_ID, INVALID_PRODUCER_EPOCH)
// become FAILED_PRECONDITION through ToStatus.
func (s *Server) publish(ctx context.Context, req *sqv1.PublishRequest) (*sqv1.PublishResponse, error) {
	if err := engine.ValidateTopicName(req.Topic); err != nil {
		return nil, err
	}
	if req.Partition < -1 {
		return nil, invalid("partition %d: want a partition number or -1 (server chooses)", req.Partition)
	}
	if len(req.Records) == 0 {
		return nil, invalid("publish to %s without records", req.Topic)
	}
	var acks engine.Acks
	switch req.Acks {
	case sqv1.Acks_ACKS_ALL:
		acks = engine.AcksAll
	case sqv1.Acks_ACKS_LEADER:
		acks = engine.AcksLeader
	default:
		return nil, invalid("acks %d: want ACKS_ALL (0) or ACKS_LEADER (1)", req.Acks)
	}
	if err := checkProducer(req); err != nil {
		return nil, err
	}
	partition, err := s.choosePartition(req)
	if err != nil {
		return nil, err
	}
	var b batch.Builder
	if req.Idempotent {
		// The header fields of a Cap'n Proto batch of an idempotent
		// producer: the engine's checks (duplicate, sequence, epoch)
		// apply as they do on the data plane.
		b.SetProducer(req.ProducerId, int16(req.ProducerEpoch), req.BaseSequence)
	}
	for i, r := range req.Records {
		if r.TimestampMs < 0 {
			return nil, invalid("record %d: timestamp_ms %d is negative (Unix ms; 0 means now)", i, r.TimestampMs)
		}
		var hs []batch.RecordHeader
		if len(r.Headers) > 0 {
			hs = make([]batch.RecordHeader, len(r.Headers))
			for i, h := range r.Headers {
				hs[i] = batch.RecordHeader{Key: string(h.Key), Value: h.Value}
			}
		}
		key := r.Key
		if key != nil && len(key) == 0 {
			key = []byte{} // an empty key is a key, not "no key"
		}
		ts := r.TimestampMs
		if ts == 0 {
			ts = s.opts.Now().UnixMilli()
		}
		b.Add(key, r.Value, hs, ts)
	}
	buf, err := b.Build()
	if err != nil {
		return nil, api.WrapError(api.CodeMessageTooLarge, err, "")
	}
	res, err := s.eng().Append(engine.WithAcks(ctx, acks), req.Topic, partition, buf)
	if err != nil {
		return nil, err
	}
	return &sqv1.PublishResponse{
		Topic: req.Topic, Partition: int32(partition), BaseOffset: res.BaseOffset, RecordCount: res.RecordCount,
		LogAppendTimeMs: res.LogAppendTime, Durability: sqv1.Durability(res.Durability),
		// An engine that predates replication leaves Replicas 0: the
		// leader alone holds the batch.
		Replicas: max(res.Replicas, 1),
	}, nil
}

// checkProducer validates the idempotent-producer fields of req
// (api/sq.proto, PublishRequest.idempotent): an idempotent request names
// its partition and carries an id >= 0, an epoch that fits the header's
// int16 and a sequence >= 0; any other request leaves the three fields 0.
func checkProducer(req *sqv1.PublishRequest) error {
	if !req.Idempotent {
		if req.ProducerId != 0 || req.ProducerEpoch != 0 || req.BaseSequence != 0 {
			return invalid("producer_id %d, producer_epoch %d, base_sequence %d without idempotent: set idempotent to publish as an idempotent producer, or leave the three fields 0",
				req.ProducerId, req.ProducerEpoch, req.BaseSequence)
		}
		return nil
	}
	switch {
	case req.Partition < 0:
		return invalid("an idempotent publish names its partition (sequences are per partition): partition %d", req.Partition)
	case req.ProducerId < 0:
		return invalid("producer_id %d: want the id InitProducerId granted (0 or more)", req.ProducerId)
	case req.ProducerEpoch < 0 || req.ProducerEpoch > math.MaxInt16:
		return invalid("producer_epoch %d: want 0 to %d", req.ProducerEpoch, math.MaxInt16)
	case req.BaseSequence < 0:
		return invalid("base_sequence %d: want 0 or more", req.BaseSequence)
	}
	return nil
}

// choosePartition returns req.Partition, or for -1 the FNV-1a 32 hash of
// the first record's key modulo the partition count (round-robin without
// a key), the SDK's default partitioner.
func (s *Server) choosePartition(req *sqv1.PublishRequest) (int, error) {
	if req.Partition >= 0 {
		return int(req.Partition), nil
	}
	ti, err := s.eng().DescribeTopic(req.Topic)
	if err != nil {
		return 0, err
	}
	n := uint32(ti.PartitionCount)
	if n == 0 {
		return 0, api.NewError(api.CodeUnknownPartition, "topic %q has no partitions", req.Topic)
	}
	if k := req.Records[0].Key; k != nil {
		h := fnv.New32a()
		h.Write(k)
		return int(h.Sum32() % n), nil
	}
	return int(s.rr.Add(1) % n), nil
}

// Subscribe implements sq.v1.Messaging: one partition's records from the
// start position, then new ones as they arrive, until the client cancels
// or the server shuts down.
func (m *messagingService) Subscribe(req *sqv1.SubscribeRequest, stream grpc.ServerStreamingServer[sqv1.SubscribeResponse]) error {
	s := m.s
	if err := engine.ValidateTopicName(req.Topic); err != nil {
		return err
	}
	if req.Partition < 0 {
		return invalid("partition %d: want 0 or more", req.Partition)
	}
	if req.MaxBytes < 0 {
		return invalid("max_bytes %d: want 0 (default) or more", req.MaxBytes)
	}
	off, id, explicit, err := s.startOffset(req)
	if err != nil {
		return err
	}
	maxBytes := int(req.MaxBytes)
	if maxBytes == 0 {
		maxBytes = s.opts.SubscribeMaxBytes
	}
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	sc := &sendCharges{b: s.recv}
	defer sc.releaseAll()
	sc.probe = func() error { return stream.Send(proto.Clone(sc.tmpl).(*sqv1.SubscribeResponse)) }
	go func() {
		select {
		case <-s.closing:
			cancel()
		case <-ctx.Done():
		}
	}()
	// ended is the error of a stream ended by its client or by shutdown.
	ended := func() error {
		if stream.Context().Err() == nil {
			return api.NewError(api.CodeShuttingDown, "server is shutting down")
		}
		return stream.Context().Err()
	}
	for ctx.Err() == nil {
		started := time.Now()
		// The stream reads one topic, the one with id: a topic created
		// again under the name ends it with UNKNOWN_TOPIC_ID (KIP-516).
		r, err := s.eng().FetchID(ctx, req.Topic, id, int(req.Partition), off, maxBytes, s.opts.SubscribeMaxWait)
		if err != nil {
			if ctx.Err() != nil {
				return ended()
			}
			if start, ok := belowLogStart(err, off); ok && !explicit {
				// Retention overtook the stream's position: go on at the
				// log start, as the consumers do (auto.offset.reset=earliest).
				s.logSkipped(req, "stream", off, start)
				off = start
				continue
			}
			return err
		}
		explicit = false // from here on the position is the stream's own
		// The fetch quota: these records are sent with the throttle time
		// they cost, and the next read waits it out.
		throttle := s.recordQuota(stream.Context(), quota.Fetch, r.Bytes())
		resp := &sqv1.SubscribeResponse{Topic: req.Topic, Partition: req.Partition, HighWatermark: r.HighWatermark, LogStartOffset: r.LogStartOffset,
			TopicId: r.TopicID.Bytes(), ThrottleTimeMs: throttleMs(throttle)}
		before := off
		off, err = s.sendRecords(ctx, stream.Send, sc, resp, r.Bufs, off)
		r.Release()
		if err == nil {
			err = holdFor(ctx, throttle)
		}
		if err != nil {
			if ctx.Err() != nil {
				return ended()
			}
			return err
		}
		if off == before {
			if !longpoll.PauseAfterEmpty(ctx, started, s.opts.SubscribeMaxWait) {
				break
			}
			continue
		}
	}
	return ended()
}

// GrpcMaxMessageBytes bounds every Subscribe response the server sends,
// in bytes of the encoded message: 64 KiB below gRPC's default 4 MiB
// receive limit (grpc.MaxCallRecvMsgSize), so a default-configured gRPC
// client reads any batch up to the server's batch limit (16 MiB by
// default) as several responses. Cluster.NodeInfo advertises it. A single
// record whose encoding exceeds it cannot be sent on this plane: the
// Subscribe fails with MESSAGE_TOO_LARGE naming its offset (read it over
// Cap'n Proto).
const GrpcMaxMessageBytes = 4<<20 - 64<<10

// sendSplit sends resp's records as consecutive responses of at most
// bound encoded bytes each, in order. A record that does not fit a
// response alone ends the stream with MESSAGE_TOO_LARGE after the records
// before it are sent.
func sendSplit(send func(*sqv1.SubscribeResponse) error, resp *sqv1.SubscribeResponse, bound int) error {
	recs := resp.Records
	resp.Records = nil
	base := proto.Size(resp)
	part := func(rs []*sqv1.ConsumedRecord) *sqv1.SubscribeResponse {
		p := proto.Clone(resp).(*sqv1.SubscribeResponse) // every field but the records
		p.Records = rs
		return p
	}
	size, first := base, 0
	for i, cr := range recs {
		n := protowire.SizeTag(3) + protowire.SizeBytes(proto.Size(cr))
		if size+n > bound && i > first {
			if err := send(part(recs[first:i])); err != nil {
				return err
			}
			size, first = base, i
		}
		if base+n > bound {
			return api.NewError(api.CodeMessageTooLarge,
				"record at offset %d of %s/%d takes %d bytes in a gRPC response, above the %d-byte bound of one response (gRPC's default 4 MiB receive limit); read it over the Cap'n Proto plane",
				cr.Offset, resp.Topic, resp.Partition, base+n, bound)
		}
		size += n
	}
	return send(part(recs[first:]))
}

// startOffset resolves where a subscription starts: the group's committed
// offset of the topic when it has one, moved up to the log start when
// retention has removed it (logged with the number of records skipped),
// else req.From; and the id of the topic it reads. A request with a topic
// id that is not the topic's current one fails with UNKNOWN_TOPIC_ID. An
// explicit START_FROM_OFFSET (explicit true) is not moved: outside [log
// start, high watermark] the first read fails with OFFSET_OUT_OF_RANGE and
// its range, as a Kafka fetch does.
func (s *Server) startOffset(req *sqv1.SubscribeRequest) (off uint64, id api.TopicID, explicit bool, err error) {
	id, err = api.TopicIDFromBytes(req.TopicId)
	if err != nil {
		return 0, id, false, err
	}
	ti, err := s.eng().DescribeTopic(req.Topic)
	if err != nil {
		if !id.IsZero() && errors.Is(err, api.ErrUnknownTopic) {
			err = api.NewError(api.CodeUnknownTopicID, "topic id %s: topic %q no longer exists", id, req.Topic)
		}
		return 0, id, false, err
	}
	if !id.IsZero() && id != ti.ID {
		return 0, id, false, api.NewError(api.CodeUnknownTopicID, "topic id %s is not the id of topic %q (deleted or created again): read its metadata again", id, req.Topic)
	}
	id = ti.ID
	if int(req.Partition) >= len(ti.Partitions) {
		return 0, id, false, api.NewError(api.CodeUnknownPartition, "topic %q has partitions 0..%d, not %d", req.Topic, len(ti.Partitions)-1, req.Partition)
	}
	committed, hasCommitted := uint64(0), false
	if req.Group != "" {
		offs, err := s.eng().FetchOffsets(req.Group, req.Topic)
		if err != nil {
			return 0, id, false, err
		}
		for _, o := range offs {
			if o.Partition == int(req.Partition) && (o.TopicID.IsZero() || o.TopicID == id) {
				committed, hasCommitted = o.Offset, true
			}
		}
	}
	p := ti.Partitions[req.Partition]
	if hasCommitted {
		if committed < p.LogStartOffset {
			s.logSkipped(req, "committed offset", committed, p.LogStartOffset)
			return p.LogStartOffset, id, false, nil
		}
		return committed, id, false, nil
	}
	switch req.From {
	case sqv1.StartFrom_START_FROM_EARLIEST:
		return p.LogStartOffset, id, false, nil
	case sqv1.StartFrom_START_FROM_LATEST:
		return p.HighWatermark, id, false, nil
	case sqv1.StartFrom_START_FROM_OFFSET:
		return req.Offset, id, true, nil
	}
	return 0, id, false, invalid("from %d: want START_FROM_EARLIEST, START_FROM_LATEST or START_FROM_OFFSET", req.From)
}

// belowLogStart reports whether err is OFFSET_OUT_OF_RANGE for an offset
// below the log start, and returns that log start.
func belowLogStart(err error, off uint64) (uint64, bool) {
	var e *api.Error
	if errors.As(err, &e) && e.Code == api.CodeOffsetOutOfRange && e.HasRange && off < e.RangeStart {
		return e.RangeStart, true
	}
	return 0, false
}

// logSkipped logs, at warning level, a subscription moved from off up to
// the log start because retention removed the records in between.
func (s *Server) logSkipped(req *sqv1.SubscribeRequest, what string, off, start uint64) {
	s.opts.Logger.Warn("control: subscribe: "+what+" below the log start: records lost to retention are skipped",
		"topic", req.Topic, "partition", req.Partition, "group", req.Group, "offset", off, "log_start", start, "skipped", start-off)
}

// walkRecords calls fn for each record at or above from in the whole
// batches in bufs, in order, until fn returns false, and returns the
// offset after the last record fn saw.
func walkRecords(bufs [][]byte, from uint64, fn func(*batch.Record) bool) (uint64, error) {
	next := from
	var it batch.Iter
	for _, buf := range bufs {
		for len(buf) > 0 {
			b, rest, h, err := batch.Split(buf, 0)
			if err != nil {
				return from, err
			}
			buf = rest
			if h.NextOffset() <= next {
				continue
			}
			if err := it.Reset(b); err != nil {
				return from, err
			}
			for it.Next() {
				r := it.Record()
				if r.Offset < next {
					continue
				}
				next = r.Offset + 1
				if !fn(r) {
					return next, nil
				}
			}
			if err := it.Err(); err != nil {
				return from, err
			}
			next = h.NextOffset()
		}
	}
	return next, nil
}

// recordSize is the encoded size of r as a ConsumedRecord inside a
// SubscribeResponse (its field tag and length included).
func recordSize(r *batch.Record) int {
	n := protowire.SizeTag(1) + protowire.SizeVarint(r.Offset) + protowire.SizeTag(2) + protowire.SizeVarint(uint64(r.Timestamp)) +
		protowire.SizeTag(4) + protowire.SizeBytes(len(r.Value))
	if r.Key != nil {
		n += protowire.SizeTag(3) + protowire.SizeBytes(len(r.Key))
	}
	for _, h := range r.Headers {
		hn := protowire.SizeTag(1) + protowire.SizeBytes(len(h.Key)) + protowire.SizeTag(2) + protowire.SizeBytes(len(h.Value))
		n += protowire.SizeTag(5) + protowire.SizeBytes(hn)
	}
	return protowire.SizeTag(3) + protowire.SizeBytes(n)
}

// measureRecords returns how many records at or above from, up to and
// including the one that brings their encoded size to max bytes or more,
// make the next response, and that size, without copying them.
func measureRecords(bufs [][]byte, from uint64, max int) (count, size int, err error) {
	_, err = walkRecords(bufs, from, func(r *batch.Record) bool {
		count++
		size += recordSize(r)
		return size < max
	})
	return count, size, err
}

// decodeRecords copies count records at or above from out of the whole
// batches in bufs and returns them with the offset to read next.
func decodeRecords(bufs [][]byte, from uint64, count int) ([]*sqv1.ConsumedRecord, uint64, error) {
	out := make([]*sqv1.ConsumedRecord, 0, count)
	next, err := walkRecords(bufs, from, func(r *batch.Record) bool {
		cr := &sqv1.ConsumedRecord{Offset: r.Offset, TimestampMs: r.Timestamp, Value: clone(r.Value)}
		if r.Key != nil {
			cr.Key = clone(r.Key)
		}
		for _, rh := range r.Headers {
			cr.Headers = append(cr.Headers, &sqv1.RecordHeader{Key: []byte(rh.Key), Value: clone(rh.Value)})
		}
		out = append(out, cr)
		return len(out) < count
	})
	if err != nil {
		return nil, from, err
	}
	return out, next, nil
}

// sendRecords sends the records at or above from in bufs as responses
// shaped like tmpl, one response's worth at a time: each is measured in
// place, charged to the send budget (twice its size: the records and
// gRPC's encoding of them) and only then copied, and its charge is held
// until the stream's next Send returns (gRPC may still hold its encoding
// until then). It returns the offset to read next.
func (s *Server) sendRecords(ctx context.Context, send func(*sqv1.SubscribeResponse) error, sc *sendCharges,
	tmpl *sqv1.SubscribeResponse, bufs [][]byte, from uint64) (uint64, error) {
	off := from
	for {
		count, size, err := measureRecords(bufs, off, GrpcMaxMessageBytes-proto.Size(tmpl))
		if err != nil {
			return off, api.WrapError(api.CodeCorruptBatch, err, "%s/%d", tmpl.Topic, tmpl.Partition)
		}
		if count == 0 {
			return off, nil
		}
		charge := 2 * int64(proto.Size(tmpl)+size)
		sc.tmpl = tmpl // a probe response: no records, the read's fields
		if err := sc.acquire(ctx, charge); err != nil {
			return off, err
		}
		resp := proto.Clone(tmpl).(*sqv1.SubscribeResponse)
		var next uint64
		resp.Records, next, err = decodeRecords(bufs, off, count)
		if err != nil {
			return off, api.WrapError(api.CodeCorruptBatch, err, "%s/%d", tmpl.Topic, tmpl.Partition)
		}
		if err := sendSplit(send, resp, GrpcMaxMessageBytes); err != nil {
			return off, err
		}
		sc.sent()
		off = next
	}
}

// clone copies b; nil stays nil, empty becomes empty.
func clone(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append(make([]byte, 0, len(b)), b...)
}

// CommitOffsets implements sq.v1.Messaging for standalone consumers
// (generation -1).
func (m *messagingService) CommitOffsets(ctx context.Context, req *sqv1.CommitOffsetsRequest) (*sqv1.CommitOffsetsResponse, error) {
	s := m.s
	if req.Group == "" {
		return nil, invalid("commit without a group")
	}
	in, err := commitsFromProto(req.Offsets)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	res, err := s.offsetsEngine(ctx).CommitOffsets(req.Group, "", -1, in)
	s.commitSpan(ctx, req.Group, len(in), start, err)
	if err != nil {
		return nil, err
	}
	return &sqv1.CommitOffsetsResponse{Offsets: offsetEntries(res)}, nil
}

// commitSpan records a finished "commit" span when tracing is on.
func (s *Server) commitSpan(ctx context.Context, group string, n int, start time.Time, err error) {
	if s.opts.Tracer == nil {
		return
	}
	group = strings.ToValidUTF8(group, "\uFFFD") // refused by the engine, but still named in the span
	_, sp := s.opts.Tracer.Start(ctx, "commit "+group, trace.WithTimestamp(start), trace.WithSpanKind(trace.SpanKindConsumer))
	sp.SetAttributes(semconv.MessagingSystemKey.String("sq"), semconv.MessagingOperationName("commit"),
		semconv.MessagingOperationTypeSettle, semconv.MessagingConsumerGroupName(group),
		attribute.Int("sq.commit.partitions", n))
	endSpan(sp, err)
	sp.End()
}

func offsetEntries(in []engine.OffsetCommit) []*sqv1.OffsetEntry {
	out := make([]*sqv1.OffsetEntry, len(in))
	for i, o := range in {
		out[i] = &sqv1.OffsetEntry{Topic: o.Topic, Partition: int32(o.Partition), Offset: o.Offset, Metadata: o.Metadata, TopicId: o.TopicID.Bytes()}
		if o.Err != nil {
			out[i].Error = strings.ToValidUTF8(api.AsError(o.Err).WireText(), "\uFFFD")
		}
	}
	return out
}

// FetchOffsets implements sq.v1.Messaging.
func (m *messagingService) FetchOffsets(ctx context.Context, req *sqv1.FetchOffsetsRequest) (*sqv1.FetchOffsetsResponse, error) {
	if req.Group == "" {
		return nil, invalid("fetch offsets without a group")
	}
	if req.Topic != "" {
		if err := engine.ValidateTopicName(req.Topic); err != nil {
			return nil, err
		}
	}
	res, err := m.s.offsetsEngine(ctx).FetchOffsets(req.Group, req.Topic)
	if err != nil {
		return nil, err
	}
	return &sqv1.FetchOffsetsResponse{Offsets: offsetEntries(res)}, nil
}

// ProducerIDBroker is implemented by an engine that grants idempotent
// producer ids (KIP-98); the data plane declares the same interface
// (dataplane.ProducerIDBroker). In a cluster the cluster layer's broker
// allocates them through the metadata log.
type ProducerIDBroker interface {
	// InitProducerID returns a producer id never granted before and its
	// epoch.
	InitProducerID(ctx context.Context) (id int64, epoch int16, err error)
}

// InitProducerId implements sq.v1.Messaging: a new idempotent producer id
// from the engine's ProducerIDBroker; Unimplemented from an engine
// without it.
func (m *messagingService) InitProducerId(ctx context.Context, _ *sqv1.InitProducerIdRequest) (*sqv1.InitProducerIdResponse, error) {
	pb, ok := m.s.eng().(ProducerIDBroker)
	if !ok {
		return nil, status.Error(codes.Unimplemented, "InitProducerId: this server does not grant producer ids")
	}
	id, epoch, err := pb.InitProducerID(ctx)
	if err != nil {
		return nil, err
	}
	return &sqv1.InitProducerIdResponse{ProducerId: id, ProducerEpoch: int32(epoch)}, nil
}
