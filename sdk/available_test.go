package sdk

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/seedqueue/sq/api"
)

// keylessMsgs returns n keyless records for topic t, values prefix-i.
func keylessMsgs(prefix string, n int) []ProducerMessage {
	var out []ProducerMessage
	for i := range n {
		out = append(out, NewProducerMessage("t", fmt.Appendf(nil, "%s-%d", prefix, i)))
	}
	return out
}

// storedOn counts the records of topic t that node i holds over parts
// partitions.
func storedOn(fc *fakeCluster, i int, parts uint32) int {
	n := 0
	for p := range parts {
		n += len(fc.nodes[i].records("t", p))
	}
	return n
}

// TestKeylessRecordsAvoidADeadLeader: with node-2 of three stopped (its
// partitions 2 and 5 unreachable), every keyless record of a Producer and
// of a BatchProducer is acknowledged, by the other leaders: the batch that
// met the dead leader moves to another partition, and later records are
// placed away from it.
func TestKeylessRecordsAvoidADeadLeader(t *testing.T) {
	fc := newFakeCluster(t, 3)
	fc.createTopic("t", 6)
	ctx := testCtx(t)
	p := newTestProducer(t, fc.nodes[0], func(c *ProducerConfig) { c.DeliveryTimeout = 20 * time.Second })
	if _, err := p.SendBatch(ctx, keylessMsgs("warm", 1)); err != nil {
		t.Fatal(err)
	}
	sent := storedOn(fc, 0, 6) + storedOn(fc, 1, 6) // the warm record, unless node 2 holds it
	fc.nodes[2].stop()
	for call := range 12 {
		acks, err := p.SendBatch(ctx, keylessMsgs(fmt.Sprintf("p%d", call), 5))
		if err != nil {
			t.Fatalf("call %d: %v", call, err)
		}
		for _, a := range acks {
			if a.Partition%3 == 2 {
				t.Fatalf("call %d: a record acknowledged on partition %d, led by the stopped node", call, a.Partition)
			}
		}
		sent += len(acks)
	}

	var failed []error
	bp, err := NewBatchProducer(ctx, BatchProducerConfig{ProducerConfig: ProducerConfig{Addr: fc.nodes[0].addr,
		RetryBackoff: time.Millisecond, RetryBackoffMax: 10 * time.Millisecond, ReconnectBackoff: time.Millisecond},
		Linger: time.Millisecond, BatchRecords: 4, OnError: func(e BatchError) { failed = append(failed, e) }})
	if err != nil {
		t.Fatal(err)
	}
	defer bp.Close()
	for i := range 40 {
		if err := bp.Send(ctx, "t", nil, fmt.Appendf(nil, "bp-%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := bp.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if len(failed) > 0 {
		t.Fatalf("BatchProducer batches failed: %v", failed)
	}
	sent += 40
	if got := storedOn(fc, 0, 6) + storedOn(fc, 1, 6); got != sent {
		t.Fatalf("the live leaders hold %d records, want %d (every record sent)", got, sent)
	}
}

// TestKeyedRecordToADeadLeaderFails: a keyed record whose partition's
// leader is stopped fails with a retriable *LeaderConnectionError naming
// the topic, the partition and the leader's address; a keyed record of a
// live leader's partition is stored.
func TestKeyedRecordToADeadLeaderFails(t *testing.T) {
	fc := newFakeCluster(t, 3)
	fc.createTopic("t", 3)
	ctx := testCtx(t)
	p := newTestProducer(t, fc.nodes[0], func(c *ProducerConfig) { c.Retries = 2 })
	if _, err := p.Send(ctx, "t", keyFor(t, 0, 3), []byte("warm")); err != nil {
		t.Fatal(err)
	}
	dead := fc.nodes[2].addr
	fc.nodes[2].stop()
	_, err := p.Send(ctx, "t", keyFor(t, 2, 3), []byte("v"))
	var lce *LeaderConnectionError
	if !errors.As(err, &lce) || lce.Topic != "t" || lce.Partition != 2 || lce.Leader != dead {
		t.Fatalf("keyed record to the stopped leader %s: %v (%#v), want a LeaderConnectionError naming t/2 and it", dead, err, lce)
	}
	if !IsRetriable(err) || !errors.Is(err, ErrConnection) || !lce.Retriable() {
		t.Fatalf("%v: want retriable, wrapping ErrConnection", err)
	}
	if _, err := p.Send(ctx, "t", keyFor(t, 1, 3), []byte("v1")); err != nil {
		t.Fatalf("keyed record to a live leader: %v", err)
	}
}

// TestKeylessFallbackWhenEveryLeaderIsDown: when every leader is in its
// cool-down, keyless placement still spreads over every partition (a node
// may be back), and records sent then are stored.
func TestKeylessFallbackWhenEveryLeaderIsDown(t *testing.T) {
	fc := newFakeCluster(t, 3)
	fc.createTopic("t", 3)
	ctx := testCtx(t)
	p := newTestProducer(t, fc.nodes[0])
	if _, err := p.SendBatch(ctx, keylessMsgs("warm", 1)); err != nil {
		t.Fatal(err)
	}
	tm, ok := p.core.cached("t")
	if !ok {
		t.Fatal("topic not cached")
	}
	now := time.Now()
	for part := range uint32(3) {
		p.core.avail.markDown(tm.leader(part), now)
	}
	seen := map[uint32]bool{}
	for range 6 {
		seen[p.core.place("t", nil, tm, map[string]uint32{})] = true
	}
	if len(seen) != 3 {
		t.Fatalf("keyless placement with every leader down reached partitions %v, want all 3", seen)
	}
	acks, err := p.SendBatch(ctx, keylessMsgs("down", 3))
	if err != nil {
		t.Fatalf("keyless records with every leader marked down (all alive): %v", err)
	}
	if len(acks) != 3 {
		t.Fatalf("%d acks", len(acks))
	}
	// A success ends its leader's cool-down.
	if p.core.leaderDown(tm, acks[0].Partition) {
		t.Fatalf("partition %d's leader still down after a record was stored there", acks[0].Partition)
	}
}

// TestGrpcProducerAvoidsADeadLeader: GrpcProducer places keyless records
// away from a stopped node, moving the request that met it: every record
// is acknowledged, none on its partitions.
func TestGrpcProducerAvoidsADeadLeader(t *testing.T) {
	fc := newFakeGrpcCluster(t, 3, "t", 6)
	ctx := testCtx(t)
	p, err := NewGrpcProducer(GrpcProducerConfig{GrpcConfig: GrpcConfig{Addr: fc.nodes[0].addr},
		RetryBackoff: time.Millisecond, RetryBackoffMax: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, err := p.Send(ctx, "t", nil, []byte("warm")); err != nil {
		t.Fatal(err)
	}
	liveHold := func() int {
		n := 0
		for node := range 2 {
			for part := range uint32(6) {
				n += len(fc.values(node, part))
			}
		}
		return n
	}
	stored := liveHold() // the warm record, unless node 2 holds it
	fc.nodes[2].stop()
	for call := range 12 {
		acks, err := p.SendBatch(ctx, keylessMsgs(fmt.Sprintf("g%d", call), 3))
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range acks {
			if a.Err != nil || a.Partition%3 == 2 {
				t.Fatalf("call %d: ack %+v: want stored on a partition of a live leader", call, a)
			}
		}
		stored += len(acks)
	}
	if got := liveHold(); got != stored {
		t.Fatalf("the live leaders hold %d records, want %d", got, stored)
	}
	_, err = p.Send(ctx, "t", keyFor(t, 2, 6), []byte("keyed"))
	var lce *LeaderConnectionError
	if !errors.As(err, &lce) || lce.Partition != 2 || lce.Leader != fc.nodes[2].addr {
		t.Fatalf("keyed record to the stopped leader: %v, want a LeaderConnectionError naming t/2 and %s", err, fc.nodes[2].addr)
	}
}

// TestGoneLeaderRereadsMetadata: a leader other than the bootstrap node
// that cannot be reached, or answers SHUTTING_DOWN, makes the producer
// read the metadata again, so the retry goes to the leader the cluster
// moved the partition to (without it, the cached leader would be used
// until MetadataMaxAge).
func TestGoneLeaderRereadsMetadata(t *testing.T) {
	fc := newFakeCluster(t, 3)
	fc.createTopic("t", 3)
	ctx := testCtx(t)
	p := newTestProducer(t, fc.nodes[0], func(c *ProducerConfig) { c.MetadataMaxAge = time.Hour })
	for part := range uint32(3) {
		if _, err := p.Send(ctx, "t", keyFor(t, part, 3), []byte("warm")); err != nil {
			t.Fatal(err)
		}
	}
	// Node 2 is gone, and the cluster moved its partition to node 1.
	fc.move("t", 2, 1)
	fc.nodes[2].stop()
	if _, err := p.Send(ctx, "t", keyFor(t, 2, 3), []byte("moved")); err != nil {
		t.Fatalf("record of a partition whose leader went away: %v", err)
	}
	if got := fc.nodes[1].records("t", 2); len(got) != 1 || !strings.HasSuffix(got[0], "=moved") {
		t.Fatalf("node 1 holds %v of partition 2, want [moved]", got)
	}

	// Node 1 shuts down, and partition 1 moves to node 0 (which node 1
	// does not name): the retry goes to node 0 at once, from the metadata.
	fc.move("t", 1, 0)
	fc.refusePartition("t", 1, api.CodeShuttingDown)
	before := fc.refusals(1)
	if _, err := p.Send(ctx, "t", keyFor(t, 1, 3), []byte("shut")); err != nil {
		t.Fatalf("record of a partition whose leader shuts down: %v", err)
	}
	if got := fc.refusals(1) - before; got != 1 {
		t.Fatalf("node 1 refused %d requests, want 1 (SHUTTING_DOWN, then the metadata names node 0)", got)
	}
	if got := fc.nodes[0].records("t", 1); len(got) != 1 || !strings.HasSuffix(got[0], "=shut") {
		t.Fatalf("node 0 holds %v of partition 1, want [shut]", got)
	}
}

// TestAvailabilityForgetsEndedCoolDowns checks the cool-down book: a
// leader marked down is down until its cool-down ends or a request to it
// succeeds, and once none is left the fast path (until 0, no clock read)
// is back.
func TestAvailabilityForgetsEndedCoolDowns(t *testing.T) {
	var a availability
	x, y := leaderAddr{nodeID: "x"}, leaderAddr{nodeID: "y"}
	if a.anyDownNow() {
		t.Fatal("down before any failure")
	}
	a.markDown(x, time.Now())
	a.markDown(y, time.Now())
	if !a.anyDownNow() || !a.isDown(x, time.Now()) || !a.isDown(y, time.Now()) {
		t.Fatal("x and y should be in their cool-downs")
	}
	a.markUp(x)
	if a.isDown(x, time.Now()) || !a.isDown(y, time.Now()) || a.until.Load() == 0 {
		t.Fatalf("after x's success: x down %v, y down %v, until %d", a.isDown(x, time.Now()), a.isDown(y, time.Now()), a.until.Load())
	}
	a.markUp(y)
	if a.until.Load() != 0 || a.anyDownNow() {
		t.Fatal("every leader answered again, yet a cool-down is left")
	}
	// A cool-down that began long enough ago has ended: the first look
	// forgets it.
	a.markDown(x, time.Now().Add(-2*leaderCooldown))
	if a.until.Load() == 0 {
		t.Fatal("markDown left no cool-down")
	}
	if a.anyDownNow() || a.until.Load() != 0 || len(a.down) != 0 {
		t.Fatalf("an ended cool-down is kept: until %d, %d entries", a.until.Load(), len(a.down))
	}
}
