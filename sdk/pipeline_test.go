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

// paddedValue is "<caller>-<n>-" padded with x to size bytes.
func paddedValue(caller, n, size int) []byte {
	v := []byte(fmt.Sprintf("%d-%d-", caller, n))
	for len(v) < size {
		v = append(v, 'x')
	}
	return v
}

// callerSequences parses the paddedValue records stored in a partition, in
// offset order, per caller.
func callerSequences(t *testing.T, s *fakeServer, topic string, partition uint32) map[int][]int {
	t.Helper()
	out := map[int][]int{}
	for _, r := range s.records(topic, partition) {
		_, kv, _ := strings.Cut(r, ":")
		_, v, _ := strings.Cut(kv, "=")
		parts := strings.SplitN(v, "-", 3)
		c, err1 := strconv.Atoi(parts[0])
		n, err2 := strconv.Atoi(parts[1])
		if len(parts) != 3 || err1 != nil || err2 != nil {
			t.Fatalf("stored value %q", v)
		}
		out[c] = append(out[c], n)
	}
	return out
}

// TestConcurrentSendBatchKeepsEachCallsOrderUnderRetries: concurrent
// SendBatch calls to one partition, each split into several batches, share
// the partition's pipeline while publishes fail with retriable errors; every
// record is stored once and each call's records are stored in its order.
func TestConcurrentSendBatchKeepsEachCallsOrderUnderRetries(t *testing.T) {
	for _, code := range []api.Code{api.CodeDiskFull, api.CodeThrottled} {
		t.Run(code.String(), func(t *testing.T) {
			s := newFakeServer(t)
			s.createTopic("t", 1)
			// One failure at the start, then one after every fifth
			// publish, so that failures hit the middle of calls.
			const injected = 12
			s.failPublish("t", 0, code)
			var publishes, added atomic.Int32
			added.Store(1)
			s.setHook(func(f api.Frame) {
				if f.Which() == api.Frame_Which_publishRequest {
					if n := publishes.Add(1); n%5 == 0 && n/5 < injected {
						added.Add(1)
						s.failPublish("t", 0, code)
					}
				}
			})
			p := newTestProducer(t, s, func(c *ProducerConfig) { c.Retries = 1 << 20 })
			const callers, records = 6, 60 // 900 B records: about 4 batches per call
			ctx := testCtx(t)
			var wg sync.WaitGroup
			for c := range callers {
				wg.Go(func() {
					msgs := make([]ProducerMessage, records)
					for i := range msgs {
						msgs[i] = NewProducerMessage("t", paddedValue(c, i, 900))
					}
					acks, err := p.SendBatch(ctx, msgs)
					if err != nil {
						t.Errorf("caller %d: %v", c, err)
						return
					}
					for i := 1; i < len(acks); i++ {
						if acks[i].Offset <= acks[i-1].Offset {
							t.Errorf("caller %d: record %d at offset %d after %d", c, i, acks[i].Offset, acks[i-1].Offset)
							return
						}
					}
				})
			}
			wg.Wait()
			seqs := callerSequences(t, s, "t", 0)
			if len(seqs) != callers {
				t.Fatalf("records of %d callers stored, want %d", len(seqs), callers)
			}
			for c, seq := range seqs {
				if len(seq) != records {
					t.Fatalf("caller %d: %d records stored, want %d", c, len(seq), records)
				}
				for i, n := range seq {
					if n != i {
						t.Fatalf("caller %d: stored record %d is %d: out of order", c, i, n)
					}
				}
			}
			s.mu.Lock()
			failed := int(added.Load()) - len(s.failures[topicPartition{"t", 0}])
			s.mu.Unlock()
			if failed < 3 {
				t.Fatalf("%d publishes failed, want at least 3", failed)
			}
		})
	}
}

