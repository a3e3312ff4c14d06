package clusternet_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seedqueue/sq/internal/clusternet"
	"github.com/seedqueue/sq/sdk"
)

// Shape of the rolling-restart test: its producers and their bound.
const (
	rollingTopic      = "rolling"
	rollingPartitions = 6
	rollingSenders    = 3     // goroutines, each with its own partitions
	rollingMaxSends   = 20000 // per sender: a bound on the run's size
	// rollingProgress is how many acknowledgements the producer must add
	// between two restarts: every node's restart happens under load.
	rollingProgress = 50
)

// ackedRecord is one acknowledged send.
type ackedRecord struct {
	partition uint32
	offset    uint64
}

// rollingProducer sends keyed records with an idempotent producer (the
// SDK's default, retries on) until stopped, and records every outcome.
type rollingProducer struct {
	p      *sdk.Producer
	stop   chan struct{}
	wg     sync.WaitGroup
	acked  atomic.Int64
	mu     sync.Mutex
	acks   map[string]ackedRecord // value -> where it was acknowledged
	failed []string
}

func startRollingProducer(t *testing.T, c *clusternet.Cluster) *rollingProducer {
	t.Helper()
	p, err := sdk.NewProducer(context.Background(), sdk.ProducerConfig{
		Addr: c.Node(1).Addr, Dialer: sdk.DialFunc(c.Client().DialContext), Partitioner: byKey, Acks: sdk.AcksAll,
		DialTimeout: 2 * time.Second,
	})
	if err != nil {
		t.Fatalf("producer: %v", err)
	}
	rp := &rollingProducer{p: p, stop: make(chan struct{}), acks: map[string]ackedRecord{}}
	for s := range rollingSenders {
		rp.wg.Go(func() { rp.send(s) })
	}
	return rp
}

// send is one sender's loop: partitions s, s+rollingSenders, ... in turn.
func (rp *rollingProducer) send(s int) {
	for k := 0; k < rollingMaxSends; k++ {
		select {
		case <-rp.stop:
			return
		default:
		}
		part := (s + k*rollingSenders) % rollingPartitions
		value := fmt.Sprintf("s%d-%d", s, k)
		ack, err := rp.p.Send(context.Background(), rollingTopic, []byte("p"+strconv.Itoa(part)), []byte(value))
		rp.mu.Lock()
		if err != nil {
			rp.failed = append(rp.failed, value+": "+err.Error())
		} else {
			rp.acks[value] = ackedRecord{partition: ack.Partition, offset: ack.Offset}
		}
		rp.mu.Unlock()
		if err == nil {
			rp.acked.Add(1)
		}
	}
}

// finish stops the senders and closes the producer.
func (rp *rollingProducer) finish(t *testing.T) {
	t.Helper()
	close(rp.stop)
	rp.wg.Wait()
	if err := rp.p.Close(); err != nil {
		t.Errorf("producer close: %v", err)
	}
}

// waitProgress waits until the producer has acknowledged n more records.
func (rp *rollingProducer) waitProgress(t *testing.T, n int64) {
	t.Helper()
	from := rp.acked.Load()
	eventually(t, fmt.Sprintf("%d more acknowledged sends", n), func() error {
		rp.mu.Lock()
		failed := len(rp.failed)
		rp.mu.Unlock()
		if failed > 0 {
			return nil // reported at the end, with every failure
		}
		if got := rp.acked.Load() - from; got < n {
			return fmt.Errorf("%d so far", got)
		}
		return nil
	})
}

// describeTopic describes topic through node n with the SDK.
func describeTopic(c *clusternet.Cluster, n *clusternet.Node, topic string) (sdk.TopicInfo, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cl, err := sdk.Dial(ctx, sdk.ClientConfig{Addr: n.Addr, Dialer: sdk.DialFunc(c.Client().DialContext), DialTimeout: 2 * time.Second})
	if err != nil {
		return sdk.TopicInfo{}, err
	}
	defer cl.Close()
	return cl.DescribeTopic(ctx, topic)
}

// waitFullISR waits until every partition of topic, described through
// node n, has a live leader and every replica in its in-sync set: the
// point where the next node may be restarted (as Kafka operators wait for
// no under-replicated partitions).
func waitFullISR(t *testing.T, c *clusternet.Cluster, n *clusternet.Node, topic string) {
	t.Helper()
	eventually(t, "every replica of "+topic+" in sync", func() error {
		ti, err := describeTopic(c, n, topic)
		if err != nil {
			return err
		}
		for _, p := range ti.PartitionInfos {
			if p.Err != nil || p.Leader == "" || len(p.ISR) != len(p.Replicas) {
				return fmt.Errorf("partition %d: leader %q, replicas %v, ISR %v, err %v", p.Partition, p.Leader, p.Replicas, p.ISR, p.Err)
			}
		}
		return nil
	})
}

