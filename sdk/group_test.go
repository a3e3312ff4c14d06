package sdk

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/api/batch"
	"github.com/seedqueue/sq/engine"
	"github.com/seedqueue/sq/net/dataplane"
)

// Members in these tests heartbeat every groupHeartbeat and have a
// session of groupSession, or mortalSession for a member whose session
// a test ends. The broker's clock (broker.clock) only moves when a test
// advances it, so no session ends because the machine is slow: a test
// ends the sessions of mortal members by advancing it past mortalSession.
const (
	groupHeartbeat = 20 * time.Millisecond
	groupSession   = time.Minute
	mortalSession  = time.Second
)

// testClock is a clock that moves only when Advance is called. It counts
// its reads, so a test can wait until a goroutine has looked at the time.
type testClock struct {
	mu    sync.Mutex
	t     time.Time
	reads int
}

func newTestClock() *testClock { return &testClock{t: time.Unix(1_700_000_000, 0)} }

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reads++
	return c.t
}

func (c *testClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// Reads returns how many times Now was called.
func (c *testClock) Reads() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.reads
}

// broker is a real engine served on loopback, on a testClock.
type broker struct {
	addr  string
	eng   *engine.Engine
	clock *testClock
}

func startBroker(t *testing.T) *broker {
	t.Helper()
	return startBrokerOpts(t, dataplane.Options{})
}

func startBrokerOpts(t *testing.T, dopts dataplane.Options) *broker {
	t.Helper()
	clock := newTestClock()
	opts := engine.Options{DataDir: t.TempDir(), SyncPolicy: "none", Logger: slog.New(slog.DiscardHandler), Now: clock.Now}
	eng, err := engine.Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	dopts.Logger = slog.New(slog.DiscardHandler)
	srv, err := dataplane.New(eng, dopts)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	t.Cleanup(func() {
		srv.Close()
		if err := <-served; err != nil {
			t.Logf("serve after close: %v", err)
		}
		eng.Close()
	})
	return &broker{addr: ln.Addr().String(), eng: eng, clock: clock}
}

// produce appends n records "p<partition>-<i>" to each listed partition.
func (b *broker) produce(t *testing.T, topic string, partitions []int, n int) {
	t.Helper()
	if err := b.produceErr(topic, partitions, n); err != nil {
		t.Fatal(err)
	}
}

func (b *broker) produceErr(topic string, partitions []int, n int) error {
	for _, p := range partitions {
		var bb batch.Builder
		for i := range n {
			bb.Add(nil, fmt.Appendf(nil, "p%d-%d", p, i), nil, 1)
		}
		out, err := bb.Build()
		if err != nil {
			return err
		}
		if _, err := b.eng.Append(context.Background(), topic, p, out); err != nil {
			return err
		}
	}
	return nil
}

// endSession ends the sessions of members that stopped heartbeating
// (mortalSession) until group has want members: it advances the broker's
// clock past mortalSession and waits for the broker's reaper. A
// heartbeat a member sent just before it stopped can reach the broker
// after an advance and extend its session once more, so the clock moves
// again then, a few times at most: a few seconds, which members with
// groupSession outlive.
func (b *broker) endSession(t *testing.T, group string, want int) {
	t.Helper()
	members := func() int {
		d, err := b.eng.DescribeGroup(group)
		if err != nil {
			return 0
		}
		return len(d.Members)
	}
	for range 5 {
		b.clock.Advance(mortalSession + time.Millisecond)
		for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			if members() == want {
				return
			}
		}
	}
	t.Fatalf("group %q has %d members after sessions ended, want %d", group, members(), want)
}

func (b *broker) topic(t *testing.T, name string, partitions int) {
	t.Helper()
	if _, err := b.eng.CreateTopic(name, partitions, engine.TopicConfig{}); err != nil {
		t.Fatal(err)
	}
}

// member is a consumer polling in the background and recording what it
// reads.
type member struct {
	c    *Consumer
	stop context.CancelFunc
	done chan struct{}

	mu   sync.Mutex
	seen map[uint32][]uint64
}

// groupConfig fills in the address, session and heartbeat of a member
// of b's groups.
func groupConfig(b *broker, cfg ConsumerConfig) ConsumerConfig {
	cfg.Addr = b.addr
	if cfg.SessionTimeout == 0 {
		cfg.SessionTimeout = groupSession
	}
	if cfg.HeartbeatInterval == 0 {
		cfg.HeartbeatInterval = groupHeartbeat
	}
	if cfg.MaxWait == 0 {
		cfg.MaxWait = 50 * time.Millisecond
	}
	return cfg
}

