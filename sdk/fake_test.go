package sdk

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"capnproto.org/go/capnp/v3"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/api/batch"
)

// fakeServer is an in-memory SQ data-plane server for the SDK's tests. It
// answers every request in its own goroutine, so responses can leave in any
// order. Its state survives stop/start, so a test can restart it on the same
// port.
type fakeServer struct {
	t      testing.TB
	limits Limits

	mu                sync.Mutex
	addr              string
	ln                net.Listener
	conns             map[net.Conn]struct{}
	stopped           chan struct{}
	topics            map[string]*fakeTopic
	groups            map[string]map[topicPartition]uint64
	failures          map[topicPartition][]api.Code // injected publish errors, in order
	hook              func(api.Frame)               // called before each request is handled
	changed           chan struct{}                 // closed and replaced on every append
	requests          map[api.Frame_Which]int
	inFlight, maxSeen int             // requests being handled at once
	rejectHandshake   api.Code        // answer handshakes with this error
	errorResponseFor  api.Frame_Which // answer these requests with errorResponse
	oorWithoutRange   bool            // OFFSET_OUT_OF_RANGE without the valid range
	endSubscriptions  bool            // end each subscription at once, without error
	// leader, when set, is stated in metadata responses as the node
	// (nodeId, dataAddress) that leads every partition.
	leader leaderAddr
	// cluster, when set, makes this server one node of a fake cluster
	// (fakecluster_test.go): it answers for the partitions it leads only.
	cluster *fakeCluster
	idem    fakeIdem // replication and idempotence (fakeidem_test.go)
	wg      sync.WaitGroup
}

type fakeTopic struct {
	cfg   TopicConfig
	parts []*fakePartition
}

type fakePartition struct {
	batches  [][]byte
	logStart uint64
	next     uint64
}

func newFakeServer(t testing.TB) *fakeServer {
	return newFakeNode(t, "fake-1", nil)
}

// newFakeNode is newFakeServer for node id of cluster fc (nil: none).
func newFakeNode(t testing.TB, id string, fc *fakeCluster) *fakeServer {
	s := &fakeServer{
		t:       t,
		cluster: fc,
		// Version 1: the fake predates publishBatches.
		limits: Limits{MaxRecordBytes: 1 << 10, MaxBatchBytes: 16 << 10, MaxFrameBytes: 64 << 10, MaxInFlight: 16,
			ProtocolVersion: api.MinProtocolVersion, ServerVersion: "fake", NodeID: id},
		topics:   map[string]*fakeTopic{},
		groups:   map[string]map[topicPartition]uint64{},
		failures: map[topicPartition][]api.Code{},
		changed:  make(chan struct{}),
		requests: map[api.Frame_Which]int{},
	}
	s.start("127.0.0.1:0")
	t.Cleanup(s.stop)
	return s
}

func (s *fakeServer) start(addr string) {
	var ln net.Listener
	var err error
	deadline := time.Now().Add(5 * time.Second)
	for {
		ln, err = net.Listen("tcp", addr)
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond) // the port may linger briefly after a stop
	}
	if err != nil {
		s.t.Fatalf("fake server listen: %v", err)
	}
	s.mu.Lock()
	s.ln = ln
	s.addr = ln.Addr().String()
	s.conns = map[net.Conn]struct{}{}
	s.stopped = make(chan struct{})
	s.mu.Unlock()
	s.wg.Add(1)
	go s.accept(ln)
}

