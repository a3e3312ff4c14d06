package clusternet_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seedqueue/sq/internal/clusternet"
	"github.com/seedqueue/sq/internal/jepsen"
	"github.com/seedqueue/sq/sdk"
)

// The Jepsen-style test (docs/architecture.md §9.1): producers and a
// consumer group work against a cluster while a seeded nemesis kills,
// stops and cuts off partition leaders and splits the cluster; after each
// round's faults heal, every partition is read in full and the round's
// history is checked by internal/jepsen. JEPSEN_SEED replays a schedule of
// faults (the timing of the operations around them is the machine's),
// JEPSEN_ROUNDS sets the number of rounds (20 by default; `make jepsen`
// runs 200), JEPSEN_NODES the cluster size (3 by default; `make jepsen`
// runs 5 as well), and JEPSEN_CONTINUE=1 goes on after a failed round
// (each round is checked from the previous round's final logs), to see
// every round's violations rather than the first.

const (
	jepsenTopic      = "jepsen"
	jepsenPartitions = 3
	jepsenProducers  = 4
	jepsenConsumers  = 2
	// jepsenSendEvery paces each producer: one record at most this often.
	jepsenSendEvery = 10 * time.Millisecond
	// jepsenSteady is how long a round runs before and after its fault.
	jepsenSteady = 500 * time.Millisecond
	// A fault lasts from jepsenFaultMin to jepsenFaultMax, drawn.
	jepsenFaultMin = 1500 * time.Millisecond
	jepsenFaultMax = 8 * time.Second
	// jepsenHealTimeout bounds the wait for every partition to be readable
	// in full after a round's faults healed.
	jepsenHealTimeout = 60 * time.Second
)

// serverHasFlag reports whether the sq-server under test has flag (as
// its serve --help lists it): the test uses flags of replication (issue
// 13) once the server has them.
func serverHasFlag(t *testing.T, flag string) bool {
	t.Helper()
	out, err := exec.Command(bins.server, "serve", "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("sq-server serve --help: %v\n%s", err, out)
	}
	return strings.Contains(string(out), flag+" ")
}

// envInt reads a non-negative integer from the environment, def when
// unset or empty.
func envInt(t *testing.T, name string, def int64) int64 {
	t.Helper()
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v < 0 {
		t.Fatalf("%s=%q: want a non-negative integer", name, s)
	}
	return v
}

// TestJepsen runs JEPSEN_ROUNDS rounds of faults against a cluster of
// JEPSEN_NODES nodes (3 by default) and checks every round's history.
func TestJepsen(t *testing.T) {
	nodes := int(envInt(t, "JEPSEN_NODES", 3))
	rounds := int(envInt(t, "JEPSEN_ROUNDS", 20))
	seed := envInt(t, "JEPSEN_SEED", time.Now().UnixNano()&(1<<53-1))
	if nodes != 3 && nodes != 5 {
		t.Fatalf("JEPSEN_NODES=%d: want 3 or 5", nodes)
	}
	t.Logf("jepsen: seed %d, %d rounds, %d nodes (replay: JEPSEN_SEED=%d JEPSEN_ROUNDS=%d JEPSEN_NODES=%d go test -run 'TestJepsen$' -count=1 ./internal/clusternet/)",
		seed, rounds, nodes, seed, rounds, nodes)
	c := newCluster(t, nodes)
	var extra []string
	if serverHasFlag(t, "--replica-lag-time-max-ms") {
		// Followers cut off or stopped for a round's fault leave the ISR
		// within it, so the rounds exercise ISR changes too.
		extra = append(extra, "--replica-lag-time-max-ms", "1500")
	}
	if serverHasFlag(t, "--offsets-topic-num-partitions") {
		// The group's coordinator needs one partition of __sq_offsets;
		// the default 16, 3 replicas each, would add 32 idle replica
		// fetchers to the three servers sharing the test machine.
		extra = append(extra, "--offsets-topic-num-partitions", "3")
	}
	startCluster(t, c, extra...)
	n1 := c.Node(1)
	sqOK(t, c.Client(), n1.Addr, "", "--control", grpcAddr(n1), "topic", "create", jepsenTopic,
		"--partitions", strconv.Itoa(jepsenPartitions), "--replication-factor", "3")
	all := make([]int, nodes)
	for i := range all {
		all[i] = i + 1
	}
	waitAgree(t, c, all...)
	keepGoing := envInt(t, "JEPSEN_CONTINUE", 0) != 0
	j := newJepsenRun(t, c, seed)
	defer j.stop()
	failed := 0
	for r := 1; r <= rounds; r++ {
		if !j.round(r) {
			failed++
			if !keepGoing {
				t.Fatalf("jepsen: seed %d failed in round %d of %d (replay: JEPSEN_SEED=%d JEPSEN_ROUNDS=%d JEPSEN_NODES=%d; JEPSEN_CONTINUE=1 goes on after a failed round)", seed, r, rounds, seed, r, nodes)
			}
		}
	}
	if failed > 0 {
		t.Errorf("jepsen: seed %d: %d of %d rounds failed", seed, failed, rounds)
	}
	if !j.compareReplicas() {
		t.Fatalf("jepsen: seed %d: the replicas differ after %d rounds (replay: JEPSEN_SEED=%d JEPSEN_ROUNDS=%d JEPSEN_NODES=%d)", seed, rounds, seed, rounds, nodes)
	}
}

