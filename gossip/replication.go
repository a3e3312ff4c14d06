package gossip

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/engine"
	"github.com/seedqueue/sq/engine/replica"
	"github.com/seedqueue/sq/gossip/meta"
)

// ReplicaStorage is what a Replicator needs of the node's storage: the
// replication calls of an *engine.Engine opened with
// Options.Replication, each as engine.Engine documents it.
type ReplicaStorage interface {
	BecomeLeader(topic string, id api.TopicID, partition int, epoch uint32, replicas, isr []string, minISR int) error
	BecomeFollower(topic string, id api.TopicID, partition int, epoch uint32, leader string) error
	UpdateISR(topic string, id api.TopicID, partition int, epoch uint32, isr []string, minISR int) error
	AppendReplica(ctx context.Context, topic string, id api.TopicID, partition int, batches [][]byte, leaderHW uint64) (engine.ReplicaState, error)
	TruncateTo(topic string, id api.TopicID, partition int, offset uint64) error
	TruncateFullyAndStartAt(topic string, id api.TopicID, partition int, offset uint64) error
	FollowLogStart(topic string, id api.TopicID, partition int, leaderStart uint64) (int, error)
	ReplicaState(topic string, id api.TopicID, partition int) (engine.ReplicaState, error)
	LocalEpochs(topic string, id api.TopicID, partition int) (*replica.EpochCache, error)
	ISRProposals(now time.Time) []engine.ISRProposal
}

// ReplicaFetched is a leader's answer to a replica fetch: its high
// watermark, log start offset and leader epoch, and the whole batches
// read (offsets and leader epochs as the leader set them), in offset
// order.
type ReplicaFetched struct {
	HighWatermark, LogStartOffset uint64
	LeaderEpoch                   uint32
	Batches                       [][]byte
}

// ReplicaConn is a follower's connection to a leader's data plane
// (dataplane.ReplicaClient through DialReplicaClient), safe for
// concurrent use by the fetchers of every partition that node leads.
// Errors the leader answered with are *api.Error; any other error, but
// the context's, means the connection is broken and is dialled again.
type ReplicaConn interface {
	FetchReplica(ctx context.Context, r engine.ReplicaFetch) (ReplicaFetched, error)
	EndOffsetForEpoch(ctx context.Context, topic string, id api.TopicID, partition int, epoch uint32) (uint32, uint64, error)
	Close() error
}

// Defaults of ReplicatorOptions.
const (
	// DefaultISRInterval is the period of the leader's check for in-sync
	// set changes to propose.
	DefaultISRInterval = time.Second
	// DefaultReplicaFetchMaxBytes bounds the batches of one replica fetch
	// (at least one whole batch is returned).
	DefaultReplicaFetchMaxBytes = 1 << 20
	// DefaultReplicaFetchMaxWait is how long a leader holds a replica fetch
	// that finds nothing new (the long poll).
	DefaultReplicaFetchMaxWait = 500 * time.Millisecond
	// DefaultReplicaRetryMin and DefaultReplicaRetryMax bound the pause
	// of a fetcher after a failure (doubled at each failure in a row).
	DefaultReplicaRetryMin = 50 * time.Millisecond
	DefaultReplicaRetryMax = time.Second
)

// ReplicatorOptions configure a Replicator.
type ReplicatorOptions struct {
	// NodeID is this node's id (required).
	NodeID string
	// Dial connects to the data plane of a leader at addr (required).
	Dial func(ctx context.Context, addr string) (ReplicaConn, error)
	// Logger receives the replicator's lines (default slog.Default()).
	Logger *slog.Logger
	// ISRInterval is the period of the in-sync set proposals (default
	// DefaultISRInterval); it is also the period at which role changes
	// that failed are tried again.
	ISRInterval time.Duration
	// FetchMaxBytes and FetchMaxWait shape each replica fetch (defaults
	// DefaultReplicaFetchMaxBytes, DefaultReplicaFetchMaxWait).
	FetchMaxBytes int
	FetchMaxWait  time.Duration
	// RetryMin and RetryMax bound a fetcher's pause after a failure
	// (defaults DefaultReplicaRetryMin, DefaultReplicaRetryMax).
	RetryMin, RetryMax time.Duration
	// ProposeTimeout bounds one set-isr proposal (default 10 s).
	ProposeTimeout time.Duration
	// Now is the clock of the in-sync set decisions (default time.Now).
	Now func() time.Time
}

