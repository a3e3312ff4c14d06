package clusternet_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/seedqueue/sq/api/batch"
	"github.com/seedqueue/sq/internal/clusternet"
	"github.com/seedqueue/sq/internal/jepsen"
	"github.com/seedqueue/sq/sdk"
)

// The bit-flip cases of issue 13: a bit flipped in a sealed segment of a
// follower makes it ineligible as leader once the scrub finds it, and it
// is repaired from the leader; flipped on the leader, the leader steps
// down when its scrub finds it. No acknowledged record is lost.

const (
	flipTopic   = "flip"
	flipRecords = 300
	// A small batch limit allows small segments (segment.bytes must be at
	// least the batch limit plus 4096), so the records fill several.
	flipMaxBatchBytes = 64 << 10
	flipSegmentBytes  = flipMaxBatchBytes + 4096
	flipWait          = 60 * time.Second
)

// TestJepsenBitFlip flips one bit in a follower's sealed segment, kills the
// leader (the corrupt follower, next in replica order, must not take
// over) and waits for the follower's repair; then flips a bit in the new
// leader's sealed segment and waits for it to step down. It needs
// sq-server's --scrub-interval.
func TestJepsenBitFlip(t *testing.T) {
	c := newCluster(t, 3)
	if !serverHasFlag(t, "--scrub-interval") {
		t.Skip("sq-server has no --scrub-interval flag yet (replication, issue 13)")
	}
	startCluster(t, c, "--scrub-interval", "1s", "--max-batch-bytes", strconv.Itoa(flipMaxBatchBytes),
		"--max-record-bytes", strconv.Itoa(flipMaxBatchBytes/2))
	n1 := c.Node(1)
	sqOK(t, c.Client(), n1.Addr, "", "--control", grpcAddr(n1), "topic", "create", flipTopic,
		"--partitions", "1", "--replication-factor", "3", "--segment-bytes", strconv.Itoa(flipSegmentBytes))
	waitAgree(t, c, 1, 2, 3)
	dial := sdk.DialFunc(c.Client().DialContext)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	prod, err := sdk.NewProducer(ctx, sdk.ProducerConfig{Addr: n1.Addr, Dialer: dial})
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	pad := strings.Repeat("x", 1000)
	var acked []string
	for i := 0; i < flipRecords; i += 10 {
		var msgs []sdk.ProducerMessage
		for k := i; k < i+10; k++ {
			msgs = append(msgs, sdk.NewProducerMessage(flipTopic, fmt.Appendf(nil, "v%04d-%s", k, pad)))
		}
		acks, err := prod.SendBatch(ctx, msgs)
		if err != nil {
			t.Fatalf("records %d..%d: %v", i, i+9, err)
		}
		for k, a := range acks {
			if a.Err != nil {
				t.Fatalf("record %d: %v", i+k, a.Err)
			}
			if a.Offset != uint64(len(acked)) {
				t.Fatalf("record %d acknowledged at offset %d, want %d", i+k, a.Offset, len(acked))
			}
			acked = append(acked, string(msgs[k].Value))
		}
	}
	pi := flipPartition(t, c)
	replicas := replicaIndexes(t, pi.Replicas)
	leader := nodeIndex(t, pi.Leader)
	for _, i := range replicas {
		waitReplica(t, c.Node(i), len(acked))
	}
	// The follower right after the leader in replica order: the one the
	// controller would choose were it eligible.
	k := slices.Index(replicas, leader)
	follower := replicas[(k+1)%len(replicas)]
	third := replicas[(k+2)%len(replicas)]
	t.Logf("leader node %d, corrupt follower node %d, other follower node %d", leader, follower, third)

	fl := c.Node(follower)
	before := strings.Count(fl.Process().Log(), "corrupt")
	flipBit(t, fl)
	eventually(t, fmt.Sprintf("node %d's scrub reports the corrupt segment", follower), func() error {
		if strings.Count(fl.Process().Log(), "corrupt") == before {
			return fmt.Errorf("no new line naming corruption in node %d's log", follower)
		}
		return nil
	})
	c.Node(leader).Kill()
	eventuallyFor(t, flipWait, "a new leader other than the killed one", func() error {
		pi := flipPartition(t, c)
		switch pi.Leader {
		case fmt.Sprintf("node-%d", follower):
			t.Fatalf("node %d, whose sealed segment is corrupt, was elected leader: %+v", follower, pi)
		case fmt.Sprintf("node-%d", third):
			return nil
		}
		return fmt.Errorf("leader %q", pi.Leader)
	})
	c.Node(leader).Restart()
	checkFlipLog(t, c, acked, replicas)

	// The leader case: flip a bit in the new leader's sealed segment.
	ld := c.Node(third)
	flipBit(t, ld)
	eventuallyFor(t, flipWait, fmt.Sprintf("node %d steps down once its scrub finds the corrupt segment", third), func() error {
		if pi := flipPartition(t, c); pi.Leader == fmt.Sprintf("node-%d", third) || pi.Leader == "" {
			return fmt.Errorf("leader %q", pi.Leader)
		}
		return nil
	})
	checkFlipLog(t, c, acked, replicas)
}

// eventuallyFor is eventually with its own bound.
func eventuallyFor(t *testing.T, d time.Duration, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v: %v", what, d, err)
		}
		time.Sleep(100 * time.Millisecond) // between polls of a bounded wait
	}
}

