package sdk

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// groupMembers returns the member ids of group, or nil on error.
func groupMembers(c *Client, group string) []string {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	d, err := c.DescribeGroup(ctx, group)
	if err != nil {
		return nil
	}
	var ids []string
	for _, m := range d.Members {
		ids = append(ids, m.MemberID)
	}
	return ids
}

// groupCommitted returns the group's committed offset per partition (-1:
// none).
func groupCommitted(c *Client, group string) map[uint32]int64 {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	d, err := c.DescribeGroup(ctx, group)
	if err != nil {
		return nil
	}
	out := map[uint32]int64{}
	for _, o := range d.Offsets {
		out[o.Partition] = o.CommittedOffset
	}
	return out
}

// A member that stops calling Poll (its process alive, heartbeating)
// leaves the group after MaxPollInterval; its partition moves to the other
// member, which reads it. When it polls again it rejoins, and Commit
// (or Close, with AutoCommit) reports the positions it had returned and
// not committed. Every record is read at least once across both members.
func TestGroupMaxPollIntervalLeavesAndRejoins(t *testing.T) {
	for _, tc := range []struct {
		name  string
		close bool // report through Close instead of Commit
	}{{"commit", false}, {"close", true}} {
		t.Run(tc.name, func(t *testing.T) { testMaxPollInterval(t, tc.close) })
	}
}

func testMaxPollInterval(t *testing.T, reportAtClose bool) {
	const (
		maxPoll = 400 * time.Millisecond
		n       = 100
	)
	b := startBroker(t)
	b.topic(t, "t", 2)
	var logs logBuffer
	ctx := testCtx(t)
	// A's MaxPollInterval runs on aClock, which moves only when the test
	// says: A stalls exactly when the test advances it past maxPoll.
	aClock := newTestClock()
	acfg := groupConfig(b, ConsumerConfig{Topic: "t", ConsumerGroup: "g",
		MaxPollInterval: maxPoll, AutoCommit: true, AutoCommitInterval: time.Nanosecond, MaxPollRecords: 10,
		Logger: logs.logger()})
	acfg.now = aClock.Now
	a, err := NewConsumer(ctx, acfg)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	bm := startMember(t, b, ConsumerConfig{Topic: "t", ConsumerGroup: "g", AutoCommit: true, AutoCommitInterval: time.Nanosecond})
	aSeen := map[uint32][]uint64{}
	pollA := func() []Message {
		msgs, err := a.Poll(ctx)
		if err != nil {
			t.Fatalf("Poll: %v", err)
		}
		for _, m := range msgs {
			aSeen[m.Partition] = append(aSeen[m.Partition], m.Offset)
		}
		return msgs
	}
	waitFor(t, 10*time.Second, "one partition each", func() bool {
		pollA()
		return len(a.Assignment()) == 1 && len(bm.c.Assignment()) == 1
	})
	pa := a.Assignment()[0]
	b.produce(t, "t", []int{0, 1}, n)
	// A polls until it has records it has not committed, then stalls.
	var last []Message
	waitFor(t, 10*time.Second, "records for A", func() bool {
		last = pollA()
		return len(last) > 0
	})
	lostAt := last[len(last)-1].Offset + 1

	// MaxPollInterval after its last Poll, A is still a member: its
	// heartbeat loop looked at the clock (two reads make one heartbeat
	// round) and stayed.
	admin := bm.c.Client()
	aClock.Advance(maxPoll)
	reads := aClock.Reads()
	waitFor(t, 10*time.Second, "A's heartbeat loop to look at the clock", func() bool { return aClock.Reads() >= reads+3 })
	a.mu.Lock()
	left := a.group.left
	a.mu.Unlock()
	if left || len(groupMembers(admin, "g")) != 2 || strings.Contains(logs.String(), "MaxPollInterval") {
		t.Fatalf("A left the group at MaxPollInterval, not after it:\n%s", logs.String())
	}
	// Past it, A leaves; B then owns and reads both partitions.
	aClock.Advance(time.Millisecond)
	waitFor(t, 10*time.Second, "A to leave the group", func() bool { return len(groupMembers(admin, "g")) == 1 })
	if !strings.Contains(logs.String(), "MaxPollInterval") {
		t.Errorf("no warning about MaxPollInterval in the log:\n%s", logs.String())
	}
	waitAssigned(t, "B to own both partitions", 10*time.Second, []*member{bm}, 2)
	waitFor(t, 10*time.Second, "B to read and commit A's partition", func() bool {
		bm.mu.Lock()
		s := bm.seen[pa]
		done := len(s) > 0 && s[len(s)-1] == n-1
		bm.mu.Unlock()
		c := groupCommitted(admin, "g")
		return done && c[0] == n && c[1] == n
	})

	// A polls again: it rejoins and gets one partition, at the group's
	// committed offset; Commit (or Close) reports the position it had not
	// stored.
	waitFor(t, 10*time.Second, "A to rejoin", func() bool {
		pollA()
		return len(a.Assignment()) == 1 && len(bm.c.Assignment()) == 1 && len(groupMembers(admin, "g")) == 2
	})
	if reportAtClose {
		err = a.Close()
	} else {
		err = a.Commit(ctx)
	}
	if !errors.Is(err, ErrMaxPollIntervalExceeded) {
		t.Fatalf("Commit or Close after rejoining: %v, want ErrMaxPollIntervalExceeded", err)
	}
	if want := fmt.Sprintf("%d@%d", pa, lostAt); !strings.Contains(err.Error(), want) {
		t.Errorf("error %q does not name position %s", err, want)
	}
	if !reportAtClose {
		if err := a.Commit(ctx); err != nil {
			t.Errorf("second Commit: %v (the loss is reported once)", err)
		}
	}

	// At least once: every record was read by A or B.
	bm.mu.Lock()
	defer bm.mu.Unlock()
	for p := range uint32(2) {
		got := map[uint64]bool{}
		for _, off := range append(append([]uint64(nil), aSeen[p]...), bm.seen[p]...) {
			got[off] = true
		}
		for off := range uint64(n) {
			if !got[off] {
				t.Errorf("partition %d offset %d never read", p, off)
			}
		}
	}
}
