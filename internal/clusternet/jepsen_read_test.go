package clusternet_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/seedqueue/sq/api/batch"
	"github.com/seedqueue/sq/api/sqv1"
	"github.com/seedqueue/sq/internal/clusternet"
	"github.com/seedqueue/sq/internal/jepsen"
	"github.com/seedqueue/sq/sdk"
)

// How the Jepsen test reads the cluster: the final read of each partition
// from its leader, each node's own high watermarks, and each replica's
// log from its node's data directory.

// finalRead reads every partition in full, from offset 0 to its high
// watermark, once its leader serves it and its high watermark has reached
// its log end (the producers have stopped, so the replicas catch up). It
// fails the test when a partition is not readable so within
// jepsenHealTimeout.
func (j *jepsenRun) finalRead() map[uint32]jepsen.FinalRead {
	out := map[uint32]jepsen.FinalRead{}
	for p := range uint32(jepsenPartitions) {
		deadline := time.Now().Add(jepsenHealTimeout)
		for {
			call := j.now()
			values, err := j.readAll(p)
			if err == nil {
				out[p] = jepsen.FinalRead{Call: call, Return: j.now(), Values: values}
				break
			}
			if time.Now().After(deadline) {
				j.t.Fatalf("jepsen: partition %d not readable in full within %v after the faults healed: %v", p, jepsenHealTimeout, err)
			}
			pace(100 * time.Millisecond) // between attempts of a bounded wait
		}
	}
	return out
}

// readAll reads partition p from offset 0 to its high watermark on its
// leader, once every node names the same leader and leader epoch for it
// and the leader reports the high watermark at the log end. A node that
// was cut off and has not caught up with the metadata yet may still name
// itself the leader of an older epoch and describe its own stale log
// (its high watermark at its log end, both below the current leader's):
// a read that believed the first node to answer would read a prefix of
// the log and take the rest for lost.
func (j *jepsenRun) readAll(p uint32) ([]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var pi sdk.PartitionInfo
	for k, n := range j.c.Nodes() {
		ti, err := j.describe(ctx, n.Addr)
		if err != nil {
			return nil, fmt.Errorf("describe on node %d: %w", n.Index, err)
		}
		if int(p) >= len(ti.PartitionInfos) {
			return nil, fmt.Errorf("describe on node %d: %d partitions", n.Index, len(ti.PartitionInfos))
		}
		got := ti.PartitionInfos[p]
		if got.Err != nil {
			return nil, fmt.Errorf("partition %d on node %d: %w", p, n.Index, got.Err)
		}
		if got.HighWatermark != got.LogEndOffset {
			return nil, fmt.Errorf("partition %d described on node %d: high watermark %d below the log end %d (leader %s, epoch %d, replicas %v, in-sync %v)",
				p, n.Index, got.HighWatermark, got.LogEndOffset, got.Leader, got.LeaderEpoch, got.Replicas, got.ISR)
		}
		if k > 0 && (got.Leader != pi.Leader || got.LeaderEpoch != pi.LeaderEpoch || got.HighWatermark != pi.HighWatermark) {
			return nil, fmt.Errorf("partition %d: the nodes disagree: leader %s at epoch %d with high watermark %d, and on node %d %s at epoch %d with %d",
				p, pi.Leader, pi.LeaderEpoch, pi.HighWatermark, n.Index, got.Leader, got.LeaderEpoch, got.HighWatermark)
		}
		pi = got
	}
	switch {
	case !strings.HasPrefix(pi.Leader, "node-"):
		return nil, fmt.Errorf("partition %d: leader %q", p, pi.Leader)
	}
	i, err := strconv.Atoi(strings.TrimPrefix(pi.Leader, "node-"))
	if err != nil || i < 1 || i > len(j.c.Nodes()) {
		return nil, fmt.Errorf("partition %d: leader %q", p, pi.Leader)
	}
	cl, err := sdk.Dial(ctx, sdk.ClientConfig{Addr: j.c.Node(i).Addr, Dialer: j.dial, DialTimeout: time.Second})
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	var values []string
	for off := uint64(0); off < pi.HighWatermark; {
		fr, err := cl.Fetch(ctx, sdk.FetchRequest{Topic: jepsenTopic, Partition: p, Offset: off})
		if err != nil {
			return nil, fmt.Errorf("fetch of partition %d at %d from node %d: %w", p, off, i, err)
		}
		if len(fr.Messages) == 0 {
			return nil, fmt.Errorf("fetch of partition %d at %d from node %d: nothing, high watermark %d (described %d)", p, off, i, fr.HighWatermark, pi.HighWatermark)
		}
		for _, m := range fr.Messages {
			if m.Offset != off {
				return nil, fmt.Errorf("fetch of partition %d from node %d: offset %d where %d was next", p, i, m.Offset, off)
			}
			if off < pi.HighWatermark {
				values = append(values, string(m.Value))
			}
			off++
		}
	}
	return values, nil
}

// describe describes the topic through the node at addr.
func (j *jepsenRun) describe(ctx context.Context, addr string) (sdk.TopicInfo, error) {
	cl, err := sdk.Dial(ctx, sdk.ClientConfig{Addr: addr, Dialer: j.dial, DialTimeout: time.Second})
	if err != nil {
		return sdk.TopicInfo{}, err
	}
	defer cl.Close()
	dctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	return cl.DescribeTopic(dctx, jepsenTopic)
}