func startMember(t *testing.T, b *broker, cfg ConsumerConfig) *member {
	t.Helper()
	cfg = groupConfig(b, cfg)
	c, err := NewConsumer(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &member{c: c, stop: cancel, done: make(chan struct{}), seen: map[uint32][]uint64{}}
	go func() {
		defer close(m.done)
		for ctx.Err() == nil {
			msgs, err := c.Poll(ctx)
			if err != nil {
				return
			}
			m.mu.Lock()
			for _, msg := range msgs {
				m.seen[msg.Partition] = append(m.seen[msg.Partition], msg.Offset)
			}
			m.mu.Unlock()
		}
	}()
	t.Cleanup(func() { m.close() })
	return m
}

// close stops polling and closes the consumer (commit, leave).
func (m *member) close() {
	m.stop()
	<-m.done
	m.c.Close()
}

// kill stops the member as a crash would: no commit, no leave; its
// connection closes.
func (m *member) kill() {
	m.stop()
	<-m.done
	kill(m.c)
}

func kill(c *Consumer) {
	c.closeOnce.Do(func() {
		c.cancel()
		c.wg.Wait()
		c.client.Close()
	})
}

func (m *member) count() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, s := range m.seen {
		n += len(s)
	}
	return n
}

func waitAssigned(t *testing.T, what string, timeout time.Duration, ms []*member, want ...int) {
	t.Helper()
	waitFor(t, timeout, what, func() bool {
		for i, m := range ms {
			if len(m.c.Assignment()) != want[i] {
				return false
			}
		}
		return true
	})
}

// checkGroupOrder fails when, per partition, the offsets read by the
// group (in member order) have a gap or go backwards within a member.
func checkGroupOrder(t *testing.T, total map[uint32]uint64, ms ...*member) {
	t.Helper()
	for p, n := range total {
		got := map[uint64]int{}
		for _, m := range ms {
			m.mu.Lock()
			s := m.seen[p]
			for i, off := range s {
				if i > 0 && off <= s[i-1] {
					t.Errorf("partition %d: offset %d after %d in one member", p, off, s[i-1])
				}
				got[off]++
			}
			m.mu.Unlock()
		}
		for off := range n {
			if got[off] != 1 {
				t.Errorf("partition %d offset %d read %d times, want exactly once", p, off, got[off])
			}
		}
	}
}

func TestGroupThreeMembersShareAndMove(t *testing.T) {
	b := startBroker(t)
	b.topic(t, "orders", 6)
	cfg := ConsumerConfig{Topic: "orders", ConsumerGroup: "g"}
	mortal := cfg
	mortal.SessionTimeout = mortalSession
	ms := []*member{startMember(t, b, cfg)}
	waitAssigned(t, "first member owns all", 5*time.Second, ms, 6)
	ms = append(ms, startMember(t, b, mortal), startMember(t, b, cfg))
	waitAssigned(t, "2 partitions each", 5*time.Second, ms, 2, 2, 2)
	seen := map[uint32]bool{}
	for _, m := range ms {
		for _, p := range m.c.Assignment() {
			if seen[p] {
				t.Fatalf("partition %d assigned twice", p)
			}
			seen[p] = true
		}
	}
	b.produce(t, "orders", []int{0, 1, 2, 3, 4, 5}, 100)
	waitFor(t, 10*time.Second, "600 records read", func() bool {
		return ms[0].count()+ms[1].count()+ms[2].count() >= 600
	})
	total := map[uint32]uint64{0: 100, 1: 100, 2: 100, 3: 100, 4: 100, 5: 100}
	checkGroupOrder(t, total, ms...)

	// One leaves: the other two own all 6. The broker's clock stands
	// still, so no session ended: the leave moved them.
	ms[2].close()
	waitAssigned(t, "two members own all 6", 5*time.Second, ms[:2], 3, 3)
	// One is killed: it stays a member, holding its partitions, until its
	// session ends on the broker's clock; then they move.
	ms[1].kill()
	admin := ms[0].c.Client()
	if ids := groupMembers(admin, "g"); len(ids) != 2 {
		t.Fatalf("members after the kill, before its session ended: %v", ids)
	}
	if got := ms[0].c.Assignment(); len(got) != 3 {
		t.Fatalf("survivor holds %v before the killed member's session ended", got)
	}
	b.endSession(t, "g", 1)
	waitAssigned(t, "survivor owns all 6", 5*time.Second, ms[:1], 6)
	if ids := groupMembers(admin, "g"); len(ids) != 1 {
		t.Fatalf("members after the session ended: %v", ids)
	}
}

