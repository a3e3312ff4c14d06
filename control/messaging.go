package control

import (
	"context"
	"errors"
	"hash/fnv"
	"io"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/api/batch"
	"github.com/seedqueue/sq/api/sqv1"
	"github.com/seedqueue/sq/engine"
	"github.com/seedqueue/sq/internal/longpoll"
)

// messagingService implements sq.v1.Messaging.
type messagingService struct {
	sqv1.UnimplementedMessagingServer
	s *Server
}

// Publish implements sq.v1.Messaging.
func (m *messagingService) Publish(ctx context.Context, req *sqv1.PublishRequest) (*sqv1.PublishResponse, error) {
	return m.s.publish(ctx, req)
}

// PublishStream implements sq.v1.Messaging: each request is one batch,
// appended in order; the first error ends the stream.
func (m *messagingService) PublishStream(stream grpc.ClientStreamingServer[sqv1.PublishRequest, sqv1.PublishStreamResponse]) error {
	out := &sqv1.PublishStreamResponse{}
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return stream.SendAndClose(out)
		}
		if err != nil {
			return err
		}
		res, err := m.s.publish(stream.Context(), req)
		if err != nil {
			return err
		}
		out.Results = append(out.Results, res)
	}
}

// publish validates req, encodes its records as one batch and appends it.
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
	partition, err := s.choosePartition(req)
	if err != nil {
		return nil, err
	}
	var b batch.Builder
	for i, r := range req.Records {
		if r.TimestampMs < 0 {
			return nil, invalid("record %d: timestamp_ms %d is negative (Unix ms; 0 means now)", i, r.TimestampMs)
		}
		var hs []batch.RecordHeader
		if len(r.Headers) > 0 {
			hs = make([]batch.RecordHeader, len(r.Headers))
			for i, h := range r.Headers {
				hs[i] = batch.RecordHeader{Key: h.Key, Value: h.Value}
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
		return nil, api.NewError(api.CodeMessageTooLarge, "%v", err)
	}
	res, err := s.eng().Append(ctx, req.Topic, partition, buf)
	if err != nil {
		return nil, err
	}
	return &sqv1.PublishResponse{
		Topic: req.Topic, Partition: int32(partition), BaseOffset: res.BaseOffset, RecordCount: res.RecordCount,
		LogAppendTimeMs: res.LogAppendTime, Durability: sqv1.Durability(res.Durability),
	}, nil
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
	off, err := s.startOffset(req)
	if err != nil {
		return err
	}
	maxBytes := int(req.MaxBytes)
	if maxBytes == 0 {
		maxBytes = s.opts.SubscribeMaxBytes
	}
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
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
		r, err := s.eng().Fetch(ctx, req.Topic, int(req.Partition), off, maxBytes, s.opts.SubscribeMaxWait)
		if err != nil {
			if ctx.Err() != nil {
				return ended()
			}
			return err
		}
		resp := &sqv1.SubscribeResponse{Topic: req.Topic, Partition: req.Partition, HighWatermark: r.HighWatermark, LogStartOffset: r.LogStartOffset}
		resp.Records, off, err = decodeRecords(r.Bufs, off)
		r.Release()
		if err != nil {
			return api.NewError(api.CodeCorruptBatch, "%s/%d: %v", req.Topic, req.Partition, err)
		}
		if len(resp.Records) == 0 {
			if !longpoll.PauseAfterEmpty(ctx, started, s.opts.SubscribeMaxWait) {
				break
			}
			continue
		}
		if err := stream.Send(resp); err != nil {
			return err
		}
	}
	return ended()
}

