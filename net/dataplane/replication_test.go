package dataplane

import (
	"bytes"
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/engine"
)

// replBroker is a memBroker that leads its partitions at one leader epoch
// and serves replica fetches (ReplicaBroker) and producer ids
// (ProducerIDBroker). Every topic's id is id.
type replBroker struct {
	*memBroker
	id    api.TopicID
	epoch uint32
	// epochs answers EndOffsetForEpoch: epoch -> (epoch, end offset).
	epochs map[uint32][2]uint64

	mu      sync.Mutex
	fetches []engine.ReplicaFetch // every replica fetch served
	nextPID int64
	// acks records the Acks of each append's context.
	acks []engine.Acks
	// replicas, when > 0, is the Replicas of every append's result, with
	// DurabilityReplicated.
	replicas int32
}

func newReplBroker() *replBroker {
	return &replBroker{
		memBroker: newMemBroker(),
		id:        api.TopicID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16},
		epoch:     5,
		epochs:    map[uint32][2]uint64{3: {3, 2}, 4: {3, 2}, 5: {5, 0}},
		nextPID:   1000,
	}
}

func (b *replBroker) Append(ctx context.Context, topic string, partition int, buf []byte) (engine.AppendResult, error) {
	b.mu.Lock()
	b.acks = append(b.acks, engine.AcksFrom(ctx))
	replicas := b.replicas
	b.mu.Unlock()
	res, err := b.memBroker.Append(ctx, topic, partition, buf)
	if err == nil && replicas > 0 {
		res.Replicas, res.Durability = replicas, engine.DurabilityReplicated
	}
	return res, err
}

func (b *replBroker) FetchReplica(ctx context.Context, r engine.ReplicaFetch) (*engine.FetchResult, error) {
	b.mu.Lock()
	b.fetches = append(b.fetches, r)
	b.mu.Unlock()
	switch {
	case r.TopicID != b.id:
		return nil, api.NewError(api.CodeUnknownTopicID, "topic id %s is not %s", r.TopicID, b.id)
	case r.LeaderEpoch < b.epoch:
		return nil, api.NewError(api.CodeFencedLeaderEpoch, "epoch %d older than %d", r.LeaderEpoch, b.epoch)
	case r.LeaderEpoch > b.epoch:
		return nil, api.NewError(api.CodeUnknownLeaderEpoch, "epoch %d newer than %d", r.LeaderEpoch, b.epoch)
	}
	res, err := b.memBroker.Fetch(ctx, r.Topic, r.Partition, r.FetchOffset, r.MaxBytes, r.MaxWait)
	if err != nil {
		return nil, err
	}
	res.LeaderEpoch = b.epoch
	res.LogStartOffset = 0
	return res, nil
}

func (b *replBroker) EndOffsetForEpoch(_ context.Context, topic string, id api.TopicID, partition int, epoch uint32) (uint32, uint64, error) {
	if id != b.id {
		return 0, 0, api.NewError(api.CodeUnknownTopicID, "topic id %s is not %s", id, b.id)
	}
	e, ok := b.epochs[epoch]
	if !ok {
		return 0, 0, api.NewError(api.CodeUnknownLeaderEpoch, "no epoch at or below %d", epoch)
	}
	if e[0] == uint64(b.epoch) {
		b.memBroker.mu.Lock()
		p, err := b.memBroker.partition(topic, partition)
		if err == nil {
			e[1] = p.next
		}
		b.memBroker.mu.Unlock()
		if err != nil {
			return 0, 0, err
		}
	}
	return uint32(e[0]), e[1], nil
}

func (b *replBroker) InitProducerID(context.Context) (int64, int16, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.nextPID++
	return b.nextPID, 0, nil
}

func (b *replBroker) lastFetch() engine.ReplicaFetch {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.fetches[len(b.fetches)-1]
}

var (
	_ ReplicaBroker    = (*replBroker)(nil)
	_ ProducerIDBroker = (*replBroker)(nil)
)

// dialReplica connects a ReplicaClient as node "f1" and closes it when the
// test ends.
func dialReplica(t *testing.T, addr string) *ReplicaClient {
	t.Helper()
	rc, err := Dial(context.Background(), addr, "f1", ReplicaClientOptions{})
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(func() { rc.Close() })
	return rc
}

func wantCode(t *testing.T, what string, err error, code api.Code) {
	t.Helper()
	var e *api.Error
	if !errors.As(err, &e) || e.Code != code {
		t.Fatalf("%s: error %v, want %v", what, err, code.Entry().Name)
	}
}

