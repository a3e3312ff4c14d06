package sdk

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// TestGrpcRouteToLeaders: GrpcProducer and GrpcConsumer send each
// partition's requests to its leader's gRPC address (from Members), and
// after the leader changes follow the NOT_LEADER to the node it names,
// without an error, the consumer resuming at its position. Every
// connection goes through the Dialer.
func TestGrpcRouteToLeaders(t *testing.T) {
	fc := newFakeGrpcCluster(t, 3, "t", 3)
	ctx := testCtx(t)
	var pd, cd dialCounter
	p, err := NewGrpcProducer(GrpcProducerConfig{GrpcConfig: GrpcConfig{Addr: fc.nodes[0].addr, Dialer: pd.dial},
		RetryBackoff: time.Millisecond, RetryBackoffMax: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	send := func(from, to int) {
		t.Helper()
		var msgs []ProducerMessage
		for i := from; i < to; i++ {
			// Key i goes to partition i mod 3 whatever the hash: one key per partition.
			msgs = append(msgs, NewProducerMessage("t", fmt.Appendf(nil, "v%02d", i)).WithKey(keyFor(t, uint32(i%3), 3)))
		}
		acks, err := p.SendBatch(ctx, msgs)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range acks {
			if a.Err != nil {
				t.Fatalf("ack: %v", a.Err)
			}
		}
	}
	send(0, 9)
	for part := range uint32(3) {
		for node := range 3 {
			if n := len(fc.values(node, part)); node != int(part) && n != 0 {
				t.Fatalf("node %d holds %d records of partition %d, led by node %d", node, n, part, part)
			}
		}
		if fc.refusals(int(part)) != 0 {
			t.Fatalf("node %d refused requests: each should have reached its leader", part)
		}
	}
	c, err := NewGrpcConsumer(ctx, GrpcConsumerConfig{GrpcConfig: GrpcConfig{Addr: fc.nodes[0].addr, Dialer: cd.dial}, Topic: "t",
		MaxWait: 20 * time.Millisecond, RetryBackoff: time.Millisecond, RetryBackoffMax: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	got := pollGrpcN(t, c, 9)
	fc.move(1, 2)
	send(9, 12)
	got = append(got, pollGrpcN(t, c, 3)...)
	var vals []string
	for _, m := range got {
		if m.Partition == 1 {
			vals = append(vals, string(m.Value))
		}
	}
	if want := []string{"v01", "v04", "v07", "v10"}; !slices.Equal(vals, want) {
		t.Fatalf("partition 1 read as %v, want %v", vals, want)
	}
	if want := []string{"v01", "v04", "v07", "v10"}; !slices.Equal(fc.values(2, 1), want) {
		t.Fatalf("new leader holds %v of partition 1, want %v", fc.values(2, 1), want)
	}
	if fc.refusals(1) == 0 {
		t.Fatal("the former leader refused nothing: the partition did not move under the clients")
	}
	all := []string{fc.nodes[0].addr, fc.nodes[1].addr, fc.nodes[2].addr}
	slices.Sort(all)
	for name, d := range map[string]*dialCounter{"producer": &pd, "consumer": &cd} {
		if got := d.addrs(); !slices.Equal(got, all) {
			t.Fatalf("%s dialed %v, want every node: %v", name, got, all)
		}
	}
	if n, accepted := pd.total()+cd.total(), fc.accepts.Load(); int64(n) != accepted {
		t.Fatalf("%d dials through the Dialers, %d connections accepted: some dial bypassed the Dialer", n, accepted)
	}
}

// keyFor returns a key that HashPartitioner places on partition of n.
func keyFor(t testing.TB, partition, n uint32) []byte {
	for i := range 1000 {
		k := fmt.Appendf(nil, "k%d", i)
		if (HashPartitioner{}).Partition("t", k, n) == partition {
			return k
		}
	}
	t.Fatalf("no key for partition %d", partition)
	return nil
}

// pollGrpcN polls c until n records arrived, within 10s.
func pollGrpcN(t *testing.T, c *GrpcConsumer, n int) []Message {
	t.Helper()
	var out []Message
	deadline := time.Now().Add(10 * time.Second)
	for len(out) < n {
		msgs, err := c.Poll(testCtx(t))
		if err != nil {
			t.Fatalf("Poll: %v", err)
		}
		out = append(out, msgs...)
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d records within 10s", len(out), n)
		}
	}
	return out
}
