package sdk

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seedqueue/sq/api"
)

// cluster is the client core every entry type is built on
// (docs/architecture.md, "Client core"): the one metadata cache (topic
// name and topic id -> partition count -> each partition's leader), the
// one connection per broker data-plane address, and the one placement
// function (Partitioner for keyed records, sticky round-robin for
// keyless ones). Producer, BatchProducer and Consumer build it on a
// Cap'n Proto Client, GrpcProducer and GrpcConsumer on an Admin: only the
// metadataSource differs.
//
// A cached topic is read again when it is older than maxAge, or at the
// next lookup after a request for it failed with UNKNOWN_TOPIC,
// UNKNOWN_TOPIC_ID, UNKNOWN_PARTITION, NOT_LEADER (unless it named the
// leader: route.go), LEADER_NOT_AVAILABLE or NO_QUORUM (noteError). One
// metadata request per topic is in flight at a time: callers that need
// the topic meanwhile wait for that request's answer.
type cluster struct {
	src         metadataSource
	maxAge      time.Duration
	partitioner Partitioner
	// bootstrap is the connection to the configured address (nil on the
	// gRPC plane); a leader on the same node uses it.
	bootstrap *Client

	closeCtx context.Context // cancelled by close: ends metadata requests
	cancel   context.CancelFunc
	wg       sync.WaitGroup // metadata requests in flight

	mu     sync.RWMutex // read-locked by the lookups that hit the cache
	topics map[string]*topicEntry
	byID   map[api.TopicID]string
	conns  map[string]*Client // broker data address -> connection, besides bootstrap
	rr     map[string]uint32  // next keyless partition per topic
	// brokers is the latest node id -> plane address map a metadata
	// answer listed, to resolve a NOT_LEADER hint that names only a node.
	brokers map[string]string

	// hot is the answer of the last lookup that hit the cache, read without
	// the lock by the next lookup of the same topic (BatchProducer.Send
	// looks the topic up for every record); cleared, under mu, whenever
	// that topic's entry changes.
	hot atomic.Pointer[hotTopic]

	// avail holds the leaders whose connection failed lately, which
	// keyless placement avoids (available.go).
	avail availability

	trace atomic.Pointer[coreTrace] // nil outside tests
}

// hotTopic is an entry's answer as of its last read from the server,
// never changed once made.
type hotTopic struct {
	name    string
	meta    topicMeta
	fetched time.Time
}

// coreTrace counts what goes through the core, for tests that check
// every entry type uses it.
type coreTrace struct {
	lookups    atomic.Int64 // topic and refresh calls
	requests   atomic.Int64 // metadata requests sent
	placements atomic.Int64 // place calls
}

// metadataSource reads one topic's metadata from a server: its id,
// partition count and, where the plane states them, the partitions'
// leaders. A topic that does not exist is an api.ErrUnknownTopic error.
type metadataSource interface {
	topicMetadata(ctx context.Context, topic string) (topicMeta, error)
}

// leaderAddr names the broker that serves a partition: its node id and
// its address on the core's plane (data plane for the Cap'n Proto entry
// types, gRPC for the gRPC ones), with the leader epoch the metadata
// stated. An empty addr is the bootstrap connection. hinted marks a
// leader taken from a NOT_LEADER answer (route.go): newer than epoch, so
// metadata stating epoch or older does not replace it.
type leaderAddr struct {
	nodeID string
	addr   string
	epoch  uint32
	hinted bool
}

// topicMeta is what the core knows of one topic.
type topicMeta struct {
	id         api.TopicID
	partitions uint32
	// leaders holds each partition's leader; shorter (nil on the gRPC
	// plane) means the bootstrap connection for the partitions beyond.
	leaders []leaderAddr
	// maxRecord is the topic's max.record.bytes (TopicConfig.MaxRecordBytes),
	// 0 when the metadata does not state it.
	maxRecord int
	// brokers maps the node ids the metadata listed to their addresses on
	// the core's plane ("" for the bootstrap node); nil when it listed
	// none (a server that predates clustering).
	brokers map[string]string
}

// leader returns partition p's leader (the zero leaderAddr when unknown).
func (m topicMeta) leader(p uint32) leaderAddr {
	if int(p) < len(m.leaders) {
		return m.leaders[p]
	}
	return leaderAddr{}
}

