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
	"github.com/seedqueue/sq/api/batch"
)

// TestConsumerPartitionOptionsValidate: Partitions, StartOffsets and
// EndOffsets are refused with a group, a partition listed twice, and a
// start or end of a partition not read, by Validate and by NewConsumer,
// each error naming its field; their valid forms are accepted.
func TestConsumerPartitionOptionsValidate(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cfg   ConsumerConfig
		field string
		want  string
	}{
		{"partitions with a group", ConsumerConfig{ConsumerGroup: "g", Partitions: []uint32{0}}, "Partitions", `is set with ConsumerGroup "g"`},
		{"start offsets with a group", ConsumerConfig{ConsumerGroup: "g", StartOffsets: map[uint32]uint64{0: 3}}, "StartOffsets", "drop StartOffsets"},
		{"end offsets with a group", ConsumerConfig{ConsumerGroup: "g", EndOffsets: map[uint32]uint64{1: 3}}, "EndOffsets", "drop EndOffsets"},
		{"a partition twice", ConsumerConfig{Partitions: []uint32{1, 0, 1}}, "Partitions", "lists partition 1 twice"},
		{"a start of a partition not read", ConsumerConfig{Partitions: []uint32{0}, StartOffsets: map[uint32]uint64{0: 1, 2: 5}}, "StartOffsets", "names partition 2, which is not in Partitions [0]"},
		{"an end of a partition not read", ConsumerConfig{Partitions: []uint32{3}, EndOffsets: map[uint32]uint64{0: 0}}, "EndOffsets", "names partition 0, which is not in Partitions [3]"},
	} {
		tc.cfg.Topic, tc.cfg.Addr = "t", unreachable
		field := "ConsumerConfig." + tc.field + " "
		err := tc.cfg.Validate()
		if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), field) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Validate = %v, want ErrInvalidConfig naming %s and saying %q", tc.name, err, field, tc.want)
		}
		c, err := NewConsumer(context.Background(), tc.cfg)
		if err == nil {
			c.Close()
		}
		if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), field) {
			t.Errorf("%s: NewConsumer = %v, want ErrInvalidConfig naming %s", tc.name, err, field)
		}
	}
	for name, cfg := range map[string]ConsumerConfig{
		"a subset":                  {Partitions: []uint32{2, 0}},
		"starts and ends of it":     {Partitions: []uint32{2, 0}, StartOffsets: map[uint32]uint64{2: 7}, EndOffsets: map[uint32]uint64{0: 0, 2: 9}},
		"starts without a subset":   {StartOffsets: map[uint32]uint64{5: 1 << 62}},
		"ends without a subset":     {EndOffsets: map[uint32]uint64{0: 10, 1: 0}},
		"start past its end":        {StartOffsets: map[uint32]uint64{0: 10}, EndOffsets: map[uint32]uint64{0: 3}},
		"empty lists with a group":  {ConsumerGroup: "g", Partitions: []uint32{}, StartOffsets: map[uint32]uint64{}},
		"StartFrom with the subset": {Partitions: []uint32{1}, StartFrom: StartLatest},
	} {
		cfg.Topic = "t"
		if err := cfg.Validate(); err != nil {
			t.Errorf("%s: %v, want valid", name, err)
		}
	}
}

// readToEnd polls c until Poll returns ErrEndOffsetsReached, and returns
// the records as "partition:offset" strings.
func readToEnd(t *testing.T, c *Consumer) []string {
	t.Helper()
	var got []string
	deadline := time.Now().Add(20 * time.Second) // guards against a hang only
	for {
		msgs, err := c.Poll(testCtx(t))
		for _, m := range msgs {
			got = append(got, fmt.Sprintf("%d:%d", m.Partition, m.Offset))
		}
		if errors.Is(err, ErrEndOffsetsReached) {
			return got
		}
		if err != nil {
			t.Fatalf("Poll: %v (after %v)", err, got)
		}
		if time.Now().After(deadline) {
			t.Fatalf("no ErrEndOffsetsReached; read %v", got)
		}
	}
}

