package sdk

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/api/batch"
)

// storedHeaders returns the headers of the batches s holds for tp, in
// order.
func storedHeaders(s *fakeServer, topic string, partition uint32) []batch.Header {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []batch.Header
	for _, b := range s.topics[topic].parts[partition].batches {
		h, _ := batch.ParseHeader(b)
		out = append(out, h)
	}
	return out
}

// checkRuns fails unless each producer id's batches in hs carry
// sequences 0, then each the one after the previous batch's records, and
// returns the ids in order of first use.
func checkRuns(t *testing.T, where string, hs []batch.Header) []int64 {
	t.Helper()
	next := map[int64]int32{}
	var ids []int64
	for _, h := range hs {
		if h.ProducerID < 0 {
			t.Fatalf("%s: a batch without a producer id: %+v", where, h)
		}
		want, seen := next[h.ProducerID]
		if !seen {
			ids = append(ids, h.ProducerID)
		}
		if h.BaseSequence != want {
			t.Fatalf("%s: producer %d batch at sequence %d, want %d", where, h.ProducerID, h.BaseSequence, want)
		}
		next[h.ProducerID] = want + int32(h.RecordCount)
	}
	return ids
}

// TestIdempotentSequencesPerPartition: the producer asks for a producer
// id once, at its first publish, and stamps every batch with it, epoch 0
// and a sequence per partition that starts at 0 and grows by the records
// of each batch.
func TestIdempotentSequencesPerPartition(t *testing.T) {
	s := newFakeServer(t)
	s.createTopic("t", 2)
	s.grantProducerIDs()
	p := newTestProducer(t, s)
	ctx := testCtx(t)
	if n := s.count(api.Frame_Which_initProducerIdRequest); n != 0 {
		t.Fatalf("%d initProducerId requests before the first publish, want 0", n)
	}
	for call := range 4 {
		var msgs []ProducerMessage
		for i := range 3 + call {
			msgs = append(msgs, NewProducerMessage("t", fmt.Appendf(nil, "v%d-%d", call, i)).WithKey(fmt.Appendf(nil, "k%d", i)))
		}
		if _, err := p.SendBatch(ctx, msgs); err != nil {
			t.Fatal(err)
		}
	}
	if n := s.count(api.Frame_Which_initProducerIdRequest); n != 1 {
		t.Errorf("%d initProducerId requests, want 1", n)
	}
	total := 0
	for part := range uint32(2) {
		hs := storedHeaders(s, "t", part)
		ids := checkRuns(t, fmt.Sprintf("partition %d", part), hs)
		if len(hs) > 0 && (len(ids) != 1 || ids[0] != 1001 || hs[0].ProducerEpoch != 0) {
			t.Errorf("partition %d: producer ids %v epoch %d, want [1001] epoch 0", part, ids, hs[0].ProducerEpoch)
		}
		total += len(s.records("t", part))
	}
	if total != 3+4+5+6 {
		t.Errorf("stored %d records, want %d", total, 3+4+5+6)
	}
}