type topicEntry struct {
	meta    topicMeta
	fetched time.Time
	hot     *hotTopic // meta and fetched, for cluster.hot
	valid   bool
	stale   bool        // read again at the next lookup
	flight  *metaFlight // the request in flight, nil when none
}

// metaFlight is one metadata request shared by every caller waiting for
// it: done is closed once meta and err are set.
type metaFlight struct {
	done chan struct{}
	meta topicMeta
	err  error
}

// newCluster returns a core reading metadata from src. bootstrap may be
// nil (gRPC plane); the core closes it in close.
func newCluster(src metadataSource, bootstrap *Client, maxAge time.Duration, partitioner Partitioner) *cluster {
	if maxAge <= 0 {
		maxAge = DefaultMetadataMaxAge
	}
	if partitioner == nil {
		partitioner = HashPartitioner{}
	}
	cl := &cluster{src: src, maxAge: maxAge, partitioner: partitioner, bootstrap: bootstrap,
		topics: map[string]*topicEntry{}, byID: map[api.TopicID]string{}, conns: map[string]*Client{}, rr: map[string]uint32{}}
	cl.closeCtx, cl.cancel = context.WithCancel(context.Background())
	return cl
}

// close ends the metadata requests in flight and closes every connection,
// the bootstrap one included.
func (cl *cluster) close() error {
	cl.cancel()
	cl.wg.Wait()
	cl.mu.Lock()
	conns := cl.conns
	cl.conns = map[string]*Client{}
	cl.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
	if cl.bootstrap != nil {
		return cl.bootstrap.Close()
	}
	return nil
}

// topic returns topic's metadata: from the cache while it is younger than
// maxAge and not marked stale, else from the metadata request in flight
// for it, started if there is none. The request outlives ctx (the other
// callers may still wait for it); ctx bounds only this caller's wait.
func (cl *cluster) topic(ctx context.Context, name string) (topicMeta, error) {
	if m, ok := cl.cached(name); ok {
		return m, nil
	}
	cl.mu.Lock()
	f := cl.flightLocked(name, cl.topics[name])
	cl.mu.Unlock()
	return cl.await(ctx, f)
}

// cached returns topic's metadata when the cache holds it younger than
// maxAge and not marked stale; topic reads it otherwise.
func (cl *cluster) cached(name string) (topicMeta, bool) {
	return cl.cachedAt(name, time.Now())
}

// cachedAt is cached for a caller that has read the clock already: the
// lookup of every BatchProducer.Send.
func (cl *cluster) cachedAt(name string, now time.Time) (topicMeta, bool) {
	if t := cl.trace.Load(); t != nil {
		t.lookups.Add(1)
	}
	if h := cl.hot.Load(); h != nil && h.name == name && now.Sub(h.fetched) < cl.maxAge {
		return h.meta, true
	}
	cl.mu.RLock()
	defer cl.mu.RUnlock()
	e := cl.topics[name]
	if e != nil && e.valid && !e.stale && now.Sub(e.fetched) < cl.maxAge {
		cl.hot.Store(e.hot) // under the read lock: no change of e meanwhile
		return e.meta, true
	}
	return topicMeta{}, false
}

// lastKnown returns topic's last metadata read from the server, however
// old or stale: what a producer places records with while no node
// answers a metadata request (leaderGone), as cluster.leader routes with.
func (cl *cluster) lastKnown(topic string) (topicMeta, bool) {
	cl.mu.RLock()
	defer cl.mu.RUnlock()
	if e := cl.topics[topic]; e != nil && e.valid {
		return e.meta, true
	}
	return topicMeta{}, false
}

// coolLocked clears cl.hot when it holds topic's answer; cl.mu held for
// writing.
func (cl *cluster) coolLocked(topic string) {
	if h := cl.hot.Load(); h != nil && h.name == topic {
		cl.hot.Store(nil)
	}
}

// refresh returns topic's metadata read from the server now (or by the
// request already in flight for it).
func (cl *cluster) refresh(ctx context.Context, name string) (topicMeta, error) {
	if t := cl.trace.Load(); t != nil {
		t.lookups.Add(1)
	}
	cl.mu.Lock()
	f := cl.flightLocked(name, cl.topics[name])
	cl.mu.Unlock()
	return cl.await(ctx, f)
}

func (cl *cluster) await(ctx context.Context, f *metaFlight) (topicMeta, error) {
	select {
	case <-f.done:
		return f.meta, f.err
	case <-ctx.Done():
		return topicMeta{}, ctx.Err()
	}
}