// TestConsumerPartitions: a consumer reads only its Partitions, in both
// read modes; one the topic lacks fails NewConsumer with
// api.ErrUnknownPartition naming the topic's partitions, whether listed
// in Partitions, StartOffsets or EndOffsets.
func TestConsumerPartitions(t *testing.T) {
	b := startBroker(t)
	b.topic(t, "t", 3)
	b.produce(t, "t", []int{0, 1, 2}, 4)
	for _, useFetch := range []bool{false, true} {
		c := newConsumerAt(t, b.addr, ConsumerConfig{Topic: "t", Partitions: []uint32{2, 0}, UseFetch: useFetch,
			EndOffsets: map[uint32]uint64{0: 4, 2: 4}})
		if got := c.Assignment(); fmt.Sprint(got) != "[0 2]" {
			t.Errorf("UseFetch %v: Assignment %v, want [0 2]", useFetch, got)
		}
		if _, ok := c.Position(1); ok {
			t.Errorf("UseFetch %v: Position(1) is held", useFetch)
		}
		got := readToEnd(t, c)
		if len(got) != 8 || strings.Contains(strings.Join(got, " "), "1:") {
			t.Errorf("UseFetch %v: read %v, want the 4 records of partitions 0 and 2", useFetch, got)
		}
	}
	for name, cfg := range map[string]ConsumerConfig{
		"Partitions":   {Partitions: []uint32{0, 3}},
		"StartOffsets": {StartOffsets: map[uint32]uint64{7: 0}},
		"EndOffsets":   {EndOffsets: map[uint32]uint64{3: 1}},
	} {
		cfg.Topic, cfg.Addr = "t", b.addr
		c, err := NewConsumer(testCtx(t), cfg)
		if err == nil {
			c.Close()
		}
		if !errors.Is(err, api.ErrUnknownPartition) || !strings.Contains(err.Error(), `topic "t" has partitions 0-2`) {
			t.Errorf("%s past the topic's partitions: NewConsumer = %v, want api.ErrUnknownPartition naming partitions 0-2", name, err)
		}
	}
}

// TestConsumerStartAndEndOffsets: each partition starts at its
// StartOffsets entry (others at StartFrom) and stops at its EndOffsets
// entry, records at or past it not returned; a partition whose start is
// at or past its end reads nothing; Poll returns ErrEndOffsetsReached
// only once every partition has an end and reached it, and Position is
// the offset after the last record returned.
func TestConsumerStartAndEndOffsets(t *testing.T) {
	b := startBroker(t)
	b.topic(t, "t", 4)
	b.produce(t, "t", []int{0, 1, 2, 3}, 6)
	for _, useFetch := range []bool{false, true} {
		c := newConsumerAt(t, b.addr, ConsumerConfig{Topic: "t", UseFetch: useFetch, StartFrom: StartLatest,
			StartOffsets: map[uint32]uint64{0: 2, 1: 0, 2: 5, 3: 9},
			EndOffsets:   map[uint32]uint64{0: 4, 1: 6, 2: 5, 3: 6}})
		got := readToEnd(t, c)
		want := map[string]bool{"0:2": true, "0:3": true, "1:0": true, "1:1": true, "1:2": true, "1:3": true, "1:4": true, "1:5": true}
		if len(got) != len(want) {
			t.Errorf("UseFetch %v: read %v, want %d records", useFetch, got, len(want))
		}
		for _, r := range got {
			if !want[r] {
				t.Errorf("UseFetch %v: read %s, not between its start and end", useFetch, r)
			}
		}
		for p, wantPos := range map[uint32]uint64{0: 4, 1: 6, 2: 5, 3: 9} {
			if pos, ok := c.Position(p); !ok || pos != wantPos {
				t.Errorf("UseFetch %v: Position(%d) = %d, %v; want %d", useFetch, p, pos, ok, wantPos)
			}
		}
		// Asked again, Poll keeps saying so.
		if _, err := c.Poll(testCtx(t)); !errors.Is(err, ErrEndOffsetsReached) {
			t.Errorf("UseFetch %v: Poll after the end = %v, want ErrEndOffsetsReached", useFetch, err)
		}
	}
	// A partition without an end keeps the consumer reading: Poll returns
	// its new records, and nothing (not ErrEndOffsetsReached) while idle.
	c := newConsumerAt(t, b.addr, ConsumerConfig{Topic: "t", Partitions: []uint32{0, 1}, EndOffsets: map[uint32]uint64{0: 1}})
	if got := pollN(t, c, 7); len(got) != 7 {
		t.Fatalf("read %d records, want 7", len(got))
	}
	if msgs, err := c.Poll(testCtx(t)); err != nil || len(msgs) != 0 {
		t.Fatalf("idle Poll = %d records, %v; want none and no error", len(msgs), err)
	}
	b.produce(t, "t", []int{0, 1}, 1)
	if got := pollN(t, c, 1); got[0].Partition != 1 || got[0].Offset != 6 {
		t.Errorf("after more records: %+v, want partition 1 offset 6 only", got)
	}
}