// jepsenRun is one test's cluster, clients and history.
type jepsenRun struct {
	t     *testing.T
	c     *clusternet.Cluster
	rng   *rand.Rand
	seed  int64
	start time.Time
	dial  sdk.DialFunc

	producers []*sdk.Producer
	consumers []*jepsenConsumer
	cancel    context.CancelFunc // ends the consumers
	wg        sync.WaitGroup

	// incarnation[i] counts node i+1's processes: observer names carry it.
	incarnation []atomic.Int64

	mu    sync.Mutex
	reads []jepsen.Read
	hws   []jepsen.HWObservation

	// What the previous round leaves to the next.
	prev     map[uint32][]string
	prevRes  jepsen.Result
	lastLogs map[uint32]jepsen.FinalRead
	// readsFrom is when the previous round's first final read began: the
	// earliest call of this round's reads.
	readsFrom int64
}

// now is the history's clock: nanoseconds since the run started.
func (j *jepsenRun) now() int64 { return time.Since(j.start).Nanoseconds() }

func newJepsenRun(t *testing.T, c *clusternet.Cluster, seed int64) *jepsenRun {
	j := &jepsenRun{t: t, c: c, rng: rand.New(rand.NewPCG(uint64(seed), 0x5eed)), seed: seed, start: time.Now(),
		dial: sdk.DialFunc(c.Client().DialContext), incarnation: make([]atomic.Int64, len(c.Nodes()))}
	ctx, cancel := context.WithCancel(context.Background())
	j.cancel = cancel
	for i := range jepsenProducers {
		p, err := sdk.NewProducer(ctx, j.producerConfig(c.Node(1+i%len(c.Nodes())).Addr))
		if err != nil {
			t.Fatalf("producer %d: %v", i, err)
		}
		j.producers = append(j.producers, p)
	}
	for i := range jepsenConsumers {
		jc := &jepsenConsumer{id: i + 1, run: j, session: map[uint32]int{}, since: map[uint32]int64{}}
		cons, err := sdk.NewConsumer(ctx, sdk.ConsumerConfig{
			Addr: c.Node(1 + (i+1)%len(c.Nodes())).Addr, Dialer: j.dial, Topic: jepsenTopic,
			ConsumerGroup: "jepsen", AutoCommit: true, AutoCommitInterval: 200 * time.Millisecond,
			HeartbeatInterval: 100 * time.Millisecond, MaxWait: 100 * time.Millisecond,
			DialTimeout: time.Second, RequestTimeout: 2 * time.Second, ReconnectBackoffMax: 500 * time.Millisecond,
			MetadataMaxAge: time.Second, CloseTimeout: 2 * time.Second,
			OnPartitionsAssigned: jc.assigned,
		})
		if err != nil {
			t.Fatalf("consumer %d: %v", i+1, err)
		}
		jc.cons = cons
		j.consumers = append(j.consumers, jc)
		j.wg.Go(func() { jc.loop(ctx) })
	}
	return j
}