// flightLocked returns the metadata request in flight for name, starting
// one if there is none; cl.mu held. e is name's entry, nil if none.
func (cl *cluster) flightLocked(name string, e *topicEntry) *metaFlight {
	if e == nil {
		e = &topicEntry{}
		cl.topics[name] = e
	}
	if e.flight != nil {
		return e.flight
	}
	f := &metaFlight{done: make(chan struct{})}
	e.flight = f
	if cl.closeCtx.Err() != nil {
		e.flight = nil
		f.err = ErrClosed
		close(f.done)
		return f
	}
	cl.wg.Add(1)
	go cl.fetch(name, e, f)
	return f
}

// fetch sends the metadata request of flight f and stores its answer.
func (cl *cluster) fetch(name string, e *topicEntry, f *metaFlight) {
	defer cl.wg.Done()
	if t := cl.trace.Load(); t != nil {
		t.requests.Add(1)
	}
	m, err := cl.src.topicMetadata(cl.closeCtx, name)
	if err == nil && m.partitions == 0 {
		err = fmt.Errorf("sdk: topic %q has no partitions", name)
	}
	if err != nil && cl.closeCtx.Err() != nil {
		err = ErrClosed
	}
	cl.mu.Lock()
	e.flight = nil
	switch {
	case err == nil:
		if e.valid && e.meta.id != m.id {
			delete(cl.byID, e.meta.id)
		} else if e.valid {
			m.leaders = mergeLeaders(e.meta.leaders, m.leaders)
		}
		if m.brokers != nil {
			cl.brokers = m.brokers
		}
		e.meta, e.fetched, e.valid, e.stale = m, time.Now(), true, false
		e.hot = &hotTopic{name: name, meta: m, fetched: e.fetched}
		cl.coolLocked(name)
		if !m.id.IsZero() {
			cl.byID[m.id] = name
		}
	case errors.Is(err, api.ErrUnknownTopic):
		// Gone: forget it, and its id.
		if e.valid {
			delete(cl.byID, e.meta.id)
		}
		if cl.topics[name] == e {
			delete(cl.topics, name)
		}
		cl.coolLocked(name)
	}
	cl.mu.Unlock()
	f.meta, f.err = m, err
	close(f.done)
}

// topicByID returns the name of the cached topic with id, if any.
func (cl *cluster) topicByID(id api.TopicID) (string, bool) {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	name, ok := cl.byID[id]
	return name, ok
}

// refreshes reports whether err, from a request about a topic, means the
// cached metadata of that topic is wrong or may be: the topic, its id or
// the partition is unknown to the server, the server no longer leads the
// partition, the partition's leader is not alive (LEADER_NOT_AVAILABLE:
// the cluster may move it) or the cluster's metadata cannot change
// (NO_QUORUM).
func refreshes(err error) bool {
	return errors.Is(err, api.ErrUnknownTopic) || errors.Is(err, api.ErrUnknownTopicID) ||
		errors.Is(err, api.ErrUnknownPartition) || errors.Is(err, api.ErrNotLeader) ||
		errors.Is(err, api.ErrLeaderNotAvailable) || errors.Is(err, api.ErrNoQuorum)
}

// noteError marks topic's metadata stale when err says it is wrong (see
// refreshes), so the next lookup reads it again; other errors change
// nothing.
func (cl *cluster) noteError(topic string, err error) {
	if err == nil || !refreshes(err) {
		return
	}
	cl.invalidate(topic)
}

// noteProduceError is noteError for a publish: a batch the server refused
// as too large also marks the topic's metadata stale, since the record
// limit cached with it (max.record.bytes, which the topic's config may
// have lowered since) let an oversized record into the batch; read again,
// it makes the producers refuse such a record on its own.
func (cl *cluster) noteProduceError(topic string, partition uint32, err error) {
	if errors.Is(err, api.ErrMessageTooLarge) {
		cl.invalidate(topic)
		return
	}
	cl.notePartitionError(topic, partition, err)
}

// invalidate marks topic's metadata stale.
func (cl *cluster) invalidate(topic string) {
	cl.mu.Lock()
	if e := cl.topics[topic]; e != nil {
		e.stale = true
	}
	cl.coolLocked(topic)
	cl.mu.Unlock()
}

