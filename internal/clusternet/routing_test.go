package clusternet_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/seedqueue/sq/internal/clusternet"
	"github.com/seedqueue/sq/sdk"
)

// byKey places a record with key "p<N>" in partition N: the tests choose
// each record's partition.
var byKey = sdk.PartitionerFunc(func(_ string, key []byte, n uint32) uint32 {
	p, _ := strconv.Atoi(strings.TrimPrefix(string(key), "p"))
	return uint32(p) % n
})

// metric returns the value of the sample named name (with its labels, as
// printed: `sq_published_records_total{topic="t"}`) on node n's /metrics,
// 0 when absent.
func metric(t *testing.T, c *clusternet.Cluster, n *clusternet.Node, sample string) float64 {
	t.Helper()
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: c.Client().DialContext}}
	defer hc.CloseIdleConnections()
	resp, err := hc.Get("http://" + net.JoinHostPort(n.IP, strconv.Itoa(clusternet.HTTPPort)) + "/metrics")
	if err != nil {
		t.Fatalf("metrics of node %d: %v", n.Index, err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 1<<16), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), sample+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("node %d: %s: %v", n.Index, sc.Text(), err)
			}
			return f
		}
	}
	return 0
}

// produce sends one record to each partition in parts with p, failing the
// test on any error.
func produce(t *testing.T, p *sdk.Producer, topic string, parts []int, tag string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var msgs []sdk.ProducerMessage
	for _, i := range parts {
		m := sdk.NewProducerMessage(topic, []byte(tag+"-"+strconv.Itoa(i)))
		m.Key = []byte("p" + strconv.Itoa(i))
		msgs = append(msgs, m)
	}
	acks, err := p.SendBatch(ctx, msgs)
	if err != nil {
		t.Fatalf("SendBatch: %v", err)
	}
	for i, a := range acks {
		if a.Err != nil {
			t.Fatalf("record to partition %d: %v", parts[i], a.Err)
		}
		if int(a.Partition) != parts[i] {
			t.Fatalf("record for partition %d stored in %d", parts[i], a.Partition)
		}
	}
}

// consume polls cons until it has want records, failing the test with
// any error.
func consume(t *testing.T, cons *sdk.Consumer, want int) []sdk.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var got []sdk.Message
	for len(got) < want {
		ms, err := cons.Poll(ctx)
		if err != nil {
			t.Fatalf("Poll after %d of %d records: %v", len(got), want, err)
		}
		got = append(got, ms...)
	}
	return got
}

// TestSDKRoutesToLeaders runs an SDK producer and consumer against a
// 3-node cluster with 6 partitions: each node appends exactly the records
// of the partitions it leads and refuses none (its sq_* metrics), and after
// `sq cluster remove-node` of a node leading only empty partitions, the
// producer and consumer, which still hold the old placement, follow
// NOT_LEADER without an error.
func TestSDKRoutesToLeaders(t *testing.T) {
	c := newCluster(t, 3)
	startCluster(t, c)
	n1 := c.Node(1)
	for _, topic := range []string{"routed", "moves"} {
		sqOK(t, c.Client(), n1.Addr, "", "--control", grpcAddr(n1), "topic", "create", topic, "--partitions", "6", "--replication-factor", "3")
	}
	waitAgree(t, c, 1, 2, 3)
	dial := sdk.DialFunc(c.Client().DialContext)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	prod, err := sdk.NewProducer(ctx, sdk.ProducerConfig{Addr: c.Node(2).Addr, Dialer: dial, Partitioner: byKey})
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	all := []int{0, 1, 2, 3, 4, 5}
	for range 5 {
		produce(t, prod, "routed", all, "r")
	}
	cons, err := sdk.NewConsumer(ctx, sdk.ConsumerConfig{Addr: c.Node(3).Addr, Dialer: dial, Topic: "routed"})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	if got := consume(t, cons, 30); len(got) != 30 {
		t.Fatalf("consumed %d records, want 30", len(got))
	}
	parts, err := describe(t, c, n1, "routed")
	if err != nil {
		t.Fatal(err)
	}
	led := map[string]int{}
	for _, p := range parts {
		led[p.Leader]++
	}
	for _, n := range c.Nodes() {
		id := "node-" + strconv.Itoa(n.Index)
		if got, want := metric(t, c, n, `sq_published_records_total{topic="routed"}`), float64(5*led[id]); got != want {
			t.Errorf("node %d appended %v records, want %v (it leads %d partitions)", n.Index, got, want, led[id])
		}
		if got := metric(t, c, n, `sq_publish_errors_total{code="NOT_LEADER"}`); got != 0 {
			t.Errorf("node %d refused %v publishes with NOT_LEADER: the SDK sent them to a follower", n.Index, got)
		}
		if got, want := metric(t, c, n, `sq_fetched_records_total{topic="routed"}`), float64(5*led[id]); got != want {
			t.Errorf("node %d returned %v fetched records, want %v", n.Index, got, want)
		}
	}

	// A controlled leader change: a producer and a consumer learn the
	// placement of "moves", then a node that leads only empty partitions
	// is removed ("routed", which holds records everywhere, is deleted
	// first: without replication a partition with records cannot move).
	sqOK(t, c.Client(), n1.Addr, "", "--control", grpcAddr(n1), "topic", "delete", "routed")
	moves, err := describe(t, c, n1, "moves")
	if err != nil {
		t.Fatal(err)
	}
	ctl, err := controllerOf(t, c, 1, 2, 3)
	if err != nil {
		t.Fatal(err)
	}
	victim := 3
	if ctl == 3 {
		victim = 2
	}
	vid := "node-" + strconv.Itoa(victim)
	var theirs, others []int
	for _, p := range moves {
		if p.Leader == vid {
			theirs = append(theirs, p.Partition)
		} else {
			others = append(others, p.Partition)
		}
	}
	if len(theirs) == 0 {
		t.Fatalf("%s leads no partition of \"moves\": %+v", vid, moves)
	}
	// Learn the placement without writing to the victim's partitions.
	produce(t, prod, "moves", others, "before")
	mcons, err := sdk.NewConsumer(ctx, sdk.ConsumerConfig{Addr: c.Node(ctl).Addr, Dialer: dial, Topic: "moves"})
	if err != nil {
		t.Fatal(err)
	}
	defer mcons.Close()
	consume(t, mcons, len(others))
	ctlNode := c.Node(ctl)
	proc := c.Node(victim).Process()
	out := sqOK(t, c.Client(), ctlNode.Addr, "", "--control", grpcAddr(ctlNode), "cluster", "remove-node", vid)
	t.Logf("remove-node %s: %s", vid, out)
	// The removed node stops by itself, with status 1 (TestRemoveLiveNode).
	if code, sig, ok := proc.ExitStatus(waitTimeout); !ok || code != 1 {
		t.Fatalf("removed node: exited %v, status %d, signal %v; want status 1; log:\n%s", ok, code, sig, tailOf(proc.Log(), 40))
	}
	produce(t, prod, "moves", all, "after")
	got := consume(t, mcons, len(all))
	seen := map[string]bool{}
	for _, m := range got {
		seen[string(m.Value)] = true
	}
	for _, i := range all {
		if !seen[fmt.Sprintf("after-%d", i)] {
			t.Errorf("record after-%d not consumed after the leader change; got %d records", i, len(got))
		}
	}
	after, err := describe(t, c, ctlNode, "moves")
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range theirs {
		if after[i].Leader == vid || after[i].LeaderEpoch != moves[i].LeaderEpoch+1 {
			t.Errorf("partition %d after remove-node: %+v (was %+v)", i, after[i], moves[i])
		}
	}
}
