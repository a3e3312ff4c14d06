package sdk

import (
	"sync"
	"testing"
	"time"
)

// A Consumer group member returns no record of a partition before
// OnPartitionsAssigned named it and returned, as Kafka's rebalance
// listener: here the partition is one the topic gained (CreatePartitions),
// its records are there at once, and the callback takes its time.
func TestConsumerAssignsBeforeReturningRecords(t *testing.T) {
	b := startBroker(t)
	b.topic(t, "t", 1)
	ctx := testCtx(t)
	entered := make(chan []uint32, 4)
	release := make(chan struct{})
	returned := make(chan struct{})
	cfg := groupConfig(b, ConsumerConfig{Topic: "t", ConsumerGroup: "g",
		OnPartitionsAssigned: func(ps []uint32) {
			entered <- ps
			if ps[0] == 1 {
				<-release
				close(returned)
			}
		}})
	c, err := NewConsumer(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var releaseOnce sync.Once
	letGo := func() { releaseOnce.Do(func() { close(release) }) }
	defer letGo() // before Close, which waits for the callback
	if ps := <-entered; len(ps) != 1 || ps[0] != 0 {
		t.Fatalf("first assignment %v, want [0]", ps)
	}
	if _, err := b.eng.CreatePartitions("t", 2); err != nil {
		t.Fatal(err)
	}
	b.produce(t, "t", []int{1}, 3)
	poll := func() []Message {
		msgs, err := c.Poll(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return msgs
	}
	// Poll until the callback for partition 1 runs; nothing of partition
	// 1 may come before it returns.
	for waiting := true; waiting; {
		select {
		case ps := <-entered:
			if len(ps) != 1 || ps[0] != 1 {
				t.Fatalf("assignment %v, want [1]", ps)
			}
			waiting = false
		default:
			if msgs := poll(); len(msgs) > 0 {
				t.Fatalf("Poll returned %d records of partition %d before OnPartitionsAssigned named it", len(msgs), msgs[0].Partition)
			}
		}
	}
	for range 3 { // the callback is still running: MaxWait passes empty
		if msgs := poll(); len(msgs) > 0 {
			t.Fatalf("Poll returned %d records of partition %d while OnPartitionsAssigned([1]) ran", len(msgs), msgs[0].Partition)
		}
	}
	letGo()
	<-returned
	var got []Message
	waitFor(t, 10*time.Second, "partition 1's records", func() bool { got = append(got, poll()...); return len(got) >= 3 })
	for _, m := range got {
		if m.Partition != 1 {
			t.Fatalf("record of partition %d, want 1", m.Partition)
		}
	}
}
