package sdk

import (
	"slices"
	"sync"
	"testing"
	"time"
)

// A GrpcConsumer group member calls OnPartitionsAssigned with a partition
// before any Poll returns one of its records, as Kafka's
// ConsumerRebalanceListener does: here the partition is one the topic
// gained (CreatePartitions) while a long Poll waited, and its records
// arrive within that Poll.
func TestGrpcConsumerAssignsBeforeReturningRecords(t *testing.T) {
	b := startBroker(t)
	b.topic(t, "t", 1)
	grpcAddr := serveGrpc(t, b)
	ctx := testCtx(t)
	var mu sync.Mutex
	var assigned []uint32
	c, err := NewGrpcConsumer(ctx, GrpcConsumerConfig{GrpcConfig: GrpcConfig{Addr: grpcAddr}, Topic: "t", ConsumerGroup: "g",
		SessionTimeout: groupSession, HeartbeatInterval: groupHeartbeat, MaxWait: time.Minute,
		OnPartitionsAssigned: func(ps []uint32) {
			mu.Lock()
			assigned = append(assigned, ps...)
			mu.Unlock()
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	type polled struct {
		msgs []Message
		err  error
	}
	done := make(chan polled, 1)
	go func() {
		msgs, err := c.Poll(ctx) // partition 0 is empty: waits for records
		done <- polled{msgs, err}
	}()
	if _, err := b.eng.CreatePartitions("t", 2); err != nil {
		t.Fatal(err)
	}
	b.produce(t, "t", []int{1}, 3)
	var got polled
	select {
	case got = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Poll returned nothing within 30s of records on the added partition")
	}
	if got.err != nil || len(got.msgs) == 0 {
		t.Fatalf("Poll = %d records, %v; want the records of partition 1", len(got.msgs), got.err)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, m := range got.msgs {
		if !slices.Contains(assigned, m.Partition) {
			t.Fatalf("Poll returned a record of partition %d (offset %d) before OnPartitionsAssigned named it (assigned so far: %v)", m.Partition, m.Offset, assigned)
		}
	}
}