// stop closes the listener and every connection and waits for all
// goroutines. The stored data is kept.
func (s *fakeServer) stop() {
	s.mu.Lock()
	if s.ln == nil {
		s.mu.Unlock()
		return
	}
	s.ln.Close()
	s.ln = nil
	close(s.stopped)
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// restart stops the server and starts it again on the same address.
func (s *fakeServer) restart() {
	s.stop()
	s.start(s.addr)
}

func (s *fakeServer) accept(ln net.Listener) {
	defer s.wg.Done()
	for {
		nc, err := ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		if s.ln != ln {
			s.mu.Unlock()
			nc.Close()
			return
		}
		s.conns[nc] = struct{}{}
		stopped := s.stopped
		s.mu.Unlock()
		s.wg.Add(1)
		go s.serve(nc, stopped)
	}
}

func (s *fakeServer) serve(nc net.Conn, stopped chan struct{}) {
	defer s.wg.Done()
	defer nc.Close()
	var wmu sync.Mutex
	var reqs sync.WaitGroup
	defer reqs.Wait()
	fr := api.NewFrameReader(nc, s.limits.MaxFrameBytes, s.limits.MaxBatchBytes)
	chains := fakeChains{}
	for {
		_, f, err := fr.ReadFrame()
		if err != nil {
			return
		}
		tail, err := fr.ReadTail(api.TailLength(f), nil)
		if err != nil {
			return
		}
		s.mu.Lock()
		s.requests[f.Which()]++
		hook := s.hook
		s.mu.Unlock()
		link := chains.link(f)
		reqs.Add(1)
		go func() {
			defer reqs.Done()
			s.mu.Lock()
			s.inFlight++
			s.maxSeen = max(s.maxSeen, s.inFlight)
			s.mu.Unlock()
			if hook != nil {
				hook(f)
			}
			link.wait()
			msg, rtail := s.handle(f, tail, stopped, link)
			link.finish()
			s.mu.Lock()
			s.inFlight-- // answered: the client may send the next request
			s.mu.Unlock()
			if msg == nil {
				return
			}
			wmu.Lock()
			defer wmu.Unlock()
			if err := api.WriteFrame(nc, msg, rtail...); err != nil {
				nc.Close()
			}
		}()
	}
}

func (s *fakeServer) count(w api.Frame_Which) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests[w]
}

func (s *fakeServer) setHook(h func(api.Frame)) {
	s.mu.Lock()
	s.hook = h
	s.mu.Unlock()
}

// failPublish makes the next publishes to tp fail with codes, in order.
func (s *fakeServer) failPublish(topic string, partition uint32, codes ...api.Code) {
	s.mu.Lock()
	tp := topicPartition{topic, partition}
	s.failures[tp] = append(s.failures[tp], codes...)
	s.mu.Unlock()
}

func (s *fakeServer) createTopic(name string, partitions int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := &fakeTopic{cfg: TopicConfig{SyncPolicy: "every-batch", SegmentBytes: 1 << 30, RetentionBytes: -1, RetentionMs: -1}}
	for range partitions {
		t.parts = append(t.parts, &fakePartition{})
	}
	s.topics[name] = t
}

// growTopic adds partitions to topic in place, up to partitions in all;
// the existing ones keep their records.
func (s *fakeServer) growTopic(name string, partitions int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.topics[name]
	for len(t.parts) < partitions {
		t.parts = append(t.parts, &fakePartition{})
	}
}

// setLeader makes metadata responses name b as every partition's leader.
func (s *fakeServer) setLeader(b leaderAddr) {
	s.mu.Lock()
	s.leader = b
	s.mu.Unlock()
}

// truncate drops the batches entirely below offset, as retention would.
func (s *fakeServer) truncate(topic string, partition uint32, offset uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.topics[topic].parts[partition]
	for len(p.batches) > 0 {
		h, _ := batch.ParseHeader(p.batches[0])
		if h.NextOffset() > offset {
			break
		}
		p.batches = p.batches[1:]
		p.logStart = h.NextOffset()
	}
}

