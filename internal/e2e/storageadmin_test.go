package e2e

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/api/batch"
	"github.com/seedqueue/sq/engine"
	"github.com/seedqueue/sq/internal/testutil"
	"github.com/seedqueue/sq/net/dataplane"
	"github.com/seedqueue/sq/sdk"
)

// TestCLITopicDeleteAndFromTime runs the real binaries: a topic created
// with retention settings shows them, consume --from-time starts at the
// first record the server appended at or after the time, and topic delete
// frees the name at once.
func TestCLITopicDeleteAndFromTime(t *testing.T) {
	srv := startServer(t, t.TempDir())
	sqOK(t, srv.addr, nil, "topic", "create", "rt", "--retention-ms", "3600000", "--retention-bytes", "1073741824", "--segment-ms", "60000")
	desc := sqOK(t, srv.addr, nil, "topic", "describe", "rt")
	for _, want := range []string{"3600000 ms (1h)", "1.0 GiB", "60000 ms (1m)"} {
		if !strings.Contains(desc, want) {
			t.Errorf("describe lacks %q:\n%s", want, desc)
		}
	}
	sqOK(t, srv.addr, []byte("a1\na2\n"), "produce", "--topic", "rt")
	// Every record above was appended at or before mark; let the clock
	// pass it (at most a millisecond) so the next ones are appended later.
	mark := time.Now().UnixMilli()
	for time.Now().UnixMilli() <= mark {
		runtime.Gosched()
	}
	sqOK(t, srv.addr, []byte("b1\nb2\n"), "produce", "--topic", "rt")
	from := strconv.FormatInt(mark+1, 10)
	cases := []struct{ from, want string }{
		{from, "b1\nb2\n"},
		{time.UnixMilli(mark + 1).UTC().Format(time.RFC3339Nano), "b1\nb2\n"},
		{"0", "a1\na2\nb1\nb2\n"},
		{"1970-01-01T00:00:00Z", "a1\na2\nb1\nb2\n"},
		{strconv.FormatInt(time.Now().Add(time.Hour).UnixMilli(), 10), ""},
	}
	for _, tc := range cases {
		if got := sqOK(t, srv.addr, nil, "consume", "--topic", "rt", "--from-time", tc.from); got != tc.want {
			t.Errorf("consume --from-time %s printed %q, want %q", tc.from, got, tc.want)
		}
	}
	if msg := sqFails(t, srv.addr, nil, "consume", "--topic", "rt", "--from-time", "yesterday"); !strings.Contains(msg, "RFC 3339") {
		t.Errorf("bad --from-time: %s", msg)
	}
	if msg := sqFails(t, srv.addr, nil, "consume", "--topic", "rt", "--from", "latest", "--from-time", from); !strings.Contains(msg, "cannot be combined") {
		t.Errorf("--from with --from-time: %s", msg)
	}
	if out := sqOK(t, srv.addr, nil, "topic", "delete", "rt"); !strings.Contains(out, "deleted topic rt") {
		t.Errorf("topic delete printed %q", out)
	}
	for _, args := range [][]string{{"topic", "describe", "rt"}, {"topic", "delete", "rt"}, {"consume", "--topic", "rt"}} {
		if msg := sqFails(t, srv.addr, nil, args...); !strings.Contains(msg, "UNKNOWN_TOPIC") {
			t.Errorf("sq %v after delete: %s", args, msg)
		}
	}
	sqOK(t, srv.addr, nil, "topic", "create", "rt")
	if got := sqOK(t, srv.addr, nil, "consume", "--topic", "rt"); got != "" {
		t.Errorf("new topic of the same name holds %q", got)
	}
	// The deletion survives a restart.
	srv = srv.restart(t)
	if got := sqOK(t, srv.addr, nil, "consume", "--topic", "rt"); got != "" {
		t.Errorf("after restart the topic holds %q", got)
	}
}

// inProcess is an engine with an injected clock and no retention
// goroutine, served on loopback, and a client.
type inProcess struct {
	eng    *engine.Engine
	addr   string
	client *sdk.Client
	mu     sync.Mutex
	now    time.Time
}

func (p *inProcess) clock() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.now
}

func (p *inProcess) advance(d time.Duration) {
	p.mu.Lock()
	p.now = p.now.Add(d)
	p.mu.Unlock()
}