// TestConsumerStartOffsetPastTheEnd: a StartOffsets entry above the high
// watermark is kept: the partition is read from there once its log
// reaches it (where StartAt would move to the high watermark), for a
// partition with records and for an empty one. The fake server counts the
// refused fetches, so the test knows the start was past the end when read.
func TestConsumerStartOffsetPastTheEnd(t *testing.T) {
	for _, tc := range []struct {
		name         string
		stored, from int
	}{{"past the records", 3, 5}, {"empty partition", 0, 2}} {
		t.Run(tc.name, func(t *testing.T) {
			s := newFakeServer(t)
			s.createTopic("t", 1)
			if tc.stored > 0 {
				produce(t, s, "t", tc.stored)
			}
			c := newTestConsumer(t, s, ConsumerConfig{Topic: "t", UseFetch: true, StartOffsets: map[uint32]uint64{0: uint64(tc.from)}})
			waitFor(t, 20*time.Second, "refused fetches", func() bool { return s.count(api.Frame_Which_fetchRequest) >= 3 })
			if pos, _ := c.Position(0); pos != uint64(tc.from) {
				t.Errorf("Position(0) = %d, want %d kept", pos, tc.from)
			}
			produce(t, s, "t", tc.from+2-tc.stored)
			if got := pollN(t, c, 1); got[0].Offset != uint64(tc.from) {
				t.Errorf("first record at offset %d, want %d", got[0].Offset, tc.from)
			}
		})
	}
	// The same through push subscriptions of a real broker.
	b := startBroker(t)
	b.topic(t, "t", 2)
	b.produce(t, "t", []int{0}, 3)
	c := newConsumerAt(t, b.addr, ConsumerConfig{Topic: "t", StartOffsets: map[uint32]uint64{0: 5, 1: 2}})
	if msgs, err := c.Poll(testCtx(t)); err != nil || len(msgs) != 0 {
		t.Fatalf("Poll before the log reaches the starts = %v, %v; want nothing", msgs, err)
	}
	b.produce(t, "t", []int{0, 1}, 3) // partition 0 to 6, partition 1 to 3
	seen := map[string]bool{}
	for _, m := range pollN(t, c, 2) {
		seen[fmt.Sprintf("%d:%d", m.Partition, m.Offset)] = true
	}
	if len(seen) != 2 || !seen["0:5"] || !seen["1:2"] {
		t.Errorf("read %v, want partition 0 from offset 5 and partition 1 from offset 2", seen)
	}
}

