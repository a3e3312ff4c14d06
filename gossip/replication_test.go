package gossip

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/api/batch"
	"github.com/seedqueue/sq/engine"
	"github.com/seedqueue/sq/gossip/meta"
)

// brokerConn is a ReplicaConn that calls a peer's Broker in process, as
// the data plane does over the wire: the batches are copied out of the
// leader's mappings and split.
type brokerConn struct{ b *Broker }

func (c brokerConn) Close() error { return nil }

func (c brokerConn) FetchReplica(ctx context.Context, r engine.ReplicaFetch) (ReplicaFetched, error) {
	res, err := c.b.FetchReplica(ctx, r)
	if err != nil {
		return ReplicaFetched{}, err
	}
	defer res.Release()
	out := ReplicaFetched{HighWatermark: res.HighWatermark, LogStartOffset: res.LogStartOffset, LeaderEpoch: res.LeaderEpoch}
	var all []byte
	for _, b := range res.Bufs {
		all = append(all, b...)
	}
	for len(all) > 0 {
		h, err := batch.ParseHeader(all)
		if err != nil {
			return ReplicaFetched{}, fmt.Errorf("split fetched batches: %w", err)
		}
		out.Batches = append(out.Batches, all[:h.Size()])
		all = all[h.Size():]
	}
	return out, nil
}

func (c brokerConn) EndOffsetForEpoch(ctx context.Context, topic string, id api.TopicID, partition int, epoch uint32) (uint32, uint64, error) {
	return c.b.EndOffsetForEpoch(ctx, topic, id, partition, epoch)
}

// replNode is one node of a replicated in-process cluster: a real engine
// with replication, its Reconciler and Broker on a fakeMeta, and its
// Replicator, whose connections reach the other nodes' Brokers.
type replNode struct {
	id   string
	dir  string
	eng  *engine.Engine
	rec  *Reconciler
	b    *Broker
	repl *Replicator
}