// Members that keep their partitions during a rebalance keep reading them:
// their readers are never stopped, and records published during the
// rebalance reach them.
func TestGroupJoinDoesNotStopTheWorld(t *testing.T) {
	b := startBroker(t)
	b.topic(t, "t", 4)
	cfg := ConsumerConfig{Topic: "t", ConsumerGroup: "g", AutoCommit: true, AutoCommitInterval: time.Millisecond}
	a := startMember(t, b, cfg)
	waitAssigned(t, "a owns all", 5*time.Second, []*member{a}, 4)
	a.c.mu.Lock()
	before := map[uint32]*partFetcher{}
	for p, pf := range a.c.parts {
		before[p] = pf
	}
	a.c.mu.Unlock()

	stop := make(chan struct{})
	produced := make(chan map[uint32]uint64, 1)
	go func() {
		n := map[uint32]uint64{}
		for {
			select {
			case <-stop:
				produced <- n
				return
			default:
			}
			if err := b.produceErr("t", []int{0, 1, 2, 3}, 1); err != nil {
				panic(err)
			}
			for p := range 4 {
				n[uint32(p)]++
			}
		}
	}()
	bm := startMember(t, b, cfg)
	waitAssigned(t, "2 each", 5*time.Second, []*member{a, bm}, 2, 2)
	// Records published after the rebalance reach both.
	ca, cb := a.count(), bm.count()
	waitFor(t, 5*time.Second, "both keep reading", func() bool { return a.count() > ca && bm.count() > cb })
	close(stop)
	total := <-produced

	a.c.mu.Lock()
	for p, pf := range a.c.parts {
		if before[p] != pf {
			t.Errorf("reader of kept partition %d was restarted", p)
		}
	}
	a.c.mu.Unlock()
	// Records of a moved partition may be read twice (at-least-once
	// across the move): wait for coverage, not for a count.
	waitFor(t, 10*time.Second, "everything read", func() bool { return covered(total, a, bm) })
	for p, n := range total {
		got := map[uint64]bool{}
		for _, m := range []*member{a, bm} {
			m.mu.Lock()
			s := m.seen[p]
			for i, off := range s {
				if i > 0 && off <= s[i-1] {
					t.Errorf("partition %d: offset %d after %d in one member", p, off, s[i-1])
				}
				got[off] = true
			}
			m.mu.Unlock()
		}
		for off := range n {
			if !got[off] {
				t.Fatalf("partition %d: offset %d never read (gap)", p, off)
			}
		}
	}
}

// covered reports whether every offset below total[p] of every partition
// was read by one of ms.
func covered(total map[uint32]uint64, ms ...*member) bool {
	for p, n := range total {
		got := map[uint64]bool{}
		for _, m := range ms {
			m.mu.Lock()
			for _, off := range m.seen[p] {
				got[off] = true
			}
			m.mu.Unlock()
		}
		if uint64(len(got)) < n {
			return false
		}
	}
	return true
}