// readAll reads every record of every partition of topic below its high
// watermark from its leader, as values by partition in offset order.
func readAll(t *testing.T, c *clusternet.Cluster, topic string) map[uint32][]string {
	t.Helper()
	ti, err := describeTopic(c, c.Node(1), topic)
	if err != nil {
		t.Fatalf("describe %s: %v", topic, err)
	}
	out := map[uint32][]string{}
	for _, p := range ti.PartitionInfos {
		i, err := strconv.Atoi(strings.TrimPrefix(p.Leader, "node-"))
		if err != nil || i < 1 || i > len(c.Nodes()) {
			t.Fatalf("partition %d: leader %q", p.Partition, p.Leader)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		cl, err := sdk.Dial(ctx, sdk.ClientConfig{Addr: c.Node(i).Addr, Dialer: sdk.DialFunc(c.Client().DialContext), DialTimeout: 2 * time.Second})
		if err != nil {
			cancel()
			t.Fatalf("dial node %d: %v", i, err)
		}
		for off := uint64(0); off < p.HighWatermark; {
			fr, err := cl.Fetch(ctx, sdk.FetchRequest{Topic: topic, Partition: p.Partition, Offset: off})
			if err != nil || len(fr.Messages) == 0 {
				cl.Close()
				cancel()
				t.Fatalf("fetch of partition %d at %d from node %d: %v (%d records)", p.Partition, off, i, err, len(fr.Messages))
			}
			for _, m := range fr.Messages {
				if m.Offset == off && off < p.HighWatermark {
					out[p.Partition] = append(out[p.Partition], string(m.Value))
					off++
				}
			}
		}
		cl.Close()
		cancel()
	}
	return out
}

// TestRollingRestart restarts each node of a 3-node cluster in turn with
// SIGTERM while an idempotent producer with retries sends keyed records
// to every partition (replication factor 3): the controlled shutdown
// hands each stopping node's partitions over first, so no send fails, and
// the records read back afterwards are exactly the acknowledged ones,
// each once, at the offset its acknowledgement gave.
func TestRollingRestart(t *testing.T) {
	c := newCluster(t, 3)
	startCluster(t, c)
	n1 := c.Node(1)
	sqOK(t, c.Client(), n1.Addr, "", "--control", grpcAddr(n1), "topic", "create", rollingTopic,
		"--partitions", strconv.Itoa(rollingPartitions), "--replication-factor", "3")
	waitAgree(t, c, 1, 2, 3)
	rp := startRollingProducer(t, c)
	finished := false
	defer func() {
		if !finished {
			rp.finish(t)
		}
	}()
	rp.waitProgress(t, rollingProgress)
	for _, n := range c.Nodes() {
		waitFullISR(t, c, c.Node(1+n.Index%3), rollingTopic)
		rp.waitProgress(t, rollingProgress)
		n.Stop() // SIGTERM; fails the test unless it exits 0
		if log := n.Process().Log(); !strings.Contains(log, "controlled shutdown: leadership handed over") {
			t.Fatalf("node %d stopped without handing its partitions over:\n%s", n.Index, tailOf(log, 4000))
		}
		n.Restart()
		waitMembers(t, c, n.Addr, grpcAddr(n), 3)
	}
	waitFullISR(t, c, n1, rollingTopic)
	rp.waitProgress(t, rollingProgress)
	rp.finish(t)
	finished = true

	if len(rp.failed) > 0 {
		t.Fatalf("%d of %d sends failed during the rolling restart, first: %s", len(rp.failed), len(rp.failed)+len(rp.acks), rp.failed[0])
	}
	got := readAll(t, c, rollingTopic)
	seen := map[string]bool{}
	total := 0
	for part, values := range got {
		for off, v := range values {
			total++
			if seen[v] {
				t.Errorf("%q is stored twice (partition %d, offset %d)", v, part, off)
			}
			seen[v] = true
			a, ok := rp.acks[v]
			switch {
			case !ok:
				t.Errorf("%q at partition %d offset %d was never acknowledged", v, part, off)
			case a.partition != part || a.offset != uint64(off):
				t.Errorf("%q acknowledged at partition %d offset %d, stored at partition %d offset %d", v, a.partition, a.offset, part, off)
			}
		}
	}
	var lost []string
	for v := range rp.acks {
		if !seen[v] {
			lost = append(lost, v)
		}
	}
	slices.Sort(lost)
	if len(lost) > 0 {
		t.Errorf("%d acknowledged records lost, first %v", len(lost), lost[:min(5, len(lost))])
	}
	t.Logf("rolling restart: %d records acknowledged and read back, 0 failed sends", total)
}