// A follower's fetch returns the leader's batches byte for byte, split on
// batch boundaries, with the leader's high watermark and epoch, and tells
// the leader the follower's id and offsets.
func TestReplicaClientFetch(t *testing.T) {
	b := newReplBroker()
	if _, err := b.CreateTopic("t", 2, engine.TopicConfig{}); err != nil {
		t.Fatal(err)
	}
	var stored [][]byte
	for _, v := range []string{"a", "bb", "ccc"} {
		bb := buildBatch(t, []byte(v), []byte(v+v))
		if _, err := b.Append(context.Background(), "t", 1, bb); err != nil {
			t.Fatal(err)
		}
		stored = append(stored, bb)
	}
	h := startServer(t, b, Options{})
	rc := dialReplica(t, h.addr)
	ctx := context.Background()

	res, err := rc.FetchReplica(ctx, engine.ReplicaFetch{
		Topic: "t", TopicID: b.id, Partition: 1, FollowerID: "f1", LeaderEpoch: 5,
		FetchOffset: 0, DurableOffset: 0, MaxBytes: 1 << 20,
	})
	if err != nil {
		t.Fatalf("FetchReplica: %v", err)
	}
	if res.HighWatermark != 6 || res.LeaderEpoch != 5 || len(res.Batches) != 3 {
		t.Fatalf("result: hw %d epoch %d, %d batches; want 6, 5, 3", res.HighWatermark, res.LeaderEpoch, len(res.Batches))
	}
	for i, bb := range res.Batches {
		if !bytes.Equal(bb, stored[i]) {
			t.Fatalf("batch %d differs from the stored one", i)
		}
		if cap(bb) != len(bb) {
			t.Errorf("batch %d: capacity %d beyond its length %d", i, cap(bb), len(bb))
		}
	}

	res, err = rc.FetchReplica(ctx, engine.ReplicaFetch{
		Topic: "t", TopicID: b.id, Partition: 1, FollowerID: "f1", LeaderEpoch: 5,
		FetchOffset: 4, DurableOffset: 2, MaxBytes: 1,
	})
	if err != nil {
		t.Fatalf("FetchReplica from 4: %v", err)
	}
	if len(res.Batches) != 1 || !bytes.Equal(res.Batches[0], stored[2]) {
		t.Fatalf("from 4 with maxBytes 1: %d batches, want the last one whole", len(res.Batches))
	}
	got := b.lastFetch()
	want := engine.ReplicaFetch{Topic: "t", TopicID: b.id, Partition: 1, FollowerID: "f1", LeaderEpoch: 5,
		FetchOffset: 4, DurableOffset: 2, MaxBytes: 1}
	if got != want {
		t.Fatalf("broker saw %+v, want %+v", got, want)
	}

	_, err = rc.FetchReplica(ctx, engine.ReplicaFetch{Topic: "t", TopicID: b.id, Partition: 1, FollowerID: "f1", LeaderEpoch: 4})
	wantCode(t, "stale epoch", err, api.CodeFencedLeaderEpoch)
	_, err = rc.FetchReplica(ctx, engine.ReplicaFetch{Topic: "t", TopicID: api.TopicID{9}, Partition: 1, FollowerID: "f1", LeaderEpoch: 5})
	wantCode(t, "other topic id", err, api.CodeUnknownTopicID)
	_, err = rc.FetchReplica(ctx, engine.ReplicaFetch{Topic: "t", Partition: 1, FollowerID: "f1", LeaderEpoch: 5})
	wantCode(t, "no topic id", err, api.CodeInvalidRequest)
	_, err = rc.FetchReplica(ctx, engine.ReplicaFetch{Topic: "t", TopicID: b.id, Partition: 1, FollowerID: "f1", LeaderEpoch: 5, FetchOffset: 7})
	wantCode(t, "beyond the log end", err, api.CodeOffsetOutOfRange)

	// An empty partition: no batch, no error.
	res, err = rc.FetchReplica(ctx, engine.ReplicaFetch{Topic: "t", TopicID: b.id, Partition: 0, FollowerID: "f1", LeaderEpoch: 5})
	if err != nil || len(res.Batches) != 0 || res.HighWatermark != 0 {
		t.Fatalf("empty partition: %+v, %v", res, err)
	}
}