func startInProcess(t *testing.T) *inProcess {
	t.Helper()
	p := &inProcess{now: time.UnixMilli(1_700_000_000_000)}
	eng, err := engine.Open(engine.Options{
		DataDir: t.TempDir(), SyncPolicy: "none", SegmentBytes: 40 << 10, MaxBatchBytes: 16 << 10, PreallocBytes: 16 << 10,
		Now: p.clock, RetentionCheckInterval: -1, Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	p.eng = eng
	srv, err := dataplane.New(eng, dataplane.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	p.addr = ln.Addr().String()
	p.client, err = sdk.Dial(context.Background(), sdk.ClientConfig{Addr: p.addr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.client.Close()
		srv.Close()
		if err := <-served; err != nil {
			t.Logf("serve after close: %v", err)
		}
		if err := eng.Close(); err != nil {
			t.Errorf("engine close: %v", err)
		}
	})
	return p
}

// publish appends n batches of 10 records "v<offset>" to partition 0.
func (p *inProcess) publish(t *testing.T, topic string, n int) {
	t.Helper()
	ctx := context.Background()
	for i := 0; i < n; i++ {
		off, _, err := p.client.ListOffsets(ctx, topic, 0, sdk.ListLatest)
		if err != nil {
			t.Fatal(err)
		}
		var b batch.Builder
		for j := uint64(0); j < 10; j++ {
			b.Add(nil, fmt.Appendf(nil, "v%d", off+j), nil, 1)
		}
		buf, err := b.Build()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.client.Publish(ctx, topic, 0, buf); err != nil {
			t.Fatal(err)
		}
	}
}

// TestConsumerResumesAtLogStart is case g end to end: a fetch below the
// log start gets OFFSET_OUT_OF_RANGE with the valid range, and a group
// whose committed offset retention deleted resumes at the log start, not
// at the end, and the SDK logs the gap. ListOffsets and StartAtTime use
// broker append times (the injected clock).
func TestConsumerResumesAtLogStart(t *testing.T) {
	p := startInProcess(t)
	ctx := context.Background()
	if _, err := p.client.CreateTopic(ctx, "g", 1, sdk.TopicConfig{RetentionMs: 1000, SegmentBytes: 20 << 10}); err != nil {
		t.Fatal(err)
	}
	p.publish(t, "g", 100)
	if _, err := p.client.CommitOffsets(ctx, "grp", []sdk.OffsetCommit{{Topic: "g", Partition: 0, Offset: 5}}); err != nil {
		t.Fatal(err)
	}
	p.advance(2 * time.Second)
	second := p.clock()
	p.publish(t, "g", 100)
	if err := p.eng.EnforceRetention(); err != nil {
		t.Fatal(err)
	}
	start, _, err := p.client.ListOffsets(ctx, "g", 0, sdk.ListEarliest)
	if err != nil || start <= 5 || start > 1000 {
		t.Fatalf("log start after retention = %d, %v", start, err)
	}
	if off, ts, err := p.client.ListOffsets(ctx, "g", 0, second.UnixMilli()); err != nil || off != 1000 || ts != second.UnixMilli() {
		t.Fatalf("ListOffsets(second half) = %d, %d, %v; want 1000", off, ts, err)
	}
	_, err = p.client.Fetch(ctx, sdk.FetchRequest{Topic: "g", Offset: 5})
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Code != api.CodeOffsetOutOfRange || !ae.HasRange || ae.RangeStart != start || ae.RangeEnd != 2000 {
		t.Fatalf("fetch below the log start = %v; want OFFSET_OUT_OF_RANGE [%d, 2000]", err, start)
	}
	t.Run("group resumes at log start", func(t *testing.T) {
		logs := testutil.NewLogBuffer()
		first := consumeFirst(t, sdk.ConsumerConfig{Addr: p.addr, Topic: "g", ConsumerGroup: "grp",
			Logger: slog.New(slog.NewTextHandler(logs, nil))})
		if first.Offset != start || string(first.Value) != fmt.Sprintf("v%d", start) {
			t.Fatalf("first record %d %q; want the log start %d", first.Offset, first.Value, start)
		}
		if !strings.Contains(logs.String(), "retention") {
			t.Errorf("the skipped records were not logged:\n%s", logs.String())
		}
	})
	t.Run("start at time", func(t *testing.T) {
		first := consumeFirst(t, sdk.ConsumerConfig{Addr: p.addr, Topic: "g", StartFrom: sdk.StartAtTime(second)})
		if first.Offset != 1000 {
			t.Fatalf("StartAtTime: first record at %d, want 1000", first.Offset)
		}
	})
}

// consumeFirst polls a new consumer until it returns a record.
func consumeFirst(t *testing.T, cfg sdk.ConsumerConfig) sdk.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := sdk.NewConsumer(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for {
		msgs, err := c.Poll(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(msgs) > 0 {
			return msgs[0]
		}
	}
}

// TestDeleteTopicUnderConsumer is case k end to end: a consumer reading a
// topic that is deleted gets UNKNOWN_TOPIC from Poll, and a new topic of
// the same name starts empty.
func TestDeleteTopicUnderConsumer(t *testing.T) {
	p := startInProcess(t)
	ctx := context.Background()
	if _, err := p.client.CreateTopic(ctx, "k", 1, sdk.TopicConfig{}); err != nil {
		t.Fatal(err)
	}
	p.publish(t, "k", 3)
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	c, err := sdk.NewConsumer(pctx, sdk.ConsumerConfig{Addr: p.addr, Topic: "k", MaxWait: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for n := 0; n < 30; {
		msgs, err := c.Poll(pctx)
		if err != nil {
			t.Fatal(err)
		}
		n += len(msgs)
	}
	// The consumer now waits at the end of the partition.
	if err := p.client.DeleteTopic(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	for {
		_, err := c.Poll(pctx)
		if errors.Is(err, api.ErrUnknownTopic) {
			break
		}
		if err != nil {
			t.Fatalf("Poll after delete = %v, want UNKNOWN_TOPIC", err)
		}
	}
	if err := p.client.DeleteTopic(ctx, "k"); !errors.Is(err, api.ErrUnknownTopic) {
		t.Fatalf("second delete = %v", err)
	}
	if _, err := p.client.CreateTopic(ctx, "k", 1, sdk.TopicConfig{}); err != nil {
		t.Fatal(err)
	}
	if off, _, err := p.client.ListOffsets(ctx, "k", 0, sdk.ListLatest); err != nil || off != 0 {
		t.Fatalf("new topic of the same name: end %d, %v", off, err)
	}
}