// producerConfig is an idempotent producer (the SDK's default) with
// quorum acks that bounds every send to a few seconds, so a round's
// operations end soon after its faults heal.
func (j *jepsenRun) producerConfig(addr string) sdk.ProducerConfig {
	return sdk.ProducerConfig{Addr: addr, Dialer: j.dial, Partitioner: byKey, Acks: sdk.AcksAll,
		DeliveryTimeout: 3 * time.Second, RequestTimeout: time.Second, DialTimeout: time.Second,
		RetryBackoff: 50 * time.Millisecond, RetryBackoffMax: 300 * time.Millisecond,
		ReconnectBackoffMax: 300 * time.Millisecond, MetadataMaxAge: time.Second}
}

// stop ends the consumers and producers.
func (j *jepsenRun) stop() {
	j.cancel()
	j.wg.Wait()
	for _, jc := range j.consumers {
		jc.cons.CloseWithoutCommit()
	}
	for _, p := range j.producers {
		p.Close()
	}
}

// jepsenConsumer is one member of the consumer group and its sessions.
type jepsenConsumer struct {
	id   int
	run  *jepsenRun
	cons *sdk.Consumer

	mu      sync.Mutex
	session map[uint32]int   // the current session of each partition
	since   map[uint32]int64 // when it started
}

// assigned starts a session for each partition assigned.
func (jc *jepsenConsumer) assigned(parts []uint32) {
	jc.mu.Lock()
	defer jc.mu.Unlock()
	for _, p := range parts {
		jc.session[p]++
		jc.since[p] = jc.run.now()
	}
}