// EndOffsetForEpoch carries the leader's answer and its errors.
func TestReplicaClientEndOffsetForEpoch(t *testing.T) {
	b := newReplBroker()
	if _, err := b.CreateTopic("t", 1, engine.TopicConfig{}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Append(context.Background(), "t", 0, buildBatch(t, []byte("x"))); err != nil {
		t.Fatal(err)
	}
	h := startServer(t, b, Options{})
	rc := dialReplica(t, h.addr)
	ctx := context.Background()
	for _, tc := range []struct {
		ask, epoch uint32
		end        uint64
	}{{4, 3, 2}, {3, 3, 2}, {5, 5, 1}} {
		e, end, err := rc.EndOffsetForEpoch(ctx, "t", b.id, 0, tc.ask)
		if err != nil || e != tc.epoch || end != tc.end {
			t.Errorf("epoch %d: (%d, %d, %v), want (%d, %d)", tc.ask, e, end, err, tc.epoch, tc.end)
		}
	}
	_, _, err := rc.EndOffsetForEpoch(ctx, "t", b.id, 0, 1)
	wantCode(t, "epoch 1", err, api.CodeUnknownLeaderEpoch)
	_, _, err = rc.EndOffsetForEpoch(ctx, "t", api.TopicID{}, 0, 5)
	wantCode(t, "no topic id", err, api.CodeInvalidRequest)
}

// Calls share the connection concurrently; a long poll does not hold up
// the others, and it returns the batch appended while it waits.
func TestReplicaClientConcurrentCalls(t *testing.T) {
	b := newReplBroker()
	if _, err := b.CreateTopic("t", 1, engine.TopicConfig{}); err != nil {
		t.Fatal(err)
	}
	h := startServer(t, b, Options{})
	rc := dialReplica(t, h.addr)
	ctx := context.Background()

	poll := make(chan error, 1)
	var polled ReplicaFetchResult
	go func() {
		var err error
		polled, err = rc.FetchReplica(ctx, engine.ReplicaFetch{Topic: "t", TopicID: b.id, FollowerID: "f1", LeaderEpoch: 5, MaxWait: 20 * time.Second})
		poll <- err
	}()
	var wg sync.WaitGroup
	errs := make(chan error, 40)
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if i%2 == 0 {
				if _, _, err := rc.EndOffsetForEpoch(ctx, "t", b.id, 0, 3); err != nil {
					errs <- err
				}
				return
			}
			if _, err := rc.FetchReplica(ctx, engine.ReplicaFetch{Topic: "t", TopicID: b.id, FollowerID: "f1", LeaderEpoch: 3}); err == nil {
				errs <- errors.New("stale epoch fetch succeeded")
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	select {
	case err := <-poll:
		t.Fatalf("long poll returned before any append: %v", err)
	default:
	}
	bb := buildBatch(t, []byte("late"))
	if _, err := b.Append(ctx, "t", 0, bb); err != nil {
		t.Fatal(err)
	}
	if err := <-poll; err != nil {
		t.Fatalf("long poll: %v", err)
	}
	if len(polled.Batches) != 1 || !bytes.Equal(polled.Batches[0], bb) {
		t.Fatalf("long poll: %d batches, want the one appended", len(polled.Batches))
	}
}

// A context that ends abandons the call, not the connection; a closed
// connection fails every call with ErrReplicaClientBroken.
func TestReplicaClientDeadlineAndBrokenConnection(t *testing.T) {
	b := newReplBroker()
	if _, err := b.CreateTopic("t", 1, engine.TopicConfig{}); err != nil {
		t.Fatal(err)
	}
	h := startServer(t, b, Options{})
	rc := dialReplica(t, h.addr)

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	_, err := rc.FetchReplica(ctx, engine.ReplicaFetch{Topic: "t", TopicID: b.id, FollowerID: "f1", LeaderEpoch: 5, MaxWait: 20 * time.Second})
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("long poll past the deadline: %v, want DeadlineExceeded", err)
	}
	if _, _, err := rc.EndOffsetForEpoch(context.Background(), "t", b.id, 0, 5); err != nil {
		t.Fatalf("after an abandoned call: %v", err)
	}

	// The server goes away: the pending long poll and later calls fail.
	poll := make(chan error, 1)
	go func() {
		_, err := rc.FetchReplica(context.Background(), engine.ReplicaFetch{Topic: "t", TopicID: b.id, FollowerID: "f1", LeaderEpoch: 5, MaxWait: 20 * time.Second})
		poll <- err
	}()
	waitFor(t, "the long poll in the broker", func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return len(b.fetches) >= 2
	})
	h.srv.Close()
	// A server closing ends the long poll: it answers it first (empty, or
	// SHUTTING_DOWN) or drops the connection.
	if err := <-poll; err != nil && !errors.Is(err, ErrReplicaClientBroken) {
		var e *api.Error
		if !errors.As(err, &e) || e.Code != api.CodeShuttingDown {
			t.Fatalf("long poll when the server closed: %v", err)
		}
	}
	select {
	case <-rc.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("client not broken 10 s after the server closed")
	}
	if _, _, err := rc.EndOffsetForEpoch(context.Background(), "t", b.id, 0, 5); !errors.Is(err, ErrReplicaClientBroken) {
		t.Fatalf("call on a broken connection: %v, want ErrReplicaClientBroken", err)
	}
	if !errors.Is(rc.Err(), ErrReplicaClientBroken) {
		t.Fatalf("Err() = %v", rc.Err())
	}
}

