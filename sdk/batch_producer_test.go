package sdk

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seedqueue/sq/api"
)

func newTestBatchProducer(t testing.TB, s *fakeServer, mod ...func(*BatchProducerConfig)) *BatchProducer {
	t.Helper()
	cfg := BatchProducerConfig{ProducerConfig: ProducerConfig{Addr: s.addr, ClientID: "test-batch-producer",
		RetryBackoff: time.Millisecond, RetryBackoffMax: 10 * time.Millisecond,
		ReconnectBackoff: time.Millisecond, ReconnectBackoffMax: 10 * time.Millisecond}}
	for _, f := range mod {
		f(&cfg)
	}
	bp, err := NewBatchProducer(testCtx(t), cfg)
	if err != nil {
		t.Fatalf("NewBatchProducer: %v", err)
	}
	t.Cleanup(func() { bp.Close() })
	return bp
}

// sequence parses the values "<key>-<n>" stored in a partition, in offset
// order, dropping repeats of values already seen (at-least-once retries).
func sequence(t *testing.T, s *fakeServer, topic string, partition uint32) map[string][]int {
	t.Helper()
	seen := map[string]bool{}
	out := map[string][]int{}
	for _, r := range s.records(topic, partition) {
		_, kv, _ := strings.Cut(r, ":")
		_, v, _ := strings.Cut(kv, "=")
		if seen[v] {
			continue
		}
		seen[v] = true
		k, n, _ := strings.Cut(v, "-")
		i, err := strconv.Atoi(n)
		if err != nil {
			t.Fatalf("stored value %q", v)
		}
		out[k] = append(out[k], i)
	}
	return out
}

// checkInOrder fails unless every key's values are 0..n-1 in order.
func checkInOrder(t *testing.T, seqs map[string][]int, n int) {
	t.Helper()
	for k, seq := range seqs {
		if len(seq) != n {
			t.Fatalf("key %s: %d distinct records stored, want %d", k, len(seq), n)
		}
		for i, v := range seq {
			if v != i {
				t.Fatalf("key %s: record %d is %d: out of order", k, i, v)
			}
		}
	}
}

func TestBatchProducerKeepsOrderPerPartitionAcrossRetries(t *testing.T) {
	tests := []struct {
		name string
		mod  func(*BatchProducerConfig)
	}{
		{"small batches", func(c *BatchProducerConfig) { c.BatchRecords = 7 }},
		{"byte bound", func(c *BatchProducerConfig) { c.BatchBytes = 600 }},
		{"no linger", func(c *BatchProducerConfig) { c.Linger = LingerNone }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newFakeServer(t)
			s.createTopic("t", 3)
			s.failPublish("t", 1, api.CodeThrottled, api.CodeDiskFull)
			var mu sync.Mutex
			acked := 0
			bp := newTestBatchProducer(t, s, tc.mod, func(c *BatchProducerConfig) {
				c.Partitioner = PartitionerFunc(func(_ string, key []byte, _ uint32) uint32 { return uint32(key[1] - '0') })
				c.OnAck = func(a BatchAck) {
					mu.Lock()
					acked += len(a.Messages)
					mu.Unlock()
				}
				c.OnError = func(e BatchError) { t.Errorf("OnError: %v", e) }
			})
			ctx := testCtx(t)
			const n = 300
			for i := range n {
				for k := range 3 {
					key := fmt.Sprintf("k%d", k)
					if err := bp.Send(ctx, "t", []byte(key), fmt.Appendf(nil, "%s-%d", key, i)); err != nil {
						t.Fatalf("Send: %v", err)
					}
				}
			}
			if err := bp.Flush(ctx); err != nil {
				t.Fatalf("Flush: %v", err)
			}
			mu.Lock()
			if acked != 3*n {
				t.Errorf("OnAck saw %d records, want %d", acked, 3*n)
			}
			mu.Unlock()
			for p := range uint32(3) {
				seqs := sequence(t, s, "t", p)
				if len(seqs) != 1 {
					t.Fatalf("partition %d holds keys %v", p, seqs)
				}
				checkInOrder(t, seqs, n)
			}
		})
	}
}