// place returns the partition of a record of topic with key, given the
// topic's metadata tm: the Partitioner's choice for a keyed record (key
// not nil); for a keyless one, sticky[topic], set first to the next
// round-robin partition whose leader is available (keyless) when absent,
// not below the partition count, or led by a leader that failed since.
// The caller owns sticky and decides how long a keyless partition
// sticks: Producer and GrpcProducer for one call, BatchProducer until the
// partition's batch closes (KIP-480).
func (cl *cluster) place(topic string, key []byte, tm topicMeta, sticky map[string]uint32) uint32 {
	if t := cl.trace.Load(); t != nil {
		t.placements.Add(1)
	}
	n := tm.partitions
	if key != nil {
		return cl.partitioner.Partition(topic, key, n) % n
	}
	s, ok := sticky[topic]
	if !ok || s >= n || cl.leaderDown(tm, s) {
		s = cl.keyless(topic, tm, n)
		sticky[topic] = s
	}
	return s
}

// leaderDown reports whether partition p's leader, as tm states it, is
// in its cool-down after a failure (available.go).
func (cl *cluster) leaderDown(tm topicMeta, p uint32) bool {
	return cl.avail.anyDownNow() && cl.avail.isDown(tm.leader(p), time.Now())
}

// keyless returns the next keyless partition of topic among n whose
// leader is available; the next one in turn when every leader is in its
// cool-down (a record may still be stored once a node returns).
func (cl *cluster) keyless(topic string, tm topicMeta, n uint32) uint32 {
	first := cl.nextKeyless(topic, n)
	if !cl.avail.anyDownNow() {
		return first
	}
	for p, i := first, uint32(0); i < n; i++ {
		if !cl.leaderDown(tm, p) {
			return p
		}
		p = cl.nextKeyless(topic, n)
	}
	return first
}

// nextKeyless returns the next keyless partition of topic: round-robin
// from a random first partition, so that many short-lived producers (one
// per CLI run, say) still spread over every partition.
func (cl *cluster) nextKeyless(topic string, n uint32) uint32 {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	v, ok := cl.rr[topic]
	if !ok {
		v = rand.Uint32()
	}
	cl.rr[topic] = v + 1
	return v % n
}

// replace returns another partition than from for keyless records of
// topic that failed on from's leader: the next one whose leader is
// available, per the cached metadata. false when there is none (every
// other leader is in its cool-down, or the topic has one partition).
func (cl *cluster) replace(topic string, from uint32) (uint32, bool) {
	cl.mu.RLock()
	e := cl.topics[topic]
	var tm topicMeta
	if e != nil && e.valid {
		tm = e.meta
	}
	cl.mu.RUnlock()
	n := tm.partitions
	if n < 2 {
		return 0, false
	}
	for range n {
		p := cl.nextKeyless(topic, n)
		if p != from && !cl.leaderDown(tm, p) {
			return p, true
		}
	}
	return 0, false
}

// noteLeaderGone marks partition's leader, as the cache knows it,
// unavailable for leaderCooldown and the topic's metadata stale: err
// says the leader could not be reached or is shutting down (leaderGone),
// so the cluster may have moved its partitions, or is about to.
func (cl *cluster) noteLeaderGone(topic string, partition uint32) {
	cl.mu.RLock()
	var b leaderAddr
	if e := cl.topics[topic]; e != nil && e.valid {
		b = e.meta.leader(partition)
	}
	cl.mu.RUnlock()
	cl.avail.markDown(b, time.Now())
	cl.invalidate(topic)
}

// noteDelivered ends the cool-down of partition's leader: a request to it
// succeeded.
func (cl *cluster) noteDelivered(topic string, partition uint32) {
	if !cl.avail.anyDownNow() {
		return
	}
	cl.mu.RLock()
	var b leaderAddr
	if e := cl.topics[topic]; e != nil && e.valid {
		b = e.meta.leader(partition)
	}
	cl.mu.RUnlock()
	cl.avail.markUp(b)
}

// leaderName returns the address requests about partition go to: the
// leader's address on the core's plane, or the bootstrap's (Addr) when
// it is the bootstrap node or unknown; for error messages.
func (cl *cluster) leaderName(topic string, partition uint32, bootAddr string) string {
	cl.mu.RLock()
	defer cl.mu.RUnlock()
	if e := cl.topics[topic]; e != nil && e.valid {
		if b := e.meta.leader(partition); b.addr != "" {
			return b.addr
		}
	}
	return bootAddr
}