// Dial fails within its context when nothing answers the handshake.
func TestReplicaClientDialTimeout(t *testing.T) {
	ln := silentListener(t)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := Dial(ctx, ln, "f1", ReplicaClientOptions{}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Dial to a silent peer: %v, want DeadlineExceeded", err)
	}
}

// A server whose broker does not replicate answers the replica frames and
// initProducerId with INVALID_REQUEST saying why.
func TestReplicaFramesWithoutReplication(t *testing.T) {
	b := newMemBroker()
	if _, err := b.CreateTopic("t", 1, engine.TopicConfig{}); err != nil {
		t.Fatal(err)
	}
	h := startServer(t, b, Options{})
	rc := dialReplica(t, h.addr)
	_, err := rc.FetchReplica(context.Background(), engine.ReplicaFetch{Topic: "t", TopicID: api.TopicID{1}, FollowerID: "f1"})
	wantCode(t, "replicaFetch", err, api.CodeInvalidRequest)
	if !strings.Contains(err.Error(), "does not replicate") {
		t.Errorf("replicaFetch error %q does not say why", err)
	}
	_, _, err = rc.EndOffsetForEpoch(context.Background(), "t", api.TopicID{1}, 0, 1)
	wantCode(t, "offsetForLeaderEpoch", err, api.CodeInvalidRequest)

	c, _ := connect(t, h.addr)
	r := c.call(initProducerIDReq, nil)
	expectWhich(t, r, api.Frame_Which_initProducerIdResponse)
	p, _ := r.f.InitProducerIdResponse()
	if code := wireErr(p.Error()); code != api.CodeInvalidRequest {
		t.Fatalf("initProducerId: code %v, want INVALID_REQUEST", code)
	}
}

func initProducerIDReq(f api.Frame) error {
	_, err := f.NewInitProducerIdRequest()
	return err
}

// initProducerId returns a fresh id each time.
func TestInitProducerID(t *testing.T) {
	h := startServer(t, newReplBroker(), Options{})
	c, _ := connect(t, h.addr)
	var last int64
	for i := range 2 {
		r := c.call(initProducerIDReq, nil)
		expectWhich(t, r, api.Frame_Which_initProducerIdResponse)
		p, _ := r.f.InitProducerIdResponse()
		if err := api.FromWire(mustWire(p.Error())); err != nil {
			t.Fatal(err)
		}
		if p.ProducerId() <= last || p.ProducerEpoch() != 0 {
			t.Fatalf("call %d: id %d epoch %d after %d", i, p.ProducerId(), p.ProducerEpoch(), last)
		}
		last = p.ProducerId()
	}
}

func publishAcksReq(topic string, n int, acks api.Acks) func(api.Frame) error {
	return func(f api.Frame) error {
		r, err := f.NewPublishRequest()
		if err != nil {
			return err
		}
		r.SetRecordsLength(uint32(n))
		r.SetAcks(acks)
		return r.SetTopic(topic)
	}
}

// A publish passes its acks to the broker and reports the result's
// replicas and durability; a result without Replicas reads as 1.
func TestPublishAcksAndReplicas(t *testing.T) {
	b := newReplBroker()
	if _, err := b.CreateTopic("t", 1, engine.TopicConfig{}); err != nil {
		t.Fatal(err)
	}
	h := startServer(t, b, Options{})
	c, _ := connect(t, h.addr)
	bb := buildBatch(t, []byte("v"))

	publish := func(acks api.Acks) api.PublishResponse {
		t.Helper()
		r := c.call(publishAcksReq("t", len(bb), acks), bb)
		expectWhich(t, r, api.Frame_Which_publishResponse)
		p, _ := r.f.PublishResponse()
		return p
	}
	p := publish(api.Acks_leader)
	if err := api.FromWire(mustWire(p.Error())); err != nil || p.Replicas() != 1 || p.Durability() != api.Durability_written {
		t.Fatalf("acks leader: replicas %d durability %v err %v; want 1, written", p.Replicas(), p.Durability(), err)
	}
	b.mu.Lock()
	b.replicas = 3
	b.mu.Unlock()
	p = publish(api.Acks_all)
	if err := api.FromWire(mustWire(p.Error())); err != nil || p.Replicas() != 3 || p.Durability() != api.Durability_replicated {
		t.Fatalf("acks all: replicas %d durability %v err %v; want 3, replicated", p.Replicas(), p.Durability(), err)
	}
	b.mu.Lock()
	got := append([]engine.Acks(nil), b.acks...)
	b.mu.Unlock()
	if len(got) != 2 || got[0] != engine.AcksLeader || got[1] != engine.AcksAll {
		t.Fatalf("broker saw acks %v, want [leader all]", got)
	}

	p = publish(api.Acks(7))
	if code := wireErr(p.Error()); code != api.CodeInvalidRequest {
		t.Fatalf("acks 7: code %v, want INVALID_REQUEST", code)
	}
	if len(b.acks) != 2 {
		t.Fatalf("a publish with unknown acks reached the broker")
	}
}

