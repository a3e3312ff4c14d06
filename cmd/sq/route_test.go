package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/api/sqv1"
	"github.com/seedqueue/sq/engine"
	"github.com/seedqueue/sq/net/dataplane"
)

// splitCluster is two in-process data-plane nodes, a and b, each with its
// own engine, that share their topics as a cluster's metadata would:
// partition p of every topic is led by node p mod 2, its only replica. A
// node refuses a publish, fetch or ListOffsets of a partition it does not
// lead with NOT_LEADER naming the leader, as gossip.Broker does; a topic
// created on either node is created on both, with the same id; a describe (and metadata) on
// either node states each partition's placement and its leader's stats.
type splitCluster struct {
	nodes   []api.Node
	engines []*engine.Engine
	stops   []func() // stop node i's data plane (as a killed node), once

	mu sync.Mutex
	// hidden partitions are described with a LEADER_NOT_AVAILABLE error
	// (a leader the describing node cannot reach, or one that lags).
	hidden          map[int]bool
	hiddenDescribes int // describes that hid a partition
}

// hide makes partition p's describe fail (LEADER_NOT_AVAILABLE) or not.
func (c *splitCluster) hide(p int, hidden bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.hidden == nil {
		c.hidden = map[int]bool{}
	}
	c.hidden[p] = hidden
}

func (c *splitCluster) isHidden(p int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.hidden[p] {
		c.hiddenDescribes++
	}
	return c.hidden[p]
}

// splitBroker is node self of a splitCluster.
type splitBroker struct {
	*engine.Engine
	c    *splitCluster
	self int
}

func (b splitBroker) Nodes() []api.Node { return b.c.nodes }
func (b splitBroker) ClusterID() string { return "split" }

// gate is nil when b leads partition, else NOT_LEADER naming its leader.
func (b splitBroker) gate(partition int) error {
	l := partition % len(b.c.nodes)
	if l == b.self {
		return nil
	}
	n := b.c.nodes[l]
	return &api.Error{Code: api.CodeNotLeader, Message: fmt.Sprintf("node %s leads partition %d", n.ID, partition), LeaderID: n.ID, LeaderAddr: n.DataAddr}
}

func (b splitBroker) CreateTopic(name string, partitions int, cfg engine.TopicConfig) (engine.TopicInfo, error) {
	ti, err := b.Engine.CreateTopic(name, partitions, cfg)
	if err != nil {
		return engine.TopicInfo{}, err
	}
	for i, e := range b.c.engines {
		if i == b.self {
			continue
		}
		// The same topic, id included, on every node.
		spec := engine.TopicSpec{Name: name, ID: ti.ID, Partitions: partitions, Config: ti.Config, CreatedMs: ti.CreatedMs}
		if _, err := e.CreateTopicSpec(spec); err != nil {
			return engine.TopicInfo{}, err
		}
	}
	return b.DescribeTopic(name)
}

func (b splitBroker) DescribeTopic(name string) (engine.TopicInfo, error) {
	ti, err := b.Engine.DescribeTopic(name)
	if err != nil {
		return ti, err
	}
	for i := range ti.Partitions {
		l := i % len(b.c.nodes)
		if lt, err := b.c.engines[l].DescribeTopic(name); err == nil && i < len(lt.Partitions) {
			ti.Partitions[i] = lt.Partitions[i]
		}
		id := b.c.nodes[l].ID
		if b.c.isHidden(i) {
			ti.Partitions[i] = engine.PartitionInfo{Partition: i,
				Err: api.NewError(api.CodeLeaderNotAvailable, "the statistics of %s/%d are not available from its leader, node %s", name, i, id)}
		}
		ti.Partitions[i].Leader, ti.Partitions[i].LeaderEpoch = id, 1
		ti.Partitions[i].Replicas, ti.Partitions[i].ISR = []string{id}, []string{id}
	}
	return ti, nil
}

func (b splitBroker) ListTopics() []engine.TopicInfo {
	var out []engine.TopicInfo
	for _, t := range b.Engine.ListTopics() {
		if ti, err := b.DescribeTopic(t.Name); err == nil {
			out = append(out, ti)
		}
	}
	return out
}

