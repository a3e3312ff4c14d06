package control_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/api/sqv1"
	"github.com/seedqueue/sq/control"
	"github.com/seedqueue/sq/engine"
	"github.com/seedqueue/sq/sdk"
)

// logBuf collects the lines of a text slog.Logger; safe for concurrent use.
type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func (l *logBuf) logger() *slog.Logger { return slog.New(slog.NewTextHandler(l, nil)) }

// skippedLine reports whether logs hold a retention warning for skipped
// records, with their count.
func skippedLine(logs string, skipped uint64) bool {
	for _, line := range strings.Split(logs, "\n") {
		if strings.Contains(line, "records lost to retention") && strings.Contains(line, fmt.Sprintf("skipped=%d", skipped)) {
			return true
		}
	}
	return false
}

// retainedSegmentBytes is the smallest segment the test node accepts
// (its batch limit, 256 KiB, plus 4 KiB): about 64 records of publishN.
const retainedSegmentBytes = 266240

// publishN publishes n records of 4000 bytes to partition 0 of topic, one
// batch each, over gRPC.
func publishN(ctx context.Context, msg sqv1.MessagingClient, topic string, n int) error {
	for i := range n {
		req := &sqv1.PublishRequest{Topic: topic, Records: []*sqv1.Record{{Value: bytes.Repeat([]byte{byte(i)}, 4000)}}}
		if _, err := msg.Publish(ctx, req); err != nil {
			return err
		}
	}
	return nil
}

// retainedTopic creates topic with one segment's retention.bytes, publishes 2 records, commits offset 1 for group "old", publishes
// 200 more and enforces retention, so the log start is well past 1.
func retainedTopic(t *testing.T, n *node, topic string) engine.PartitionInfo {
	t.Helper()
	ctx := context.Background()
	_, err := sqv1.NewTopicsClient(n.conn).CreateTopic(ctx, &sqv1.CreateTopicRequest{Name: topic, Partitions: 1,
		Config: &sqv1.TopicConfig{SegmentBytes: retainedSegmentBytes, RetentionBytes: retainedSegmentBytes}})
	if err != nil {
		t.Fatal(err)
	}
	msg := sqv1.NewMessagingClient(n.conn)
	if err := publishN(ctx, msg, topic, 2); err != nil {
		t.Fatal(err)
	}
	if _, err := msg.CommitOffsets(ctx, &sqv1.CommitOffsetsRequest{Group: "old", Offsets: []*sqv1.OffsetEntry{{Topic: topic, Partition: 0, Offset: 1}}}); err != nil {
		t.Fatal(err)
	}
	if err := publishN(ctx, msg, topic, 200); err != nil {
		t.Fatal(err)
	}
	if err := n.eng.EnforceRetention(); err != nil {
		t.Fatal(err)
	}
	ti, err := n.eng.DescribeTopic(topic)
	if err != nil {
		t.Fatal(err)
	}
	pi := ti.Partitions[0]
	if pi.LogStartOffset <= 10 || pi.HighWatermark != 202 {
		t.Fatalf("retention left %+v; want the log start past 10 and HW 202", pi)
	}
	return pi
}

// TestLagCountsOnlyStoredRecords: the lag of a committed offset below the
// log start is HW - log start, in DescribeGroup and in the metric.
func TestLagCountsOnlyStoredRecords(t *testing.T) {
	n := startNode(t, control.Options{})
	pi := retainedTopic(t, n, "lag")
	want := pi.HighWatermark - pi.LogStartOffset
	d, err := sqv1.NewGroupsClient(n.conn).DescribeGroup(context.Background(), &sqv1.DescribeGroupRequest{Group: "old"})
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Offsets) != 1 || d.Offsets[0].CommittedOffset != 1 || d.Offsets[0].Lag != int64(want) {
		t.Fatalf("DescribeGroup offsets = %v; want committed 1, lag %d (HW %d - log start %d)", d.Offsets, want, pi.HighWatermark, pi.LogStartOffset)
	}
	got := value(scrape(t, n), "sq_consumer_group_lag_records", map[string]string{"group": "old", "topic": "lag", "partition": "0"})
	if got != float64(want) {
		t.Fatalf("sq_consumer_group_lag_records = %v, want %d", got, want)
	}
}

