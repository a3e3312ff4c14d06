package sdk

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seedqueue/sq/api"
)

// produce sends n keyed records "v<i>" to topic and returns their acks.
func produce(t *testing.T, s *fakeServer, topic string, n int) []Ack {
	t.Helper()
	p := newTestProducer(t, s)
	var msgs []ProducerMessage
	for i := range n {
		msgs = append(msgs, NewProducerMessage(topic, []byte(fmt.Sprint("v", i))).WithKey([]byte(fmt.Sprint("k", i))))
	}
	acks, err := p.SendBatch(testCtx(t), msgs)
	if err != nil {
		t.Fatal(err)
	}
	p.Close()
	return acks
}

func TestConsumerTopicRequired(t *testing.T) {
	_, err := NewConsumer(testCtx(t), ConsumerConfig{})
	if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "Topic") {
		t.Fatalf("NewConsumer without topic: %v", err)
	}
}

func TestConsumerUnknownTopic(t *testing.T) {
	s := newFakeServer(t)
	_, err := NewConsumer(testCtx(t), ConsumerConfig{Addr: s.addr, Topic: "nope"})
	if !errors.Is(err, api.ErrUnknownTopic) {
		t.Fatalf("NewConsumer on a missing topic: %v", err)
	}
}

func TestPollAcrossPartitionsInOrder(t *testing.T) {
	s := newFakeServer(t)
	s.createTopic("t", 4)
	acks := produce(t, s, "t", 200)
	c := newTestConsumer(t, s, ConsumerConfig{Topic: "t", MaxPollRecords: 7})
	msgs := pollN(t, c, 200)
	if len(msgs) != 200 {
		t.Fatalf("got %d messages", len(msgs))
	}
	next := map[uint32]uint64{}
	byPos := map[string]string{}
	for _, a := range acks {
		byPos[fmt.Sprint(a.Partition, "/", a.Offset)] = ""
	}
	for _, m := range msgs {
		if m.Topic != "t" || m.Offset != next[m.Partition] {
			t.Fatalf("message %+v out of order: want offset %d", m, next[m.Partition])
		}
		next[m.Partition]++
		if strings.TrimPrefix(string(m.Key), "k") != strings.TrimPrefix(string(m.Value), "v") {
			t.Fatalf("key %q with value %q", m.Key, m.Value)
		}
		delete(byPos, fmt.Sprint(m.Partition, "/", m.Offset))
	}
	if len(next) != 4 || len(byPos) != 0 {
		t.Fatalf("partitions read %v, %d acked records not read", next, len(byPos))
	}
	// Idle: an empty result after MaxWait, no error.
	more, err := c.Poll(testCtx(t))
	if err != nil || len(more) != 0 {
		t.Fatalf("idle Poll = %d messages, %v", len(more), err)
	}
}

// An idle Poll waits for MaxWait: with an hour, the caller's deadline ends
// it, not an early empty answer.
func TestIdlePollWaitsForMaxWait(t *testing.T) {
	s := newFakeServer(t)
	s.createTopic("t", 1)
	c := newTestConsumer(t, s, ConsumerConfig{Topic: "t", MaxWait: time.Hour})
	ctx, cancel := context.WithTimeout(testCtx(t), 100*time.Millisecond)
	defer cancel()
	if msgs, err := c.Poll(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("idle Poll with MaxWait 1h = %d messages, %v; want the caller's deadline", len(msgs), err)
	}
}