// flipPartition describes partition 0 of the flip topic through any node
// that answers.
func flipPartition(t *testing.T, c *clusternet.Cluster) sdk.PartitionInfo {
	t.Helper()
	var last error
	for _, n := range c.Nodes() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		ti, err := func() (sdk.TopicInfo, error) {
			cl, err := sdk.Dial(ctx, sdk.ClientConfig{Addr: n.Addr, Dialer: sdk.DialFunc(c.Client().DialContext), DialTimeout: time.Second})
			if err != nil {
				return sdk.TopicInfo{}, err
			}
			defer cl.Close()
			return cl.DescribeTopic(ctx, flipTopic)
		}()
		cancel()
		if err == nil && len(ti.PartitionInfos) == 1 {
			return ti.PartitionInfos[0]
		}
		last = fmt.Errorf("node %d: %v (%+v)", n.Index, err, ti.PartitionInfos)
	}
	t.Fatalf("no node describes %s: %v", flipTopic, last)
	return sdk.PartitionInfo{}
}

func nodeIndex(t *testing.T, id string) int {
	t.Helper()
	i, err := strconv.Atoi(strings.TrimPrefix(id, "node-"))
	if err != nil {
		t.Fatalf("node id %q", id)
	}
	return i
}

func replicaIndexes(t *testing.T, ids []string) []int {
	t.Helper()
	if len(ids) != 3 {
		t.Fatalf("replicas %v: want 3", ids)
	}
	var out []int
	for _, id := range ids {
		out = append(out, nodeIndex(t, id))
	}
	return out
}

// waitReplica waits until node's local copy of the flip topic holds n
// records, read from its segment files.
func waitReplica(t *testing.T, node *clusternet.Node, n int) {
	t.Helper()
	eventuallyFor(t, flipWait, fmt.Sprintf("node %d holds the %d records", node.Index, n), func() error {
		rl, err := readReplica(node, flipTopic, 0)
		if err != nil {
			return err
		}
		if got := int(rl.Start) + len(rl.Values); got < n {
			return fmt.Errorf("%d records", got)
		}
		return nil
	})
}

// flipBit flips one bit inside the records of the first batch of node's
// first sealed segment (the log files are sorted; the last is active).
func flipBit(t *testing.T, node *clusternet.Node) {
	t.Helper()
	dir := filepath.Join(node.DataDir, "topics", flipTopic, "0")
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var logs []string
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".log") {
			logs = append(logs, e.Name())
		}
	}
	slices.Sort(logs)
	if len(logs) < 2 {
		t.Fatalf("node %d: segments %v: want a sealed one", node.Index, logs)
	}
	f, err := os.OpenFile(filepath.Join(dir, logs[0]), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	at := int64(batch.HeaderSize + 100)
	b := []byte{0}
	if _, err := f.ReadAt(b, at); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x10
	if _, err := f.WriteAt(b, at); err != nil {
		t.Fatal(err)
	}
	t.Logf("node %d: flipped bit 4 of byte %d of %s", node.Index, at, filepath.Join(dir, logs[0]))
}

// checkFlipLog waits until every replica holds the acknowledged records
// intact again (repaired), then checks them and a read from the leader
// with the Jepsen checker: nothing acknowledged lost, the replicas alike
// byte for byte.
func checkFlipLog(t *testing.T, c *clusternet.Cluster, acked []string, replicas []int) {
	t.Helper()
	h := jepsen.History{Final: map[uint32]jepsen.FinalRead{}}
	for i, v := range acked {
		h.Produces = append(h.Produces, jepsen.Produce{Client: 1, Value: v, Status: jepsen.StatusOK, Offset: uint64(i)})
	}
	eventuallyFor(t, flipWait, "the leader serves every acknowledged record", func() error {
		pi := flipPartition(t, c)
		if pi.Err != nil || pi.Leader == "" {
			return fmt.Errorf("partition: %+v", pi)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		cl, err := sdk.Dial(ctx, sdk.ClientConfig{Addr: c.Node(nodeIndex(t, pi.Leader)).Addr, Dialer: sdk.DialFunc(c.Client().DialContext)})
		if err != nil {
			return err
		}
		defer cl.Close()
		var values []string
		for off := uint64(0); off < pi.HighWatermark; {
			fr, err := cl.Fetch(ctx, sdk.FetchRequest{Topic: flipTopic, Offset: off})
			if err != nil {
				return err
			}
			if len(fr.Messages) == 0 {
				return fmt.Errorf("nothing at %d below the high watermark %d", off, pi.HighWatermark)
			}
			for _, m := range fr.Messages {
				values = append(values, string(m.Value))
			}
			off = fr.NextOffset
		}
		h.Final[0] = jepsen.FinalRead{Values: values, Return: 1}
		return nil
	})
	for _, i := range replicas {
		var rl jepsen.ReplicaLog
		eventuallyFor(t, flipWait, fmt.Sprintf("node %d's copy repaired", i), func() error {
			var err error
			rl, err = readReplica(c.Node(i), flipTopic, 0)
			if err != nil {
				return err
			}
			if got := int(rl.Start) + len(rl.Values); got < len(acked) {
				return fmt.Errorf("%d of %d records", got, len(acked))
			}
			return nil
		})
		h.Replicas = append(h.Replicas, rl)
	}
	if res := jepsen.Check(h, jepsen.Options{}); !res.OK() {
		t.Fatal(res)
	}
}