// TestConsumerStartOffsetBelowLogStart: a StartOffsets entry below the log
// start moves up to it, reported to OnRecordsLost.
func TestConsumerStartOffsetBelowLogStart(t *testing.T) {
	s := newFakeServer(t)
	s.createTopic("t", 1)
	produce(t, s, "t", 3) // values v0..v2, one batch
	produce(t, s, "t", 2) // v0, v1 again at offsets 3 and 4
	s.truncate("t", 0, 3) // retention removed the first batch
	var mu sync.Mutex
	var lost []string
	c := newTestConsumer(t, s, ConsumerConfig{Topic: "t", UseFetch: true, StartOffsets: map[uint32]uint64{0: 1}, EndOffsets: map[uint32]uint64{0: 5},
		OnRecordsLost: func(p uint32, from, to uint64) {
			mu.Lock()
			lost = append(lost, fmt.Sprintf("%d:%d-%d", p, from, to))
			mu.Unlock()
		}})
	if got := pollN(t, c, 2); got[0].Offset != 3 || got[1].Offset != 4 {
		t.Errorf("read %+v, want offsets 3 and 4", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(lost, " ") != "0:1-3" {
		t.Errorf("OnRecordsLost calls %v, want one for offsets [1, 3) of partition 0", lost)
	}
}

// TestConsumerBoundsOfADeletedTopic: StartOffsets and EndOffsets are
// offsets of the topic the consumer started on. When it is deleted and
// created again, a bounded partition is at its end (Poll returns
// ErrEndOffsetsReached rather than wait for the new topic to reach the old
// end), and an unbounded one starts over at StartFrom.
func TestConsumerBoundsOfADeletedTopic(t *testing.T) {
	b := startBroker(t)
	b.topic(t, "t", 1)
	b.produce(t, "t", []int{0}, 3)
	// Waiting for its log to reach its start.
	bounded := newConsumerAt(t, b.addr, ConsumerConfig{Topic: "t", UseFetch: true, StartOffsets: map[uint32]uint64{0: 5}, EndOffsets: map[uint32]uint64{0: 100}})
	open := newConsumerAt(t, b.addr, ConsumerConfig{Topic: "t", UseFetch: true, StartOffsets: map[uint32]uint64{0: 2}})
	if msgs, err := bounded.Poll(testCtx(t)); len(msgs) != 0 || err != nil {
		t.Fatalf("bounded: Poll = %+v, %v; want nothing yet", msgs, err)
	}
	if got := pollN(t, open, 1); got[0].Offset != 2 {
		t.Fatalf("open: first record at %d, want 2", got[0].Offset)
	}
	if err := b.eng.DeleteTopic("t"); err != nil {
		t.Fatal(err)
	}
	b.topic(t, "t", 1)
	b.produce(t, "t", []int{0}, 1)
	// Poll may say api.ErrUnknownTopic while the consumer saw the topic
	// gone and not yet created again.
	var got []Message
	waitFor(t, 20*time.Second, "the end of the bounded partition", func() bool {
		msgs, err := bounded.Poll(testCtx(t))
		got = append(got, msgs...)
		if err != nil && !errors.Is(err, ErrEndOffsetsReached) && !errors.Is(err, api.ErrUnknownTopic) {
			t.Fatalf("bounded: Poll: %v", err)
		}
		return errors.Is(err, ErrEndOffsetsReached)
	})
	if len(got) != 0 {
		t.Errorf("bounded: read %+v from the new topic, want its end at once", got)
	}
	waitFor(t, 20*time.Second, "a record of the new topic", func() bool {
		msgs, err := open.Poll(testCtx(t))
		if err != nil && !errors.Is(err, api.ErrUnknownTopic) {
			t.Fatalf("open: Poll: %v", err)
		}
		got = append(got, msgs...)
		return len(got) > 0
	})
	if got[0].Offset != 0 {
		t.Errorf("open: first record of the new topic at %d, want 0 (StartFrom, earliest)", got[0].Offset)
	}
}

// TestConsumerEndNotWaitedFor: a bounded partition whose log holds nothing
// more below its end is at its end: an end above the high watermark, and
// a log that lost records it had when the end was set (the fake server's
// log is cut back, as after a restart without a sync).
func TestConsumerEndNotWaitedFor(t *testing.T) {
	s := newFakeServer(t)
	s.createTopic("t", 2)
	produce(t, s, "t", 3)
	produce(t, s, "t", 2)
	// Cut partition 0 back to its first batch.
	s.mu.Lock()
	for _, p := range s.topics["t"].parts {
		if len(p.batches) > 1 {
			h, _ := batch.ParseHeader(p.batches[0])
			p.batches, p.next = p.batches[:1], h.NextOffset()
		}
	}
	hw := make([]uint64, 2)
	for i, p := range s.topics["t"].parts {
		hw[i] = p.next
	}
	s.mu.Unlock()
	c := newTestConsumer(t, s, ConsumerConfig{Topic: "t", EndOffsets: map[uint32]uint64{0: hw[0] + 2, 1: hw[1] + 10}})
	got := readToEnd(t, c)
	if uint64(len(got)) != hw[0]+hw[1] {
		t.Errorf("read %v, want the %d records stored", got, hw[0]+hw[1])
	}
	for p, want := range hw {
		if pos, _ := c.Position(uint32(p)); pos != want {
			t.Errorf("Position(%d) = %d, want %d, where its log ends", p, pos, want)
		}
	}
}