// blockedServer returns a fake server whose publishes wait until release
// is called (release is idempotent).
func blockedServer(t *testing.T) (s *fakeServer, release func()) {
	s = newFakeServer(t)
	s.createTopic("t", 1)
	unblock := make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(unblock) }) }
	s.setHook(func(f api.Frame) {
		if f.Which() == api.Frame_Which_publishRequest {
			<-unblock
		}
	})
	return s, release
}

func TestBatchProducerBackPressure(t *testing.T) {
	value := make([]byte, 100)
	per := recordEstimate(&ProducerMessage{Value: value})
	const capacity = 10
	t.Run("error when full", func(t *testing.T) {
		s, release := blockedServer(t)
		bp := newTestBatchProducer(t, s, func(c *BatchProducerConfig) {
			c.BufferBytes = capacity * per
			c.ErrorOnFull = true
			c.Linger = LingerNone
		})
		t.Cleanup(release) // before the producer's Close, which flushes
		ctx := testCtx(t)
		for i := range capacity {
			if err := bp.Send(ctx, "t", nil, value); err != nil {
				t.Fatalf("Send %d: %v", i, err)
			}
		}
		if err := bp.Send(ctx, "t", nil, value); !errors.Is(err, ErrBufferFull) {
			t.Fatalf("Send over the buffer = %v, want ErrBufferFull", err)
		}
		if got := bp.Buffered(); got != capacity {
			t.Fatalf("Buffered = %d, want %d", got, capacity)
		}
	})
	t.Run("block when full", func(t *testing.T) {
		s, release := blockedServer(t)
		bp := newTestBatchProducer(t, s, func(c *BatchProducerConfig) {
			c.BufferBytes = capacity * per
			c.Linger = LingerNone
		})
		t.Cleanup(release)
		ctx := testCtx(t)
		for i := range capacity {
			if err := bp.Send(ctx, "t", nil, value); err != nil {
				t.Fatalf("Send %d: %v", i, err)
			}
		}
		cancelled, cancel := context.WithCancel(ctx)
		cancel()
		if err := bp.Send(cancelled, "t", nil, value); !errors.Is(err, context.Canceled) {
			t.Fatalf("Send on a full buffer with a cancelled context = %v, want context.Canceled", err)
		}
		done := make(chan error, 1)
		go func() { done <- bp.Send(ctx, "t", nil, value) }()
		release()
		if err := <-done; err != nil {
			t.Fatalf("blocked Send = %v", err)
		}
		if err := bp.Flush(ctx); err != nil {
			t.Fatalf("Flush: %v", err)
		}
		if got := bp.Buffered(); got != 0 {
			t.Fatalf("Buffered after Flush = %d", got)
		}
		if got := len(s.records("t", 0)); got != capacity+1 {
			t.Fatalf("%d records stored, want %d", got, capacity+1)
		}
	})
}

func TestBatchProducerReportsErrors(t *testing.T) {
	s := newFakeServer(t)
	s.createTopic("t", 1)
	s.failPublish("t", 0, api.CodePartitionFailed)
	errs := make(chan BatchError, 10)
	bp := newTestBatchProducer(t, s, func(c *BatchProducerConfig) {
		c.OnError = func(e BatchError) { errs <- e }
		c.Linger = time.Hour // only Flush sends
	})
	ctx := testCtx(t)
	for _, v := range []string{"a", "b"} {
		if err := bp.Send(ctx, "t", nil, []byte(v)); err != nil {
			t.Fatal(err)
		}
	}
	if err := bp.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case e := <-errs:
		if !errors.Is(e, api.ErrPartitionFailed) || len(e.Messages) != 2 || string(e.Messages[1].Value) != "b" || e.Topic != "t" {
			t.Fatalf("BatchError = %+v", e)
		}
	default:
		t.Fatal("no BatchError after Flush")
	}
	// The partition keeps working for later batches.
	if err := bp.Send(ctx, "t", nil, []byte("c")); err != nil {
		t.Fatal(err)
	}
	if err := bp.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(s.records("t", 0), ","); got != "0:=c" {
		t.Fatalf("stored %s", got)
	}

	checks := []struct {
		name string
		m    ProducerMessage
		want error
	}{
		{"unknown topic", NewProducerMessage("nope", []byte("x")), api.ErrUnknownTopic},
		{"empty topic", NewProducerMessage("", []byte("x")), api.ErrInvalidTopicName},
		{"record too large", NewProducerMessage("t", make([]byte, s.limits.MaxRecordBytes+1)), api.ErrMessageTooLarge},
	}
	for _, c := range checks {
		if err := bp.SendMessage(ctx, c.m); !errors.Is(err, c.want) {
			t.Errorf("%s: SendMessage = %v, want %v", c.name, err, c.want)
		}
	}
	if err := bp.Close(); err != nil {
		t.Fatal(err)
	}
	if err := bp.Send(ctx, "t", nil, []byte("late")); !errors.Is(err, ErrClosed) {
		t.Fatalf("Send after Close = %v, want ErrClosed", err)
	}
}