// TestRawSubscribeWithGroupBelowLogStart: a raw Subscribe for a group whose
// committed offset retention removed starts at the log start (logged with
// the count skipped) instead of failing with OUT_OF_RANGE; an explicit
// START_FROM_OFFSET below the log start fails with OUT_OF_RANGE and the
// range.
func TestRawSubscribeWithGroupBelowLogStart(t *testing.T) {
	var logs logBuf
	n := startNode(t, control.Options{Logger: logs.logger()})
	pi := retainedTopic(t, n, "raw")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	msg := sqv1.NewMessagingClient(n.conn)
	for _, from := range []sqv1.StartFrom{sqv1.StartFrom_START_FROM_EARLIEST, sqv1.StartFrom_START_FROM_LATEST, sqv1.StartFrom_START_FROM_OFFSET} {
		st, err := msg.Subscribe(ctx, &sqv1.SubscribeRequest{Topic: "raw", Group: "old", From: from})
		if err != nil {
			t.Fatal(err)
		}
		r, err := st.Recv()
		if err != nil {
			t.Fatalf("from %v: Recv: %v; want records from the log start %d", from, err, pi.LogStartOffset)
		}
		if r.Records[0].Offset != pi.LogStartOffset {
			t.Fatalf("from %v: first record %d, want the log start %d", from, r.Records[0].Offset, pi.LogStartOffset)
		}
	}
	if !skippedLine(logs.String(), pi.LogStartOffset-1) {
		t.Fatalf("no retention warning with skipped=%d in the server log:\n%s", pi.LogStartOffset-1, logs.String())
	}
	st, err := msg.Subscribe(ctx, &sqv1.SubscribeRequest{Topic: "raw", From: sqv1.StartFrom_START_FROM_OFFSET, Offset: 0})
	if err != nil {
		t.Fatal(err)
	}
	_, err = st.Recv()
	if s, _ := status.FromError(err); s.Code() != codes.OutOfRange || errorReason(s) != "OFFSET_OUT_OF_RANGE" {
		t.Fatalf("explicit offset 0 below the log start: %v, want OUT_OF_RANGE", err)
	}
}

// overtaken wraps the engine: armed, its next Fetch at an offset above 0
// first runs retention past that offset, as if the stream fell behind.
type overtaken struct {
	*engine.Engine
	armed  atomic.Bool
	before func() error
	err    atomic.Pointer[error]
}

func (o *overtaken) Fetch(ctx context.Context, topic string, partition int, offset uint64, maxBytes int, maxWait time.Duration) (*engine.FetchResult, error) {
	if offset > 0 && o.armed.CompareAndSwap(true, false) {
		if err := o.before(); err != nil {
			o.err.Store(&err)
		}
	}
	return o.Engine.Fetch(ctx, topic, partition, offset, maxBytes, maxWait)
}

// FetchID is Fetch for readers that name the topic id (Subscribe).
func (o *overtaken) FetchID(ctx context.Context, topic string, id api.TopicID, partition int, offset uint64, maxBytes int, maxWait time.Duration) (*engine.FetchResult, error) {
	if offset > 0 && o.armed.CompareAndSwap(true, false) {
		if err := o.before(); err != nil {
			o.err.Store(&err)
		}
	}
	return o.Engine.FetchID(ctx, topic, id, partition, offset, maxBytes, maxWait)
}

// overtake installs an overtaken engine in n that, once armed, publishes
// 200 records to topic and enforces retention.
func overtake(t *testing.T, n *node, topic string) *overtaken {
	o := &overtaken{Engine: n.eng}
	msg := sqv1.NewMessagingClient(n.conn)
	o.before = func() error {
		if err := publishN(context.Background(), msg, topic, 200); err != nil {
			return err
		}
		return n.eng.EnforceRetention()
	}
	n.srv.SetEngine(o)
	t.Cleanup(func() {
		if p := o.err.Load(); p != nil {
			t.Errorf("overtaking: %v", *p)
		}
	})
	return o
}

// midStreamTopic creates topic (retention.bytes one segment) with 3
// records.
func midStreamTopic(t *testing.T, n *node, topic string) {
	t.Helper()
	ctx := context.Background()
	_, err := sqv1.NewTopicsClient(n.conn).CreateTopic(ctx, &sqv1.CreateTopicRequest{Name: topic, Partitions: 1,
		Config: &sqv1.TopicConfig{SegmentBytes: retainedSegmentBytes, RetentionBytes: retainedSegmentBytes}})
	if err != nil {
		t.Fatal(err)
	}
	if err := publishN(ctx, sqv1.NewMessagingClient(n.conn), topic, 3); err != nil {
		t.Fatal(err)
	}
}