// client returns the connection to partition's leader (leader): the
// bootstrap connection when the leader is unknown or is the bootstrap
// node, else the one connection to the leader's data address, made on
// first use (it dials at its first request).
func (cl *cluster) client(ctx context.Context, topic string, partition uint32) *Client {
	b := cl.leader(ctx, topic, partition)
	cl.mu.Lock()
	defer cl.mu.Unlock()
	return cl.clientLocked(b)
}

// clientLocked returns the connection to b; cl.mu held.
func (cl *cluster) clientLocked(b leaderAddr) *Client {
	boot := cl.bootstrap
	if b.addr == "" || b.addr == boot.cfg.Addr || (b.nodeID != "" && b.nodeID == boot.Limits().NodeID) {
		return boot
	}
	c := cl.conns[b.addr]
	if c == nil {
		cfg := boot.cfg
		cfg.Addr = b.addr
		c = newClient(cfg)
		if cl.closeCtx.Err() != nil {
			c.Close()
		}
		cl.conns[b.addr] = c
	}
	return c
}

// newCapnpCluster returns the core of a Cap'n Proto entry type, reading
// metadata from bootstrap, or from the other brokers it knows while
// bootstrap cannot be reached.
func newCapnpCluster(bootstrap *Client, maxAge time.Duration, partitioner Partitioner) *cluster {
	src := &capnpMetadata{c: bootstrap}
	cl := newCluster(src, bootstrap, maxAge, partitioner)
	src.others = cl.brokerClients
	return cl
}

// brokerClients returns the connections to the brokers of the latest
// metadata answer other than the bootstrap node, made on first use.
func (cl *cluster) brokerClients() []*Client {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	var out []*Client
	for id, addr := range cl.brokers {
		if c := cl.clientLocked(leaderAddr{nodeID: id, addr: addr}); c != cl.bootstrap {
			out = append(out, c)
		}
	}
	return out
}

// capnpMetadata reads metadata with the data plane's Metadata request:
// each partition's leader from its placement (partitionInfos) and the
// brokers list; every partition is led by the answering node (nodeId,
// dataAddress) when the answer lists no brokers (a server that predates
// clustering). When the bootstrap node cannot be reached (ErrConnection)
// it asks the other brokers it knows (others), one after the other, as
// Kafka clients ask any broker: a client keeps finding leaders while the
// node it was configured with is down.
type capnpMetadata struct {
	c      *Client
	others func() []*Client // nil: none
}

func (s *capnpMetadata) topicMetadata(ctx context.Context, topic string) (topicMeta, error) {
	md, err := s.c.Metadata(ctx, topic)
	if err != nil && errors.Is(err, ErrConnection) && s.others != nil {
		for _, c := range s.others() {
			if omd, oerr := c.Metadata(ctx, topic); oerr == nil {
				md, err = omd, nil
				break
			}
		}
	}
	if err != nil {
		return topicMeta{}, err
	}
	for _, t := range md.Topics {
		if t.Name == topic {
			self := leaderAddr{nodeID: md.NodeID, addr: md.DataAddress}
			return placement(t, self, md.Brokers, func(n api.Node) string { return n.DataAddr }), nil
		}
	}
	return topicMeta{}, api.NewError(api.CodeUnknownTopic, "topic %q does not exist", topic)
}

// grpcMetadata reads metadata with the control plane's DescribeTopic
// (each partition's leader and epoch) and Members (each node's gRPC
// address). The node that answered is the bootstrap connection; a server
// whose Members fails or lists no one makes it lead every partition.
type grpcMetadata struct{ a *Admin }

func (s grpcMetadata) topicMetadata(ctx context.Context, topic string) (topicMeta, error) {
	ti, err := s.a.DescribeTopic(ctx, topic)
	if err != nil {
		return topicMeta{}, err
	}
	members, err := s.a.Members(ctx)
	if err != nil && ctx.Err() != nil {
		return topicMeta{}, err
	}
	var brokers []api.Node
	for _, m := range members {
		n := api.Node{ID: m.NodeID, DataAddr: m.CapnpAddr, GRPCAddr: m.GrpcAddr, Alive: m.State == "alive"}
		if m.Self {
			n.GRPCAddr = "" // the bootstrap connection
		}
		brokers = append(brokers, n)
	}
	return placement(ti, leaderAddr{}, brokers, func(n api.Node) string { return n.GRPCAddr }), nil
}
