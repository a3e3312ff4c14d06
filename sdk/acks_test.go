package sdk

import (
	"errors"
	"testing"
	"time"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/api/batch"
	"github.com/seedqueue/sq/api/sqv1"
)

// TestProducerAcksOnTheWire: a Producer's publishes carry its Acks
// (AcksAll when unset), and the Ack reports what the leader answered: a
// leader with three in-sync replicas answers acks all with durability
// replicated and 3 replicas, acks leader with synced and 1.
func TestProducerAcksOnTheWire(t *testing.T) {
	for _, tc := range []struct {
		name     string
		acks     Acks
		wire     api.Acks
		dur      Durability
		replicas uint32
	}{
		{"default", AcksAll, api.Acks_all, DurabilityReplicated, 3},
		{"leader", AcksLeader, api.Acks_leader, DurabilitySynced, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newFakeServer(t)
			s.createTopic("t", 1)
			s.setReplicas(3)
			sent := make(chan api.Acks, 4)
			s.setHook(func(f api.Frame) {
				if f.Which() == api.Frame_Which_publishRequest {
					pr, _ := f.PublishRequest()
					sent <- pr.Acks()
				}
			})
			p := newTestProducer(t, s, func(c *ProducerConfig) { c.Acks = tc.acks })
			a, err := p.Send(testCtx(t), "t", nil, []byte("v"))
			if err != nil {
				t.Fatal(err)
			}
			if got := <-sent; got != tc.wire {
				t.Errorf("publish sent acks %v, want %v", got, tc.wire)
			}
			if a.Durability != tc.dur || a.Replicas != tc.replicas {
				t.Errorf("Ack durability %v, replicas %d; want %v, %d", a.Durability, a.Replicas, tc.dur, tc.replicas)
			}
		})
	}
}

// TestAckReplicasFromAnOldServer: a server that predates replication
// answers no replicas count; the Ack says 1.
func TestAckReplicasFromAnOldServer(t *testing.T) {
	s := newFakeServer(t)
	s.createTopic("t", 1)
	p := newTestProducer(t, s)
	a, err := p.Send(testCtx(t), "t", nil, []byte("v"))
	if err != nil {
		t.Fatal(err)
	}
	if a.Replicas != 1 || a.Durability != DurabilitySynced {
		t.Errorf("Ack replicas %d durability %v, want 1 synced", a.Replicas, a.Durability)
	}
}