func TestBatchProducerSurvivesServerRestart(t *testing.T) {
	s := newFakeServer(t)
	s.createTopic("t", 2)
	bp := newTestBatchProducer(t, s, func(c *BatchProducerConfig) {
		c.BatchRecords = 10
		c.Partitioner = PartitionerFunc(func(_ string, key []byte, _ uint32) uint32 { return uint32(key[1] - '0') })
		c.OnError = func(e BatchError) { t.Errorf("OnError: %v", e) }
	})
	ctx := testCtx(t)
	const n = 400
	for i := range n {
		if i == n/2 {
			s.restart()
		}
		for k := range 2 {
			key := fmt.Sprintf("k%d", k)
			if err := bp.Send(ctx, "t", []byte(key), fmt.Appendf(nil, "%s-%d", key, i)); err != nil {
				t.Fatalf("Send: %v", err)
			}
		}
	}
	if err := bp.Close(); err != nil {
		t.Fatal(err)
	}
	for p := range uint32(2) {
		checkInOrder(t, sequence(t, s, "t", p), n)
	}
}

func TestBatchProducerLingerSendsWithoutFlush(t *testing.T) {
	s := newFakeServer(t)
	s.createTopic("t", 1)
	bp := newTestBatchProducer(t, s, func(c *BatchProducerConfig) { c.Linger = 5 * time.Millisecond })
	if err := bp.Send(testCtx(t), "t", nil, []byte("x")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the lingering batch", func() bool { return len(s.records("t", 0)) == 1 })
	waitFor(t, 5*time.Second, "the ack", func() bool { return bp.Buffered() == 0 })
}

func TestBatchProducerKeylessRecordsFormBatches(t *testing.T) {
	s := newFakeServer(t)
	s.createTopic("t", 4)
	bp := newTestBatchProducer(t, s, func(c *BatchProducerConfig) { c.BatchRecords = 25; c.Linger = time.Hour })
	ctx := testCtx(t)
	for i := range 100 {
		if err := bp.Send(ctx, "t", nil, fmt.Appendf(nil, "%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := bp.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if n := s.count(api.Frame_Which_publishRequest); n != 4 {
		t.Fatalf("%d publish requests for 100 keyless records in batches of 25, want 4", n)
	}
	for p := range uint32(4) {
		if got := len(s.records("t", p)); got != 25 {
			t.Errorf("partition %d holds %d records, want 25", p, got)
		}
	}
}

// TestBatchProducerCallbackMaySend checks that OnAck can Send even when the
// buffer has room for one record only: the acknowledged batch's space is
// freed before its callback runs, and Flush waits for the callbacks.
func TestBatchProducerCallbackMaySend(t *testing.T) {
	s := newFakeServer(t)
	s.createTopic("t", 1)
	value := make([]byte, 100)
	var (
		bp     *BatchProducer
		acks   atomic.Int32
		sendMu sync.Mutex
	)
	const follow = 5
	bp = newTestBatchProducer(t, s, func(c *BatchProducerConfig) {
		c.BufferBytes = recordEstimate(&ProducerMessage{Value: value})
		c.Linger = LingerNone
		c.OnAck = func(a BatchAck) {
			if acks.Add(1) <= follow {
				sendMu.Lock()
				defer sendMu.Unlock()
				if err := bp.Send(context.Background(), "t", nil, value); err != nil {
					t.Errorf("Send from OnAck: %v", err)
				}
			}
		}
	})
	ctx := testCtx(t)
	if err := bp.Send(ctx, "t", nil, value); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the follow-up records", func() bool { return acks.Load() > follow })
	if err := bp.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got := len(s.records("t", 0)); got != follow+1 {
		t.Fatalf("%d records stored, want %d", got, follow+1)
	}
}

// TestBatchProducerPipelinedRetryKeepsOrder: with several batches of one
// partition in flight, a retriable failure of the first one fails the
// later ones too (they were sent chained), and the producer resends them
// after its retry, so the partition stores every record once, in order.
func TestBatchProducerPipelinedRetryKeepsOrder(t *testing.T) {
	for _, code := range []api.Code{api.CodeThrottled, api.CodeDiskFull} {
		t.Run(code.String(), func(t *testing.T) {
			s := newFakeServer(t)
			s.createTopic("t", 1)
			s.failPublish("t", 0, code)
			var gate sync.Once
			s.setHook(func(f api.Frame) {
				if f.Which() != api.Frame_Which_publishRequest {
					return
				}
				// Hold the first publish until three more are read, so
				// they are in flight behind it when it fails.
				gate.Do(func() {
					deadline := time.Now().Add(10 * time.Second)
					for s.count(api.Frame_Which_publishRequest) < 4 && time.Now().Before(deadline) {
						runtime.Gosched()
					}
				})
			})
			var acks atomic.Int64
			bp := newTestBatchProducer(t, s, func(c *BatchProducerConfig) {
				c.BatchRecords = 10
				c.MaxInFlightPerPartition = 4
				c.OnAck = func(a BatchAck) { acks.Add(int64(len(a.Messages))) }
				c.OnError = func(e BatchError) { t.Errorf("OnError: %v", e) }
			})
			ctx := testCtx(t)
			const n = 200
			for i := range n {
				if err := bp.Send(ctx, "t", []byte("k"), fmt.Appendf(nil, "k-%d", i)); err != nil {
					t.Fatalf("Send: %v", err)
				}
			}
			if err := bp.Flush(ctx); err != nil {
				t.Fatalf("Flush: %v", err)
			}
			if got := s.count(api.Frame_Which_publishRequest); got < 4 {
				t.Fatalf("%d publishes, want at least 4 (several in flight)", got)
			}
			if acks.Load() != n {
				t.Fatalf("acknowledged %d records, want %d", acks.Load(), n)
			}
			recs := s.records("t", 0)
			if len(recs) != n {
				t.Fatalf("stored %d records, want %d (a chained batch was stored after a failure?)", len(recs), n)
			}
			for i, r := range recs {
				if want := fmt.Sprintf("=k-%d", i); !strings.HasSuffix(r, want) {
					t.Fatalf("record %d is %q, want the value k-%d: out of order", i, r, i)
				}
			}
		})
	}
}

// TestBatchProducerSendStopsAtCanceledContext checks that Send refuses a
// record once its context has ended, also with buffer space free, so a
// loop of sends stops at Ctrl-C: before, only a Send waiting for space
// noticed, and a producer kept up with the server ignored the interrupt.
func TestBatchProducerSendStopsAtCanceledContext(t *testing.T) {
	s := newFakeServer(t)
	s.createTopic("t", 2)
	bp := newTestBatchProducer(t, s, func(c *BatchProducerConfig) { c.Linger = time.Hour })
	if err := bp.Send(testCtx(t), "t", nil, []byte("before")); err != nil {
		t.Fatal(err)
	}
	buffered := bp.Buffered()
	ctx, cancel := context.WithCancel(testCtx(t))
	cancel()
	for _, m := range []ProducerMessage{
		{Topic: "t", Value: []byte("after")},
		{Topic: "t", Key: []byte("k"), Value: []byte("keyed")},
		{Topic: "other", Value: []byte("unknown topic, not looked up")},
	} {
		if err := bp.SendMessage(ctx, m); !errors.Is(err, context.Canceled) {
			t.Fatalf("SendMessage(%q) with a canceled context: %v, want context.Canceled", m.Value, err)
		}
	}
	if got := bp.Buffered(); got != buffered {
		t.Fatalf("Buffered() = %d after refused sends, want %d (nothing queued)", got, buffered)
	}
	if err := bp.Flush(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if got := len(s.records("t", 0)) + len(s.records("t", 1)); got != 1 {
		t.Fatalf("%d records stored, want the 1 sent before the cancel", got)
	}
}