// p0 moves from A to B, B reads to 300 and commits, p0 moves back to A: A
// resumes at 300 (from the broker, not from its own position).
func TestGroupMoveBackResumesAtCommitted(t *testing.T) {
	b := startBroker(t)
	b.topic(t, "t", 1)
	b.produce(t, "t", []int{0}, 500)
	ctx := context.Background()
	cfg := groupConfig(b, ConsumerConfig{Topic: "t", ConsumerGroup: "g", MaxPollRecords: 100})
	acfg := cfg
	acfg.SessionTimeout = mortalSession
	a, err := NewConsumer(ctx, acfg)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	msgs := pollN(t, a, 100)
	if msgs[0].Offset != 0 || msgs[99].Offset != 99 {
		t.Fatalf("A read %d..%d", msgs[0].Offset, msgs[99].Offset)
	}
	if err := a.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	a.mu.Lock()
	staleGen, aID := a.group.generation, a.group.memberID
	a.mu.Unlock()

	// B joins; A is removed (its session expires: its heartbeats stop)
	// so p0 moves to B.
	bc, err := NewConsumer(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer bc.Close()
	a.cancel() // stops A's heartbeats and readers, keeps its connection
	a.wg.Wait()
	b.endSession(t, "g", 1)
	waitFor(t, 5*time.Second, "p0 moves to B", func() bool { return len(bc.Assignment()) == 1 })
	got := pollN(t, bc, 200)
	if got[0].Offset != 100 || got[199].Offset != 299 {
		t.Fatalf("B read %d..%d, want 100..299", got[0].Offset, got[199].Offset)
	}
	if err := bc.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	// A's stale generation is fenced and changes nothing.
	_, err = a.Client().CommitGroupOffsets(ctx, "g", aID, staleGen, []OffsetCommit{{Topic: "t", Partition: 0, Offset: 100}})
	if !errors.Is(err, api.ErrFencedGeneration) {
		t.Fatalf("stale commit: %v", err)
	}
	if offs, _ := bc.Client().FetchOffsets(ctx, "g", "t"); len(offs) != 1 || offs[0].Offset != 300 {
		t.Fatalf("committed after a stale commit: %+v", offs)
	}

	// A comes back as a member (fenced, it joins again) and B leaves:
	// p0 returns to A, which resumes at 300.
	a2 := &Consumer{client: a.client, core: a.core, cfg: a.cfg.withDefaults(), log: a.log,
		ready: make(chan struct{}, 1), revoke: make(chan struct{}, 1), hbNow: make(chan struct{}, 1),
		parts: map[uint32]*partFetcher{}, consumed: map[uint32]uint64{}, committed: map[uint32]uint64{}, marked: map[uint32]uint64{}, from: map[uint32]uint64{}, revoking: map[uint32]bool{},
		returned: map[uint32]bool{}, lost: map[uint32]uint64{}, posID: map[uint32]api.TopicID{}, restartCh: make(chan struct{}, 1)}
	a2.ctx, a2.cancel = context.WithCancel(context.Background())
	// The old position of A (100) is kept in a2 to show it is not used.
	a2.consumed[0] = 100
	if err := a2.start(ctx); err != nil {
		t.Fatal(err)
	}
	defer a2.Close()
	bc.Close()
	waitFor(t, 5*time.Second, "p0 back to A", func() bool { return len(a2.Assignment()) == 1 })
	back := pollN(t, a2, 1)
	if back[0].Offset != 300 {
		t.Fatalf("A resumed at %d, want 300", back[0].Offset)
	}
}

func TestGroupAutoCommitAtLeastOnce(t *testing.T) {
	b := startBroker(t)
	b.topic(t, "t", 1)
	b.produce(t, "t", []int{0}, 500)
	ctx := context.Background()
	cfg := groupConfig(b, ConsumerConfig{Topic: "t", ConsumerGroup: "g", SessionTimeout: mortalSession,
		AutoCommit: true, AutoCommitInterval: time.Nanosecond, MaxPollRecords: 500})

	// Processed 200 of 500 polled records, then killed: nothing past 200
	// may be committed.
	c1, err := NewConsumer(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got := pollN(t, c1, 500); len(got) != 500 {
		t.Fatalf("polled %d", len(got))
	}
	kill(c1)
	b.endSession(t, "g", 0)
	c2, err := NewConsumer(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	got := pollN(t, c2, 1)
	if first := got[0].Offset; first > 200 {
		t.Fatalf("restarted at %d after processing 200", first)
	}
	// Read everything, Poll again (which commits it), then killed: the
	// next member resumes exactly after the last record.
	got = append(got, pollN(t, c2, int(500-got[0].Offset)-len(got))...)
	if last := got[len(got)-1].Offset; last != 499 {
		t.Fatalf("last record %d", last)
	}
	if _, err := c2.Poll(ctx); err != nil {
		t.Fatal(err)
	}
	kill(c2)
	b.endSession(t, "g", 0)
	b.produce(t, "t", []int{0}, 1)
	c3, err := NewConsumer(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c3.Close()
	if off := pollN(t, c3, 1)[0].Offset; off != 500 {
		t.Fatalf("resumed at %d, want 500", off)
	}
}

// A push consumer with a small credit window and a slow handler reads
// every record once, in order; a consumer at the log end gets a new record
// when it is published: its Poll, with a MaxWait of an hour, returns only
// when a push wakes it.
func TestPushSmallCreditSlowHandler(t *testing.T) {
	b := startBroker(t)
	b.topic(t, "t", 2)
	for range 20 {
		b.produce(t, "t", []int{0, 1}, 50)
	}
	c, err := NewConsumer(context.Background(), ConsumerConfig{Addr: b.addr, Topic: "t", MaxBytes: 2048, MaxPollRecords: 7, MaxWait: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	next := map[uint32]uint64{}
	for next[0]+next[1] < 2000 {
		msgs := pollN(t, c, 1)
		for _, m := range msgs {
			if m.Offset != next[m.Partition] {
				t.Fatalf("partition %d: offset %d, want %d", m.Partition, m.Offset, next[m.Partition])
			}
			next[m.Partition]++
		}
		time.Sleep(time.Millisecond) // the slow handler
	}
	b.produce(t, "t", []int{1}, 1)
	msgs := pollN(t, c, 1)
	if msgs[0].Offset != 1000 {
		t.Fatalf("new record %d, want 1000", msgs[0].Offset)
	}
}

func TestGroupAdminThroughClient(t *testing.T) {
	b := startBroker(t)
	b.topic(t, "t", 2)
	b.produce(t, "t", []int{0, 1}, 10)
	ctx := context.Background()
	m := startMember(t, b, ConsumerConfig{Topic: "t", ConsumerGroup: "g"})
	waitAssigned(t, "member owns all", 5*time.Second, []*member{m}, 2)
	cl := m.c.Client()
	if _, err := cl.ResetOffsets(ctx, "g", "t", ResetEarliest, 0); !errors.Is(err, api.ErrInvalidRequest) {
		t.Fatalf("reset with a member: %v", err)
	}
	d, err := cl.DescribeGroup(ctx, "g")
	if err != nil || len(d.Members) != 1 || len(d.Offsets) != 2 || d.Summary.State == "" {
		t.Fatalf("describe: %+v %v", d, err)
	}
	m.close()
	c2, err := Dial(ctx, ClientConfig{Addr: b.addr})
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	offs, err := c2.ResetOffsets(ctx, "g", "t", ResetToOffset, 4)
	if err != nil || len(offs) != 2 || offs[1].Offset != 4 {
		t.Fatalf("reset: %+v %v", offs, err)
	}
	gs, err := c2.ListGroups(ctx)
	if err != nil || len(gs) != 1 || gs[0].Group != "g" {
		t.Fatalf("list: %+v %v", gs, err)
	}
	if err := c2.DeleteGroup(ctx, "g"); err != nil {
		t.Fatal(err)
	}
	if gs, _ := c2.ListGroups(ctx); len(gs) != 0 {
		t.Fatalf("after delete: %+v", gs)
	}
	if _, err := c2.DescribeGroup(ctx, "g"); !errors.Is(err, api.ErrUnknownGroup) {
		t.Fatalf("describe after delete: %v", err)
	}
	if err := c2.DeleteGroup(ctx, "g"); !errors.Is(err, api.ErrUnknownGroup) {
		t.Fatalf("delete after delete: %v", err)
	}
}

// Subscriptions hold no request slot: a consumer reads more partitions
// than the server's in-flight limit and still heartbeats and commits.
func TestPushMorePartitionsThanInFlight(t *testing.T) {
	b := startBrokerOpts(t, dataplane.Options{MaxInFlightPerConn: 4})
	b.topic(t, "t", 8)
	b.produce(t, "t", []int{0, 1, 2, 3, 4, 5, 6, 7}, 10)
	m := startMember(t, b, ConsumerConfig{Topic: "t", ConsumerGroup: "g", AutoCommit: true, AutoCommitInterval: time.Millisecond})
	waitFor(t, 10*time.Second, "80 records", func() bool { return m.count() >= 80 })
	waitFor(t, 10*time.Second, "commits of every partition", func() bool {
		offs, err := m.c.Client().FetchOffsets(context.Background(), "g", "t")
		return err == nil && len(offs) == 8
	})
	checkGroupOrder(t, map[uint32]uint64{0: 10, 1: 10, 2: 10, 3: 10, 4: 10, 5: 10, 6: 10, 7: 10}, m)
}