func TestConsumerHeadersAndEmptyValues(t *testing.T) {
	s := newFakeServer(t)
	s.createTopic("t", 1)
	p := newTestProducer(t, s)
	msgs := []ProducerMessage{
		NewProducerMessage("t", nil).WithKey([]byte{}),
		NewProducerMessage("t", []byte("x")).WithHeaders(Header{Key: "trace", Value: []byte("abc")}, Header{Key: "empty"}),
	}
	if _, err := p.SendBatch(testCtx(t), msgs); err != nil {
		t.Fatal(err)
	}
	c := newTestConsumer(t, s, ConsumerConfig{Topic: "t"})
	got := pollN(t, c, 2)
	if got[0].Key == nil || len(got[0].Key) != 0 || got[0].Value == nil || len(got[0].Value) != 0 || got[0].Headers != nil {
		t.Fatalf("message 0 = %#v", got[0])
	}
	if got[1].Key != nil || len(got[1].Headers) != 2 || got[1].Headers[0].Key != "trace" || string(got[1].Headers[0].Value) != "abc" || got[1].Headers[1].Key != "empty" {
		t.Fatalf("message 1 = %#v", got[1])
	}
}

func TestStartFrom(t *testing.T) {
	s := newFakeServer(t)
	s.createTopic("t", 1)
	produce(t, s, "t", 10)
	for _, tc := range []struct {
		start StartPosition
		first uint64
		name  string
	}{
		{StartEarliest, 0, "earliest"},
		{StartAt(6), 6, "offset 6"},
		{StartLatest, 10, "latest"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.start.String() != tc.name {
				t.Fatalf("String() = %q", tc.start.String())
			}
			c := newTestConsumer(t, s, ConsumerConfig{Topic: "t", StartFrom: tc.start})
			if tc.start == StartLatest {
				if msgs, err := c.Poll(testCtx(t)); err != nil || len(msgs) != 0 {
					t.Fatalf("Poll at latest = %v, %v", msgs, err)
				}
				produce(t, s, "t", 1)
			}
			msgs := pollN(t, c, 1)
			if msgs[0].Offset != tc.first {
				t.Fatalf("first offset %d, want %d", msgs[0].Offset, tc.first)
			}
		})
	}
}

