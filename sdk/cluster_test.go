package sdk

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seedqueue/sq/api"
)

// trace starts counting what goes through cl.
func trace(cl *cluster) *coreTrace {
	t := &coreTrace{}
	cl.trace.Store(t)
	return t
}

// TestEntryTypesShareTheCore: every entry type places its records and
// reads its topic's metadata through the client core: Producer,
// BatchProducer and GrpcProducer place each record with cluster.place and
// read the partition count with one metadata request through the core;
// Consumer and GrpcConsumer hold the topic's id in the core's cache, and a
// standalone Consumer reads the metadata again through it.
func TestEntryTypesShareTheCore(t *testing.T) {
	n := startFaultyNode(t)
	ctx := testCtx(t)
	admin, err := Dial(ctx, ClientConfig{Addr: n.capnpAddr})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	ti, err := admin.CreateTopic(ctx, "t", 3, TopicConfig{})
	if err != nil {
		t.Fatal(err)
	}
	msgs := func(prefix string) []ProducerMessage {
		var out []ProducerMessage
		for i := range 10 {
			m := NewProducerMessage("t", fmt.Appendf(nil, "%s-%d", prefix, i))
			if i%2 == 0 {
				m = m.WithKey(fmt.Appendf(nil, "k%d", i))
			}
			out = append(out, m)
		}
		return out
	}
	checkProducer := func(name string, tr *coreTrace, cl *cluster) {
		t.Helper()
		if got := tr.placements.Load(); got != 10 {
			t.Errorf("%s: %d placements through the core, want 10 (one per record)", name, got)
		}
		if got := tr.requests.Load(); got != 1 {
			t.Errorf("%s: %d metadata requests through the core, want 1", name, got)
		}
		if got := tr.lookups.Load(); got < 1 {
			t.Errorf("%s: no metadata lookup through the core", name)
		}
		if got, ok := cl.topicByID(ti.ID); !ok || got != "t" {
			t.Errorf("%s: topic id %v not in the core's cache (%q, %v)", name, ti.ID, got, ok)
		}
	}

	p, err := NewProducer(ctx, ProducerConfig{Addr: n.capnpAddr})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	tr := trace(p.core)
	if _, err := p.SendBatch(ctx, msgs("p")); err != nil {
		t.Fatal(err)
	}
	checkProducer("Producer", tr, p.core)

	bp, err := NewBatchProducer(ctx, BatchProducerConfig{ProducerConfig: ProducerConfig{Addr: n.capnpAddr}})
	if err != nil {
		t.Fatal(err)
	}
	defer bp.Close()
	tr = trace(bp.p.core)
	for _, m := range msgs("bp") {
		if err := bp.SendMessage(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	if err := bp.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	checkProducer("BatchProducer", tr, bp.p.core)

	gp, err := NewGrpcProducer(GrpcProducerConfig{GrpcConfig: GrpcConfig{Addr: n.grpcAddr}})
	if err != nil {
		t.Fatal(err)
	}
	defer gp.Close()
	tr = trace(gp.core)
	if _, err := gp.SendBatch(ctx, msgs("gp")); err != nil {
		t.Fatal(err)
	}
	checkProducer("GrpcProducer", tr, gp.core)

	c, err := NewConsumer(ctx, ConsumerConfig{Addr: n.capnpAddr, Topic: "t", MaxWait: 50 * time.Millisecond, MetadataMaxAge: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got, ok := c.core.topicByID(ti.ID); !ok || got != "t" {
		t.Errorf("Consumer: topic id %v not in the core's cache (%q, %v)", ti.ID, got, ok)
	}
	tr = trace(c.core)
	waitFor(t, 10*time.Second, "the consumer reading the metadata again through the core", func() bool { return tr.requests.Load() >= 1 })
	if got := len(pollN(t, c, 30)); got != 30 {
		t.Fatalf("Consumer read %d records, want 30", got)
	}

	gc, err := NewGrpcConsumer(ctx, GrpcConsumerConfig{GrpcConfig: GrpcConfig{Addr: n.grpcAddr}, Topic: "t", MaxWait: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer gc.Close()
	if got, ok := gc.core.topicByID(ti.ID); !ok || got != "t" {
		t.Errorf("GrpcConsumer: topic id %v not in the core's cache (%q, %v)", ti.ID, got, ok)
	}

	// Call registration: every frame the Cap'n Proto entry types wrote
	// (publishes, metadata, fetches or subscriptions, credit grants,
	// commits) went through conn.issue.
	for _, e := range []struct {
		name string
		cl   *Client
	}{{"Producer", p.client}, {"BatchProducer", bp.p.client}, {"Consumer", c.client}} {
		e.cl.mu.Lock()
		cn := e.cl.cur
		e.cl.mu.Unlock()
		if cn == nil {
			t.Fatalf("%s: no connection", e.name)
		}
		waitFor(t, 10*time.Second, e.name+"'s writer to be idle", func() bool { return cn.issued.Load() == cn.written.Load() })
		if cn.written.Load() == 0 {
			t.Errorf("%s: no frame written", e.name)
		}
	}
}

// TestTopicGrowthReachesProducersAndConsumer: a topic that gets more
// partitions in place is seen by Producer, BatchProducer and a standalone
// Consumer once their metadata is older than MetadataMaxAge: keyless
// records reach the new partitions and the consumer reads them.
func TestTopicGrowthReachesProducersAndConsumer(t *testing.T) {
	s := newFakeServer(t)
	s.createTopic("t", 2)
	ctx := testCtx(t)
	const age = 20 * time.Millisecond
	p, err := NewProducer(ctx, ProducerConfig{Addr: s.addr, MetadataMaxAge: age})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	bp, err := NewBatchProducer(ctx, BatchProducerConfig{ProducerConfig: ProducerConfig{Addr: s.addr, MetadataMaxAge: age}})
	if err != nil {
		t.Fatal(err)
	}
	defer bp.Close()
	c, err := NewConsumer(ctx, ConsumerConfig{Addr: s.addr, Topic: "t", MaxWait: 20 * time.Millisecond, MetadataMaxAge: age})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := p.Send(ctx, "t", nil, []byte("p-first")); err != nil {
		t.Fatal(err)
	}
	if err := bp.Send(ctx, "t", nil, []byte("bp-first")); err != nil {
		t.Fatal(err)
	}
	if err := bp.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	s.growTopic("t", 4)

	seen := map[string]bool{} // "<producer>/<partition>" read by the consumer from a new partition
	done := func() bool { return seen["p/2"] && seen["p/3"] && seen["bp/2"] && seen["bp/3"] }
	deadline := time.Now().Add(15 * time.Second)
	for i := 0; !done(); i++ {
		if time.Now().After(deadline) {
			t.Fatalf("new partitions not reached or not read: %v", seen)
		}
		if _, err := p.Send(ctx, "t", nil, fmt.Appendf(nil, "p-%d", i)); err != nil {
			t.Fatal(err)
		}
		if err := bp.Send(ctx, "t", nil, fmt.Appendf(nil, "bp-%d", i)); err != nil {
			t.Fatal(err)
		}
		if err := bp.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		ms, err := c.Poll(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range ms {
			if m.Partition >= 2 {
				who, _, _ := strings.Cut(string(m.Value), "-")
				seen[fmt.Sprintf("%s/%d", who, m.Partition)] = true
			}
		}
	}
}

// TestPublishErrorRefreshesMetadata: with metadata that would stay cached
// for minutes, a publish failing with UNKNOWN_PARTITION makes the next
// send read it again, for Producer and BatchProducer: the partitions the
// topic got meanwhile are used.
func TestPublishErrorRefreshesMetadata(t *testing.T) {
	for _, code := range []api.Code{api.CodeUnknownPartition, api.CodeUnknownTopicID, api.CodeNotLeader} {
		t.Run(api.Catalog[code].Name, func(t *testing.T) {
			s := newFakeServer(t)
			// One topic per producer, so each meets its own failure.
			s.createTopic("tp", 2)
			s.createTopic("tb", 2)
			ctx := testCtx(t)
			cfg := ProducerConfig{Addr: s.addr, MetadataMaxAge: time.Hour, RetryBackoff: time.Millisecond}
			p, err := NewProducer(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			bp, err := NewBatchProducer(ctx, BatchProducerConfig{ProducerConfig: cfg, OnError: func(BatchError) {}})
			if err != nil {
				t.Fatal(err)
			}
			defer bp.Close()
			if _, err := p.Send(ctx, "tp", nil, []byte("first")); err != nil {
				t.Fatal(err)
			}
			if err := bp.Send(ctx, "tb", nil, []byte("first")); err != nil {
				t.Fatal(err)
			}
			if err := bp.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			for _, topic := range []string{"tp", "tb"} {
				s.growTopic(topic, 4)
				for part := range uint32(2) {
					// Whichever old partition a producer sends to
					// next, it fails there once.
					s.failPublish(topic, part, code)
				}
			}
			reached := func(topic string) bool {
				return len(s.records(topic, 2))+len(s.records(topic, 3)) > 0
			}
			deadline := time.Now().Add(15 * time.Second)
			for i := 0; !reached("tp") || !reached("tb"); i++ {
				if time.Now().After(deadline) {
					t.Fatalf("no record reached a new partition after %s (Producer %v, BatchProducer %v)", api.Catalog[code].Name, reached("tp"), reached("tb"))
				}
				_, _ = p.Send(ctx, "tp", nil, fmt.Appendf(nil, "v%d", i)) // the injected failures fail some
				if err := bp.Send(ctx, "tb", nil, fmt.Appendf(nil, "v%d", i)); err != nil {
					t.Fatal(err)
				}
				if err := bp.Flush(ctx); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// TestMetadataRefreshIsShared: after a request fails with an error that
// makes the metadata stale, concurrent callers share one metadata request;
// an error that says nothing about the metadata (THROTTLED) refreshes
// nothing.
func TestMetadataRefreshIsShared(t *testing.T) {
	errs := []error{
		api.NewError(api.CodeUnknownTopicID, "gone"),
		api.NewError(api.CodeUnknownPartition, "gone"),
		api.NewError(api.CodeUnknownTopic, "gone"),
		api.NewError(api.CodeNotLeader, "moved"),
		fmt.Errorf("publish t/1: %w", api.NewError(api.CodeUnknownPartition, "wrapped")),
	}
	for _, cause := range errs {
		t.Run(cause.Error(), func(t *testing.T) {
			s := newFakeServer(t)
			s.createTopic("t", 2)
			ctx := testCtx(t)
			p, err := NewProducer(ctx, ProducerConfig{Addr: s.addr, MetadataMaxAge: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			cl := p.core
			if tm, err := cl.topic(ctx, "t"); err != nil || tm.partitions != 2 {
				t.Fatalf("topic = %+v, %v", tm, err)
			}
			cl.noteError("t", api.NewError(api.CodeThrottled, "busy"))
			cl.noteError("t", nil)
			if _, err := cl.topic(ctx, "t"); err != nil {
				t.Fatal(err)
			}
			if n := s.count(api.Frame_Which_metadataRequest); n != 1 {
				t.Fatalf("%d metadata requests after errors that say nothing of the metadata, want 1", n)
			}

			release := make(chan struct{})
			s.setHook(func(f api.Frame) {
				if f.Which() == api.Frame_Which_metadataRequest {
					<-release
				}
			})
			s.growTopic("t", 5)
			cl.noteError("t", cause)
			tr := trace(cl)
			const callers = 8
			var wg sync.WaitGroup
			got := make([]uint32, callers)
			errs := make([]error, callers)
			for i := range callers {
				wg.Go(func() {
					tm, err := cl.topic(ctx, "t")
					got[i], errs[i] = tm.partitions, err
				})
			}
			waitFor(t, 10*time.Second, "every caller waiting", func() bool { return tr.lookups.Load() == callers })
			waitFor(t, 10*time.Second, "the refresh at the server", func() bool { return s.count(api.Frame_Which_metadataRequest) == 2 })
			close(release)
			wg.Wait()
			for i := range callers {
				if errs[i] != nil || got[i] != 5 {
					t.Fatalf("caller %d: %d partitions, %v; want 5", i, got[i], errs[i])
				}
			}
			if n := s.count(api.Frame_Which_metadataRequest); n != 2 {
				t.Fatalf("%d metadata requests, want 2 (the first and one shared refresh)", n)
			}
			if n := tr.requests.Load(); n != 1 {
				t.Fatalf("%d refresh requests through the core, want 1", n)
			}
		})
	}
}

// TestLeaderConnection: a partition whose leader the metadata names at
// another data address is published to and read from over one connection
// to that address, made on first use and shared by every partition it
// leads.
func TestLeaderConnection(t *testing.T) {
	boot := newFakeServer(t)
	lead := newFakeServer(t)
	boot.createTopic("t", 3)
	lead.createTopic("t", 3)
	boot.setLeader(leaderAddr{nodeID: "fake-2", addr: lead.addr})
	ctx := testCtx(t)
	p, err := NewProducer(ctx, ProducerConfig{Addr: boot.addr})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var msgs []ProducerMessage
	for i := range 30 {
		msgs = append(msgs, NewProducerMessage("t", fmt.Appendf(nil, "v%d", i)).WithKey(fmt.Appendf(nil, "k%d", i)))
	}
	if _, err := p.SendBatch(ctx, msgs); err != nil {
		t.Fatal(err)
	}
	total := 0
	for part := range uint32(3) {
		if n := len(boot.records("t", part)); n != 0 {
			t.Fatalf("%d records on the bootstrap node's partition %d, want 0", n, part)
		}
		total += len(lead.records("t", part))
	}
	if total != len(msgs) {
		t.Fatalf("%d records on the leader, want %d", total, len(msgs))
	}
	p.core.mu.Lock()
	conns := len(p.core.conns)
	p.core.mu.Unlock()
	if conns != 1 {
		t.Fatalf("%d connections besides the bootstrap one, want 1 (one per broker)", conns)
	}

	c, err := NewConsumer(ctx, ConsumerConfig{Addr: boot.addr, Topic: "t", MaxWait: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := len(pollN(t, c, len(msgs))); got != len(msgs) {
		t.Fatalf("consumer read %d records from the leader, want %d", got, len(msgs))
	}
	if n := boot.count(api.Frame_Which_subscribeRequest) + boot.count(api.Frame_Which_fetchRequest); n != 0 {
		t.Fatalf("%d reads sent to the bootstrap node, want 0", n)
	}
}

// TestCoreClosed: after close, a lookup that needs the server fails with
// ErrClosed instead of starting a request.
func TestCoreClosed(t *testing.T) {
	s := newFakeServer(t)
	s.createTopic("t", 1)
	ctx := testCtx(t)
	p, err := NewProducer(ctx, ProducerConfig{Addr: s.addr})
	if err != nil {
		t.Fatal(err)
	}
	p.Close()
	if _, err := p.core.topic(ctx, "t"); !errors.Is(err, ErrClosed) {
		t.Fatalf("topic after close: %v, want ErrClosed", err)
	}
	if _, err := p.Send(ctx, "t", nil, []byte("x")); !errors.Is(err, ErrClosed) {
		t.Fatalf("Send after close: %v, want ErrClosed", err)
	}
}

// TestMetadataChangeReachesEveryEntryType: a topic that gets more
// partitions, grown in place (CreatePartitions, KIP-195) or deleted and
// created again, is picked up by every entry type on a real node: the
// three producers reach the new partitions once their metadata is older
// than MetadataMaxAge (or an error says it is stale), and both consumers
// without a group read what lands there.
func TestMetadataChangeReachesEveryEntryType(t *testing.T) {
	for _, change := range []string{"grown", "recreated"} {
		t.Run(change, func(t *testing.T) { testMetadataChange(t, change) })
	}
}

func testMetadataChange(t *testing.T, change string) {
	n := startFaultyNode(t)
	ctx := testCtx(t)
	admin, err := NewAdmin(AdminConfig{GrpcConfig: GrpcConfig{Addr: n.grpcAddr}})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if _, err := admin.CreateTopic(ctx, "t", 2, TopicConfig{}); err != nil {
		t.Fatal(err)
	}
	const age = 20 * time.Millisecond
	p, err := NewProducer(ctx, ProducerConfig{Addr: n.capnpAddr, MetadataMaxAge: age})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	bp, err := NewBatchProducer(ctx, BatchProducerConfig{ProducerConfig: ProducerConfig{Addr: n.capnpAddr, MetadataMaxAge: age}, OnError: func(BatchError) {}})
	if err != nil {
		t.Fatal(err)
	}
	defer bp.Close()
	gp, err := NewGrpcProducer(GrpcProducerConfig{GrpcConfig: GrpcConfig{Addr: n.grpcAddr}, MetadataMaxAge: age})
	if err != nil {
		t.Fatal(err)
	}
	defer gp.Close()
	c, err := NewConsumer(ctx, ConsumerConfig{Addr: n.capnpAddr, Topic: "t", MaxWait: 20 * time.Millisecond, MetadataMaxAge: age})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	gc, err := NewGrpcConsumer(ctx, GrpcConsumerConfig{GrpcConfig: GrpcConfig{Addr: n.grpcAddr}, Topic: "t", MaxWait: 20 * time.Millisecond, MetadataMaxAge: age})
	if err != nil {
		t.Fatal(err)
	}
	defer gc.Close()
	switch change {
	case "grown":
		if _, err := admin.CreatePartitions(ctx, "t", 4); err != nil {
			t.Fatal(err)
		}
	case "recreated":
		if err := admin.DeleteTopic(ctx, "t"); err != nil {
			t.Fatal(err)
		}
		if _, err := admin.CreateTopic(ctx, "t", 4, TopicConfig{}); err != nil {
			t.Fatal(err)
		}
	}

	seen := map[string]map[string]bool{"consumer": {}, "grpc-consumer": {}} // consumer -> "<producer>/<partition>"
	note := func(who string, ms []Message) {
		for _, m := range ms {
			if m.Partition >= 2 {
				prod, _, _ := strings.Cut(string(m.Value), "-")
				seen[who][fmt.Sprintf("%s/%d", prod, m.Partition)] = true
			}
		}
	}
	done := func() bool {
		for _, s := range seen {
			for _, prod := range []string{"p", "bp", "gp"} {
				if !s[prod+"/2"] || !s[prod+"/3"] {
					return false
				}
			}
		}
		return true
	}
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; !done(); i++ {
		if time.Now().After(deadline) {
			t.Fatalf("%s topic: its new partitions not reached or not read: %v", change, seen)
		}
		// Sends right after the delete may fail (UNKNOWN_TOPIC); the
		// loop goes on until the new partitions are reached.
		_, _ = p.Send(ctx, "t", nil, fmt.Appendf(nil, "p-%d", i))
		_ = bp.Send(ctx, "t", nil, fmt.Appendf(nil, "bp-%d", i))
		_, _ = gp.Send(ctx, "t", nil, fmt.Appendf(nil, "gp-%d", i))
		if err := bp.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		ms, _ := c.Poll(ctx)
		note("consumer", ms)
		ms, _ = gc.Poll(ctx)
		note("grpc-consumer", ms)
	}
}

// TestConsumerMetadataMaxAgeValidated: a negative MetadataMaxAge is
// refused, naming the field.
func TestConsumerMetadataMaxAgeValidated(t *testing.T) {
	err := ConsumerConfig{Topic: "t", MetadataMaxAge: -time.Second}.Validate()
	if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "MetadataMaxAge") {
		t.Fatalf("Validate = %v, want ErrInvalidConfig naming MetadataMaxAge", err)
	}
	if _, err := NewConsumer(context.Background(), ConsumerConfig{Topic: "t", MetadataMaxAge: -1}); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("NewConsumer = %v, want ErrInvalidConfig", err)
	}
}

// countingSource is a metadataSource whose topic has partitions
// partitions; it counts its requests.
type countingSource struct {
	partitions atomic.Uint32
	requests   atomic.Int64
}

func (s *countingSource) topicMetadata(ctx context.Context, topic string) (topicMeta, error) {
	s.requests.Add(1)
	return topicMeta{partitions: s.partitions.Load()}, nil
}

// TestCachedLookupSeesEveryChange: the lock-free answer of the last cache
// hit never outlives a change of its topic: after invalidate (an error
// that says the metadata is wrong) the lookup misses, and after the
// refresh it answers the new partition count; another topic's lookup does
// not serve this one's answer.
func TestCachedLookupSeesEveryChange(t *testing.T) {
	src := &countingSource{}
	src.partitions.Store(2)
	cl := newCluster(src, nil, time.Hour, nil)
	defer cl.close()
	ctx := testCtx(t)
	for _, topic := range []string{"a", "b"} {
		if _, err := cl.topic(ctx, topic); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Now()
	for range 2 { // the second lookup is served by the hot answer
		if tm, ok := cl.cachedAt("a", now); !ok || tm.partitions != 2 {
			t.Fatalf("cachedAt(a) = %+v, %v; want 2 partitions", tm, ok)
		}
	}
	src.partitions.Store(5)
	if tm, ok := cl.cachedAt("b", now); !ok || tm.partitions != 2 {
		t.Fatalf("cachedAt(b) = %+v, %v; want its own entry, 2 partitions", tm, ok)
	}
	cl.cachedAt("a", now) // a is the hot answer again
	cl.noteError("a", api.NewError(api.CodeUnknownPartition, "no partition 4"))
	if tm, ok := cl.cachedAt("a", now); ok {
		t.Fatalf("cachedAt(a) after UNKNOWN_PARTITION = %+v, want a miss", tm)
	}
	if tm, err := cl.topic(ctx, "a"); err != nil || tm.partitions != 5 {
		t.Fatalf("topic(a) = %+v, %v; want the refreshed 5 partitions", tm, err)
	}
	if tm, ok := cl.cachedAt("a", time.Now()); !ok || tm.partitions != 5 {
		t.Fatalf("cachedAt(a) after the refresh = %+v, %v; want 5 partitions", tm, ok)
	}
	if tm, ok := cl.cachedAt("a", time.Now().Add(2*time.Hour)); ok {
		t.Fatalf("cachedAt(a) past MetadataMaxAge = %+v, want a miss", tm)
	}
}
