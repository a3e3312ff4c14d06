package sdk

import (
	"errors"
	"log/slog"
	"maps"
	"net"
	"testing"
	"time"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/engine"
	"github.com/seedqueue/sq/net/dataplane"
)

// restartableBroker is a real engine and data plane on a fixed loopback
// address, over a data directory that outlives restarts.
type restartableBroker struct {
	broker
	dir    string
	srv    *dataplane.Server
	served chan error
}

func startRestartable(t *testing.T) *restartableBroker {
	t.Helper()
	rb := &restartableBroker{dir: t.TempDir()}
	rb.open(t, "127.0.0.1:0")
	t.Cleanup(rb.stop)
	return rb
}

func (rb *restartableBroker) open(t *testing.T, addr string) {
	t.Helper()
	eng, err := engine.Open(engine.Options{DataDir: rb.dir, SyncPolicy: "none", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := dataplane.New(eng, dataplane.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		eng.Close()
		t.Fatal(err)
	}
	var ln net.Listener
	deadline := time.Now().Add(5 * time.Second)
	for {
		if ln, err = net.Listen("tcp", addr); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond) // the port is still held by the old listener's teardown
	}
	if err != nil {
		srv.Close()
		eng.Close()
		t.Fatal(err)
	}
	rb.srv, rb.eng, rb.addr = srv, eng, ln.Addr().String()
	rb.served = make(chan error, 1)
	go func() { rb.served <- srv.Serve(ln) }()
}

// stop shuts the server down: group membership, held in memory, is lost.
func (rb *restartableBroker) stop() {
	if rb.srv == nil {
		return
	}
	rb.srv.Close()
	<-rb.served //nolint:errcheck // Serve's result after Close says only that it stopped
	rb.eng.Close()
	rb.srv = nil
}

func (rb *restartableBroker) restart(t *testing.T) {
	t.Helper()
	rb.stop()
	rb.open(t, rb.addr)
}

func committedOf(t *testing.T, e *engine.Engine, group string) map[int]uint64 {
	t.Helper()
	offs, err := e.FetchOffsets(group, "t")
	if err != nil {
		t.Fatal(err)
	}
	out := map[int]uint64{}
	for _, o := range offs {
		out[o.Partition] = o.Offset
	}
	return out
}

// After a broker restart the member is unknown to the coordinator: the
// consumer joins again, and Commit and Close return nil only when the
// broker stores the position after the records Poll returned. Before the
// fix, the rejoin dropped the positions silently and the next Commit and
// Close returned nil with the pre-restart offsets still stored.
func TestGroupCommitAfterBrokerRestart(t *testing.T) {
	tests := []struct {
		name             string
		rejoin, closeNow bool
	}{
		{"commit-before-rejoin", false, false},
		{"commit-after-rejoin", true, false},
		{"close-after-rejoin", true, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			testCommitAfterRestart(t, tc.rejoin, tc.closeNow)
		})
	}
}

func testCommitAfterRestart(t *testing.T, rejoin, closeOnly bool) {
	b := startRestartable(t)
	b.topic(t, "t", 3)
	parts := []int{0, 1, 2}
	b.produce(t, "t", parts, 100)
	ctx := testCtx(t)
	// A long session, so the heartbeat does not run between the steps
	// unless the test asks for it.
	c, err := NewConsumer(ctx, ConsumerConfig{Addr: b.addr, Topic: "t", ConsumerGroup: "my-group", AutoCommit: true,
		AutoCommitInterval: time.Hour, SessionTimeout: time.Minute, MaxWait: 50 * time.Millisecond,
		ReconnectBackoff: time.Millisecond, ReconnectBackoffMax: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	pollN(t, c, 300)
	if err := c.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	want := map[int]uint64{0: 100, 1: 100, 2: 100}
	if got := committedOf(t, b.eng, "my-group"); !maps.Equal(got, want) {
		t.Fatalf("committed before the restart: %v", got)
	}
	memberID := func() string {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.group.memberID
	}
	oldID := memberID()

	b.restart(t)
	b.produce(t, "t", parts, 100)
	readTo := func(n uint64) {
		seen := map[uint32]uint64{}
		deadline := time.Now().Add(10 * time.Second)
		for seen[0] < n || seen[1] < n || seen[2] < n {
			if time.Now().After(deadline) {
				t.Fatalf("read up to %v", seen)
			}
			msgs, err := c.Poll(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range msgs {
				seen[m.Partition] = max(seen[m.Partition], m.Offset+1)
			}
		}
	}
	readTo(200) // from the in-memory positions, over the new connection
	if rejoin {
		notify(c.hbNow)
		waitFor(t, 10*time.Second, "rejoin", func() bool {
			return memberID() != oldID && len(c.Assignment()) == 3
		})
	}
	want = map[int]uint64{0: 200, 1: 200, 2: 200}
	if closeOnly {
		// Close, with AutoCommit, reports the positions it could not
		// store.
		err := c.Close()
		if got := committedOf(t, b.eng, "my-group"); err == nil && !maps.Equal(got, want) {
			t.Fatalf("Close returned nil but the broker holds %v, want %v", got, want)
		}
		if err != nil && !errors.Is(err, api.ErrFencedGeneration) {
			t.Fatalf("Close: %v, want FENCED_GENERATION", err)
		}
		return
	}
	cerr := c.Commit(ctx)
	if got := committedOf(t, b.eng, "my-group"); cerr == nil && !maps.Equal(got, want) {
		t.Fatalf("Commit returned nil but the broker holds %v, want %v", got, want)
	}
	if cerr != nil && !errors.Is(cerr, api.ErrFencedGeneration) {
		t.Fatalf("Commit: %v, want FENCED_GENERATION", cerr)
	}
	// The consumer rejoins and reads again from the stored offsets; once
	// it has returned everything, Commit stores it.
	waitFor(t, 10*time.Second, "rejoin", func() bool { return memberID() != oldID })
	if !maps.Equal(committedOf(t, b.eng, "my-group"), want) {
		readTo(200)
		if err := c.Commit(ctx); err != nil {
			t.Fatalf("Commit after reading again: %v", err)
		}
	}
	if got := committedOf(t, b.eng, "my-group"); !maps.Equal(got, want) {
		t.Fatalf("the broker holds %v, want %v", got, want)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}