func (o ReplicatorOptions) defaults() ReplicatorOptions {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.ISRInterval <= 0 {
		o.ISRInterval = DefaultISRInterval
	}
	if o.FetchMaxBytes <= 0 {
		o.FetchMaxBytes = DefaultReplicaFetchMaxBytes
	}
	if o.FetchMaxWait <= 0 {
		o.FetchMaxWait = DefaultReplicaFetchMaxWait
	}
	if o.RetryMin <= 0 {
		o.RetryMin = DefaultReplicaRetryMin
	}
	if o.RetryMax < o.RetryMin {
		o.RetryMax = max(DefaultReplicaRetryMax, o.RetryMin)
	}
	if o.ProposeTimeout <= 0 {
		o.ProposeTimeout = DefaultProposeTimeout
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

// Replicator keeps this node's replicas of its partitions in step with
// the metadata (docs/cluster.md "Replication"). At Start, at every
// applied metadata state (Kick, from the cluster runtime's OnApply hook)
// and every ISRInterval it compares each partition this node holds a
// replica of with the metadata:
//
//   - led by this node: the storage becomes its leader for the
//     partition's leader epoch (BecomeLeader with the replicas, the
//     committed ISR and the topic's min.insync.replicas), and a committed
//     ISR or min.insync.replicas change reaches it through UpdateISR;
//   - led by another node: the storage becomes its follower
//     (BecomeFollower) and a fetcher goroutine copies the leader's log:
//     first the KIP-101/KIP-279 truncation (ask the leader for the end of
//     its latest epoch known here, cut the divergent suffix, again until
//     nothing is cut), then replica fetches (long polls) appended with
//     AppendReplica, which also carries the leader's high watermark. A
//     fetcher stops when the partition's epoch or leader changes, the
//     topic is deleted, or the node no longer holds a replica, and backs
//     off (RetryMin doubling to RetryMax) after a failure;
//   - without a leader: the storage is fenced (BecomeFollower with no
//     leader) and nothing is fetched.
//
// There is one fetcher goroutine per followed partition; the fetchers of
// the partitions one node leads share one connection to it (ReplicaConn
// multiplexes requests). Every ISRInterval the leader's ISR changes
// (ReplicaStorage.ISRProposals: shrink followers that lag, expand caught
// up ones) are proposed as meta.OpSetISR, fenced by the leader epoch;
// whatever the outcome, the committed set is passed back with UpdateISR.
// Close stops every goroutine. Methods are safe for concurrent use.
type Replicator struct {
	store ReplicaStorage
	c     Cluster
	self  string
	opts  ReplicatorOptions
	log   *slog.Logger

	// mu serialises passes; guards roles.
	mu    sync.Mutex
	roles map[partKey]*partRole

	pool *connPoolR

	// restarting: a proposal of new leader epochs for the partitions
	// this restarted node leads is in flight (replication_restart.go);
	// guarded by mu.
	restarting bool
	// restartDone is closed when the latest proposal of restarts ends;
	// guarded by mu.
	restartDone chan struct{}
	// started is set once Start's first pass is done: OnApply passes
	// from then on.
	started atomic.Bool

	kick      chan struct{}
	stop      chan struct{}
	wg        sync.WaitGroup
	startOnce sync.Once
	closeOnce sync.Once
}

// partKey names a partition of the topic with an id.
type partKey struct {
	id        api.TopicID
	partition int
}

// partRole is what the storage was last told about one partition.
type partRole struct {
	topic    string
	epoch    uint32
	leader   string // the leader's node id ("" none)
	isr      []string
	minISR   int
	addr     string // the leader's data address, on a follower
	resync   bool   // pass the committed ISR again (after a proposal)
	fetch    *fetcher
	lastFail string // the last failure logged
}

// NewReplicator returns a Replicator of store for cluster c. Call Start
// to run it and Close to stop it.
func NewReplicator(store ReplicaStorage, c Cluster, o ReplicatorOptions) *Replicator {
	o = o.defaults()
	if o.NodeID == "" {
		o.NodeID = c.ID()
	}
	r := &Replicator{store: store, c: c, self: o.NodeID, opts: o, log: o.Logger.With("component", "replication"),
		roles: map[partKey]*partRole{}, kick: make(chan struct{}, 1), stop: make(chan struct{})}
	r.pool = &connPoolR{dial: o.Dial, conns: map[string]*pooledConn{}}
	return r
}

// Start runs a first pass (and, on a node that restarted as the leader
// of partitions, waits up to ProposeTimeout for their new leader epochs
// and passes again: replication_restart.go), then the role loop (passes
// at every Kick and every ISRInterval) and the in-sync set loop, until
// Close. Calling it again does nothing.
func (r *Replicator) Start() {
	r.startOnce.Do(func() {
		r.Sync()
		r.awaitRestarts() // replication_restart.go
		r.started.Store(true)
		r.wg.Add(2)
		go r.roleLoop()
		go r.isrLoop()
	})
}

// Kick asks for a pass against the latest metadata; it never blocks (the
// cluster runtime's OnApply hook calls it).
func (r *Replicator) Kick() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// OnApply is an OnApply hook: once Start has run, a pass against next,
// done before it returns, so that a metadata change is in the storage
// when its proposer hears it applied (a topic created on this node can
// be published to at once: its partitions are led, not waiting for the
// next pass, which would answer NOT_LEADER meanwhile). Before Start it
// does nothing: Start's first pass reads the latest state.
func (r *Replicator) OnApply(prev, next *meta.State) {
	if r.started.Load() {
		r.Sync()
	}
}

// Close stops the loops and every fetcher, waits for them and closes the
// connections to leaders. It returns nil.
func (r *Replicator) Close() error {
	r.closeOnce.Do(func() {
		close(r.stop)
		r.wg.Wait()
		r.mu.Lock()
		for k, pr := range r.roles {
			pr.stopFetch()
			delete(r.roles, k)
		}
		r.mu.Unlock()
		r.pool.close()
	})
	return nil
}

func (r *Replicator) closed() bool {
	select {
	case <-r.stop:
		return true
	default:
		return false
	}
}

func (r *Replicator) roleLoop() {
	defer r.wg.Done()
	t := time.NewTicker(r.opts.ISRInterval)
	defer t.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-r.kick:
		case <-t.C:
		}
		r.Sync()
	}
}