func (b splitBroker) Append(ctx context.Context, topic string, partition int, batch []byte) (engine.AppendResult, error) {
	if err := b.gate(partition); err != nil {
		return engine.AppendResult{}, err
	}
	return b.Engine.Append(ctx, topic, partition, batch)
}

func (b splitBroker) AppendAsync(ctx context.Context, topic string, partition int, batch []byte, after *engine.Pending) (*engine.Pending, error) {
	if err := b.gate(partition); err != nil {
		return nil, err
	}
	return b.Engine.AppendAsync(ctx, topic, partition, batch, after)
}

func (b splitBroker) Fetch(ctx context.Context, topic string, partition int, offset uint64, maxBytes int, maxWait time.Duration) (*engine.FetchResult, error) {
	if err := b.gate(partition); err != nil {
		return nil, err
	}
	return b.Engine.Fetch(ctx, topic, partition, offset, maxBytes, maxWait)
}

func (b splitBroker) FetchID(ctx context.Context, topic string, id api.TopicID, partition int, offset uint64, maxBytes int, maxWait time.Duration) (*engine.FetchResult, error) {
	if err := b.gate(partition); err != nil {
		return nil, err
	}
	return b.Engine.FetchID(ctx, topic, id, partition, offset, maxBytes, maxWait)
}

func (b splitBroker) ListOffsets(topic string, partition int, timestamp int64) (uint64, int64, error) {
	if err := b.gate(partition); err != nil {
		return 0, 0, err
	}
	return b.Engine.ListOffsets(topic, partition, timestamp)
}

// nodeInfoServer is a control plane that answers only NodeInfo.
type nodeInfoServer struct {
	sqv1.UnimplementedClusterServer
	id, backend string
}

func (s nodeInfoServer) NodeInfo(context.Context, *sqv1.NodeInfoRequest) (*sqv1.NodeInfoResponse, error) {
	return &sqv1.NodeInfoResponse{NodeId: s.id, IoBackend: s.backend}, nil
}

