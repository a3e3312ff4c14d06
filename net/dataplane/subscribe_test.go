package dataplane

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/api/batch"
)

func subscribeReq(topic string, partition uint32, offset uint64, credit uint32) func(api.Frame) error {
	return func(f api.Frame) error {
		r, err := f.NewSubscribeRequest()
		if err != nil {
			return err
		}
		r.SetPartition(partition)
		r.SetOffset(offset)
		r.SetCreditBytes(credit)
		return r.SetTopic(topic)
	}
}

func grantReq(id uint64, credit uint32) func(api.Frame) error {
	return func(f api.Frame) error {
		r, err := f.NewGrantCreditRequest()
		if err != nil {
			return err
		}
		r.SetSubscriptionId(id)
		r.SetCreditBytes(credit)
		return nil
	}
}

// peakUnacked returns the most bytes any subscription of the server had
// pushed and not yet got back as credit: a bound of what the broker holds
// for it (frames queued for the writer are a subset).
func peakUnacked(h *harness) int64 {
	var peak int64
	for _, c := range h.srv.snapshotConns() {
		c.subs.mu.Lock()
		for _, s := range c.subs.m {
			s.mu.Lock()
			peak = max(peak, s.peakUnack)
			s.mu.Unlock()
		}
		c.subs.mu.Unlock()
	}
	return peak
}

// A slow subscriber with a small credit window costs the broker at most
// its credit plus one batch, and receives every record in order.
func TestSubscribeCreditBoundsMemory(t *testing.T) {
	h := startServer(t, openEngine(t), Options{})
	c, _ := connect(t, h.addr)
	c.createTopic("s", 1)
	const batches, perBatch, credit = 200, 10, 4 << 10
	value := bytes.Repeat([]byte("v"), 100)
	var batchLen int
	for i := range batches {
		vals := make([][]byte, perBatch)
		for j := range vals {
			vals[j] = fmt.Appendf(nil, "%d-%s", i*perBatch+j, value)
		}
		b := buildBatch(t, vals...)
		batchLen = max(batchLen, len(b))
		c.publish("s", 0, b)
	}
	sc, _ := connect(t, h.addr)
	subID := sc.send(subscribeReq("s", 0, 0, credit), nil)
	next := uint64(0)
	for next < batches*perBatch {
		r := sc.recv()
		expectWhich(t, r, api.Frame_Which_pushBatches)
		p, _ := r.f.PushBatches()
		if code := wireErr(p.Error()); code != api.CodeNone {
			t.Fatalf("push error %v", code)
		}
		if r.f.CorrelationId() != subID || len(r.tail) == 0 {
			t.Fatalf("push for %d with %d bytes", r.f.CorrelationId(), len(r.tail))
		}
		buf := r.tail
		for len(buf) > 0 {
			_, rest, hd, err := batch.Split(buf, 0)
			if err != nil {
				t.Fatal(err)
			}
			if hd.BaseOffset != next {
				t.Fatalf("batch at %d, want %d: gap or reorder", hd.BaseOffset, next)
			}
			next = hd.NextOffset()
			buf = rest
		}
		// The slow handler: the broker cannot run ahead of the credit.
		if peak := peakUnacked(h); peak > credit+int64(batchLen) {
			t.Fatalf("broker queued %d bytes for the subscription, bound %d", peak, credit+batchLen)
		}
		sc.send(grantReq(subID, uint32(len(r.tail))), nil)
	}
	// New records are pushed without a request.
	c.publish("s", 0, buildBatch(t, []byte("late")))
	r := sc.recv()
	p, _ := r.f.PushBatches()
	if len(r.tail) == 0 || p.HighWatermark() != batches*perBatch+1 {
		t.Fatalf("late push: %d bytes, hw %d", len(r.tail), p.HighWatermark())
	}
	unsub := sc.send(func(f api.Frame) error {
		u, err := f.NewUnsubscribeRequest()
		u.SetSubscriptionId(subID)
		return err
	}, nil)
	deadline := time.Now().Add(10 * time.Second)
	gotUnsub, gotFinal := false, false
	for !(gotUnsub && gotFinal) && time.Now().Before(deadline) {
		r := sc.recv()
		switch {
		case r.f.CorrelationId() == unsub:
			expectWhich(t, r, api.Frame_Which_unsubscribeResponse)
			gotUnsub = true
		case r.f.CorrelationId() == subID && len(r.tail) == 0:
			gotFinal = true
		}
	}
	if !gotUnsub || !gotFinal {
		t.Fatalf("unsubscribe answered %v, final push %v", gotUnsub, gotFinal)
	}
}