func openReplEngine(t *testing.T, id, dir string) *engine.Engine {
	t.Helper()
	e, err := engine.Open(engine.Options{DataDir: dir, SegmentBytes: 64 << 10, MaxBatchBytes: 32 << 10, PreallocBytes: 16 << 10,
		Logger:      slog.New(slog.NewTextHandler(io.Discard, nil)),
		Replication: &engine.ReplicationOptions{NodeID: id, LagTimeMax: 30 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// startReplNode starts node id on m with its data in dir.
func startReplNode(t *testing.T, m *fakeMeta, id, dir string) *replNode {
	t.Helper()
	n := &replNode{id: id, dir: dir, eng: openReplEngine(t, id, dir)}
	log := testLogger(t).With("node", id)
	n.rec = NewReconciler(n.eng, ReconcilerOptions{NodeID: id, Logger: log})
	n.b = NewBroker(n.eng, &fakeNode{m: m, id: id}, n.rec, BrokerOptions{Logger: log})
	n.startReplicator(t, m)
	m.mu.Lock()
	m.peers[id] = n.b
	m.alive[id] = true
	m.hooks[id] = func(prev, next *meta.State) {
		n.rec.OnApply(prev, next)
		n.repl.Kick()
	}
	n.rec.OnApply(nil, m.state)
	m.mu.Unlock()
	n.repl.Start()
	t.Cleanup(func() { n.kill(m) })
	return n
}

// startReplicator makes a new Replicator (not started).
func (n *replNode) startReplicator(t *testing.T, m *fakeMeta) {
	dial := func(ctx context.Context, addr string) (ReplicaConn, error) {
		node, _, _ := strings.Cut(addr, ":")
		m.mu.Lock()
		b, alive := m.peers[node], m.alive[node]
		m.mu.Unlock()
		if b == nil || !alive {
			return nil, fmt.Errorf("dial %s: connection refused", addr)
		}
		return brokerConn{b}, nil
	}
	n.repl = NewReplicator(n.eng, &fakeNode{m: m, id: n.id}, ReplicatorOptions{NodeID: n.id, Dial: dial, Logger: testLogger(t).With("node", n.id),
		ISRInterval: 20 * time.Millisecond, FetchMaxWait: 50 * time.Millisecond, RetryMin: time.Millisecond, RetryMax: 20 * time.Millisecond})
}

// kill stops the node as a crash would for the others: its replicator
// and engine stop and it is no longer alive nor reachable. Idempotent.
func (n *replNode) kill(m *fakeMeta) {
	m.mu.Lock()
	if m.peers[n.id] == n.b {
		delete(m.peers, n.id)
		delete(m.hooks, n.id)
		m.alive[n.id] = false
	}
	m.mu.Unlock()
	n.repl.Close()
	n.eng.Close()
}

// records returns the records of partition p below the high watermark,
// as "value" strings, and the raw bytes of its batches.
func (n *replNode) records(t *testing.T, topic string, p int) ([]string, []byte) {
	t.Helper()
	var vals []string
	var raw []byte
	for off := uint64(0); ; {
		res, err := n.eng.Fetch(context.Background(), topic, p, off, 1<<20, 0)
		if err != nil {
			t.Fatalf("%s: fetch %s/%d at %d: %v", n.id, topic, p, off, err)
		}
		var buf []byte
		for _, b := range res.Bufs {
			buf = append(buf, b...)
		}
		res.Release()
		if len(buf) == 0 {
			return vals, raw
		}
		raw = append(raw, buf...)
		for len(buf) > 0 {
			h, err := batch.ParseHeader(buf)
			if err != nil {
				t.Fatal(err)
			}
			it, err := batch.NewIter(buf[:h.Size()])
			if err != nil {
				t.Fatal(err)
			}
			for it.Next() {
				vals = append(vals, string(it.Record().Value))
			}
			off = h.NextOffset()
			buf = buf[h.Size():]
		}
	}
}

// TestReplicationFailover, over real engines: records published with
// acks all are on every in-sync replica; when the leader dies the
// controller's choice (from the ISR) leads with the next epoch and holds
// every acknowledged record; the dead node, restarted on its data,
// truncates what only it held (published with acks leader) and catches
// up, rejoins the ISR, and the three logs are byte for byte the same.
func TestReplicationFailover(t *testing.T) {
	m := newFakeMeta(t, "n1", "n2", "n3")
	nodes := map[string]*replNode{}
	for _, id := range []string{"n1", "n2", "n3"} {
		nodes[id] = startReplNode(t, m, id, t.TempDir())
	}
	cmd := placed("orders", "")
	tp := cmd.Topic
	tp.Config.ReplicationFactor, tp.Config.SyncPolicy = 3, "every-batch"
	tp.Partitions = []meta.Partition{{Replicas: []string{"n1", "n2", "n3"}, Leader: "n1", ISR: []string{"n1", "n2", "n3"}}}
	m.mustApply(t, cmd)

	var acked []string
	publish := func(n *replNode, acks engine.Acks, vals ...string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(engine.WithAcks(context.Background(), acks), 10*time.Second)
		defer cancel()
		var res engine.AppendResult
		var err error
		eventually(t, 10*time.Second, "a publish to "+n.id, func() bool {
			res, err = n.b.Append(ctx, "orders", 0, mkBatch(t, vals...))
			return codeOf(err) != api.CodeNotLeader && codeOf(err) != api.CodeLeaderNotAvailable
		})
		if err != nil {
			t.Fatalf("publish %v to %s: %v", vals, n.id, err)
		}
		if acks == engine.AcksAll {
			if res.Durability != engine.DurabilityReplicated || res.Replicas < 2 {
				t.Fatalf("acks all: %+v", res)
			}
			acked = append(acked, vals...)
		}
	}
	for i := range 10 {
		publish(nodes["n1"], engine.AcksAll, fmt.Sprintf("a%d", i), fmt.Sprintf("b%d", i))
	}

	// The followers stop copying; n1 takes records only it holds, then
	// dies.
	nodes["n2"].repl.Close()
	nodes["n3"].repl.Close()
	publish(nodes["n1"], engine.AcksLeader, "lost1", "lost2")
	nodes["n1"].kill(m)
	for _, id := range []string{"n2", "n3"} {
		nodes[id].startReplicator(t, m)
		nodes[id].repl.Start()
	}
	changes := meta.LeadersAfterDeath(m.state0(), func(id string) bool { return id != "n1" })
	m.mustApply(t, meta.Command{Op: meta.OpSetLeaders, Leaders: changes})
	p := m.state0().Topics["orders"].Partitions[0]
	if p.LeaderEpoch != 1 || !slices.Contains([]string{"n2", "n3"}, p.Leader) || slices.Contains(p.ISR, "n1") {
		t.Fatalf("after the failover: %+v", p)
	}
	leader := nodes[p.Leader]
	for i := range 5 {
		publish(leader, engine.AcksAll, fmt.Sprintf("c%d", i))
	}
	if got, _ := leader.records(t, "orders", 0); !slices.Equal(got, acked) {
		t.Fatalf("the new leader %s holds %v, acknowledged %v", leader.id, got, acked)
	}

	// n1 restarts on its data: it truncates lost1, lost2 and catches up.
	nodes["n1"] = startReplNode(t, m, "n1", nodes["n1"].dir)
	eventually(t, 10*time.Second, "n1 back in the ISR", func() bool {
		return slices.Contains(m.state0().Topics["orders"].Partitions[0].ISR, "n1")
	})
	publish(leader, engine.AcksAll, "d0")
	_, want := leader.records(t, "orders", 0)
	for _, id := range []string{"n1", "n2", "n3"} {
		eventually(t, 10*time.Second, id+"'s log equal to the leader's", func() bool {
			_, got := nodes[id].records(t, "orders", 0)
			return bytes.Equal(got, want)
		})
	}
	if got, _ := nodes["n1"].records(t, "orders", 0); slices.Contains(got, "lost1") || len(got) != len(acked) {
		t.Fatalf("n1 after the restart: %v", got)
	}
}