// append stores a batch as the engine would; it returns the base offset.
func (s *fakeServer) appendBatch(topic string, partition uint32, b []byte) (uint64, error) {
	if _, err := batch.Validate(b, batch.Limits{MaxRecordBytes: int(s.limits.MaxRecordBytes), MaxBatchBytes: int(s.limits.MaxBatchBytes)}); err != nil {
		if errors.Is(err, batch.ErrTooLarge) {
			return 0, api.NewError(api.CodeMessageTooLarge, "%v", err)
		}
		return 0, api.NewError(api.CodeCorruptBatch, "%v", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.topics[topic]
	if !ok {
		return 0, api.NewError(api.CodeUnknownTopic, "no topic %q", topic)
	}
	if int(partition) >= len(t.parts) {
		return 0, api.NewError(api.CodeUnknownPartition, "no partition %d", partition)
	}
	tp := topicPartition{topic, partition}
	if codes := s.failures[tp]; len(codes) > 0 {
		s.failures[tp] = codes[1:]
		return 0, api.NewError(codes[0], "injected")
	}
	if err := s.nthFailure(tp); err != nil {
		return 0, err
	}
	p := t.parts[partition]
	h, _ := batch.ParseHeader(b)
	if base, dup, err := s.checkSequence(tp, h); err != nil || dup {
		if dup {
			if s.idem.dups == nil {
				s.idem.dups = map[topicPartition]int{}
			}
			s.idem.dups[tp]++
		}
		return base, err
	}
	cp := append([]byte(nil), b...)
	batch.SetBaseOffset(cp, p.next)
	base := p.next
	p.next += uint64(h.RecordCount)
	p.batches = append(p.batches, cp)
	s.noteSequence(tp, h, base)
	close(s.changed)
	s.changed = make(chan struct{})
	return base, nil
}

// records returns every stored record of a partition as "key=value" strings.
func (s *fakeServer) records(topic string, partition uint32) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, b := range s.topics[topic].parts[partition].batches {
		it, err := batch.NewIter(b)
		if err != nil {
			s.t.Fatal(err)
		}
		for it.Next() {
			r := it.Record()
			out = append(out, fmt.Sprintf("%d:%s=%s", r.Offset, r.Key, r.Value))
		}
	}
	return out
}

// fetch returns the batches at or above offset up to maxBytes (at least
// one), waiting up to wait for data.
func (s *fakeServer) fetch(topic string, partition uint32, offset uint64, maxBytes uint32, wait time.Duration, stopped chan struct{}) (hw, logStart uint64, out [][]byte, err error) {
	deadline := time.Now().Add(wait)
	for {
		s.mu.Lock()
		t, ok := s.topics[topic]
		if !ok {
			s.mu.Unlock()
			return 0, 0, nil, api.NewError(api.CodeUnknownTopic, "no topic %q", topic)
		}
		if int(partition) >= len(t.parts) {
			s.mu.Unlock()
			return 0, 0, nil, api.NewError(api.CodeUnknownPartition, "no partition %d", partition)
		}
		p := t.parts[partition]
		hw, logStart = p.next, p.logStart
		if offset < p.logStart || offset > p.next {
			s.mu.Unlock()
			if s.oorWithoutRange {
				return hw, logStart, nil, api.NewError(api.CodeOffsetOutOfRange, "offset %d out of range", offset)
			}
			return hw, logStart, nil, api.NewRangeError(api.CodeOffsetOutOfRange, p.logStart, p.next, "offset %d outside [%d, %d]", offset, p.logStart, p.next)
		}
		size := 0
		for _, b := range p.batches {
			h, _ := batch.ParseHeader(b)
			if h.NextOffset() <= offset {
				continue
			}
			if len(out) > 0 && size+len(b) > int(maxBytes) {
				break
			}
			out = append(out, b)
			size += len(b)
		}
		changed := s.changed
		s.mu.Unlock()
		if len(out) > 0 || !time.Now().Before(deadline) {
			return hw, logStart, out, nil
		}
		t2 := time.NewTimer(time.Until(deadline))
		select {
		case <-changed:
		case <-t2.C:
		case <-stopped:
		}
		t2.Stop()
		select {
		case <-stopped:
			return hw, logStart, nil, nil
		default:
		}
	}
}

// newResponse returns a frame message with the request's correlation id.
func newResponse(req api.Frame) (*capnp.Message, api.Frame) {
	msg, f, err := api.NewFrameMessage(req.CorrelationId())
	if err != nil {
		panic(err)
	}
	return msg, f
}

func setErr(newErr func() (api.WireError, error), err error) {
	if err == nil {
		return
	}
	w, e := newErr()
	if e != nil {
		panic(e)
	}
	if e := api.ToWire(w, err); e != nil {
		panic(e)
	}
}

// fakeLink orders the publishes of one connection to one partition as the
// real server does: each is appended after the previous one, and a chained
// publish whose predecessor failed fails with the same error, unwritten.
type fakeLink struct {
	prev     *fakeLink
	chained  bool
	done     chan struct{}
	err      error // the publish's outcome, set before done is closed
	chainErr error // set by wait: the predecessor's error, for a chained publish
}

// fakeChains is a connection's last publish link per partition; only the
// connection's reader uses it.
type fakeChains map[topicPartition]*fakeLink

// link returns the link of a publish frame (nil for other frames).
func (c fakeChains) link(f api.Frame) *fakeLink {
	if f.Which() != api.Frame_Which_publishRequest {
		return nil
	}
	pr, _ := f.PublishRequest()
	topic, _ := pr.Topic()
	tp := topicPartition{topic, pr.Partition()}
	l := &fakeLink{prev: c[tp], chained: pr.Chained(), done: make(chan struct{})}
	c[tp] = l
	return l
}

func (l *fakeLink) wait() {
	if l == nil || l.prev == nil {
		return
	}
	<-l.prev.done
	if l.chained {
		l.chainErr = l.prev.err
	}
	l.prev = nil
}

func (l *fakeLink) finish() {
	if l != nil {
		close(l.done)
	}
}