// startSplitCluster starts nodes a and b with topic orders (2 partitions:
// 0 led by a, 1 by b); everything stops at the test's cleanup.
func startSplitCluster(t *testing.T) *splitCluster {
	t.Helper()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	c := &splitCluster{}
	var lns []net.Listener
	for _, id := range []string{"a", "b"} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		c.nodes = append(c.nodes, api.Node{ID: id, DataAddr: ln.Addr().String(), Alive: true})
		eng, err := engine.Open(engine.Options{DataDir: t.TempDir(), Logger: quiet})
		if err != nil {
			ln.Close()
			t.Fatal(err)
		}
		c.engines = append(c.engines, eng)
		t.Cleanup(func() { eng.Close() })
	}
	for i, backend := range []string{"uring", "portable"} {
		// Each node's control plane answers NodeInfo (sq bench asks each
		// leader's), at the gRPC address the metadata lists.
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		gs := grpc.NewServer()
		sqv1.RegisterClusterServer(gs, nodeInfoServer{id: c.nodes[i].ID, backend: backend})
		done := make(chan struct{})
		go func() { _ = gs.Serve(ln); close(done) }()
		t.Cleanup(func() { gs.Stop(); <-done })
		c.nodes[i].GRPCAddr = ln.Addr().String()
	}
	for i, n := range c.nodes {
		srv, err := dataplane.New(splitBroker{Engine: c.engines[i], c: c, self: i}, dataplane.Options{NodeID: n.ID, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() { _ = srv.Serve(lns[i]); close(done) }()
		stop := sync.OnceFunc(func() { srv.Close(); <-done })
		c.stops = append(c.stops, stop)
		t.Cleanup(stop)
	}
	if _, err := (splitBroker{Engine: c.engines[0], c: c}).CreateTopic("orders", 2, engine.TopicConfig{}); err != nil {
		t.Fatal(err)
	}
	return c
}

// highWatermarks returns each node's high watermark of orders' partitions.
func (c *splitCluster) highWatermarks(t *testing.T) [][]uint64 {
	t.Helper()
	var out [][]uint64
	for _, e := range c.engines {
		ti, err := e.DescribeTopic("orders")
		if err != nil {
			t.Fatal(err)
		}
		var hw []uint64
		for _, p := range ti.Partitions {
			hw = append(hw, p.HighWatermark)
		}
		out = append(out, hw)
	}
	return out
}

// runSQInput is runSQ with stdin.
func runSQInput(t *testing.T, stdin string, args ...string) (string, string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	root := newRootCommand(strings.NewReader(stdin), &out, &errOut, func(string) string { return "" })
	root.SetArgs(args)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // guards against a hang only
	defer cancel()
	err := root.ExecuteContext(ctx)
	if ctx.Err() != nil {
		t.Fatalf("sq %v ran into the test's guard deadline", args)
	}
	return out.String(), errOut.String(), err
}

// TestProduceConsumeOnAnyNode: sq produce and sq consume (with
// --from-time) given either node of a cluster send each partition's
// requests to its leader: the records land on the leader's log, none on
// the other node's, and read back whole.
func TestProduceConsumeOnAnyNode(t *testing.T) {
	c := startSplitCluster(t)
	for i, n := range c.nodes {
		for p := range 2 {
			in := fmt.Sprintf("via-%s-p%d-1\nvia-%s-p%d-2\n", n.ID, p, n.ID, p)
			out, errOut, err := runSQInput(t, in, "--server", n.DataAddr, "produce", "-t", "orders", "-p", fmt.Sprint(p))
			if err != nil {
				t.Fatalf("produce via %s to partition %d: %v\n%s", n.ID, p, err, errOut)
			}
			want := fmt.Sprintf("produced 2 records to orders: partition %d offsets %d-%d", p, 2*i, 2*i+1)
			if !strings.Contains(out+errOut, want) {
				t.Errorf("produce via %s to partition %d said %q, want %q", n.ID, p, out+errOut, want)
			}
		}
	}
	if got, want := fmt.Sprint(c.highWatermarks(t)), "[[4 0] [0 4]]"; got != want {
		t.Fatalf("high watermarks per node %s, want %s (each partition on its leader only)", got, want)
	}
	for _, n := range c.nodes {
		for _, extra := range [][]string{nil, {"--from-time", "-1h"}} {
			args := append([]string{"--server", n.DataAddr, "consume", "-t", "orders"}, extra...)
			out, errOut, err := runSQInput(t, "", args...)
			if err != nil {
				t.Fatalf("sq %v: %v\n%s", args, err, errOut)
			}
			for _, v := range []string{"via-a-p0-1", "via-b-p0-2", "via-a-p1-1", "via-b-p1-2"} {
				if !strings.Contains(out, v+"\n") {
					t.Errorf("sq %v printed %q, missing %s", args, out, v)
				}
			}
			if lines := strings.Count(out, "\n"); lines != 8 {
				t.Errorf("sq %v printed %d records, want 8:\n%s", args, lines, out)
			}
		}
	}
}

// TestBenchOnAnyNode: sq bench e2e given node b of a cluster creates its
// topic, publishes and reads back every record, each partition on its
// leader, and reports the I/O backend of each leader.
func TestBenchOnAnyNode(t *testing.T) {
	c := startSplitCluster(t)
	out, errOut, err := runSQInput(t, "", "--server", c.nodes[1].DataAddr, "--control", "127.0.0.1:1", "bench", "e2e",
		"--quiet", "--topic", "bench", "--keep-topic", "--partitions", "2", "--count", "400", "--consumers", "2")
	if err != nil {
		t.Fatalf("bench: %v\n%s%s", err, out, errOut)
	}
	var total uint64
	for i, e := range c.engines {
		ti, err := e.DescribeTopic("bench")
		if err != nil {
			t.Fatal(err)
		}
		for p, pi := range ti.Partitions {
			if p%2 != i && pi.HighWatermark != 0 {
				t.Errorf("node %s holds %d records of partition %d, which it does not lead", c.nodes[i].ID, pi.HighWatermark, p)
			}
			total += pi.HighWatermark
		}
	}
	if total != 400 {
		t.Errorf("the leaders hold %d records, want 400", total)
	}
	if !strings.Contains(out, "400") {
		t.Errorf("bench summary does not count 400 records:\n%s", out)
	}
	// The backends of both leaders, each from its own control plane (not
	// --control, which answers nothing).
	if !strings.Contains(out, "I/O backend a uring, b portable") {
		t.Errorf("bench summary does not name each leader's I/O backend:\n%s", out)
	}
}
