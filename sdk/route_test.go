package sdk

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/api/batch"
)

// dialCounter is a DialFunc that counts its dials per address.
type dialCounter struct {
	mu    sync.Mutex
	dials map[string]int
}

func (d *dialCounter) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	d.mu.Lock()
	if d.dials == nil {
		d.dials = map[string]int{}
	}
	d.dials[addr]++
	d.mu.Unlock()
	var nd net.Dialer
	return nd.DialContext(ctx, network, addr)
}

func (d *dialCounter) total() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for _, c := range d.dials {
		n += c
	}
	return n
}

func (d *dialCounter) addrs() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []string
	for a := range d.dials {
		out = append(out, a)
	}
	slices.Sort(out)
	return out
}

// TestRouteEachRequestToItsLeader: with the partitions of a topic led by
// three different nodes, every publish and every fetch reaches its
// partition's leader at once (no node refuses one), through one
// connection per node, each opened with the configured Dialer.
func TestRouteEachRequestToItsLeader(t *testing.T) {
	fc := newFakeCluster(t, 3)
	fc.createTopic("t", 6)
	ctx := testCtx(t)
	var pd, cd dialCounter
	p := newTestProducer(t, fc.nodes[0], func(c *ProducerConfig) { c.Dialer = pd.dial })
	var msgs []ProducerMessage
	for i := range 60 {
		msgs = append(msgs, NewProducerMessage("t", fmt.Appendf(nil, "v%d", i)).WithKey(fmt.Appendf(nil, "k%d", i)))
	}
	acks, err := p.SendBatch(ctx, msgs)
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for part := range uint32(6) {
		for i, s := range fc.nodes {
			n := len(s.records("t", part))
			if leads := int(part)%3 == i; !leads && n != 0 {
				t.Fatalf("node %d holds %d records of partition %d, led by node %d", i, n, part, part%3)
			}
			total += n
		}
	}
	if total != len(msgs) {
		t.Fatalf("%d records stored, want %d", total, len(msgs))
	}
	c := newConsumerAt(t, fc.nodes[1].addr, ConsumerConfig{Topic: "t", UseFetch: true, Dialer: cd.dial})
	got := pollN(t, c, len(msgs))
	if len(got) != len(msgs) {
		t.Fatalf("read %d records, want %d", len(got), len(msgs))
	}
	for _, m := range got {
		if i := slices.IndexFunc(acks, func(a Ack) bool { return a.Partition == m.Partition && a.Offset == m.Offset }); i < 0 {
			t.Fatalf("read %s/%d@%d, never acknowledged", m.Topic, m.Partition, m.Offset)
		}
	}
	for i := range fc.nodes {
		if n := fc.refusals(i); n != 0 {
			t.Fatalf("node %d refused %d requests, want 0 (each sent to its leader)", i, n)
		}
	}
	want := slices.Sorted(slices.Values([]string{fc.nodes[0].addr, fc.nodes[1].addr, fc.nodes[2].addr}))
	for name, d := range map[string]*dialCounter{"producer": &pd, "consumer": &cd} {
		if got := d.addrs(); !slices.Equal(got, want) {
			t.Fatalf("%s dialed %v, want every node once: %v", name, got, want)
		}
	}
	handshakes := 0
	for _, s := range fc.nodes {
		handshakes += s.count(api.Frame_Which_handshakeRequest)
	}
	if n := pd.total() + cd.total(); n != handshakes {
		t.Fatalf("%d dials through the Dialers, %d connections handshaken: some dial bypassed the Dialer", n, handshakes)
	}
}

