package sdk

import (
	"context"
	"errors"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seedqueue/sq/api"
)

// silence makes s stop answering: every request from now on is read and
// then held, unanswered, until the test ends (as a server that was
// SIGSTOPped with its connections open). It returns the kinds of the
// requests held, in arrival order.
func silence(t *testing.T, s *fakeServer) func() []api.Frame_Which {
	var mu sync.Mutex
	var held []api.Frame_Which
	release := make(chan struct{})
	t.Cleanup(func() { close(release) }) // runs before the server stops
	s.setHook(func(f api.Frame) {
		mu.Lock()
		held = append(held, f.Which())
		mu.Unlock()
		<-release
	})
	return func() []api.Frame_Which {
		mu.Lock()
		defer mu.Unlock()
		return append([]api.Frame_Which(nil), held...)
	}
}

// closeWithin runs close and fails the test when it has not returned
// within guard (a guard against a hang, far above the bound under test).
func closeWithin(t *testing.T, guard time.Duration, close func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- close() }()
	select {
	case err := <-done:
		return err
	case <-time.After(guard):
		t.Fatalf("Close has not returned after %v", guard)
		return nil
	}
}

// positionsAfter returns, per partition, the offset after the last of msgs.
func positionsAfter(msgs []Message) map[uint32]uint64 {
	out := map[uint32]uint64{}
	for _, m := range msgs {
		out[m.Partition] = max(out[m.Partition], m.Offset+1)
	}
	return out
}

// A consumer whose server stopped answering closes within its budget, not
// RequestTimeout (an hour here): the final commit is sent, is not
// answered, and Close returns a *CloseCommitError that names every
// partition whose position was not stored and wraps the cause. Nothing is
// stored, and Close does not report success. The budget comes from
// CloseTimeout, from CloseContext's deadline (CloseTimeout unbounded), or
// from a context already cancelled (the commit then fails at once).
func TestCloseBoundedWhenServerStopsAnswering(t *testing.T) {
	cases := []struct {
		name         string
		closeTimeout time.Duration
		ctx          func() (context.Context, context.CancelFunc)
		cause        error
	}{
		{"CloseTimeout", 200 * time.Millisecond, nil, context.DeadlineExceeded},
		{"CloseContext deadline", -1, func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), 200*time.Millisecond)
		}, context.DeadlineExceeded},
		{"CloseContext cancelled", time.Hour, func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			return ctx, cancel
		}, context.Canceled},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newFakeServer(t)
			s.createTopic("t", 3)
			produce(t, s, "t", 12)
			c := newTestConsumer(t, s, ConsumerConfig{Topic: "t", ConsumerGroup: "g", AutoCommit: true,
				AutoCommitInterval: time.Hour, RequestTimeout: time.Hour, CloseTimeout: tc.closeTimeout})
			want := positionsAfter(pollN(t, c, 12))
			if len(want) != 3 {
				t.Fatalf("records of partitions %v, want all 3", want)
			}
			held := silence(t, s)
			err := closeWithin(t, 30*time.Second, func() error {
				if tc.ctx == nil {
					return c.Close()
				}
				ctx, cancel := tc.ctx()
				defer cancel()
				return c.CloseContext(ctx)
			})
			var ce *CloseCommitError
			if !errors.As(err, &ce) {
				t.Fatalf("Close: %v, want a *CloseCommitError", err)
			}
			if !errors.Is(err, tc.cause) {
				t.Fatalf("Close: %v, want it to wrap %v", err, tc.cause)
			}
			if named := strings.Contains(err.Error(), "CloseTimeout 200ms spent"); named != (tc.ctx == nil) {
				t.Fatalf("Close: %q: CloseTimeout named %v, want %v (only when it ended the budget)", err, named, tc.ctx == nil)
			}
			if ce.Group != "g" || ce.Topic != "t" || !maps.Equal(ce.Positions, want) {
				t.Fatalf("CloseCommitError %s/%s positions %v, want g/t %v", ce.Group, ce.Topic, ce.Positions, want)
			}
			if got := s.count(api.Frame_Which_commitOffsetsRequest); tc.cause == context.DeadlineExceeded && got != 1 {
				t.Fatalf("%d commits sent, want the one left unanswered", got)
			}
			for _, w := range held() {
				if w != api.Frame_Which_commitOffsetsRequest && w != api.Frame_Which_fetchRequest {
					t.Fatalf("requests held %v: want only the commit and reads", held())
				}
			}
			s.mu.Lock()
			stored := len(s.groups["g"])
			s.mu.Unlock()
			if stored != 0 {
				t.Fatalf("the group has %d offsets stored, want none", stored)
			}
			if again := c.Close(); !errors.Is(again, tc.cause) {
				t.Fatalf("second Close: %v, want the first one's error", again)
			}
		})
	}
}

// Against a server that answers, Close commits within its budget and
// returns nil; the positions are stored.
func TestCloseCommitsWithinBudget(t *testing.T) {
	s := newFakeServer(t)
	s.createTopic("t", 2)
	produce(t, s, "t", 6)
	c := newTestConsumer(t, s, ConsumerConfig{Topic: "t", ConsumerGroup: "g", AutoCommit: true,
		AutoCommitInterval: time.Hour, CloseTimeout: 10 * time.Second})
	want := positionsAfter(pollN(t, c, 6))
	if err := closeWithin(t, 30*time.Second, c.Close); err != nil {
		t.Fatalf("Close: %v", err)
	}
	got := map[uint32]uint64{}
	s.mu.Lock()
	for tp, off := range s.groups["g"] {
		got[tp.partition] = off
	}
	s.mu.Unlock()
	if !maps.Equal(got, want) {
		t.Fatalf("stored %v, want %v", got, want)
	}
}