// localHWs asks node n for its own high watermark of each partition (a
// describe with the sq-describe-local header, which answers from the
// node's storage only), within a short bound.
func localHWs(c *clusternet.Cluster, n *clusternet.Node) (map[uint32]uint64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	cc, err := grpc.NewClient("passthrough:///"+grpcAddr(n), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return c.Client().DialContext(ctx, "tcp", addr)
		}))
	if err != nil {
		return nil, err
	}
	defer cc.Close()
	ctx = metadata.AppendToOutgoingContext(ctx, "sq-describe-local", "1")
	resp, err := sqv1.NewTopicsClient(cc).DescribeTopic(ctx, &sqv1.DescribeTopicRequest{Name: jepsenTopic})
	if err != nil {
		return nil, err
	}
	out := map[uint32]uint64{}
	for _, pi := range resp.GetTopic().GetPartitions() {
		if pi.GetError() == "" {
			out[uint32(pi.GetPartition())] = pi.GetHighWatermark()
		}
	}
	return out, nil
}

// readReplica reads partition p of the topic from node's data directory:
// its segments' batches in order, up to the first that is incomplete or
// fails its CRC (a segment's unwritten tail, or a corrupt batch: what
// follows is not read, and the replica then lacks those offsets).
func readReplica(node *clusternet.Node, topic string, p uint32) (jepsen.ReplicaLog, error) {
	rl := jepsen.ReplicaLog{Node: fmt.Sprintf("node-%d", node.Index), Partition: p, Batches: []jepsen.RawBatch{}}
	dir := filepath.Join(node.DataDir, "topics", topic, strconv.Itoa(int(p)))
	ents, err := os.ReadDir(dir)
	if err != nil {
		return rl, err
	}
	var logs []string
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".log") {
			logs = append(logs, e.Name())
		}
	}
	slices.Sort(logs)
	next := uint64(0)
	for _, name := range logs {
		buf, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return rl, err
		}
		for len(buf) > 0 {
			b, rest, h, err := batch.Split(buf, 0)
			if err != nil {
				break // the segment's end
			}
			if _, err := batch.CheckHeader(b); err != nil {
				return rl, fmt.Errorf("%s offset %d: %w", filepath.Join(dir, name), h.BaseOffset, err)
			}
			if len(rl.Batches) == 0 {
				rl.Start, next = h.BaseOffset, h.BaseOffset
			}
			if h.BaseOffset != next {
				return rl, fmt.Errorf("%s: batch at offset %d where %d was next", filepath.Join(dir, name), h.BaseOffset, next)
			}
			it, err := batch.NewIter(b)
			if err != nil {
				return rl, fmt.Errorf("%s offset %d: %w", filepath.Join(dir, name), h.BaseOffset, err)
			}
			for it.Next() {
				rl.Values = append(rl.Values, string(it.Record().Value))
			}
			if err := it.Err(); err != nil {
				return rl, fmt.Errorf("%s offset %d: %w", filepath.Join(dir, name), h.BaseOffset, err)
			}
			rl.Batches = append(rl.Batches, jepsen.RawBatch{Base: h.BaseOffset, Next: h.NextOffset(), Bytes: slices.Clone(b)})
			next = h.NextOffset()
			buf = rest
		}
	}
	return rl, nil
}

// compareReplicas waits until every replica of each partition holds the
// last final log (bounded), then checks them against it and each other.
// It reports whether they passed.
func (j *jepsenRun) compareReplicas() bool {
	t := j.t
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var ti sdk.TopicInfo
	var err error
	for _, n := range j.c.Nodes() {
		if ti, err = j.describe(ctx, n.Addr); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("jepsen: describe for the replicas: %v", err)
	}
	h := jepsen.History{Init: j.prev, Final: j.lastLogs}
	type replica struct {
		node      int
		partition uint32
	}
	var all []replica
	for _, pi := range ti.PartitionInfos {
		for _, id := range pi.Replicas {
			i, err := strconv.Atoi(strings.TrimPrefix(id, "node-"))
			if err != nil || i < 1 || i > len(j.c.Nodes()) {
				t.Fatalf("jepsen: replica %q of partition %d", id, pi.Partition)
			}
			all = append(all, replica{i, pi.Partition})
		}
	}
	// One bound for all: the replicas catch up together.
	logs := make([]jepsen.ReplicaLog, len(all))
	errs := make([]error, len(all))
	deadline := time.Now().Add(20 * time.Second)
	for {
		behind := 0
		for k, r := range all {
			logs[k], errs[k] = readReplica(j.c.Node(r.node), jepsenTopic, r.partition)
			if errs[k] != nil || int(logs[k].Start)+len(logs[k].Values) < len(j.lastLogs[r.partition].Values) {
				behind++
			}
		}
		if behind == 0 || time.Now().After(deadline) {
			break
		}
		pace(200 * time.Millisecond) // between attempts of a bounded wait
	}
	for k, r := range all {
		if errs[k] != nil {
			t.Errorf("jepsen: replica node-%d of partition %d: %v", r.node, r.partition, errs[k])
		}
		rl := logs[k]
		t.Logf("jepsen: replica node-%d of partition %d holds %d records from offset %d (%d batches); the final log has %d",
			r.node, r.partition, len(rl.Values), rl.Start, len(rl.Batches), len(j.lastLogs[r.partition].Values))
		h.Replicas = append(h.Replicas, rl)
	}
	res := jepsen.Check(h, jepsen.Options{})
	if !res.OK() {
		t.Errorf("jepsen: the replicas after the last round: %s", res)
	}
	return res.OK() && !slices.ContainsFunc(errs, func(err error) bool { return err != nil })
}