// TestNotLeaderWithLeaderMovesThePartition: after the partition's leader
// changed, the batches in flight to the former leader come back
// NOT_LEADER naming the new one; the producer sends them there at once,
// in order, without reading the metadata again and without an error.
func TestNotLeaderWithLeaderMovesThePartition(t *testing.T) {
	fc := newFakeCluster(t, 2)
	fc.createTopic("t", 1)
	ctx := testCtx(t)
	var mu sync.Mutex
	var failed []error
	bp, err := NewBatchProducer(ctx, BatchProducerConfig{
		ProducerConfig: ProducerConfig{Addr: fc.nodes[0].addr, RetryBackoff: time.Millisecond, RetryBackoffMax: 10 * time.Millisecond},
		Linger:         time.Hour, BatchRecords: 2,
		OnError: func(e BatchError) { mu.Lock(); failed = append(failed, e); mu.Unlock() },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer bp.Close()
	send := func(from, to int) {
		t.Helper()
		for i := from; i < to; i++ {
			if err := bp.Send(ctx, "t", nil, fmt.Appendf(nil, "v%02d", i)); err != nil {
				t.Fatal(err)
			}
		}
		if err := bp.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	send(0, 10)
	fc.move("t", 0, 1)
	send(10, 30)
	mu.Lock()
	defer mu.Unlock()
	if len(failed) != 0 {
		t.Fatalf("batches failed: %v", failed)
	}
	if got, want := storedValues(fc.nodes[0], "t", 0), values(0, 10); !slices.Equal(got, want) {
		t.Fatalf("former leader holds %v, want %v", got, want)
	}
	if got, want := storedValues(fc.nodes[1], "t", 0), values(10, 30); !slices.Equal(got, want) {
		t.Fatalf("new leader holds %v, want %v (in order)", got, want)
	}
	if n := fc.nodes[0].count(api.Frame_Which_metadataRequest); n != 1 {
		t.Fatalf("%d metadata requests, want 1: the NOT_LEADER named the leader", n)
	}
	if fc.refusals(0) == 0 {
		t.Fatal("the former leader refused nothing: the test did not move a partition under the producer")
	}
}

// storedValues returns the values of the records s stores for partition,
// in offset order.
func storedValues(s *fakeServer, topic string, partition uint32) []string {
	var out []string
	for _, r := range s.records(topic, partition) {
		_, v, _ := strings.Cut(r, "=")
		out = append(out, v)
	}
	return out
}

// values returns "v<from>" ... "v<to-1>", two digits each.
func values(from, to int) []string {
	var out []string
	for i := from; i < to; i++ {
		out = append(out, fmt.Sprintf("v%02d", i))
	}
	return out
}

// TestNotLeaderWithoutLeaderRefreshes: a NOT_LEADER that names no leader
// makes the retry read the metadata again and go to the leader it names
// (before, the retry went back to the former leader until the retries
// ran out), and so does a consumer's next fetch.
func TestNotLeaderWithoutLeaderRefreshes(t *testing.T) {
	fc := newFakeCluster(t, 2)
	fc.noHint = true
	fc.createTopic("t", 1)
	ctx := testCtx(t)
	p := newTestProducer(t, fc.nodes[0], func(c *ProducerConfig) { c.Retries = 1 })
	if _, err := p.Send(ctx, "t", nil, []byte("v00")); err != nil {
		t.Fatal(err)
	}
	c := newConsumerAt(t, fc.nodes[0].addr, ConsumerConfig{Topic: "t", UseFetch: true})
	if got := pollN(t, c, 1); string(got[0].Value) != "v00" {
		t.Fatalf("read %q, want v00", got[0].Value)
	}
	// The new leader holds what the former one had (as a replica would).
	fc.nodes[0].mu.Lock()
	first := fc.nodes[0].topics["t"].parts[0].batches[0]
	fc.nodes[0].mu.Unlock()
	if _, err := fc.nodes[1].appendBatch("t", 0, first); err != nil {
		t.Fatal(err)
	}
	fc.move("t", 0, 1)
	if _, err := p.Send(ctx, "t", nil, []byte("v01")); err != nil {
		t.Fatalf("Send after the leader moved: %v", err)
	}
	if got := storedValues(fc.nodes[1], "t", 0); !slices.Equal(got, values(0, 2)) {
		t.Fatalf("new leader holds %v, want %v", got, values(0, 2))
	}
	if got := pollN(t, c, 1); string(got[0].Value) != "v01" || got[0].Offset != 1 {
		t.Fatalf("read %q at %d, want v01 at 1 from the new leader", got[0].Value, got[0].Offset)
	}
	if n := fc.nodes[0].count(api.Frame_Which_metadataRequest); n < 3 {
		t.Fatalf("%d metadata requests, want the producer's and the consumer's first ones and a refresh each", n)
	}
	if n := fc.refusals(0); n < 2 {
		t.Fatalf("the former leader refused %d requests, want the publish and a fetch", n)
	}
}

// TestLeaderNotAvailableThenDelivered: LEADER_NOT_AVAILABLE and
// NO_QUORUM are retried with backoff within the retry budget, each retry
// after reading the metadata again, and the record is stored once the
// partition answers.
func TestLeaderNotAvailableThenDelivered(t *testing.T) {
	fc := newFakeCluster(t, 2)
	fc.createTopic("t", 2)
	fc.refusePartition("t", 1, api.CodeLeaderNotAvailable, api.CodeNoQuorum, api.CodeLeaderNotAvailable)
	ctx := testCtx(t)
	p := newTestProducer(t, fc.nodes[0], func(c *ProducerConfig) { c.Retries = 3 })
	key := []byte("k")
	for i := 0; (HashPartitioner{}).Partition("t", key, 2) != 1; i++ {
		key = fmt.Appendf(nil, "k%d", i)
	}
	if ack, err := p.Send(ctx, "t", key, []byte("v")); err != nil || ack.Partition != 1 {
		t.Fatalf("Send: partition %d, %v; want partition 1 stored", ack.Partition, err)
	}
	if n := fc.refusals(1); n != 3 {
		t.Fatalf("node 1 refused %d publishes, want 3", n)
	}
	if got := storedValues(fc.nodes[1], "t", 1); len(got) != 1 {
		t.Fatalf("partition 1 holds %v, want one record", got)
	}
	if n := fc.nodes[0].count(api.Frame_Which_metadataRequest); n != 4 {
		t.Fatalf("%d metadata requests, want 4: the first and one before each retry", n)
	}
}

// TestMergeLeaders: a metadata answer replaces a partition's leader only
// when it is not older: an answer of a lower epoch never does, nor one of
// the same epoch when the leader was named by a NOT_LEADER since.
func TestMergeLeaders(t *testing.T) {
	a := leaderAddr{nodeID: "a", addr: "a:1", epoch: 3}
	b := leaderAddr{nodeID: "b", addr: "b:1", epoch: 4}
	hinted := leaderAddr{nodeID: "b", addr: "b:1", epoch: 3, hinted: true}
	for _, tc := range []struct {
		name       string
		prev, next leaderAddr
		want       leaderAddr
	}{
		{"newer epoch replaces", a, b, b},
		{"older epoch is ignored", b, a, b},
		{"same epoch replaces", a, leaderAddr{nodeID: "c", addr: "c:1", epoch: 3}, leaderAddr{nodeID: "c", addr: "c:1", epoch: 3}},
		{"hint outlives its epoch", hinted, a, hinted},
		{"a later epoch replaces a hint", hinted, b, b},
		{"no placement (old server) keeps a hint", hinted, leaderAddr{addr: "a:1"}, hinted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := mergeLeaders([]leaderAddr{tc.prev}, []leaderAddr{tc.next})
			if got[0] != tc.want {
				t.Fatalf("got %+v, want %+v", got[0], tc.want)
			}
		})
	}
}

// TestLaggingMetadataKeepsTheNamedLeader: a leader named by a NOT_LEADER
// is kept when a lagging node's metadata still names the former leader at
// the former epoch, and replaced once the metadata reaches a later epoch.
func TestLaggingMetadataKeepsTheNamedLeader(t *testing.T) {
	fc := newFakeCluster(t, 3)
	fc.createTopic("t", 1)
	ctx := testCtx(t)
	p := newTestProducer(t, fc.nodes[0])
	if _, err := p.Send(ctx, "t", nil, []byte("v00")); err != nil {
		t.Fatal(err)
	}
	fc.report("t", 0, &fakeLead{node: 0, epoch: 1}) // the bootstrap node lags
	fc.move("t", 0, 1)
	if _, err := p.Send(ctx, "t", nil, []byte("v01")); err != nil {
		t.Fatal(err)
	}
	if _, err := p.core.refresh(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	if got := p.core.leader(ctx, "t", 0); got.nodeID != "node-1" {
		t.Fatalf("leader after lagging metadata: %+v, want node-1 (named by NOT_LEADER)", got)
	}
	if _, err := p.Send(ctx, "t", nil, []byte("v02")); err != nil {
		t.Fatal(err)
	}
	if n := fc.refusals(0); n != 1 {
		t.Fatalf("the former leader refused %d publishes, want 1 (the one that named the new leader)", n)
	}
	fc.move("t", 0, 2)
	fc.report("t", 0, nil)
	if _, err := p.core.refresh(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	if got := p.core.leader(ctx, "t", 0); got.nodeID != "node-2" || got.epoch != 3 || got.hinted {
		t.Fatalf("leader after current metadata: %+v, want node-2 at epoch 3", got)
	}
	if got := storedValues(fc.nodes[1], "t", 0); !slices.Equal(got, values(1, 3)) {
		t.Fatalf("node-1 holds %v, want %v", got, values(1, 3))
	}
}

// TestDialerEveryClientType: each client type opens its connections
// through the configured Dialer: one that refuses makes every constructor
// or first call fail with its error, and one that counts sees the dials.
func TestDialerEveryClientType(t *testing.T) {
	s := newFakeServer(t)
	s.createTopic("t", 1)
	fg := newFakeGrpcCluster(t, 1, "t", 1)
	ctx := testCtx(t)
	refused := errors.New("refused by the test dialer")
	refuse := func(context.Context, string, string) (net.Conn, error) { return nil, refused }
	short := GrpcConfig{Addr: fg.nodes[0].addr, Dialer: refuse, RequestTimeout: time.Second, ConnectTimeout: time.Second}
	for name, open := range map[string]func() error{
		"Client": func() error { _, err := Dial(ctx, ClientConfig{Addr: s.addr, Dialer: refuse}); return err },
		"Producer": func() error {
			_, err := NewProducer(ctx, ProducerConfig{Addr: s.addr, Dialer: refuse})
			return err
		},
		"BatchProducer": func() error {
			_, err := NewBatchProducer(ctx, BatchProducerConfig{ProducerConfig: ProducerConfig{Addr: s.addr, Dialer: refuse}})
			return err
		},
		"Consumer": func() error {
			_, err := NewConsumer(ctx, ConsumerConfig{Addr: s.addr, Topic: "t", Dialer: refuse})
			return err
		},
		"Admin": func() error {
			a, err := NewAdmin(AdminConfig{short})
			if err != nil {
				return err
			}
			defer a.Close()
			_, err = a.Members(ctx)
			return err
		},
		"GrpcProducer": func() error {
			p, err := NewGrpcProducer(GrpcProducerConfig{GrpcConfig: short, Retries: RetriesNone})
			if err != nil {
				return err
			}
			defer p.Close()
			_, err = p.Send(ctx, "t", nil, []byte("x"))
			return err
		},
		"GrpcConsumer": func() error {
			_, err := NewGrpcConsumer(ctx, GrpcConsumerConfig{GrpcConfig: short, Topic: "t"})
			return err
		},
	} {
		t.Run(name, func(t *testing.T) {
			err := open()
			if err == nil {
				t.Fatal("connected although the Dialer refuses every dial")
			}
			if !errors.Is(err, refused) && !strings.Contains(err.Error(), refused.Error()) {
				t.Fatalf("error %v does not come from the Dialer", err)
			}
		})
	}
	var d dialCounter
	a, err := NewAdmin(AdminConfig{GrpcConfig{Addr: fg.nodes[0].addr, Dialer: d.dial}})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if _, err := a.Members(ctx); err != nil {
		t.Fatal(err)
	}
	if got := d.addrs(); !slices.Equal(got, []string{fg.nodes[0].addr}) {
		t.Fatalf("Admin dialed %v, want [%s]", got, fg.nodes[0].addr)
	}
}

// TestMetadataFromAnotherBroker: while the bootstrap node cannot be
// reached, the metadata is read from another node of the last brokers
// list, so the partitions the other nodes lead stay writable.
func TestMetadataFromAnotherBroker(t *testing.T) {
	fc := newFakeCluster(t, 2)
	fc.createTopic("t", 2)
	ctx := testCtx(t)
	p := newTestProducer(t, fc.nodes[0], func(c *ProducerConfig) { c.Retries = 1 })
	key := keyFor(t, 1, 2)
	if _, err := p.Send(ctx, "t", key, []byte("v00")); err != nil {
		t.Fatal(err)
	}
	fc.nodes[0].stop()
	p.core.invalidate("t")
	if ack, err := p.Send(ctx, "t", key, []byte("v01")); err != nil || ack.Partition != 1 {
		t.Fatalf("Send with the bootstrap node down: partition %d, %v", ack.Partition, err)
	}
	if n := fc.nodes[1].count(api.Frame_Which_metadataRequest); n != 1 {
		t.Fatalf("%d metadata requests to node-1, want 1", n)
	}
	if got := storedValues(fc.nodes[1], "t", 1); !slices.Equal(got, values(0, 2)) {
		t.Fatalf("node-1 holds %v, want %v", got, values(0, 2))
	}
}

// TestLeaderClient: LeaderClient hands out the leader's connection, and
// after NoteError of a NOT_LEADER the connection of the leader it named.
func TestLeaderClient(t *testing.T) {
	fc := newFakeCluster(t, 2)
	fc.createTopic("t", 2)
	ctx := testCtx(t)
	p := newTestProducer(t, fc.nodes[0])
	if got := p.LeaderClient(ctx, "t", 1).cfg.Addr; got != fc.nodes[1].addr {
		t.Fatalf("partition 1's client at %s, want node-1 at %s", got, fc.nodes[1].addr)
	}
	var b batch.Builder
	b.Add(nil, []byte("v"), nil, 0)
	data, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	fc.move("t", 1, 0)
	_, err = p.LeaderClient(ctx, "t", 1).Publish(ctx, "t", 1, data)
	if !errors.Is(err, api.ErrNotLeader) {
		t.Fatalf("Publish to the former leader: %v, want NOT_LEADER", err)
	}
	p.NoteError("t", 1, err)
	if _, err := p.LeaderClient(ctx, "t", 1).Publish(ctx, "t", 1, data); err != nil {
		t.Fatalf("Publish to the leader named: %v", err)
	}
	c := newConsumerAt(t, fc.nodes[1].addr, ConsumerConfig{Topic: "t", UseFetch: true})
	res, err := c.LeaderClient(ctx, 1).Fetch(ctx, FetchRequest{Topic: "t", Partition: 1})
	if err != nil || len(res.Messages) != 1 {
		t.Fatalf("Fetch from the leader: %d records, %v; want 1", len(res.Messages), err)
	}
}

// TestOnFetchRetry: each retriable refusal of a fetch is reported to
// OnFetchRetry with its partition and error, and the records come once
// the partition answers.
func TestOnFetchRetry(t *testing.T) {
	fc := newFakeCluster(t, 2)
	fc.createTopic("t", 1)
	ctx := testCtx(t)
	p := newTestProducer(t, fc.nodes[0])
	if _, err := p.Send(ctx, "t", nil, []byte("v00")); err != nil {
		t.Fatal(err)
	}
	fc.refusePartition("t", 0, api.CodeLeaderNotAvailable, api.CodeLeaderNotAvailable)
	var mu sync.Mutex
	var calls []error
	c := newConsumerAt(t, fc.nodes[0].addr, ConsumerConfig{Topic: "t", UseFetch: true, OnFetchRetry: func(partition uint32, err error) {
		if partition != 0 {
			t.Errorf("OnFetchRetry for partition %d, want 0", partition)
		}
		mu.Lock()
		calls = append(calls, err)
		mu.Unlock()
	}})
	if got := pollN(t, c, 1); string(got[0].Value) != "v00" {
		t.Fatalf("read %q, want v00", got[0].Value)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(calls) != 2 {
		t.Fatalf("OnFetchRetry called %d times (%v), want once for each of the 2 refusals", len(calls), calls)
	}
	for _, err := range calls {
		if !errors.Is(err, api.ErrLeaderNotAvailable) {
			t.Fatalf("OnFetchRetry error %v, want LEADER_NOT_AVAILABLE", err)
		}
	}
}