func logStart(t *testing.T, n *node, topic string) uint64 {
	t.Helper()
	ti, err := n.eng.DescribeTopic(topic)
	if err != nil {
		t.Fatal(err)
	}
	return ti.Partitions[0].LogStartOffset
}

// TestRawSubscribeOvertakenByRetention: a stream whose position retention
// removes between two reads goes on at the log start, logged by the server
// with the count skipped, instead of ending with OUT_OF_RANGE.
func TestRawSubscribeOvertakenByRetention(t *testing.T) {
	var logs logBuf
	n := startNode(t, control.Options{Logger: logs.logger()})
	midStreamTopic(t, n, "mid")
	o := overtake(t, n, "mid")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	o.armed.Store(true)
	st, err := sqv1.NewMessagingClient(n.conn).Subscribe(ctx, &sqv1.SubscribeRequest{Topic: "mid", MaxBytes: 1})
	if err != nil {
		t.Fatal(err)
	}
	r, err := st.Recv()
	if err != nil || len(r.Records) != 1 || r.Records[0].Offset != 0 {
		t.Fatalf("first response %v, %v; want record 0 alone", r, err)
	}
	r, err = st.Recv()
	if err != nil {
		t.Fatalf("after retention: %v; want the stream to go on at the log start", err)
	}
	start := logStart(t, n, "mid")
	if start <= 1 || r.Records[0].Offset != start || r.LogStartOffset != start {
		t.Fatalf("after retention the stream is at %d (log start in response %d), want the log start %d > 1", r.Records[0].Offset, r.LogStartOffset, start)
	}
	if !skippedLine(logs.String(), start-1) {
		t.Fatalf("no retention warning with skipped=%d in the server log:\n%s", start-1, logs.String())
	}
}