// Sync runs one pass against the cluster's current metadata and returns
// when the storage has been told every change (fetchers started or
// stopped). A failed step is logged and tried again at the next pass.
func (r *Replicator) Sync() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed() {
		return
	}
	s := r.c.State()
	if s == nil {
		return
	}
	seen := map[partKey]bool{}
	var restarts []meta.LeaderChange
	for _, t := range s.Topics {
		minISR := meta.MinInsync(t.Config)
		for i, p := range t.Partitions {
			if !slices.Contains(p.Replicas, r.self) {
				continue
			}
			k := partKey{t.ID, i}
			seen[k] = true
			if r.syncPartition(s, t, i, p, minISR) {
				restarts = append(restarts, meta.LeaderChange{Topic: t.Name, ID: t.ID, Partition: i, Leader: r.self, Epoch: p.LeaderEpoch, Restart: true})
			}
		}
	}
	r.proposeRestarts(restarts) // replication_restart.go
	for k, pr := range r.roles {
		if !seen[k] {
			pr.stopFetch()
			delete(r.roles, k)
		}
	}
}

// syncPartition brings the storage's role for partition i of t to the
// metadata's; r.mu is held. It reports whether the partition waits for a
// new leader epoch because this node led its epoch before it restarted
// (replication_restart.go): its replica is fenced meanwhile.
func (r *Replicator) syncPartition(s *meta.State, t *meta.Topic, i int, p meta.Partition, minISR int) (restart bool) {
	k := partKey{t.ID, i}
	pr := r.roles[k]
	if pr == nil {
		pr = &partRole{topic: t.Name, epoch: ^uint32(0)}
		r.roles[k] = pr
	}
	fail := func(what string, err error) {
		if text := what + ": " + err.Error(); text != pr.lastFail {
			pr.lastFail = text
			r.log.Warn("replication: a partition's role could not be changed; retrying", "topic", t.Name, "partition", i,
				"leader_epoch", p.LeaderEpoch, "step", what, "err", err)
		}
		pr.epoch = ^uint32(0) // try again at the next pass
	}
	switch p.Leader {
	case r.self:
		if pr.epoch == p.LeaderEpoch && pr.leader == r.self {
			if pr.resync || !slices.Equal(pr.isr, p.ISR) || pr.minISR != minISR {
				if err := r.store.UpdateISR(t.Name, t.ID, i, p.LeaderEpoch, p.ISR, minISR); err != nil {
					fail("update the in-sync set", err)
					return
				}
				pr.isr, pr.minISR, pr.resync = slices.Clone(p.ISR), minISR, false
			}
			return
		}
		pr.stopFetch()
		if r.resumesEpoch(t.Name, t.ID, i, p.LeaderEpoch) {
			if err := r.store.BecomeFollower(t.Name, t.ID, i, p.LeaderEpoch, ""); err != nil {
				fail("fence the replica until its new leader epoch", err)
				return false
			}
			*pr = partRole{topic: t.Name, epoch: p.LeaderEpoch}
			return true
		}
		if err := r.store.BecomeLeader(t.Name, t.ID, i, p.LeaderEpoch, p.Replicas, p.ISR, minISR); err != nil {
			fail("become the leader", err)
			return
		}
		*pr = partRole{topic: t.Name, epoch: p.LeaderEpoch, leader: r.self, isr: slices.Clone(p.ISR), minISR: minISR}
	default:
		addr := ""
		if p.Leader != "" {
			addr = s.Nodes[p.Leader].DataAddr
		}
		if pr.epoch == p.LeaderEpoch && pr.leader == p.Leader && pr.addr == addr {
			return
		}
		pr.stopFetch()
		if err := r.store.BecomeFollower(t.Name, t.ID, i, p.LeaderEpoch, p.Leader); err != nil {
			fail("become a follower", err)
			return
		}
		*pr = partRole{topic: t.Name, epoch: p.LeaderEpoch, leader: p.Leader, addr: addr}
		if p.Leader != "" && addr != "" {
			pr.fetch = r.startFetch(t.Name, t.ID, i, p.LeaderEpoch, p.Leader, addr)
		}
	}
	return false
}