// TestIdempotentRetryAfterALostResponse: a batch whose response is lost
// (the server stored it; the client times out and reconnects) is sent
// again with the same sequence, and the server's deduplication answers
// with the original offset: the record is stored once and acknowledged
// at that offset, for a Producer and for a BatchProducer with batches
// pipelined behind it.
func TestIdempotentRetryAfterALostResponse(t *testing.T) {
	s := newFakeServer(t)
	s.createTopic("t", 1)
	s.grantProducerIDs()
	p := newTestProducer(t, s, func(c *ProducerConfig) { c.RequestTimeout = 300 * time.Millisecond })
	ctx := testCtx(t)
	if _, err := p.Send(ctx, "t", nil, []byte("a")); err != nil {
		t.Fatal(err)
	}
	s.dropResponses("t", 0, 1)
	ack, err := p.Send(ctx, "t", nil, []byte("b"))
	if err != nil {
		t.Fatal(err)
	}
	if ack.Offset != 1 {
		t.Errorf("retried record acknowledged at offset %d, want 1 (the original)", ack.Offset)
	}
	if got := s.records("t", 0); strings.Join(got, ",") != "0:=a,1:=b" {
		t.Errorf("stored %v, want [0:=a 1:=b] (once each)", got)
	}
	if d := s.duplicates("t", 0); d != 1 {
		t.Errorf("%d duplicates answered, want 1", d)
	}

	// A BatchProducer: four batches in flight, the first one's response lost.
	s.dropResponses("t", 0, 1)
	acked := map[string]uint64{}
	var failed []error
	bp, err := NewBatchProducer(ctx, BatchProducerConfig{
		ProducerConfig: ProducerConfig{Addr: s.addr, RequestTimeout: 300 * time.Millisecond,
			RetryBackoff: time.Millisecond, RetryBackoffMax: 10 * time.Millisecond, ReconnectBackoff: time.Millisecond},
		Linger: LingerNone, BatchRecords: 2, MaxInFlightPerPartition: 4,
		OnAck: func(a BatchAck) {
			for i, m := range a.Messages {
				acked[string(m.Value)] = a.BaseOffset + uint64(i)
			}
		},
		OnError: func(e BatchError) { failed = append(failed, e) },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer bp.Close()
	for i := range 12 {
		if err := bp.Send(ctx, "t", nil, fmt.Appendf(nil, "bp%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := bp.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if len(failed) > 0 {
		t.Fatalf("batches failed: %v", failed)
	}
	got := s.records("t", 0)
	want := []string{"0:=a", "1:=b"}
	for i := range 12 {
		want = append(want, fmt.Sprintf("%d:=bp%d", 2+i, i))
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("stored %v, want %v (each once, in order)", got, want)
	}
	for i := range 12 {
		if off := acked[fmt.Sprintf("bp%d", i)]; off != uint64(2+i) {
			t.Errorf("bp%d acknowledged at %d, want %d", i, off, 2+i)
		}
	}
	checkRuns(t, "partition 0", storedHeaders(s, "t", 0))
}

// TestIdempotenceOffAgainstAnOldServer: a server that answers
// initProducerId with INVALID_REQUEST (it predates idempotent producers):
// the producer sends without a producer id, warns once, and asks no more.
func TestIdempotenceOffAgainstAnOldServer(t *testing.T) {
	s := newFakeServer(t)
	s.createTopic("t", 1)
	var logs logBuffer
	p := newTestProducer(t, s, func(c *ProducerConfig) { c.Logger = logs.logger() })
	ctx := testCtx(t)
	for i := range 3 {
		if _, err := p.Send(ctx, "t", nil, fmt.Appendf(nil, "%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	for _, h := range storedHeaders(s, "t", 0) {
		if h.ProducerID != -1 || h.BaseSequence != -1 {
			t.Fatalf("batch with producer id %d sequence %d, want -1 -1", h.ProducerID, h.BaseSequence)
		}
	}
	if n := s.count(api.Frame_Which_initProducerIdRequest); n != 1 {
		t.Errorf("%d initProducerId requests, want 1", n)
	}
	if n := strings.Count(logs.String(), "does not grant idempotent producer ids"); n != 1 {
		t.Errorf("%d warnings, want 1; log:\n%s", n, logs.String())
	}
}

// TestDisableIdempotence: no initProducerId, no producer id on batches.
func TestDisableIdempotence(t *testing.T) {
	s := newFakeServer(t)
	s.createTopic("t", 1)
	s.grantProducerIDs()
	p := newTestProducer(t, s, func(c *ProducerConfig) { c.DisableIdempotence = true })
	if _, err := p.Send(testCtx(t), "t", nil, []byte("v")); err != nil {
		t.Fatal(err)
	}
	if n := s.count(api.Frame_Which_initProducerIdRequest); n != 0 {
		t.Errorf("%d initProducerId requests, want 0", n)
	}
	if h := storedHeaders(s, "t", 0)[0]; h.ProducerID != -1 {
		t.Errorf("batch with producer id %d, want -1", h.ProducerID)
	}
}

// TestOutOfOrderSequenceRenewsTheProducerID: a batch refused with
// OUT_OF_ORDER_SEQUENCE fails with an error that says so; the partition's
// next batch carries a new producer id from sequence 0, and is stored.
// UNKNOWN_PRODUCER_ID is handled the same way.
func TestOutOfOrderSequenceRenewsTheProducerID(t *testing.T) {
	for _, code := range []api.Code{api.CodeOutOfOrderSequence, api.CodeUnknownProducerID} {
		t.Run(code.String(), func(t *testing.T) {
			s := newFakeServer(t)
			s.createTopic("t", 1)
			s.grantProducerIDs()
			p := newTestProducer(t, s)
			ctx := testCtx(t)
			if _, err := p.Send(ctx, "t", nil, []byte("a")); err != nil {
				t.Fatal(err)
			}
			s.failPublish("t", 0, code)
			_, err := p.Send(ctx, "t", nil, []byte("b"))
			var ae *api.Error
			if !errors.As(err, &ae) || ae.Code != code || !strings.Contains(err.Error(), "new producer id") {
				t.Fatalf("Send refused with %v: got %v", code, err)
			}
			if _, err := p.Send(ctx, "t", nil, []byte("c")); err != nil {
				t.Fatalf("Send after the refusal: %v", err)
			}
			hs := storedHeaders(s, "t", 0)
			if ids := checkRuns(t, "partition 0", hs); len(ids) != 2 || ids[0] == ids[1] {
				t.Errorf("producer ids %v, want two (the first, then a new one)", ids)
			}
			if got := s.records("t", 0); strings.Join(got, ",") != "0:=a,1:=c" {
				t.Errorf("stored %v, want [0:=a 1:=c]", got)
			}
		})
	}
}

// TestInvalidProducerEpochFences: INVALID_PRODUCER_EPOCH fails the batch
// with ErrProducerFenced, and every later record fails with it unsent.
func TestInvalidProducerEpochFences(t *testing.T) {
	s := newFakeServer(t)
	s.createTopic("t", 2)
	s.grantProducerIDs()
	p := newTestProducer(t, s)
	ctx := testCtx(t)
	s.failPublish("t", 0, api.CodeInvalidProducerEpoch)
	if _, err := p.Send(ctx, "t", []byte("k0"), []byte("a")); !errors.Is(err, ErrProducerFenced) || !errors.Is(err, api.ErrInvalidProducerEpoch) {
		t.Fatalf("Send refused with INVALID_PRODUCER_EPOCH: %v, want ErrProducerFenced", err)
	}
	before := s.count(api.Frame_Which_publishRequest)
	for part := range uint32(2) {
		acks, err := p.SendBatch(ctx, []ProducerMessage{{Topic: "t", Value: []byte("b")}})
		if !errors.Is(err, ErrProducerFenced) {
			t.Fatalf("Send after fencing (partition %d): %v %+v, want ErrProducerFenced", part, err, acks)
		}
	}
	if n := s.count(api.Frame_Which_publishRequest); n != before {
		t.Errorf("%d publishes after fencing, want none", n-before)
	}
}

// TestMovedBatchesAreSequencedAgain: keyless batches moved off a dead
// leader to another partition take that partition's sequences (the fake
// leaders refuse any other order), and the partitions left behind go on
// with new producer ids. Each id is asked of the node a publish goes to.
func TestMovedBatchesAreSequencedAgain(t *testing.T) {
	fc := newFakeCluster(t, 3)
	fc.createTopic("t", 6)
	for _, n := range fc.nodes {
		n.grantProducerIDs()
	}
	ctx := testCtx(t)
	p := newTestProducer(t, fc.nodes[0], func(c *ProducerConfig) { c.DeliveryTimeout = 20 * time.Second })
	for call := range 6 {
		if _, err := p.SendBatch(ctx, keylessMsgs(fmt.Sprintf("w%d", call), 2)); err != nil {
			t.Fatal(err)
		}
	}
	fc.nodes[2].stop()
	for call := range 12 {
		if _, err := p.SendBatch(ctx, keylessMsgs(fmt.Sprintf("p%d", call), 3)); err != nil {
			t.Fatalf("call %d: %v", call, err)
		}
	}
	for i := range 2 {
		for part := range uint32(6) {
			if int(part)%3 == i {
				checkRuns(t, fmt.Sprintf("node %d partition %d", i, part), storedHeaders(fc.nodes[i], "t", part))
			}
		}
	}
}

// TestBrokenRunGoesOnWithANewProducerID: a BatchProducer with batches
// pipelined; one batch in the middle is refused for good (CORRUPT_BATCH,
// not retriable). The batches chained behind it, which the leader failed
// unwritten, are sent again under a new producer id from sequence 0, so
// every other record is stored, once, in order.
func TestBrokenRunGoesOnWithANewProducerID(t *testing.T) {
	s := newFakeServer(t)
	s.createTopic("t", 1)
	s.grantProducerIDs()
	s.failNthPublish("t", 0, 3, api.CodeCorruptBatch)
	var failed []BatchError
	bp, err := NewBatchProducer(testCtx(t), BatchProducerConfig{
		ProducerConfig: ProducerConfig{Addr: s.addr, RetryBackoff: time.Millisecond, RetryBackoffMax: 10 * time.Millisecond},
		Linger:         LingerNone, BatchRecords: 2, MaxInFlightPerPartition: 4,
		OnError: func(e BatchError) { failed = append(failed, e) },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer bp.Close()
	ctx := testCtx(t)
	for i := range 30 {
		if err := bp.Send(ctx, "t", nil, fmt.Appendf(nil, "%02d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := bp.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if len(failed) != 1 || !errors.Is(failed[0].Err, api.ErrCorruptBatch) {
		t.Fatalf("failed batches %v, want the one refused", failed)
	}
	lost := map[string]bool{}
	for _, m := range failed[0].Messages {
		lost[string(m.Value)] = true
	}
	var want []string
	for i := range 30 {
		if v := fmt.Sprintf("%02d", i); !lost[v] {
			want = append(want, v)
		}
	}
	var got []string
	for _, r := range s.records("t", 0) {
		got = append(got, r[strings.Index(r, "=")+1:])
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("stored %v, want %v", got, want)
	}
	hs := storedHeaders(s, "t", 0)
	ids := checkRuns(t, "partition 0", hs)
	if len(ids) != 2 {
		t.Errorf("producer ids %v: want two (a new one after the refusal)", ids)
	}
}

// TestProducerIDFromThePartitionsLeader: the producer id is asked of the
// node the first publish goes to (its partition's leader), not of the
// bootstrap node, so a producer whose bootstrap node is gone still gets
// one from a live leader.
func TestProducerIDFromThePartitionsLeader(t *testing.T) {
	fc := newFakeCluster(t, 2)
	fc.createTopic("t", 2) // partition p led by node p
	for _, n := range fc.nodes {
		n.grantProducerIDs()
	}
	p := newTestProducer(t, fc.nodes[0], func(c *ProducerConfig) {
		c.Partitioner = PartitionerFunc(func(string, []byte, uint32) uint32 { return 1 })
	})
	if _, err := p.Send(testCtx(t), "t", []byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	if n0, n1 := fc.nodes[0].count(api.Frame_Which_initProducerIdRequest), fc.nodes[1].count(api.Frame_Which_initProducerIdRequest); n0 != 0 || n1 != 1 {
		t.Errorf("initProducerId requests: %d to the bootstrap node, %d to the leader; want 0 and 1", n0, n1)
	}
	if ids := checkRuns(t, "partition 1", storedHeaders(fc.nodes[1], "t", 1)); len(ids) != 1 {
		t.Errorf("producer ids %v, want one", ids)
	}
}