// TestCanceledCallUnblocksThePartition: a call whose batch waits for its
// retry holds up the later calls of its partition (they must not overtake
// it); cancelling it fails it with both causes and lets the later call
// through.
func TestCanceledCallUnblocksThePartition(t *testing.T) {
	s := newFakeServer(t)
	s.createTopic("t", 1)
	s.failPublish("t", 0, api.CodeDiskFull)
	var logs logBuffer
	p := newTestProducer(t, s, func(c *ProducerConfig) {
		c.RetryBackoff, c.RetryBackoffMax = time.Hour, time.Hour
		c.DeliveryTimeout = 2 * time.Hour
		c.Logger = logs.logger()
	})
	actx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	aerr := make(chan error, 1)
	go func() {
		_, err := p.Send(actx, "t", nil, []byte("a"))
		aerr <- err
	}()
	waitFor(t, 10*time.Second, "a retry waiting", func() bool { return strings.Contains(logs.String(), "sdk: retrying") })
	berr := make(chan error, 1)
	go func() {
		_, err := p.Send(testCtx(t), "t", nil, []byte("b"))
		berr <- err
	}()
	cancel()
	err := ends(t, "the cancelled Send", aerr)
	if !errors.Is(err, context.Canceled) || !errors.Is(err, api.ErrDiskFull) {
		t.Fatalf("cancelled Send: %v, want context.Canceled and DISK_FULL", err)
	}
	if err := ends(t, "the later Send", berr); err != nil {
		t.Fatalf("later Send: %v", err)
	}
	if got := s.records("t", 0); len(got) != 1 || !strings.HasSuffix(got[0], "=b") {
		t.Fatalf("stored %q, want only b", got)
	}
}