func (pr *partRole) stopFetch() {
	if pr.fetch != nil {
		pr.fetch.stop()
		pr.fetch = nil
	}
}

// isrLoop proposes the leader's in-sync set changes every ISRInterval.
func (r *Replicator) isrLoop() {
	defer r.wg.Done()
	t := time.NewTicker(r.opts.ISRInterval)
	defer t.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-t.C:
		}
		for _, ch := range r.store.ISRProposals(r.opts.Now()) {
			if r.closed() {
				return
			}
			r.proposeISR(ch)
		}
		r.handOverCorrupt()
	}
}

// handOverCorrupt acts on the partitions whose local replica a scrub
// found damaged (engine.ReplicaState.Corrupt): a damaged replica must
// not lead, and may lack records it acknowledged. For a partition this
// node leads it proposes that the first other alive member of its ISR
// (in replica order) leads it instead; the leader change commits the next
// epoch and takes this node out of the ISR; it then follows, and the
// engine repairs its log from the new leader. A partition with no other
// alive in-sync replica keeps its leader (logged). For a partition this
// node follows while in its ISR it proposes the ISR without itself
// (leaveISR), so that no election picks it; the leader adds it back once
// it has copied the log again.
func (r *Replicator) handOverCorrupt() {
	type led struct {
		topic     string
		id        api.TopicID
		partition int
		epoch     uint32
	}
	var damaged []led
	r.mu.Lock()
	for k, pr := range r.roles {
		if pr.leader == "" || pr.epoch == ^uint32(0) {
			continue
		}
		if st, err := r.store.ReplicaState(pr.topic, k.id, k.partition); err == nil && st.Corrupt {
			damaged = append(damaged, led{pr.topic, k.id, k.partition, pr.epoch})
		}
	}
	r.mu.Unlock()
	s := r.c.State()
	for _, d := range damaged {
		t := s.Topics[d.topic]
		if t == nil || t.ID != d.id || d.partition >= len(t.Partitions) {
			continue
		}
		p := t.Partitions[d.partition]
		if p.LeaderEpoch != d.epoch {
			continue
		}
		if p.Leader != r.self {
			r.leaveISR(d.topic, d.id, d.partition, p)
			continue
		}
		next, _, ok := replica.ChooseLeader(p.Replicas, p.ISR, func(id string) bool { return id != r.self && r.c.Alive(id) }, false)
		if !ok {
			r.log.Error("replication: this node's replica of a partition it leads is damaged and no other in-sync replica is alive to take over; it keeps leading",
				"topic", d.topic, "partition", d.partition, "isr", p.ISR)
			continue
		}
		ctx, cancel := r.proposeContext()
		res, err := r.c.Propose(ctx, meta.Command{Op: meta.OpSetLeaders, Leaders: []meta.LeaderChange{{Topic: d.topic, ID: d.id, Partition: d.partition, Leader: next, Epoch: d.epoch}}})
		cancel()
		if err == nil && res.Err != nil {
			err = res.Err
		}
		if err != nil {
			r.log.Warn("replication: handing over the leadership of a damaged replica failed; retrying", "topic", d.topic, "partition", d.partition, "err", err)
			continue
		}
		r.log.Warn("replication: this node's replica is damaged: leadership handed over", "topic", d.topic, "partition", d.partition, "new_leader", next)
	}
}