// TestBatchProducerAckReplicas: OnAck reports the replicas and the
// replicated durability of an acks-all batch.
func TestBatchProducerAckReplicas(t *testing.T) {
	s := newFakeServer(t)
	s.createTopic("t", 1)
	s.setReplicas(2)
	got := make(chan BatchAck, 1)
	bp, err := NewBatchProducer(testCtx(t), BatchProducerConfig{
		ProducerConfig: ProducerConfig{Addr: s.addr},
		OnAck:          func(a BatchAck) { got <- a },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer bp.Close()
	if err := bp.Send(testCtx(t), "t", nil, []byte("v")); err != nil {
		t.Fatal(err)
	}
	if err := bp.Flush(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	a := <-got
	if a.Durability != DurabilityReplicated || a.Replicas != 2 {
		t.Errorf("BatchAck durability %v replicas %d, want replicated 2", a.Durability, a.Replicas)
	}
}

// TestNotEnoughReplicasIsRetried: NOT_ENOUGH_REPLICAS (the in-sync set
// below min.insync.replicas) is retried like the other retriable codes,
// and the record is stored once the set recovers; with RetriesNone it is
// the record's error.
func TestNotEnoughReplicasIsRetried(t *testing.T) {
	s := newFakeServer(t)
	s.createTopic("t", 1)
	s.failPublish("t", 0, api.CodeNotEnoughReplicas, api.CodeNotEnoughReplicas)
	p := newTestProducer(t, s)
	if _, err := p.Send(testCtx(t), "t", nil, []byte("a")); err != nil {
		t.Fatalf("Send after two NOT_ENOUGH_REPLICAS: %v", err)
	}
	if got := s.records("t", 0); len(got) != 1 {
		t.Fatalf("stored %v, want the one record", got)
	}
	s.failPublish("t", 0, api.CodeNotEnoughReplicas)
	once := newTestProducer(t, s, func(c *ProducerConfig) { c.Retries = RetriesNone })
	if _, err := once.Send(testCtx(t), "t", nil, []byte("b")); !errors.Is(err, api.ErrNotEnoughReplicas) {
		t.Fatalf("Send with RetriesNone: %v, want NOT_ENOUGH_REPLICAS", err)
	}
}

// TestProducerConfigRefusesUnknownAcks: Validate names the field.
func TestProducerConfigRefusesUnknownAcks(t *testing.T) {
	if err := (ProducerConfig{Acks: 7}).Validate(); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("ProducerConfig{Acks: 7}.Validate() = %v, want ErrInvalidConfig", err)
	}
	if err := (GrpcProducerConfig{Acks: 2}).Validate(); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("GrpcProducerConfig{Acks: 2}.Validate() = %v, want ErrInvalidConfig", err)
	}
	for _, s := range []string{"all", "leader"} {
		a, err := ParseAcks(s)
		if err != nil || a.String() != s {
			t.Errorf("ParseAcks(%q) = %v, %v", s, a, err)
		}
	}
	if _, err := ParseAcks("1"); err == nil {
		t.Error(`ParseAcks("1") succeeded`)
	}
}

// TestGrpcProducerAcks: a GrpcProducer's Publish carries its Acks, and the
// Ack reports the durability and replicas of the answer.
func TestGrpcProducerAcks(t *testing.T) {
	fc := newFakeGrpcCluster(t, 1, "t", 1)
	ctx := testCtx(t)
	for _, tc := range []struct {
		acks     Acks
		wire     sqv1.Acks
		dur      Durability
		replicas uint32
	}{
		{AcksAll, sqv1.Acks_ACKS_ALL, DurabilityReplicated, 3},
		{AcksLeader, sqv1.Acks_ACKS_LEADER, DurabilitySynced, 1},
	} {
		p, err := NewGrpcProducer(GrpcProducerConfig{GrpcConfig: GrpcConfig{Addr: fc.nodes[0].addr}, Acks: tc.acks,
			RetryBackoff: time.Millisecond, RetryBackoffMax: 10 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		a, err := p.Send(ctx, "t", nil, []byte("v"))
		p.Close()
		if err != nil {
			t.Fatal(err)
		}
		fc.mu.Lock()
		got := fc.acks[len(fc.acks)-1]
		fc.mu.Unlock()
		if got != tc.wire {
			t.Errorf("Acks %v: Publish sent %v", tc.acks, got)
		}
		if a.Durability != tc.dur || a.Replicas != tc.replicas {
			t.Errorf("Acks %v: Ack durability %v replicas %d, want %v %d", tc.acks, a.Durability, a.Replicas, tc.dur, tc.replicas)
		}
	}
}

// TestClientPublishAcks: Client.Publish asks for acks all, PublishAcks
// for the acks given; the result carries the replicas of the answer.
func TestClientPublishAcks(t *testing.T) {
	s := newFakeServer(t)
	s.createTopic("t", 1)
	s.setReplicas(3)
	sent := make(chan api.Acks, 2)
	s.setHook(func(f api.Frame) {
		if f.Which() == api.Frame_Which_publishRequest {
			pr, _ := f.PublishRequest()
			sent <- pr.Acks()
		}
	})
	c := dialTest(t, s)
	ctx := testCtx(t)
	var b batch.Builder
	b.Add(nil, []byte("v"), nil, 0)
	data, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Publish(ctx, "t", 0, data)
	if err != nil {
		t.Fatal(err)
	}
	if got := <-sent; got != api.Acks_all || res.Replicas != 3 || res.Durability != DurabilityReplicated {
		t.Errorf("Publish: acks %v, result replicas %d durability %v; want all, 3, replicated", got, res.Replicas, res.Durability)
	}
	res, err = c.PublishAcks(ctx, "t", 0, data, AcksLeader)
	if err != nil {
		t.Fatal(err)
	}
	if got := <-sent; got != api.Acks_leader || res.Replicas != 1 {
		t.Errorf("PublishAcks(AcksLeader): acks %v, result replicas %d; want leader, 1", got, res.Replicas)
	}
}