// startOffset resolves where a subscription starts: the group's committed
// offset when it has one, else req.From.
func (s *Server) startOffset(req *sqv1.SubscribeRequest) (uint64, error) {
	if req.Group != "" {
		offs, err := s.eng().FetchOffsets(req.Group, req.Topic)
		if err != nil {
			return 0, err
		}
		for _, o := range offs {
			if o.Partition == int(req.Partition) {
				return o.Offset, nil
			}
		}
	}
	ti, err := s.eng().DescribeTopic(req.Topic)
	if err != nil {
		return 0, err
	}
	if int(req.Partition) >= len(ti.Partitions) {
		return 0, api.NewError(api.CodeUnknownPartition, "topic %q has partitions 0..%d, not %d", req.Topic, len(ti.Partitions)-1, req.Partition)
	}
	p := ti.Partitions[req.Partition]
	switch req.From {
	case sqv1.StartFrom_START_FROM_EARLIEST:
		return p.LogStartOffset, nil
	case sqv1.StartFrom_START_FROM_LATEST:
		return p.HighWatermark, nil
	case sqv1.StartFrom_START_FROM_OFFSET:
		return req.Offset, nil
	}
	return 0, invalid("from %d: want START_FROM_EARLIEST, START_FROM_LATEST or START_FROM_OFFSET", req.From)
}

// decodeRecords copies the records at or above from out of the whole
// batches in bufs and returns them with the offset to read next.
func decodeRecords(bufs [][]byte, from uint64) ([]*sqv1.ConsumedRecord, uint64, error) {
	var out []*sqv1.ConsumedRecord
	next := from
	var it batch.Iter
	for _, buf := range bufs {
		for len(buf) > 0 {
			b, rest, h, err := batch.Split(buf, 0)
			if err != nil {
				return nil, from, err
			}
			buf = rest
			if h.NextOffset() <= next {
				continue
			}
			if err := it.Reset(b); err != nil {
				return nil, from, err
			}
			for it.Next() {
				r := it.Record()
				if r.Offset < from {
					continue
				}
				cr := &sqv1.ConsumedRecord{Offset: r.Offset, TimestampMs: r.Timestamp, Value: clone(r.Value)}
				if r.Key != nil {
					cr.Key = clone(r.Key)
				}
				for _, rh := range r.Headers {
					cr.Headers = append(cr.Headers, &sqv1.RecordHeader{Key: rh.Key, Value: clone(rh.Value)})
				}
				out = append(out, cr)
			}
			if err := it.Err(); err != nil {
				return nil, from, err
			}
			next = h.NextOffset()
		}
	}
	return out, next, nil
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
	in := make([]engine.OffsetCommit, len(req.Offsets))
	for i, o := range req.Offsets {
		if o.Partition < 0 {
			return nil, invalid("commit of %s partition %d: want 0 or more", o.Topic, o.Partition)
		}
		in[i] = engine.OffsetCommit{Topic: o.Topic, Partition: int(o.Partition), Offset: o.Offset, Metadata: o.Metadata}
	}
	start := time.Now()
	res, err := s.eng().CommitOffsets(req.Group, "", -1, in)
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
	_, sp := s.opts.Tracer.Start(ctx, "commit "+group, trace.WithTimestamp(start), trace.WithSpanKind(trace.SpanKindConsumer))
	sp.SetAttributes(semconv.MessagingSystemKey.String("sq"), semconv.MessagingOperationName("commit"),
		semconv.MessagingOperationTypeSettle, semconv.MessagingConsumerGroupName(group),
		attribute.Int("sq.commit.partitions", n))
	if err != nil {
		sp.RecordError(err)
		sp.SetStatus(codes.Error, err.Error())
	}
	sp.End()
}

func offsetEntries(in []engine.OffsetCommit) []*sqv1.OffsetEntry {
	out := make([]*sqv1.OffsetEntry, len(in))
	for i, o := range in {
		out[i] = &sqv1.OffsetEntry{Topic: o.Topic, Partition: int32(o.Partition), Offset: o.Offset, Metadata: o.Metadata}
		if o.Err != nil {
			out[i].Error = o.Err.Error()
		}
	}
	return out
}

// FetchOffsets implements sq.v1.Messaging.
func (m *messagingService) FetchOffsets(_ context.Context, req *sqv1.FetchOffsetsRequest) (*sqv1.FetchOffsetsResponse, error) {
	if req.Group == "" {
		return nil, invalid("fetch offsets without a group")
	}
	if req.Topic != "" {
		if err := engine.ValidateTopicName(req.Topic); err != nil {
			return nil, err
		}
	}
	res, err := m.s.eng().FetchOffsets(req.Group, req.Topic)
	if err != nil {
		return nil, err
	}
	return &sqv1.FetchOffsetsResponse{Offsets: offsetEntries(res)}, nil
}
