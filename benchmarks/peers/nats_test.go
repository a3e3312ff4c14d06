package main

import (
	"testing"
	"time"
)

func TestSentQueue(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var q sentQueue
	lat := newLatencies()
	for i := range 10 {
		q.push(t0.Add(time.Duration(i) * time.Millisecond))
	}
	q.ack(0, t0, lat) // the first Add's ack may cover nothing yet
	if q.acked != 0 || lat.h.TotalCount() != 0 {
		t.Fatalf("ack 0: acked %d, %d latencies", q.acked, lat.h.TotalCount())
	}
	q.ack(4, t0.Add(10*time.Millisecond), lat) // sequences 1..4, sent at 0..3 ms
	if q.acked != 4 || lat.h.TotalCount() != 4 {
		t.Fatalf("ack 4: acked %d, %d latencies", q.acked, lat.h.TotalCount())
	}
	if got := lat.h.Max(); got < 9_990 || got > 10_010 {
		t.Fatalf("max latency %d µs, want 10 ms", got)
	}
	q.ack(3, t0.Add(time.Second), lat) // an older ack adds nothing
	if q.acked != 4 || lat.h.TotalCount() != 4 {
		t.Fatalf("stale ack: acked %d, %d latencies", q.acked, lat.h.TotalCount())
	}
	// Compaction keeps the unacknowledged send times in order.
	for i := 10; i < 1000; i++ {
		q.push(t0.Add(time.Duration(i) * time.Millisecond))
		if i%7 == 0 {
			q.ack(uint64(i-5), t0.Add(time.Duration(i)*time.Millisecond), lat)
		}
	}
	if len(q.times)-q.head != int(q.sent-q.acked) {
		t.Fatalf("%d times held for %d unacknowledged", len(q.times)-q.head, q.sent-q.acked)
	}
	if want := t0.Add(time.Duration(q.acked) * time.Millisecond); !q.times[q.head].Equal(want) {
		t.Fatalf("oldest held send time %v, want %v (sequence %d)", q.times[q.head], want, q.acked+1)
	}
	// An ack beyond what was sent (the commit's count) stops at sent.
	q.ack(q.sent+5, t0.Add(2*time.Second), lat)
	if q.acked != q.sent || q.acked != 1000 || lat.h.TotalCount() != 1000 {
		t.Fatalf("final ack: acked %d of %d, %d latencies", q.acked, q.sent, lat.h.TotalCount())
	}
}
