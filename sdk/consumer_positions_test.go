package sdk

import (
	"errors"
	"testing"
	"time"

	"github.com/seedqueue/sq/api"
)

// committedOffset returns the group's committed offset of partition p of
// topic t, or -1 when it has none.
func committedOffset(t *testing.T, b *broker, group, topic string, p uint32) int64 {
	t.Helper()
	cl, err := Dial(testCtx(t), ClientConfig{Addr: b.addr})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	offs, err := cl.FetchOffsets(testCtx(t), group, topic)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range offs {
		if o.Partition == p && o.Err == nil {
			return int64(o.Offset)
		}
	}
	return -1
}

// A Poll returns 500 records; the application processes 200, fails and
// closes. What the group has committed, and where the next member starts,
// depends on the commit mode the application chose.
func TestCommitModesOnFailureAfterPartialProcessing(t *testing.T) {
	const polled, processed = 500, 200
	for _, tc := range []struct {
		name string
		cfg  ConsumerConfig
		// finish is what the application does after processing msgs[:200]
		// and failing.
		finish func(t *testing.T, c *Consumer, msgs []Message)
		want   int64 // committed offset afterwards; -1: none
	}{
		{"default commits what Poll returned", ConsumerConfig{AutoCommit: true},
			func(t *testing.T, c *Consumer, msgs []Message) {
				if err := c.Close(); err != nil {
					t.Fatal(err)
				}
			}, polled},
		{"AutoCommitMarked commits the marked records", ConsumerConfig{AutoCommitMarked: true},
			func(t *testing.T, c *Consumer, msgs []Message) {
				for _, m := range msgs[:processed] {
					if err := c.MarkProcessed(m); err != nil {
						t.Fatal(err)
					}
				}
				if err := c.Close(); err != nil {
					t.Fatal(err)
				}
			}, processed},
		{"CloseWithoutCommit commits nothing", ConsumerConfig{AutoCommit: true},
			func(t *testing.T, c *Consumer, msgs []Message) { c.CloseWithoutCommit() }, -1},
		{"CommitOffsets commits the given position", ConsumerConfig{},
			func(t *testing.T, c *Consumer, msgs []Message) {
				last := msgs[processed-1]
				if err := c.CommitOffsets(testCtx(t), []OffsetCommit{{Partition: last.Partition, Offset: last.Offset + 1}}); err != nil {
					t.Fatal(err)
				}
				if err := c.Close(); err != nil {
					t.Fatal(err)
				}
			}, processed},
		{"CommitOffsets then CloseWithoutCommit with AutoCommit", ConsumerConfig{AutoCommit: true},
			func(t *testing.T, c *Consumer, msgs []Message) {
				if err := c.CommitOffsets(testCtx(t), []OffsetCommit{{Topic: "t", Partition: 0, Offset: processed}}); err != nil {
					t.Fatal(err)
				}
				c.CloseWithoutCommit()
				if err := c.Close(); err != nil { // after CloseWithoutCommit: nothing
					t.Fatal(err)
				}
			}, processed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := startBroker(t)
			b.topic(t, "t", 1)
			b.produce(t, "t", []int{0}, polled)
			cfg := tc.cfg
			// Only Close (or the application) commits: no automatic
			// commit falls due during the test.
			cfg.Topic, cfg.ConsumerGroup, cfg.MaxPollRecords, cfg.AutoCommitInterval = "t", "g", polled, time.Hour
			cfg = groupConfig(b, cfg)
			c, err := NewConsumer(testCtx(t), cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			msgs := pollN(t, c, polled)
			if len(msgs) != polled || msgs[polled-1].Offset != polled-1 {
				t.Fatalf("polled %d records", len(msgs))
			}
			tc.finish(t, c, msgs)
			if got := committedOffset(t, b, "g", "t", 0); got != tc.want {
				t.Fatalf("committed %d, want %d", got, tc.want)
			}
			// The next member starts after what was committed.
			b.produce(t, "t", []int{0}, 1)
			next, err := NewConsumer(testCtx(t), cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer next.CloseWithoutCommit()
			if first, want := pollN(t, next, 1)[0].Offset, uint64(max(tc.want, 0)); first != want {
				t.Fatalf("next member starts at %d, want %d", first, want)
			}
		})
	}
}

// A revoked partition is committed at its marked position when Poll
// releases it (a record marked after the revocation and before that Poll
// counts); the member that gets it starts there. Marking a record of the
// partition once it is released fails, as does committing it.
func TestMarkedCommitAtRevocation(t *testing.T) {
	b := startBroker(t)
	b.topic(t, "t", 2)
	b.produce(t, "t", []int{0, 1}, 100)
	ctx := testCtx(t)
	cfg := groupConfig(b, ConsumerConfig{Topic: "t", ConsumerGroup: "g", AutoCommitMarked: true, AutoCommitInterval: time.Hour})
	a, err := NewConsumer(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	byPart := map[uint32][]Message{}
	for _, m := range pollN(t, a, 200) {
		byPart[m.Partition] = append(byPart[m.Partition], m)
	}
	for p := range uint32(2) {
		if len(byPart[p]) != 100 {
			t.Fatalf("partition %d: %d records", p, len(byPart[p]))
		}
		if err := a.MarkProcessed(byPart[p][29]); err != nil {
			t.Fatal(err)
		}
		// An earlier mark does not move the position back.
		if err := a.MarkProcessed(byPart[p][3]); err != nil {
			t.Fatal(err)
		}
	}

	// B joins with a callback-free config; A's heartbeat revokes one
	// partition, which A stops reading at once.
	bm := startMember(t, b, ConsumerConfig{Topic: "t", ConsumerGroup: "g", AutoCommitMarked: true})
	waitFor(t, 10*time.Second, "A to have a partition revoked", func() bool { return len(a.Assignment()) == 1 })
	kept := a.Assignment()[0]
	moved := 1 - kept
	// Not released yet: marking a record of it still counts.
	if err := a.MarkProcessed(byPart[moved][59]); err != nil {
		t.Fatalf("mark of a revoked partition before the release: %v", err)
	}
	if got := committedOffset(t, b, "g", "t", moved); got != -1 {
		t.Fatalf("committed %d before the release", got)
	}
	// A's Poll commits it at 60 and releases it; B reads from there.
	waitFor(t, 10*time.Second, "B to get the moved partition", func() bool {
		if _, err := a.Poll(ctx); err != nil {
			t.Fatal(err)
		}
		return len(bm.c.Assignment()) == 1
	})
	if got := committedOffset(t, b, "g", "t", moved); got != 60 {
		t.Fatalf("moved partition committed at %d, want 60 (after the last marked record)", got)
	}
	waitFor(t, 10*time.Second, "B to read the moved partition", func() bool {
		bm.mu.Lock()
		defer bm.mu.Unlock()
		return len(bm.seen[moved]) == 40
	})
	bm.mu.Lock()
	first := bm.seen[moved][0]
	bm.mu.Unlock()
	if first != 60 {
		t.Fatalf("B started the moved partition at %d, want 60", first)
	}

	// Misuse: the released partition's records, and commits of it.
	if err := a.MarkProcessed(byPart[moved][70]); !errors.Is(err, ErrNotAssigned) {
		t.Errorf("mark of a released partition: %v, want ErrNotAssigned", err)
	}
	if err := a.CommitOffsets(ctx, []OffsetCommit{{Partition: moved, Offset: 80}}); !errors.Is(err, ErrNotAssigned) {
		t.Errorf("CommitOffsets of a released partition: %v, want ErrNotAssigned", err)
	}
	if got := committedOffset(t, b, "g", "t", moved); got != 60 {
		t.Fatalf("moved partition committed at %d after refused commits, want 60", got)
	}
	// B leaves (it marked nothing, so commits nothing): the partition
	// comes back to A at 60. Its records A read before the move belong to
	// the earlier assignment; those not read again yet were not returned.
	bm.close()
	waitFor(t, 10*time.Second, "the moved partition back to A", func() bool { return len(a.Assignment()) == 2 })
	if err := a.MarkProcessed(byPart[moved][59]); !errors.Is(err, ErrNotAssigned) {
		t.Errorf("mark of a record of an earlier assignment: %v, want ErrNotAssigned", err)
	}
	if err := a.MarkProcessed(byPart[moved][70]); !errors.Is(err, ErrInvalidPosition) {
		t.Errorf("mark of a record not returned in this assignment: %v, want ErrInvalidPosition", err)
	}
	again := pollN(t, a, 40)
	if again[0].Offset != 60 || again[0].Partition != moved {
		t.Fatalf("A resumed the moved partition at %d/%d, want %d/60", again[0].Partition, again[0].Offset, moved)
	}
	if err := a.MarkProcessed(again[9]); err != nil {
		t.Fatal(err)
	}
	// Close commits each partition at its mark.
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if got := committedOffset(t, b, "g", "t", kept); got != 30 {
		t.Fatalf("kept partition committed at %d, want 30", got)
	}
	if got := committedOffset(t, b, "g", "t", moved); got != 70 {
		t.Fatalf("moved partition committed at %d, want 70", got)
	}
}

// Wrong uses of MarkProcessed and CommitOffsets fail and commit nothing.
func TestMarkAndCommitOffsetsMisuse(t *testing.T) {
	b := startBroker(t)
	b.topic(t, "t", 2)
	b.topic(t, "other", 1)
	b.produce(t, "t", []int{0, 1}, 10)
	ctx := testCtx(t)
	// Heartbeats at the server's interval (20 s): none comes between the
	// test making the generation stale and the commit that uses it.
	c, err := NewConsumer(ctx, groupConfig(b, ConsumerConfig{Topic: "t", ConsumerGroup: "g", AutoCommitMarked: true, HeartbeatInterval: time.Hour}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	msgs := pollN(t, c, 20)
	m := msgs[0]
	for _, tc := range []struct {
		name string
		msg  Message
		want error
	}{
		{"record not returned yet", Message{Topic: "t", Partition: m.Partition, Offset: 10}, ErrInvalidPosition},
		{"record far ahead", Message{Topic: "t", Partition: m.Partition, Offset: 1 << 40}, ErrInvalidPosition},
		{"another topic", Message{Topic: "other", Partition: 0, Offset: 0}, ErrNotAssigned},
		{"partition the topic lacks", Message{Topic: "t", Partition: 7, Offset: 0}, ErrNotAssigned},
	} {
		if err := c.MarkProcessed(tc.msg); !errors.Is(err, tc.want) {
			t.Errorf("MarkProcessed, %s: %v, want %v", tc.name, err, tc.want)
		}
	}
	for _, tc := range []struct {
		name string
		offs []OffsetCommit
		want error
	}{
		{"beyond the high watermark", []OffsetCommit{{Partition: 0, Offset: 11}}, api.ErrOffsetOutOfRange},
		{"far beyond the high watermark", []OffsetCommit{{Partition: 1, Offset: 1 << 62}}, api.ErrOffsetOutOfRange},
		{"another topic", []OffsetCommit{{Topic: "other", Partition: 0, Offset: 0}}, ErrNotAssigned},
		{"partition the topic lacks", []OffsetCommit{{Partition: 2, Offset: 0}}, ErrNotAssigned},
		{"a partition twice", []OffsetCommit{{Partition: 0, Offset: 1}, {Partition: 0, Offset: 2}}, ErrInvalidPosition},
		{"one bad entry stops all", []OffsetCommit{{Partition: 0, Offset: 3}, {Partition: 5, Offset: 1}}, ErrNotAssigned},
	} {
		if err := c.CommitOffsets(ctx, tc.offs); !errors.Is(err, tc.want) {
			t.Errorf("CommitOffsets, %s: %v, want %v", tc.name, err, tc.want)
		}
	}
	for p := range uint32(2) {
		if got := committedOffset(t, b, "g", "t", p); got != -1 {
			t.Errorf("partition %d committed at %d after refused commits", p, got)
		}
	}
	// Fenced like Commit: a stale generation stores nothing (the
	// heartbeat it triggers brings the current one back).
	c.mu.Lock()
	gen := c.group.generation
	c.group.generation = gen - 1
	c.mu.Unlock()
	if err := c.CommitOffsets(ctx, []OffsetCommit{{Partition: 0, Offset: 4}}); !errors.Is(err, api.ErrFencedGeneration) {
		t.Errorf("CommitOffsets with a stale generation: %v, want ErrFencedGeneration", err)
	}
	if got := committedOffset(t, b, "g", "t", 0); got != -1 {
		t.Errorf("partition 0 committed at %d by a stale generation", got)
	}
	waitFor(t, 10*time.Second, "the heartbeat to bring the generation back", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.group.generation == gen
	})
	// At the high watermark is fine; the other entry of a partly refused
	// request is stored.
	if err := c.CommitOffsets(ctx, []OffsetCommit{{Partition: 0, Offset: 10}, {Partition: 1, Offset: 11}}); !errors.Is(err, api.ErrOffsetOutOfRange) {
		t.Fatalf("CommitOffsets with one entry beyond the high watermark: %v", err)
	}
	if got := committedOffset(t, b, "g", "t", 0); got != 10 {
		t.Fatalf("partition 0 committed at %d, want 10", got)
	}

	// Without AutoCommitMarked, without a group, after Close.
	plain, err := NewConsumer(ctx, groupConfig(b, ConsumerConfig{Topic: "t", ConsumerGroup: "g2"}))
	if err != nil {
		t.Fatal(err)
	}
	if err := plain.MarkProcessed(m); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("MarkProcessed without AutoCommitMarked: %v", err)
	}
	plain.Close()
	if err := plain.CommitOffsets(ctx, []OffsetCommit{{Partition: 0, Offset: 1}}); !errors.Is(err, ErrClosed) {
		t.Errorf("CommitOffsets after Close: %v", err)
	}
	solo, err := NewConsumer(ctx, ConsumerConfig{Addr: b.addr, Topic: "t", MaxWait: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer solo.Close()
	if err := solo.CommitOffsets(ctx, []OffsetCommit{{Partition: 0, Offset: 1}}); !errors.Is(err, ErrNoGroup) {
		t.Errorf("CommitOffsets without a group: %v", err)
	}
	c.Close()
	if err := c.MarkProcessed(m); !errors.Is(err, ErrClosed) {
		t.Errorf("MarkProcessed after Close: %v", err)
	}
}

// A partition given back while Poll was committing its revocation keeps
// its position: release does not forget it.
func TestReleaseSkipsPartitionGivenBack(t *testing.T) {
	var revoked []uint32
	c := &Consumer{cfg: ConsumerConfig{OnPartitionsRevoked: func(ps []uint32) { revoked = ps }}.withDefaults(),
		hbNow: make(chan struct{}, 1), consumed: map[uint32]uint64{0: 10, 1: 20}, committed: map[uint32]uint64{0: 5, 1: 15},
		revoking: map[uint32]bool{1: true}, returned: map[uint32]bool{0: true, 1: true}, marked: map[uint32]uint64{}}
	c.release([]uint32{0, 1}) // 0 was resumed by apply meanwhile
	if pos, ok := c.consumed[0]; !ok || pos != 10 || !c.returned[0] || c.committed[0] != 5 {
		t.Fatalf("partition 0 given back: consumed %v committed %v returned %v", c.consumed, c.committed, c.returned)
	}
	if _, ok := c.consumed[1]; ok || len(revoked) != 1 || revoked[0] != 1 {
		t.Fatalf("partition 1 not released: consumed %v, revoked %v", c.consumed, revoked)
	}
}