// The engine's publish path also receives the acks (AppendAsync), and a
// topic's min.insync.replicas and unclean.leader.election.enable travel in
// create and describe.
func TestEngineTopicReplicationSettings(t *testing.T) {
	eng := openEngine(t)
	h := startServer(t, eng, Options{})
	c, _ := connect(t, h.addr)
	r := c.call(func(f api.Frame) error {
		q, err := f.NewCreateTopicRequest()
		if err != nil {
			return err
		}
		q.SetPartitions(1)
		cfg, err := q.NewConfig()
		if err != nil {
			return err
		}
		cfg.SetMinInsyncReplicas(1)
		cfg.SetUncleanLeaderElection(true)
		return q.SetName("t")
	}, nil)
	expectWhich(t, r, api.Frame_Which_createTopicResponse)
	ct, _ := r.f.CreateTopicResponse()
	if err := api.FromWire(mustWire(ct.Error())); err != nil {
		t.Fatal(err)
	}
	r = c.call(describeTopicReq("t"), nil)
	expectWhich(t, r, api.Frame_Which_describeTopicResponse)
	dt, _ := r.f.DescribeTopicResponse()
	ti, _ := dt.Topic()
	cfg, _ := ti.Config()
	if cfg.MinInsyncReplicas() != 1 || !cfg.UncleanLeaderElection() {
		t.Fatalf("describe: min.insync.replicas %d unclean %v; want 1, true", cfg.MinInsyncReplicas(), cfg.UncleanLeaderElection())
	}
	bb := buildBatch(t, []byte("v"))
	r = c.call(publishAcksReq("t", len(bb), api.Acks_leader), bb)
	p, _ := r.f.PublishResponse()
	if err := api.FromWire(mustWire(p.Error())); err != nil || p.Replicas() != 1 {
		t.Fatalf("publish to the engine: replicas %d, %v", p.Replicas(), err)
	}
}

// silentListener accepts connections and never answers; it returns its
// address. Its connections are closed when the test ends.
func silentListener(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
	})
	return ln.Addr().String()
}

// A ReplicaClient keeps at most the leader's maxInFlight requests
// outstanding: a call beyond waits for a slot within its context, and gets
// one once a long poll returns.
func TestReplicaClientInFlightLimit(t *testing.T) {
	b := newReplBroker()
	if _, err := b.CreateTopic("t", 1, engine.TopicConfig{}); err != nil {
		t.Fatal(err)
	}
	h := startServer(t, b, Options{MaxInFlightPerConn: 2})
	rc := dialReplica(t, h.addr)
	polls := make(chan error, 2)
	for range 2 {
		go func() {
			_, err := rc.FetchReplica(context.Background(), engine.ReplicaFetch{Topic: "t", TopicID: b.id, FollowerID: "f1", LeaderEpoch: 5, MaxWait: 20 * time.Second})
			polls <- err
		}()
	}
	waitFor(t, "two long polls in the broker", func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return len(b.fetches) == 2
	})
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	_, _, err := rc.EndOffsetForEpoch(ctx, "t", b.id, 0, 5)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("third call with two long polls outstanding: %v, want DeadlineExceeded waiting for a slot", err)
	}
	if rc.Err() != nil {
		t.Fatalf("a call that never got a slot broke the connection: %v", rc.Err())
	}
	if _, err := b.Append(context.Background(), "t", 0, buildBatch(t, []byte("x"))); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := <-polls; err != nil {
			t.Fatalf("long poll: %v", err)
		}
	}
	if _, _, err := rc.EndOffsetForEpoch(context.Background(), "t", b.id, 0, 5); err != nil {
		t.Fatalf("after the long polls returned: %v", err)
	}
}