// loop polls until ctx ends, recording every record read.
func (jc *jepsenConsumer) loop(ctx context.Context) {
	for ctx.Err() == nil {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		ms, err := jc.cons.Poll(pctx)
		cancel()
		ret := jc.run.now()
		jc.mu.Lock()
		var reads []jepsen.Read
		for _, m := range ms {
			reads = append(reads, jepsen.Read{Consumer: jc.id, Session: jc.session[m.Partition], Partition: m.Partition,
				Offset: m.Offset, Value: string(m.Value), Call: jc.since[m.Partition], Return: ret})
		}
		jc.mu.Unlock()
		jc.run.mu.Lock()
		jc.run.reads = append(jc.run.reads, reads...)
		jc.run.mu.Unlock()
		if err != nil && ctx.Err() == nil && pctx.Err() == nil {
			// A retriable failure answered at once: pace the next Poll.
			select {
			case <-ctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
}

// fault is one round's nemesis: what it did and how to undo it.
type fault struct {
	name string
	heal func()
}

// leaderOf returns the node that leads partition p, as the metadata of
// any node that answers says.
func (j *jepsenRun) leaderOf(p uint32) (int, error) {
	var errs []error
	for _, n := range j.c.Nodes() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		md, err := func() (sdk.Metadata, error) {
			cl, err := sdk.Dial(ctx, sdk.ClientConfig{Addr: n.Addr, Dialer: j.dial, DialTimeout: time.Second})
			if err != nil {
				return sdk.Metadata{}, err
			}
			defer cl.Close()
			return cl.Metadata(ctx, jepsenTopic)
		}()
		cancel()
		if err != nil {
			errs = append(errs, fmt.Errorf("node %d: %w", n.Index, err))
			continue
		}
		for _, ti := range md.Topics {
			for _, pi := range ti.PartitionInfos {
				if pi.Partition == p && pi.Leader != "" {
					i, err := strconv.Atoi(strings.TrimPrefix(pi.Leader, "node-"))
					if err == nil {
						return i, nil
					}
				}
			}
		}
		errs = append(errs, fmt.Errorf("node %d: no leader of partition %d in %+v", n.Index, p, md.Topics))
	}
	return 0, errors.Join(errs...)
}

// nemesis injects the round's fault, drawn from the seeded generator,
// against the leader of a partition it draws.
func (j *jepsenRun) nemesis() fault {
	t := j.t
	p := uint32(j.rng.IntN(jepsenPartitions))
	kind := j.rng.IntN(5)
	leader, err := j.leaderOf(p)
	if err != nil {
		t.Fatalf("jepsen: leader of partition %d: %v", p, err)
	}
	n := j.c.Node(leader)
	nodes := len(j.c.Nodes())
	switch kind {
	case 0:
		n.Kill()
		j.incarnation[leader-1].Add(1)
		return fault{fmt.Sprintf("kill -9 node %d (leader of partition %d), restart it on its data", leader, p), func() { n.Restart() }}
	case 1:
		n.Pause()
		return fault{fmt.Sprintf("SIGSTOP node %d (leader of partition %d), then SIGCONT", leader, p), n.Resume}
	case 2:
		j.c.Isolate(leader)
		return fault{fmt.Sprintf("isolate node %d (leader of partition %d)", leader, p), j.c.Heal}
	default:
		// A minority of (nodes-1)/2 nodes, the leader in it (kind 3) or
		// in the majority (kind 4).
		others := slices.DeleteFunc(allNodes(nodes), func(i int) bool { return i == leader })
		j.rng.Shuffle(len(others), func(a, b int) { others[a], others[b] = others[b], others[a] })
		minority := others[:(nodes-1)/2]
		if kind == 3 {
			minority = append([]int{leader}, others[:(nodes-1)/2-1]...)
		}
		j.c.Split(minority...)
		return fault{fmt.Sprintf("split minority %v | majority (leader of partition %d: node %d)", minority, p, leader), j.c.Heal}
	}
}

func allNodes(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i + 1
	}
	return out
}

// produceLoop sends unique values with producer i until stop is closed,
// returning its operations.
func (j *jepsenRun) produceLoop(round, i int, stop <-chan struct{}) []jepsen.Produce {
	var ops []jepsen.Produce
	tick := time.NewTicker(jepsenSendEvery)
	defer tick.Stop()
	for k := 0; ; k++ {
		select {
		case <-stop:
			return ops
		case <-tick.C:
		}
		part := uint32((i + k) % jepsenPartitions)
		value := fmt.Sprintf("r%d-p%d-%d", round, i+1, k)
		op := jepsen.Produce{Client: i + 1, Partition: part, Value: value, Call: j.now()}
		ack, err := j.producers[i].Send(context.Background(), jepsenTopic, []byte("p"+strconv.Itoa(int(part))), []byte(value))
		op.Return = j.now()
		switch {
		case err != nil:
			// A send the SDK gave up on may have been stored by an attempt
			// whose answer was lost: its outcome is unknown.
			op.Status, op.Err = jepsen.StatusInfo, err.Error()
		case ack.Partition != part:
			j.t.Errorf("jepsen: %q for partition %d acknowledged on partition %d", value, part, ack.Partition)
			op.Status, op.Err = jepsen.StatusInfo, "acknowledged on another partition"
		default:
			op.Status, op.Offset = jepsen.StatusOK, ack.Offset
		}
		ops = append(ops, op)
	}
}

// observeHWs records every node's own high watermark of each partition
// (a describe answered from its local storage) until stop is closed.
func (j *jepsenRun) observeHWs(stop <-chan struct{}) {
	tick := time.NewTicker(150 * time.Millisecond)
	defer tick.Stop()
	for {
		for _, n := range j.c.Nodes() {
			before := j.incarnation[n.Index-1].Load()
			hws, err := localHWs(j.c, n)
			if err != nil || j.incarnation[n.Index-1].Load() != before {
				continue
			}
			at := j.now()
			j.mu.Lock()
			for p, hw := range hws {
				j.hws = append(j.hws, jepsen.HWObservation{Observer: fmt.Sprintf("node-%d#%d", n.Index, before+1), Partition: p, HW: hw, At: at})
			}
			j.mu.Unlock()
		}
		select {
		case <-stop:
			return
		case <-tick.C:
		}
	}
}

// round runs one round: steady load, a fault, steady load again after
// healing it, then the final read of every partition and the check. It
// reports whether every check passed.
func (j *jepsenRun) round(r int) bool {
	t := j.t
	roundStart := j.now()
	stop, obsStop := make(chan struct{}), make(chan struct{})
	var pwg, owg sync.WaitGroup
	ops := make([][]jepsen.Produce, len(j.producers))
	for i := range j.producers {
		pwg.Go(func() { ops[i] = j.produceLoop(r, i, stop) })
	}
	owg.Go(func() { j.observeHWs(obsStop) })
	// Stops the producers and the observer, also when the round fails
	// the test halfway.
	stopLoad := sync.OnceFunc(func() {
		close(stop)
		close(obsStop)
		pwg.Wait()
		owg.Wait()
	})
	defer stopLoad()
	pace(jepsenSteady)
	f := j.nemesis()
	// From shorter than the cluster's failure detection (memberlist's
	// suspicion, some 5 s for 3 nodes) to well beyond it, so that some
	// faults end before the leader is declared dead and others after a
	// new one was elected.
	faultFor := jepsenFaultMin + time.Duration(j.rng.Int64N(int64(jepsenFaultMax-jepsenFaultMin)))
	t.Logf("jepsen: round %d: %s for %v", r, f.name, faultFor)
	pace(faultFor)
	healAt := j.now()
	f.heal()
	healed := j.now()
	pace(jepsenSteady)
	stopAt := j.now()
	stopLoad()
	readAt := j.now()
	finals := j.finalRead()
	cut := j.now()

	h := jepsen.History{Init: j.prev, Pending: j.prevRes.Pending, Final: finals,
		Resume: j.prevRes.Resume, LastHW: j.prevRes.LastHW}
	for _, o := range ops {
		h.Produces = append(h.Produces, o...)
	}
	j.mu.Lock()
	var later []jepsen.Read
	for _, rd := range j.reads {
		// A read returned once its partition's final read began may be of
		// a record appended after that (a send the SDK gave up on, stored
		// late): it is the next round's.
		if rd.Return > finals[rd.Partition].Call {
			later = append(later, rd)
			continue
		}
		// The record was read after the previous round's final reads
		// began, or it is in their logs: no earlier call is needed.
		rd.Call = max(rd.Call, j.readsFrom)
		h.Reads = append(h.Reads, rd)
	}
	j.reads = later
	var laterHW []jepsen.HWObservation
	for _, o := range j.hws {
		if o.At > cut {
			laterHW = append(laterHW, o)
			continue
		}
		h.HWs = append(h.HWs, o)
	}
	j.hws = laterHW
	j.mu.Unlock()

	// A partition without a linearization gets porcupine's page in the
	// temporary directory, kept after the test. A round's history is
	// decided in milliseconds; a search cut short by the timeout fails
	// the round (inconclusive), so a short one keeps a failing run within
	// make test's budget.
	res := jepsen.Check(h, jepsen.Options{Timeout: 10 * time.Second,
		VisualizePrefix: filepath.Join(os.TempDir(), fmt.Sprintf("sq-jepsen-%d-round-%d-", j.seed, r))})
	checked := j.now()
	okCount, infoCount := 0, 0
	for _, p := range h.Produces {
		if p.Status == jepsen.StatusOK {
			okCount++
		} else {
			infoCount++
		}
	}
	var lens []int
	for p := range uint32(jepsenPartitions) {
		lens = append(lens, len(finals[p].Values))
	}
	ms := func(from, to int64) time.Duration { return time.Duration(to - from).Round(time.Millisecond) }
	t.Logf("jepsen: round %d: %d produces acknowledged, %d unknown; %d reads; %d high watermarks seen; logs %v; %v (healing took %v, the last sends %v, the final read %v, the check %v)",
		r, okCount, infoCount, len(h.Reads), len(h.HWs), lens, ms(roundStart, checked), ms(healAt, healed), ms(stopAt, readAt), ms(readAt, cut), ms(cut, checked))
	if !res.OK() {
		t.Errorf("jepsen: round %d (%s): %s", r, f.name, res)
	}
	j.prev = map[uint32][]string{}
	for p, f := range finals {
		j.prev[p] = f.Values
	}
	j.lastLogs = finals
	j.prevRes = res
	j.readsFrom = cut
	for _, f := range finals {
		j.readsFrom = min(j.readsFrom, f.Call)
	}
	return res.OK()
}

// pace waits d: the length of a phase of a round, not a wait for state.
func pace(d time.Duration) { time.Sleep(d) }