// TestGrpcConsumerBelowLogStart: GrpcConsumer starts at the log start for a
// group offset and an explicit StartAt that retention removed, and goes on
// at the log start when retention overtakes it mid-stream; each time it
// logs the count skipped.
func TestGrpcConsumerBelowLogStart(t *testing.T) {
	n := startNode(t, control.Options{})
	pi := retainedTopic(t, n, "gc")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, c := range []struct {
		name string
		cfg  sdk.GrpcConsumerConfig
		from uint64
	}{
		{"group", sdk.GrpcConsumerConfig{ConsumerGroup: "old"}, 1},
		{"StartAt", sdk.GrpcConsumerConfig{StartFrom: sdk.StartAt(0)}, 0},
	} {
		var logs logBuf
		cfg := c.cfg
		cfg.GrpcConfig, cfg.Topic, cfg.Logger = sdk.GrpcConfig{Addr: n.grpcAddr}, "gc", logs.logger()
		first := firstGrpcOffset(ctx, t, cfg)
		if first != pi.LogStartOffset || !skippedLine(logs.String(), pi.LogStartOffset-c.from) {
			t.Errorf("%s: first offset %d (want the log start %d); logs:\n%s", c.name, first, pi.LogStartOffset, logs.String())
		}
	}

	// With OnRecordsLost the loss goes to the callback instead of the log.
	{
		var logs logBuf
		type lostCall struct {
			p        uint32
			from, to uint64
		}
		var mu sync.Mutex
		var calls []lostCall
		cfg := sdk.GrpcConsumerConfig{GrpcConfig: sdk.GrpcConfig{Addr: n.grpcAddr}, Topic: "gc", ConsumerGroup: "old", Logger: logs.logger(),
			OnRecordsLost: func(p uint32, from, to uint64) {
				mu.Lock()
				calls = append(calls, lostCall{p, from, to})
				mu.Unlock()
			}}
		if first := firstGrpcOffset(ctx, t, cfg); first != pi.LogStartOffset {
			t.Errorf("OnRecordsLost: first offset %d, want the log start %d", first, pi.LogStartOffset)
		}
		mu.Lock()
		if len(calls) != 1 || calls[0] != (lostCall{0, 1, pi.LogStartOffset}) || strings.Contains(logs.String(), "records lost to retention") {
			t.Errorf("OnRecordsLost calls %+v, want one (0, 1, %d) and no warning; logs:\n%s", calls, pi.LogStartOffset, logs.String())
		}
		mu.Unlock()
	}

	midStreamTopic(t, n, "gcmid")
	o := overtake(t, n, "gcmid")
	var logs logBuf
	o.armed.Store(true)
	cons, err := sdk.NewGrpcConsumer(ctx, sdk.GrpcConsumerConfig{GrpcConfig: sdk.GrpcConfig{Addr: n.grpcAddr}, Topic: "gcmid", MaxBytes: 1, Logger: logs.logger()})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	var offsets []uint64
	for len(offsets) < 2 && ctx.Err() == nil {
		msgs, err := cons.Poll(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range msgs {
			offsets = append(offsets, m.Offset)
		}
	}
	start := logStart(t, n, "gcmid")
	if len(offsets) < 2 || offsets[0] != 0 || offsets[1] != start || !skippedLine(logs.String(), start-1) {
		t.Fatalf("offsets %v, want 0 then the log start %d with a warning skipped=%d; logs:\n%s", offsets, start, start-1, logs.String())
	}
}

// firstGrpcOffset returns the offset of the first record a GrpcConsumer
// with cfg polls.
func firstGrpcOffset(ctx context.Context, t *testing.T, cfg sdk.GrpcConsumerConfig) uint64 {
	t.Helper()
	c, err := sdk.NewGrpcConsumer(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for ctx.Err() == nil {
		msgs, err := c.Poll(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(msgs) > 0 {
			return msgs[0].Offset
		}
	}
	t.Fatal(ctx.Err())
	return 0
}

// TestCapnpConsumerBelowLogStart: the Cap'n Proto consumer of a group whose
// committed offset retention removed starts at the log start and logs the
// count skipped, the same as the gRPC paths.
func TestCapnpConsumerBelowLogStart(t *testing.T) {
	n := startNode(t, control.Options{})
	pi := retainedTopic(t, n, "cc")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, useFetch := range []bool{false, true} {
		var logs logBuf
		c, err := sdk.NewConsumer(ctx, sdk.ConsumerConfig{Addr: n.capnpAddr, Topic: "cc", ConsumerGroup: "old", UseFetch: useFetch, Logger: logs.logger()})
		if err != nil {
			t.Fatal(err)
		}
		var first int64 = -1
		for first < 0 && ctx.Err() == nil {
			msgs, err := c.Poll(ctx)
			if err != nil && !errors.Is(err, context.DeadlineExceeded) {
				t.Fatal(err)
			}
			if len(msgs) > 0 {
				first = int64(msgs[0].Offset)
			}
		}
		c.Close()
		if first != int64(pi.LogStartOffset) || !skippedLine(logs.String(), pi.LogStartOffset-1) {
			t.Errorf("UseFetch %v: first offset %d (want the log start %d); logs:\n%s", useFetch, first, pi.LogStartOffset, logs.String())
		}
	}
}

// TestCapnpConsumerOvertakenByRetention: a Cap'n Proto consumer whose
// position retention removes while it reads goes on at the log start and
// logs the count skipped (push subscription and fetch).
func TestCapnpConsumerOvertakenByRetention(t *testing.T) {
	n := startNode(t, control.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	msg := sqv1.NewMessagingClient(n.conn)
	for _, useFetch := range []bool{false, true} {
		topic := fmt.Sprintf("ccmid-%v", useFetch)
		midStreamTopic(t, n, topic)
		var logs logBuf
		c, err := sdk.NewConsumer(ctx, sdk.ConsumerConfig{Addr: n.capnpAddr, Topic: topic, UseFetch: useFetch, MaxBytes: 1, MaxPollRecords: 1, Logger: logs.logger()})
		if err != nil {
			t.Fatal(err)
		}
		var offsets []uint64
		poll := func() {
			for ctx.Err() == nil {
				msgs, err := c.Poll(ctx)
				if err != nil {
					t.Fatal(err)
				}
				for _, m := range msgs {
					offsets = append(offsets, m.Offset)
				}
				if len(msgs) > 0 {
					return
				}
			}
		}
		poll()
		if err := publishN(ctx, msg, topic, 200); err != nil {
			t.Fatal(err)
		}
		if err := n.eng.EnforceRetention(); err != nil {
			t.Fatal(err)
		}
		start := logStart(t, n, topic)
		if start <= 3 {
			t.Fatalf("retention left the log start at %d", start)
		}
		for offsets[len(offsets)-1] < start && ctx.Err() == nil {
			poll()
		}
		c.Close()
		// Records read ahead before retention ran are still delivered; the
		// first one after them is the log start, and the gap is logged.
		i := len(offsets) - 1
		if offsets[i] != start || i == 0 || !skippedLine(logs.String(), start-offsets[i-1]-1) {
			t.Errorf("UseFetch %v: offsets %v, want a jump to the log start %d logged with its count; logs:\n%s", useFetch, offsets, start, logs.String())
		}
	}
}