// proposeContext is the context of one proposal: ProposeTimeout, ended
// early by Close.
func (r *Replicator) proposeContext() (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(context.Background(), r.opts.ProposeTimeout)
	go func() {
		select {
		case <-r.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// proposeISR commits one in-sync set change and has the next pass give
// the storage the committed set, whether the change was committed,
// refused (a newer leader epoch) or not known to be. A change whose only
// effect is to add followers in controlled shutdown is not proposed (the
// metadata would not add them: meta.OpDrainNode), so an idle partition
// does not propose it every ISRInterval until they return.
func (r *Replicator) proposeISR(ch engine.ISRProposal) {
	ctx, cancel := r.proposeContext()
	defer cancel()
	cmd := meta.Command{Op: meta.OpSetISR, Name: ch.Topic, ID: ch.ID, Partition: ch.Partition, Epoch: ch.Epoch, ISR: ch.ISR}
	var (
		res meta.Result
		err error
	)
	skip := onlyAddsShuttingDown(r.c.State(), ch)
	if !skip {
		res, err = r.c.Propose(ctx, cmd)
	}
	if err == nil && res.Err != nil {
		err = res.Err
	}
	switch {
	case skip:
		r.log.Debug("replication: a follower in controlled shutdown is not added to the in-sync set", "topic", ch.Topic, "partition", ch.Partition, "isr", ch.ISR)
	case err == nil:
		r.log.Info("replication: in-sync set changed", "topic", ch.Topic, "partition", ch.Partition, "leader_epoch", ch.Epoch, "isr", ch.ISR)
	case errors.Is(err, api.ErrFencedLeaderEpoch), errors.Is(err, context.Canceled):
		r.log.Debug("replication: in-sync set change not made", "topic", ch.Topic, "partition", ch.Partition, "isr", ch.ISR, "err", err)
	default:
		r.log.Warn("replication: in-sync set change not committed; asked again if still needed", "topic", ch.Topic, "partition", ch.Partition,
			"leader_epoch", ch.Epoch, "isr", ch.ISR, "err", err)
	}
	r.mu.Lock()
	if pr := r.roles[partKey{ch.ID, ch.Partition}]; pr != nil {
		pr.resync = true
	}
	r.mu.Unlock()
	r.Kick()
}

// leaveISR proposes that this node, a follower of partition of topic
// (p as the metadata has it) whose replica is damaged, leave the ISR: a
// set-isr at the partition's epoch with the ISR less this node, when that
// still holds the leader. Nothing is proposed when this node is not in
// the ISR.
func (r *Replicator) leaveISR(topic string, id api.TopicID, partition int, p meta.Partition) {
	if !slices.Contains(p.ISR, r.self) {
		return
	}
	var isr []string
	for _, m := range p.ISR {
		if m != r.self {
			isr = append(isr, m)
		}
	}
	if !slices.Contains(isr, p.Leader) {
		return
	}
	ctx, cancel := r.proposeContext()
	defer cancel()
	res, err := r.c.Propose(ctx, meta.Command{Op: meta.OpSetISR, Name: topic, ID: id, Partition: partition, Epoch: p.LeaderEpoch, ISR: isr})
	if err == nil && res.Err != nil {
		err = res.Err
	}
	if err != nil {
		r.log.Warn("replication: a damaged follower could not leave the in-sync set; retrying", "topic", topic, "partition", partition, "err", err)
		return
	}
	r.log.Warn("replication: this node's replica is damaged: it left the in-sync set until it has copied the log again", "topic", topic, "partition", partition, "isr", isr)
}

// onlyAddsShuttingDown reports whether in-sync set change ch, against the
// committed ISR in s, adds only nodes in controlled shutdown
// (meta.State.ShuttingDown) and removes none.
func onlyAddsShuttingDown(s *meta.State, ch engine.ISRProposal) bool {
	t := s.Topics[ch.Topic]
	if t == nil || t.ID != ch.ID || ch.Partition >= len(t.Partitions) {
		return false
	}
	cur := t.Partitions[ch.Partition].ISR
	added := false
	for _, m := range ch.ISR {
		if !slices.Contains(cur, m) {
			if !s.ShuttingDown(m) {
				return false
			}
			added = true
		}
	}
	for _, m := range cur {
		if !slices.Contains(ch.ISR, m) {
			return false
		}
	}
	return added
}