func TestCommitAndResume(t *testing.T) {
	s := newFakeServer(t)
	s.createTopic("t", 2)
	produce(t, s, "t", 20)
	cfg := ConsumerConfig{Topic: "t", ConsumerGroup: "g", MaxPollRecords: 5}
	c := newTestConsumer(t, s, cfg)
	first, err := c.Poll(testCtx(t))
	if err != nil || len(first) == 0 {
		t.Fatalf("Poll = %d, %v", len(first), err)
	}
	if err := c.Commit(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Poll(testCtx(t)); !errors.Is(err, ErrClosed) {
		t.Fatalf("Poll after Close: %v", err)
	}
	// The second consumer resumes after the first Poll's records, even with
	// StartFrom latest (committed offsets win).
	cfg.StartFrom = StartLatest
	cfg.MaxPollRecords = 100
	c2 := newTestConsumer(t, s, cfg)
	rest := pollN(t, c2, 20-len(first))
	seen := map[string]bool{}
	for _, m := range append(first, rest...) {
		k := fmt.Sprint(m.Partition, "/", m.Offset)
		if seen[k] {
			t.Fatalf("record %s read twice", k)
		}
		seen[k] = true
	}
	if len(seen) != 20 {
		t.Fatalf("read %d distinct records, want 20", len(seen))
	}
}

func TestCommitWithoutGroup(t *testing.T) {
	s := newFakeServer(t)
	s.createTopic("t", 1)
	c := newTestConsumer(t, s, ConsumerConfig{Topic: "t"})
	if err := c.Commit(testCtx(t)); !errors.Is(err, ErrNoGroup) {
		t.Fatalf("Commit = %v, want ErrNoGroup", err)
	}
}

// TestAutoCommit checks that auto-commit never covers records not yet
// returned, commits at the next Poll, and commits at Close.
func TestAutoCommit(t *testing.T) {
	s := newFakeServer(t)
	s.createTopic("t", 1)
	produce(t, s, "t", 10)
	c := newTestConsumer(t, s, ConsumerConfig{Topic: "t", ConsumerGroup: "g", AutoCommit: true, AutoCommitInterval: time.Nanosecond, MaxPollRecords: 3})
	committed := func() (uint64, bool) {
		cl := dialTest(t, s)
		defer cl.Close()
		offs, err := cl.FetchOffsets(testCtx(t), "g", "t")
		if err != nil || len(offs) > 1 {
			t.Fatalf("FetchOffsets = %+v, %v", offs, err)
		}
		if len(offs) == 0 {
			return 0, false
		}
		return offs[0].Offset, true
	}
	msgs := pollN(t, c, 1)
	if len(msgs) != 3 {
		t.Fatalf("first Poll returned %d records, want 3", len(msgs))
	}
	if off, ok := committed(); ok && off != 0 {
		t.Fatalf("committed %d after the first Poll, want nothing beyond 0", off)
	}
	msgs = pollN(t, c, 1) // commits the first Poll's 3 records
	if off, _ := committed(); off != 3 {
		t.Fatalf("committed %d after the second Poll, want 3", off)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if off, _ := committed(); off != 3+uint64(len(msgs)) {
		t.Fatalf("committed %d after Close, want %d", off, 3+len(msgs))
	}
}

func TestOffsetOutOfRangeMovesToLogStart(t *testing.T) {
	s := newFakeServer(t)
	s.createTopic("t", 1)
	p := newTestProducer(t, s)
	for i := range 5 { // five batches of two records
		msgs := []ProducerMessage{NewProducerMessage("t", []byte(fmt.Sprint(2*i))), NewProducerMessage("t", []byte(fmt.Sprint(2*i+1)))}
		if _, err := p.SendBatch(testCtx(t), msgs); err != nil {
			t.Fatal(err)
		}
	}
	s.truncate("t", 0, 4) // retention removed offsets 0..3
	var logs logBuffer
	c := newTestConsumer(t, s, ConsumerConfig{Topic: "t", StartFrom: StartAt(1), Logger: logs.logger()})
	msgs := pollN(t, c, 6)
	if msgs[0].Offset != 4 || string(msgs[0].Value) != "4" {
		t.Fatalf("first message %+v, want offset 4", msgs[0])
	}
	if !strings.Contains(logs.String(), "records lost to retention") || !strings.Contains(logs.String(), "skipped=3") {
		t.Fatalf("no loss warning logged:\n%s", logs.String())
	}
}

// TestOnRecordsLost: with OnRecordsLost set, the records lost to
// retention are reported to it, with the partition and the offsets
// skipped, instead of the log.
func TestOnRecordsLost(t *testing.T) {
	s := newFakeServer(t)
	s.createTopic("t", 1)
	p := newTestProducer(t, s)
	for i := range 5 {
		if _, err := p.SendBatch(testCtx(t), []ProducerMessage{NewProducerMessage("t", []byte(fmt.Sprint(i)))}); err != nil {
			t.Fatal(err)
		}
	}
	s.truncate("t", 0, 3) // retention removed offsets 0..2
	var logs logBuffer
	type lost struct {
		p        uint32
		from, to uint64
	}
	var mu sync.Mutex
	var got []lost
	c := newTestConsumer(t, s, ConsumerConfig{Topic: "t", StartFrom: StartAt(1), Logger: logs.logger(),
		OnRecordsLost: func(p uint32, from, to uint64) {
			mu.Lock()
			got = append(got, lost{p, from, to})
			mu.Unlock()
		}})
	if msgs := pollN(t, c, 2); msgs[0].Offset != 3 {
		t.Fatalf("first message %+v, want offset 3", msgs[0])
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 1 || got[0] != (lost{0, 1, 3}) {
		t.Errorf("OnRecordsLost calls %+v, want one for partition 0, offsets [1, 3)", got)
	}
	if strings.Contains(logs.String(), "lost to retention") {
		t.Errorf("the loss was logged too:\n%s", logs.String())
	}
}

func TestConsumerReconnectsAfterRestart(t *testing.T) {
	s := newFakeServer(t)
	s.createTopic("t", 2)
	produce(t, s, "t", 10)
	c := newTestConsumer(t, s, ConsumerConfig{Topic: "t"})
	first := pollN(t, c, 10)
	s.restart()
	produce(t, s, "t", 10)
	second := pollN(t, c, 10)
	seen := map[string]bool{}
	for _, m := range append(first, second...) {
		k := fmt.Sprint(m.Partition, "/", m.Offset)
		if seen[k] {
			t.Fatalf("record %s read twice after reconnect", k)
		}
		seen[k] = true
	}
	if len(seen) != 20 {
		t.Fatalf("%d distinct records", len(seen))
	}
}

func TestConsumerReportsPermanentError(t *testing.T) {
	s := newFakeServer(t)
	s.createTopic("t", 1)
	c := newTestConsumer(t, s, ConsumerConfig{Topic: "t"})
	s.mu.Lock()
	delete(s.topics, "t")
	s.mu.Unlock()
	var err error
	waitFor(t, 5*time.Second, "the error", func() bool {
		_, err = c.Poll(testCtx(t))
		return err != nil
	})
	if !errors.Is(err, api.ErrUnknownTopic) {
		t.Fatalf("Poll after the topic was deleted: %v", err)
	}
}

func TestCloseUnblocksPoll(t *testing.T) {
	s := newFakeServer(t)
	s.createTopic("t", 1)
	c := newTestConsumer(t, s, ConsumerConfig{Topic: "t", MaxWait: time.Minute})
	done := make(chan error, 1)
	go func() {
		_, err := c.Poll(testCtx(t))
		done <- err
	}()
	waitFor(t, 5*time.Second, "a fetch at the server", func() bool { return s.count(api.Frame_Which_fetchRequest) >= 1 })
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, ErrClosed) {
		t.Fatalf("Poll during Close: %v, want ErrClosed", err)
	}
}

// TestOffsetOutOfRangeWithoutRange: a server that omits the valid range is
// asked for it with a describe.
func TestOffsetOutOfRangeWithoutRange(t *testing.T) {
	s := newFakeServer(t)
	s.createTopic("t", 1)
	produce(t, s, "t", 5)
	s.mu.Lock()
	s.oorWithoutRange = true
	s.mu.Unlock()
	var logs logBuffer
	c := newTestConsumer(t, s, ConsumerConfig{Topic: "t", StartFrom: StartAt(100), Logger: logs.logger()})
	waitFor(t, 5*time.Second, "the move to the high watermark", func() bool {
		return strings.Contains(logs.String(), "high_watermark=5")
	})
	produce(t, s, "t", 1)
	msgs := pollN(t, c, 1)
	if msgs[0].Offset != 5 {
		t.Fatalf("first offset %d, want 5 (moved to the high watermark)", msgs[0].Offset)
	}
}

// TestAutoCommitAfterPartialCommit: committing only some partitions (as a
// revocation does) must not postpone the auto-commit of the others.
func TestAutoCommitAfterPartialCommit(t *testing.T) {
	s := newFakeServer(t)
	s.createTopic("t", 2)
	p := newTestProducer(t, s)
	for i := range 8 {
		if _, err := p.Send(testCtx(t), "t", []byte(fmt.Sprint(i)), []byte(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	c := newTestConsumer(t, s, ConsumerConfig{Topic: "t", ConsumerGroup: "g", AutoCommit: true, AutoCommitInterval: time.Hour})
	got := 0
	for got < 8 {
		got += len(pollN(t, c, 1))
	}
	c.mu.Lock()
	c.lastCommit = time.Now().Add(-2 * time.Hour) // the auto-commit is due
	c.mu.Unlock()
	// A partial commit, as for a revoked partition...
	if err := c.commitPartitions(testCtx(t), []uint32{0}); err != nil {
		t.Fatal(err)
	}
	// ...leaves the auto-commit of the rest due.
	c.maybeAutoCommit(testCtx(t))
	cl := dialTest(t, s)
	defer cl.Close()
	offs, err := cl.FetchOffsets(testCtx(t), "g", "t")
	if err != nil || len(offs) != 2 {
		t.Fatalf("FetchOffsets = %+v, %v; want both partitions committed", offs, err)
	}
}
