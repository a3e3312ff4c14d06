package sdk

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/api/batch"
)

func dialTest(t *testing.T, s *fakeServer) *Client {
	t.Helper()
	c, err := Dial(testCtx(t), ClientConfig{Addr: s.addr, ReconnectBackoff: time.Millisecond, ReconnectBackoffMax: 10 * time.Millisecond})
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestClientHandshakeLimits(t *testing.T) {
	s := newFakeServer(t)
	c := dialTest(t, s)
	if got := c.Limits(); got != s.limits {
		t.Fatalf("Limits() = %+v, want %+v", got, s.limits)
	}
}

func TestDialFailsFast(t *testing.T) {
	s := newFakeServer(t)
	addr := s.addr
	s.stop()
	_, err := Dial(testCtx(t), ClientConfig{Addr: addr})
	if !errors.Is(err, ErrConnection) || !IsRetriable(err) {
		t.Fatalf("Dial to a stopped server: %v, want ErrConnection", err)
	}
}

func TestClientAdmin(t *testing.T) {
	s := newFakeServer(t)
	c := dialTest(t, s)
	ctx := testCtx(t)
	ti, err := c.CreateTopic(ctx, "orders", 3, TopicConfig{SyncPolicy: "none", RetentionMs: 60000})
	if err != nil {
		t.Fatalf("CreateTopic: %v", err)
	}
	if ti.Name != "orders" || ti.Partitions != 3 || ti.Config.SyncPolicy != "none" || ti.Config.RetentionMs != 60000 {
		t.Fatalf("CreateTopic = %+v", ti)
	}
	if _, err := c.CreateTopic(ctx, "orders", 3, TopicConfig{}); !errors.Is(err, api.ErrTopicExists) {
		t.Fatalf("second CreateTopic: %v, want TOPIC_EXISTS", err)
	}
	if _, err := c.DescribeTopic(ctx, "nope"); !errors.Is(err, api.ErrUnknownTopic) {
		t.Fatalf("DescribeTopic(nope): %v, want UNKNOWN_TOPIC", err)
	}
	p := newTestProducer(t, s)
	if _, err := p.Send(ctx, "orders", []byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	d, err := c.DescribeTopic(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	if len(d.PartitionInfos) != 3 {
		t.Fatalf("DescribeTopic partitions = %+v", d.PartitionInfos)
	}
	var hw uint64
	for _, pi := range d.PartitionInfos {
		hw += pi.HighWatermark
	}
	if hw != 1 {
		t.Fatalf("sum of high watermarks = %d, want 1", hw)
	}
	list, err := c.ListTopics(ctx)
	if err != nil || len(list) != 1 || list[0].Name != "orders" {
		t.Fatalf("ListTopics = %+v, %v", list, err)
	}
	md, err := c.Metadata(ctx, "orders", "nope")
	if err != nil || len(md.Topics) != 1 || md.Topics[0].Partitions != 3 || md.NodeID != "fake-1" {
		t.Fatalf("Metadata = %+v, %v", md, err)
	}
}

func TestFetchDropsRecordsBeforeOffset(t *testing.T) {
	s := newFakeServer(t)
	s.createTopic("t", 1)
	c := dialTest(t, s)
	ctx := testCtx(t)
	var b batch.Builder
	for i := range 10 {
		b.Add([]byte(fmt.Sprint("k", i)), []byte(fmt.Sprint("v", i)), nil, 0)
	}
	data, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Publish(ctx, "t", 0, data)
	if err != nil || res.BaseOffset != 0 || res.RecordCount != 10 || res.Durability != DurabilitySynced {
		t.Fatalf("Publish = %+v, %v", res, err)
	}
	fr, err := c.Fetch(ctx, FetchRequest{Topic: "t", Partition: 0, Offset: 4})
	if err != nil {
		t.Fatal(err)
	}
	if fr.NextOffset != 10 || fr.HighWatermark != 10 || len(fr.Messages) != 6 {
		t.Fatalf("Fetch = next %d hw %d, %d messages", fr.NextOffset, fr.HighWatermark, len(fr.Messages))
	}
	for i, m := range fr.Messages {
		if m.Offset != uint64(4+i) || string(m.Value) != fmt.Sprint("v", 4+i) || string(m.Key) != fmt.Sprint("k", 4+i) {
			t.Fatalf("message %d = %+v", i, m)
		}
	}
	if _, err := c.Fetch(ctx, FetchRequest{Topic: "t", Partition: 0, Offset: 11}); !errors.Is(err, api.ErrOffsetOutOfRange) {
		t.Fatalf("Fetch beyond HW: %v", err)
	} else if e := api.AsError(err); e.RangeEnd != 10 {
		t.Fatalf("range = [%d, %d]", e.RangeStart, e.RangeEnd)
	}
}

func TestFetchLongPollIdle(t *testing.T) {
	s := newFakeServer(t)
	s.createTopic("t", 1)
	c := dialTest(t, s)
	fr, err := c.Fetch(testCtx(t), FetchRequest{Topic: "t", Offset: 0, MaxWait: 50 * time.Millisecond})
	if err != nil || len(fr.Messages) != 0 || fr.NextOffset != 0 {
		t.Fatalf("idle Fetch = %+v, %v", fr, err)
	}
	// The server holds an idle fetch for its MaxWait: with an hour, the
	// caller's deadline ends the wait, not an early empty answer.
	ctx, cancel := context.WithTimeout(testCtx(t), 100*time.Millisecond)
	defer cancel()
	if fr, err := c.Fetch(ctx, FetchRequest{Topic: "t", Offset: 0, MaxWait: time.Hour}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("idle Fetch with MaxWait 1h = %+v, %v; want the caller's deadline", fr, err)
	}
}

// TestResponsesOutOfOrder holds the first request at the server until a
// second one has been answered.
func TestResponsesOutOfOrder(t *testing.T) {
	s := newFakeServer(t)
	s.createTopic("slow", 1)
	s.createTopic("fast", 2)
	release := make(chan struct{})
	s.setHook(func(f api.Frame) {
		if f.Which() != api.Frame_Which_describeTopicRequest {
			return
		}
		dr, _ := f.DescribeTopicRequest()
		if name, _ := dr.Name(); name == "slow" {
			<-release
		}
	})
	c := dialTest(t, s)
	ctx := testCtx(t)
	type result struct {
		ti  TopicInfo
		err error
	}
	slow := make(chan result, 1)
	go func() {
		ti, err := c.DescribeTopic(ctx, "slow")
		slow <- result{ti, err}
	}()
	waitFor(t, 5*time.Second, "slow request at the server", func() bool { return s.count(api.Frame_Which_describeTopicRequest) == 1 })
	ti, err := c.DescribeTopic(ctx, "fast")
	if err != nil || ti.Name != "fast" || ti.Partitions != 2 {
		t.Fatalf("fast DescribeTopic = %+v, %v", ti, err)
	}
	select {
	case r := <-slow:
		t.Fatalf("slow request answered before release: %+v", r)
	default:
	}
	close(release)
	r := <-slow
	if r.err != nil || r.ti.Name != "slow" || r.ti.Partitions != 1 {
		t.Fatalf("slow DescribeTopic = %+v, %v", r.ti, r.err)
	}
}

func TestClientReconnectsAfterRestart(t *testing.T) {
	s := newFakeServer(t)
	s.createTopic("t", 1)
	c := dialTest(t, s)
	ctx := testCtx(t)
	if _, err := c.ListTopics(ctx); err != nil {
		t.Fatal(err)
	}
	s.restart()
	// The old connection is gone: requests fail with ErrConnection until a
	// redial succeeds.
	var err error
	waitFor(t, 5*time.Second, "reconnect", func() bool {
		_, err = c.ListTopics(ctx)
		if err != nil && !errors.Is(err, ErrConnection) {
			t.Fatalf("ListTopics after restart: %v", err)
		}
		return err == nil
	})
}

func TestClientClose(t *testing.T) {
	s := newFakeServer(t)
	s.createTopic("t", 1)
	c := dialTest(t, s)
	ctx := testCtx(t)
	done := make(chan error, 1)
	go func() {
		_, err := c.Fetch(ctx, FetchRequest{Topic: "t", MaxWait: 10 * time.Second})
		done <- err
	}()
	waitFor(t, 5*time.Second, "fetch at the server", func() bool { return s.count(api.Frame_Which_fetchRequest) == 1 })
	c.Close()
	if err := <-done; !errors.Is(err, ErrClosed) {
		t.Fatalf("Fetch during Close: %v, want ErrClosed", err)
	}
	if _, err := c.ListTopics(ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("ListTopics after Close: %v", err)
	}
}

func TestCommitAndFetchOffsets(t *testing.T) {
	s := newFakeServer(t)
	s.createTopic("t", 2)
	c := dialTest(t, s)
	ctx := testCtx(t)
	p := newTestProducer(t, s)
	if _, err := p.SendBatch(ctx, []ProducerMessage{NewProducerMessage("t", []byte("a")), NewProducerMessage("t", []byte("b"))}); err != nil {
		t.Fatal(err)
	}
	offs, _ := c.FetchOffsets(ctx, "g", "t")
	if len(offs) != 0 {
		t.Fatalf("FetchOffsets before commit = %+v", offs)
	}
	res, err := c.CommitOffsets(ctx, "g", []OffsetCommit{{Topic: "t", Partition: 0, Offset: 0}, {Topic: "t", Partition: 1, Offset: 99}})
	if err != nil || len(res) != 2 || res[0].Err != nil || !errors.Is(res[1].Err, api.ErrOffsetOutOfRange) {
		t.Fatalf("CommitOffsets = %+v, %v", res, err)
	}
	offs, err = c.FetchOffsets(ctx, "g", "t")
	if err != nil || len(offs) != 1 || offs[0].Partition != 0 || offs[0].Offset != 0 {
		t.Fatalf("FetchOffsets = %+v, %v", offs, err)
	}
}

func TestBackoffBounds(t *testing.T) {
	for n := 1; n < 20; n++ {
		d := backoff(n, 10*time.Millisecond, 200*time.Millisecond)
		want := 10 * time.Millisecond << (n - 1)
		if want > 200*time.Millisecond || want <= 0 {
			want = 200 * time.Millisecond
		}
		if d < want/2 || d > want {
			t.Fatalf("backoff(%d) = %v, want in [%v, %v]", n, d, want/2, want)
		}
	}
}

func TestInFlightBoundedByServerLimit(t *testing.T) {
	s := newFakeServer(t)
	s.limits.MaxInFlight = 2
	s.createTopic("t", 1)
	release := make(chan struct{})
	s.setHook(func(f api.Frame) {
		if f.Which() == api.Frame_Which_describeTopicRequest {
			<-release
		}
	})
	c := dialTest(t, s)
	ctx := testCtx(t)
	errs := make(chan error, 5)
	for range 5 {
		go func() {
			_, err := c.DescribeTopic(ctx, "t")
			errs <- err
		}()
	}
	waitFor(t, 5*time.Second, "two requests at the server", func() bool { return s.count(api.Frame_Which_describeTopicRequest) == 2 })
	close(release)
	for range 5 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.maxSeen > 2 {
		t.Fatalf("%d requests in flight, server allows 2", s.maxSeen)
	}
}

func TestHandshakeErrorIsPermanent(t *testing.T) {
	s := newFakeServer(t)
	s.rejectHandshake = api.CodeUnsupportedVersion
	_, err := Dial(testCtx(t), ClientConfig{Addr: s.addr})
	if !errors.Is(err, api.ErrUnsupportedVersion) || errors.Is(err, ErrConnection) {
		t.Fatalf("Dial = %v, want UNSUPPORTED_VERSION", err)
	}
}

func TestFetchDetectsCorruptBatch(t *testing.T) {
	s := newFakeServer(t)
	s.createTopic("t", 1)
	produce(t, s, "t", 3)
	s.mu.Lock()
	b := s.topics["t"].parts[0].batches[0]
	b[len(b)-1] ^= 0xff
	s.mu.Unlock()
	c := dialTest(t, s)
	if _, err := c.Fetch(testCtx(t), FetchRequest{Topic: "t"}); !errors.Is(err, batch.ErrCorrupt) {
		t.Fatalf("Fetch of a corrupt batch: %v, want batch.ErrCorrupt", err)
	}
}

func TestRequestTimeoutClosesConnection(t *testing.T) {
	s := newFakeServer(t)
	s.createTopic("t", 1)
	release := make(chan struct{})
	defer close(release)
	s.setHook(func(f api.Frame) {
		if f.Which() == api.Frame_Which_describeTopicRequest {
			<-release
		}
	})
	c, err := Dial(testCtx(t), ClientConfig{Addr: s.addr, RequestTimeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.DescribeTopic(testCtx(t), "t"); !errors.Is(err, ErrConnection) {
		t.Fatalf("DescribeTopic without answer: %v, want ErrConnection", err)
	}
	if _, err := c.ListTopics(testCtx(t)); err != nil {
		t.Fatalf("ListTopics on the new connection: %v", err)
	}
}

func TestErrorResponse(t *testing.T) {
	s := newFakeServer(t)
	c := dialTest(t, s)
	s.mu.Lock()
	s.errorResponseFor = api.Frame_Which_listTopicsRequest
	s.mu.Unlock()
	if _, err := c.ListTopics(testCtx(t)); !errors.Is(err, api.ErrInvalidRequest) {
		t.Fatalf("ListTopics answered by errorResponse: %v, want INVALID_REQUEST", err)
	}
	// The connection stays usable.
	if _, err := c.Metadata(testCtx(t)); err != nil {
		t.Fatal(err)
	}
}