// TestProducerAndBatchProducerSideBySide: a Producer and a BatchProducer
// on one server share nothing: under injected failures each keeps its
// records of a key in order, and closing the Producer returns at once and
// leaves the BatchProducer working.
func TestProducerAndBatchProducerSideBySide(t *testing.T) {
	s := newFakeServer(t)
	s.createTopic("t", 2)
	s.failPublish("t", 0, api.CodeDiskFull, api.CodeDiskFull)
	s.failPublish("t", 1, api.CodeDiskFull)
	p := newTestProducer(t, s)
	var acked, failed sync.Map
	bp := newTestBatchProducer(t, s, func(c *BatchProducerConfig) {
		c.BatchRecords = 7
		c.OnAck = func(a BatchAck) {
			for _, m := range a.Messages {
				acked.Store(string(m.Value), true)
			}
		}
		c.OnError = func(e BatchError) { failed.Store(e.Err.Error(), true) }
	})
	const n = 100
	ctx := testCtx(t)
	var wg sync.WaitGroup
	for _, key := range []string{"p0", "p1"} {
		wg.Go(func() {
			for i := 0; i < n; i += 20 {
				var msgs []ProducerMessage
				for j := i; j < i+20; j++ {
					msgs = append(msgs, NewProducerMessage("t", []byte(fmt.Sprintf("%s-%d", key, j))).WithKey([]byte(key)))
				}
				if _, err := p.SendBatch(ctx, msgs); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	for _, key := range []string{"b0", "b1"} {
		wg.Go(func() {
			for i := range n {
				if err := bp.Send(ctx, "t", []byte(key), []byte(fmt.Sprintf("%s-%d", key, i))); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	returnsWithin(t, "Producer.Close", func() {
		if err := p.Close(); err != nil {
			t.Errorf("Producer.Close: %v", err)
		}
	})
	if err := bp.Send(ctx, "t", []byte("b0"), []byte(fmt.Sprintf("b0-%d", n))); err != nil {
		t.Fatalf("BatchProducer.Send after Producer.Close: %v", err)
	}
	if err := bp.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	failed.Range(func(k, _ any) bool { t.Fatalf("BatchProducer batch failed: %v", k); return false })
	for _, key := range []string{"b0", "b1"} {
		for i := range n {
			if _, ok := acked.Load(fmt.Sprintf("%s-%d", key, i)); !ok {
				t.Fatalf("record %s-%d not acknowledged", key, i)
			}
		}
	}
	seqs := map[string][]int{}
	for part := range uint32(2) {
		for k, seq := range sequence(t, s, "t", part) {
			seqs[k] = append(seqs[k], seq...)
		}
	}
	if len(seqs) != 4 {
		t.Fatalf("keys stored: %v", seqs)
	}
	last := seqs["b0"]
	seqs["b0"] = last[:len(last)-1]
	checkInOrder(t, seqs, n)
	if last[len(last)-1] != n {
		t.Fatalf("b0's last record is %d, want %d", last[len(last)-1], n)
	}
}

// pipelineGoroutines counts the goroutines serving a pipeline's partition.
func pipelineGoroutines() int {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	return strings.Count(string(buf), "sdk.(*pipeline).run(")
}

// TestPipelineGoroutinesEndWhenIdle: a partition's goroutine lives only
// while the partition has records to send or in flight, for both
// producers, so their number is bounded by the partitions in use and none
// outlives Close.
func TestPipelineGoroutinesEndWhenIdle(t *testing.T) {
	s := newFakeServer(t)
	s.createTopic("t", 8)
	ctx := testCtx(t)
	waitFor(t, 10*time.Second, "earlier tests' pipelines to end", func() bool { return pipelineGoroutines() == 0 })

	p := newTestProducer(t, s)
	var msgs []ProducerMessage
	for i := range 64 {
		msgs = append(msgs, NewProducerMessage("t", []byte("v")).WithKey([]byte(strconv.Itoa(i))))
	}
	for range 3 {
		if _, err := p.SendBatch(ctx, msgs); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 10*time.Second, "the Producer's partition goroutines to end", func() bool { return pipelineGoroutines() == 0 })

	bp := newTestBatchProducer(t, s, func(c *BatchProducerConfig) { c.Linger = time.Hour })
	for _, m := range msgs {
		if err := bp.SendMessage(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	used := map[uint32]bool{}
	for _, m := range msgs {
		used[HashPartitioner{}.Partition("t", m.Key, 8)] = true
	}
	waitFor(t, 10*time.Second, "one goroutine per lingering partition", func() bool { return pipelineGoroutines() == len(used) })
	if err := bp.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the BatchProducer's partition goroutines to end", func() bool { return pipelineGoroutines() == 0 })
	for _, m := range msgs[:10] {
		if err := bp.SendMessage(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	if err := bp.Close(); err != nil {
		t.Fatal(err)
	}
	// Close waited for them: each has at most its return left.
	waitFor(t, 10*time.Second, "no partition goroutine after BatchProducer.Close", func() bool { return pipelineGoroutines() == 0 })
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestCanceledSendBatchLeavesItsRecordsAlone: a SendBatch call that stops
// waiting (its context ended) while its batch is still queued behind
// another call's retry gives its records back: the pipeline neither reads
// them afterwards (the race detector watches the caller rewriting them)
// nor sends them.
func TestCanceledSendBatchLeavesItsRecordsAlone(t *testing.T) {
	s := newFakeServer(t)
	s.createTopic("t", 1)
	s.failPublish("t", 0, api.CodeDiskFull)
	var logs logBuffer
	p := newTestProducer(t, s, func(c *ProducerConfig) {
		c.RetryBackoff, c.RetryBackoffMax = time.Hour, time.Hour
		c.DeliveryTimeout = 2 * time.Hour
		c.Logger = logs.logger()
	})
	actx, acancel := context.WithCancel(testCtx(t))
	defer acancel()
	aerr := make(chan error, 1)
	go func() {
		_, err := p.Send(actx, "t", nil, []byte("a"))
		aerr <- err
	}()
	waitFor(t, 10*time.Second, "a retry waiting", func() bool { return strings.Contains(logs.String(), "sdk: retrying") })

	bctx, bcancel := context.WithCancel(testCtx(t))
	value := []byte("b")
	berr := make(chan error, 1)
	go func() {
		_, err := p.SendBatch(bctx, []ProducerMessage{NewProducerMessage("t", value)})
		berr <- err
	}()
	bcancel()
	if err := ends(t, "the cancelled SendBatch", berr); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled SendBatch: %v, want context.Canceled", err)
	}
	acancel()      // the partition goes on to the cancelled call's batch
	value[0] = 'X' // the caller's again
	_ = ends(t, "the Send waiting to retry", aerr)
	waitFor(t, 10*time.Second, "the partition goroutine to end", func() bool { return pipelineGoroutines() == 0 })
	if got := s.records("t", 0); len(got) != 0 {
		t.Fatalf("stored %q, want nothing", got)
	}
}
