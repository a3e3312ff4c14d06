package gossip

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/engine"
	"github.com/seedqueue/sq/gossip/meta"
	"github.com/seedqueue/sq/ring"
)

// Storage is the node-local storage a Broker serves from and the
// Reconciler keeps in step with the metadata: every method the data plane
// (net/dataplane Broker, AsyncAppender, GroupBroker, PartitionCreator)
// and the control plane (control.Engine, GroupAdmin, GroupCoordinator,
// TopicDeleter, TopicAlterer, TopicPartitioner and the health, disk and
// segment-file reporters) call or look for on their engine, plus the
// calls the cluster layer itself needs (CreateTopicSpec, ResolveConfig,
// ResolveConfigChange, SetCommitCheck). *engine.Engine implements it, and
// so does any type that embeds one (control.TracedEngine). Because a
// Broker embeds its Storage, the planes find every optional interface on
// the Broker too.
type Storage interface {
	Limits() engine.Limits
	BackendName() string
	DataDir() string
	InFlight() int64

	CreateTopic(name string, partitions int, cfg engine.TopicConfig) (engine.TopicInfo, error)
	CreateTopicSpec(spec engine.TopicSpec) (engine.TopicInfo, error)
	ResolveConfig(cfg engine.TopicConfig) (engine.TopicConfig, error)
	ResolveConfigChange(name string, cur engine.TopicConfig, change engine.TopicConfigChange) (engine.TopicConfig, error)
	DescribeTopic(name string) (engine.TopicInfo, error)
	ListTopics() []engine.TopicInfo
	DeleteTopic(name string) error
	AlterTopicConfig(name string, change engine.TopicConfigChange) (engine.TopicInfo, error)
	CreatePartitions(name string, total int) (engine.TopicInfo, error)

	Append(ctx context.Context, topic string, partition int, batch []byte) (engine.AppendResult, error)
	AppendAsync(ctx context.Context, topic string, partition int, batch []byte, after *engine.Pending) (*engine.Pending, error)
	Fetch(ctx context.Context, topic string, partition int, offset uint64, maxBytes int, maxWait time.Duration) (*engine.FetchResult, error)
	FetchID(ctx context.Context, topic string, id api.TopicID, partition int, offset uint64, maxBytes int, maxWait time.Duration) (*engine.FetchResult, error)
	ListOffsets(topic string, partition int, timestamp int64) (offset uint64, ts int64, err error)

	CommitOffsets(group, memberID string, generation int32, offsets []engine.OffsetCommit) ([]engine.OffsetCommit, error)
	FetchOffsets(group, topic string) ([]engine.OffsetCommit, error)
	SetCommitCheck(leads func(topic string, partition int) bool)
	SetTopicStats(stats func(topic string) (engine.TopicInfo, error))
	ClampOffsets(leads func(topic string, partition int) bool) int
	JoinGroup(group, memberID, clientID string, topics []string, sessionTimeout time.Duration) (engine.JoinResult, error)
	Heartbeat(group, memberID string, generation int32, owned engine.GroupAssignment) (engine.JoinResult, error)
	LeaveGroup(group, memberID string) error
	ListGroups() []engine.GroupSummary
	DescribeGroup(group string) (engine.GroupDescription, error)
	ResetOffsets(group, topic string, mode engine.ResetMode, value int64) ([]engine.OffsetCommit, error)
	DeleteGroup(group string) error

	Health() error
	FailedPartitions() error
	DiskSpace() (ring.DiskSpace, error)
	MinFreeBytes() int64
	SegmentFiles() engine.SegmentFileStats
}

var (
	_ Storage        = (*engine.Engine)(nil)
	_ ReplicaStorage = (*engine.Engine)(nil)
	_ ReplicaSource  = (*engine.Engine)(nil)
)

// Cluster is what a Broker needs from the cluster runtime (*Node
// implements it; tests use a fake).
type Cluster interface {
	// ID is this node's id.
	ID() string
	// State is the latest applied metadata (immutable; nil before the
	// first apply).
	State() *meta.State
	// Alive reports whether gossip holds the node alive or suspect.
	Alive(nodeID string) bool
	// Propose commits c through the controller and returns once it is
	// applied on this node (its OnApply reconcile done). The Broker
	// proposes commands unprepared, for the controller to complete:
	// OpCreateTopic with Topic{Name, Config, Partitions: n empty entries}
	// (no id, no creation time, ReplicationFactor 0 for the default);
	// OpCreatePartitions with Name, ID and NewPartitions of (total -
	// current count) empty entries. Errors: NO_QUORUM (retriable) and
	// ctx's error; a refused command comes back in Result.Err.
	Propose(ctx context.Context, c meta.Command) (meta.Result, error)
	// Nodes lists the registered nodes with their addresses and liveness.
	Nodes() []api.Node
	// ClusterID is the cluster's id (--cluster-id).
	ClusterID() string
	// PeerDescribe returns topic as node nodeID's storage describes it
	// (its Broker's DescribeLocal: local statistics only, never asking
	// other nodes, so that describes do not recurse between nodes).
	PeerDescribe(ctx context.Context, nodeID, topic string) (engine.TopicInfo, error)
	// PeerConn returns a gRPC connection to node nodeID, on which the
	// Broker forwards the calls of the groups that node coordinates
	// (broker_groups.go).
	PeerConn(nodeID string) (grpc.ClientConnInterface, error)
}

// BrokerOptions tune a Broker; the zero value is valid.
type BrokerOptions struct {
	// Logger receives the broker's log lines (default slog.Default()).
	Logger *slog.Logger
	// ProposeTimeout bounds a metadata change made from a call without a
	// context (topic administration): default 30 s.
	ProposeTimeout time.Duration
	// DescribeTimeout bounds the PeerDescribe calls of one DescribeTopic:
	// default 5 s.
	DescribeTimeout time.Duration
	// OffsetsTopicPartitions is the partition count the offsets topic
	// (engine.OffsetsTopic) is created with (the server's
	// --offsets-topic-num-partitions; default
	// DefaultOffsetsTopicPartitions). The count never changes once the
	// topic exists: it decides which partition holds each group.
	OffsetsTopicPartitions int
	// OffsetsTopicReplicationFactor is the offsets topic's replication
	// factor (--offsets-topic-replication-factor; default
	// DefaultOffsetsTopicReplicationFactor), lowered to the live nodes
	// when fewer.
	OffsetsTopicReplicationFactor int
}

// Broker is a Storage that serves as one node of a cluster
// (docs/cluster.md): topic administration goes through the metadata log
// (Cluster.Propose), appends, fetches and offset lookups are served only
// by the partition's leader (NOT_LEADER with the leader's address
// elsewhere, LEADER_NOT_AVAILABLE when it is not alive or there is none),
// and describes carry each partition's placement from the metadata and
// its statistics from its leader. Each consumer group has one
// coordinator node, the leader of its partition of the offsets topic
// (engine.OffsetsTopic); its calls are served there and forwarded there
// from every other node (broker_groups.go). A commit's
// offset is checked against the high watermark only for the partitions
// this node leads (engine.SetCommitCheck), and a group's lag is computed
// from each partition's leader (engine.SetTopicStats). Followers' replica
// fetches and end-offset requests (dataplane.ReplicaBroker) pass the same
// gate and the partition's leader epoch (broker_replica.go). Every other
// method is the Storage's own.
type Broker struct {
	Storage
	c    Cluster
	rec  *Reconciler
	self string
	log  *slog.Logger
	opts BrokerOptions

	idx atomic.Pointer[index]

	markMu  sync.Mutex
	marking map[markKey]*markCall

	producerIDs brokerProducerIDs // InitProducerID (producerids.go)

	offsetsMu sync.Mutex // one creation of the offsets topic at a time
}

// NewBroker returns a Broker serving s for cluster c; rec is the
// Reconciler whose OnApply hook the cluster runtime calls (the Broker
// answers LEADER_NOT_AVAILABLE for the partitions it leads of a topic rec
// could not yet create or update here). It installs the Broker's
// leadership test as s's commit check (Storage.SetCommitCheck) and its
// DescribeTopic as s's topic statistics (Storage.SetTopicStats).
func NewBroker(s Storage, c Cluster, rec *Reconciler, o BrokerOptions) *Broker {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.ProposeTimeout <= 0 {
		o.ProposeTimeout = 30 * time.Second
	}
	if o.DescribeTimeout <= 0 {
		o.DescribeTimeout = 5 * time.Second
	}
	if o.OffsetsTopicPartitions <= 0 {
		o.OffsetsTopicPartitions = DefaultOffsetsTopicPartitions
	}
	if o.OffsetsTopicReplicationFactor <= 0 {
		o.OffsetsTopicReplicationFactor = DefaultOffsetsTopicReplicationFactor
	}
	b := &Broker{Storage: s, c: c, rec: rec, self: c.ID(), log: o.Logger, opts: o, marking: map[markKey]*markCall{}}
	s.SetCommitCheck(b.leads)
	s.SetTopicStats(b.DescribeTopic)
	return b
}

// Nodes lists the cluster's nodes (the data plane's metadata brokers).
func (b *Broker) Nodes() []api.Node { return b.c.Nodes() }

// ClusterID returns the cluster's id.
func (b *Broker) ClusterID() string { return b.c.ClusterID() }

// partLeader is what the leadership gate needs of one partition.
type partLeader struct {
	leader  string // node id; "" when the partition has none
	addr    string // the leader's data-plane address
	epoch   uint32 // the leader epoch
	hasData bool
}

type topicIndex struct {
	id    api.TopicID
	parts []partLeader
}

// index is the gate's view of one State, built once per State.
type index struct {
	state  *meta.State
	topics map[string]*topicIndex
}

func buildIndex(s *meta.State) *index {
	x := &index{state: s, topics: map[string]*topicIndex{}}
	if s == nil {
		return x
	}
	for name, t := range s.Topics {
		ti := &topicIndex{id: t.ID, parts: make([]partLeader, len(t.Partitions))}
		for i, p := range t.Partitions {
			ti.parts[i] = partLeader{leader: p.Leader, addr: s.Nodes[p.Leader].DataAddr, epoch: p.LeaderEpoch, hasData: p.HasData}
		}
		x.topics[name] = ti
	}
	return x
}

// index returns the gate's index of the current State, building it when
// the State changed since the last call.
func (b *Broker) index() *index {
	s := b.c.State()
	if x := b.idx.Load(); x != nil && x.state == s {
		return x
	}
	x := buildIndex(s)
	b.idx.Store(x)
	return x
}

// leads reports whether this node leads topic/partition (true for a
// topic the metadata does not know: the engine then refuses the commit).
func (b *Broker) leads(topic string, partition int) bool {
	t := b.index().topics[topic]
	if t == nil || partition < 0 || partition >= len(t.parts) {
		return true
	}
	return t.parts[partition].leader == b.self
}

func unknownTopic(name string) error {
	if err := engine.ValidateTopicName(name); err != nil {
		return err
	}
	return api.NewError(api.CodeUnknownTopic, "topic %q does not exist", name)
}

// route is the leadership gate: nil when this node leads topic/partition
// (of the topic with id, when id is set) and can serve it; else the error
// the client gets: UNKNOWN_TOPIC, UNKNOWN_TOPIC_ID, UNKNOWN_PARTITION,
// NOT_LEADER with the leader's id and data address, or
// LEADER_NOT_AVAILABLE.
func (b *Broker) route(topic string, id api.TopicID, partition int) (*topicIndex, error) {
	t := b.index().topics[topic]
	if t == nil {
		if !id.IsZero() {
			return nil, api.NewError(api.CodeUnknownTopicID, "topic id %s is not the id of topic %q (deleted or created again): read its metadata again", id, topic)
		}
		return nil, unknownTopic(topic)
	}
	if !id.IsZero() && id != t.id {
		return nil, api.NewError(api.CodeUnknownTopicID, "topic id %s is not the id of topic %q (deleted or created again): read its metadata again", id, topic)
	}
	if partition < 0 || partition >= len(t.parts) {
		return nil, api.NewError(api.CodeUnknownPartition, "topic %q has partitions 0..%d, not %d", topic, len(t.parts)-1, partition)
	}
	p := t.parts[partition]
	switch {
	case p.leader == b.self:
		if b.rec != nil && b.rec.Pending(topic) {
			return nil, api.NewError(api.CodeLeaderNotAvailable, "%s/%d: this node leads it but has not yet created or updated the topic locally", topic, partition)
		}
		return t, nil
	case p.leader == "":
		return nil, api.NewError(api.CodeLeaderNotAvailable, "%s/%d has no leader", topic, partition)
	case !b.c.Alive(p.leader):
		return nil, api.NewError(api.CodeLeaderNotAvailable, "the leader of %s/%d, node %s, is not alive", topic, partition, p.leader)
	}
	e := api.NewError(api.CodeNotLeader, "node %s does not lead %s/%d: node %s at %s does", b.self, topic, partition, p.leader, p.addr)
	e.LeaderID, e.LeaderAddr = p.leader, p.addr
	return nil, e
}

// routeWrite is route for an append: before the first append to a
// partition that never held data it commits mark-data, so that the
// controller no longer moves its leadership (docs/cluster.md).
func (b *Broker) routeWrite(ctx context.Context, topic string, partition int) error {
	t, err := b.route(topic, api.TopicID{}, partition)
	if err != nil {
		return err
	}
	if t.parts[partition].hasData {
		return nil
	}
	return b.markData(ctx, topic, t.id, partition)
}

// Append appends batch to topic/partition when this node leads it.
func (b *Broker) Append(ctx context.Context, topic string, partition int, batch []byte) (engine.AppendResult, error) {
	if err := b.routeWrite(ctx, topic, partition); err != nil {
		return engine.AppendResult{}, err
	}
	res, err := b.Storage.Append(ctx, topic, partition, batch)
	return res, b.takingOver(topic, partition, err)
}

// AppendAsync queues batch on topic/partition when this node leads it.
func (b *Broker) AppendAsync(ctx context.Context, topic string, partition int, batch []byte, after *engine.Pending) (*engine.Pending, error) {
	if err := b.routeWrite(ctx, topic, partition); err != nil {
		return nil, err
	}
	pd, err := b.Storage.AppendAsync(ctx, topic, partition, batch, after)
	return pd, b.takingOver(topic, partition, err)
}

// takingOver turns the storage's NOT_LEADER for a partition the metadata
// says this node leads into LEADER_NOT_AVAILABLE (retriable; the client
// waits and tries again): the node is taking the leadership over (its
// replicator has not made the storage the leader yet, or it waits for a
// new leader epoch after a restart, replication_restart.go). A NOT_LEADER
// naming this node would send the client back to it at once.
func (b *Broker) takingOver(topic string, partition int, err error) error {
	if err == nil || !errors.Is(err, api.ErrNotLeader) || !b.leads(topic, partition) {
		return err
	}
	return api.NewError(api.CodeLeaderNotAvailable, "partition %s/%d: this node is taking over its leadership (%s)", topic, partition, api.AsError(err).Message)
}

// Fetch reads topic/partition when this node leads it.
func (b *Broker) Fetch(ctx context.Context, topic string, partition int, offset uint64, maxBytes int, maxWait time.Duration) (*engine.FetchResult, error) {
	if _, err := b.route(topic, api.TopicID{}, partition); err != nil {
		return nil, err
	}
	res, err := b.Storage.Fetch(ctx, topic, partition, offset, maxBytes, maxWait)
	return res, b.takingOver(topic, partition, err)
}

// FetchID reads topic/partition of the topic with id (zero: by name) when
// this node leads it.
func (b *Broker) FetchID(ctx context.Context, topic string, id api.TopicID, partition int, offset uint64, maxBytes int, maxWait time.Duration) (*engine.FetchResult, error) {
	if _, err := b.route(topic, id, partition); err != nil {
		return nil, err
	}
	res, err := b.Storage.FetchID(ctx, topic, id, partition, offset, maxBytes, maxWait)
	return res, b.takingOver(topic, partition, err)
}

// ListOffsets looks an offset up in topic/partition when this node leads
// it.
func (b *Broker) ListOffsets(topic string, partition int, timestamp int64) (uint64, int64, error) {
	if _, err := b.route(topic, api.TopicID{}, partition); err != nil {
		return 0, 0, err
	}
	return b.Storage.ListOffsets(topic, partition, timestamp)
}

type markKey struct {
	id        api.TopicID
	partition int
}

// markCall is one mark-data proposal that concurrent first appends share.
type markCall struct {
	done chan struct{}
	err  error
}

// markData commits mark-data for partition of topic (id) once for all the
// concurrent first appends that need it, and waits for it. A waiter whose
// own context is live retries when the proposer's context ended first.
func (b *Broker) markData(ctx context.Context, topic string, id api.TopicID, partition int) error {
	k := markKey{id, partition}
	for {
		b.markMu.Lock()
		c, running := b.marking[k]
		if !running {
			// Checked again under the lock: a call that just finished has
			// already published its State.
			if t := b.index().topics[topic]; t != nil && t.id == id && partition < len(t.parts) && t.parts[partition].hasData {
				b.markMu.Unlock()
				return nil
			}
			c = &markCall{done: make(chan struct{})}
			b.marking[k] = c
		}
		b.markMu.Unlock()
		if !running {
			c.err = b.proposeMark(ctx, topic, id, partition)
			b.markMu.Lock()
			delete(b.marking, k)
			b.markMu.Unlock()
			close(c.done)
			return c.err
		}
		select {
		case <-c.done:
		case <-ctx.Done():
			return ctx.Err()
		}
		if c.err == nil || ctx.Err() != nil || !(errors.Is(c.err, context.Canceled) || errors.Is(c.err, context.DeadlineExceeded)) {
			return c.err
		}
	}
}

func (b *Broker) proposeMark(ctx context.Context, topic string, id api.TopicID, partition int) error {
	ctx, cancel := context.WithTimeout(ctx, b.opts.ProposeTimeout)
	defer cancel()
	res, err := b.c.Propose(ctx, meta.Command{Op: meta.OpMarkData, Name: topic, ID: id, Partition: partition, NodeID: b.self})
	if err != nil {
		return err
	}
	if res.Err != nil {
		return res.Err
	}
	b.log.Debug("partition marked as holding data", "topic", topic, "topic_id", id, "partition", partition)
	return nil
}

// propose commits c with ProposeTimeout and returns the applied result's
// topic, or the refusal.
func (b *Broker) propose(c meta.Command) (*meta.Topic, error) {
	ctx, cancel := context.WithTimeout(context.Background(), b.opts.ProposeTimeout)
	defer cancel()
	res, err := b.c.Propose(ctx, c)
	if err != nil {
		return nil, err
	}
	if res.Err != nil {
		return nil, res.Err
	}
	return res.Topic, nil
}

// metaTopic returns topic name of the current State.
func (b *Broker) metaTopic(name string) (*meta.Topic, error) {
	s := b.index().state
	if s == nil || s.Topics[name] == nil {
		return nil, unknownTopic(name)
	}
	return s.Topics[name], nil
}

// CreateTopic creates topic name in the cluster: the config is resolved
// by this node's storage (its defaults fill the zero fields; a
// ReplicationFactor of 0 is left for the controller, which takes the
// cluster's default), the controller places the partitions and commits
// the topic, and every node creates it. It returns the topic as
// DescribeTopic does. Errors: those of ResolveConfig, the controller's
// refusals (TOPIC_EXISTS, INVALID_CONFIG for a replication factor above
// the live nodes), NO_QUORUM.
func (b *Broker) CreateTopic(name string, partitions int, cfg engine.TopicConfig) (engine.TopicInfo, error) {
	if err := engine.ValidateTopicName(name); err != nil {
		return engine.TopicInfo{}, err
	}
	if partitions < 1 || partitions > engine.MaxPartitions {
		return engine.TopicInfo{}, api.NewError(api.CodeInvalidConfig, "partitions %d out of range [1, %d]", partitions, engine.MaxPartitions)
	}
	resolved, err := b.Storage.ResolveConfig(cfg)
	if err != nil {
		return engine.TopicInfo{}, err
	}
	t := &meta.Topic{Name: name, Config: resolved, Partitions: make([]meta.Partition, partitions)}
	if _, err := b.propose(meta.Command{Op: meta.OpCreateTopic, Topic: t}); err != nil {
		return engine.TopicInfo{}, err
	}
	return b.DescribeTopic(name)
}

// DeleteTopic deletes topic name from the cluster; every node deletes its
// files. Errors: UNKNOWN_TOPIC, NO_QUORUM.
func (b *Broker) DeleteTopic(name string) error {
	t, err := b.metaTopic(name)
	if err != nil {
		return err
	}
	_, err = b.propose(meta.Command{Op: meta.OpDeleteTopic, Name: name, ID: t.ID})
	return err
}

// AlterTopicConfig changes topic name's config in the cluster: the new
// config is resolved by this node's storage from the metadata's current
// one (Storage.ResolveConfigChange) and committed; every node applies it.
// Errors: UNKNOWN_TOPIC, INVALID_CONFIG, NO_QUORUM.
func (b *Broker) AlterTopicConfig(name string, change engine.TopicConfigChange) (engine.TopicInfo, error) {
	t, err := b.metaTopic(name)
	if err != nil {
		return engine.TopicInfo{}, err
	}
	cfg, err := b.Storage.ResolveConfigChange(name, t.Config, change)
	if err != nil {
		return engine.TopicInfo{}, err
	}
	if _, err := b.propose(meta.Command{Op: meta.OpAlterTopic, Name: name, ID: t.ID, Config: &cfg}); err != nil {
		return engine.TopicInfo{}, err
	}
	return b.DescribeTopic(name)
}

// CreatePartitions grows topic name to total partitions (KIP-195), placed
// by the controller. Errors: UNKNOWN_TOPIC, INVALID_CONFIG (total not
// above the current count or above engine.MaxPartitions), NO_QUORUM.
func (b *Broker) CreatePartitions(name string, total int) (engine.TopicInfo, error) {
	t, err := b.metaTopic(name)
	if err != nil {
		return engine.TopicInfo{}, err
	}
	cur := len(t.Partitions)
	switch {
	case total <= cur:
		return engine.TopicInfo{}, api.NewError(api.CodeInvalidConfig, "topic %q has %d partitions; the new total %d must be larger (partitions can be added, not removed)", name, cur, total)
	case total > engine.MaxPartitions:
		return engine.TopicInfo{}, api.NewError(api.CodeInvalidConfig, "topic %q has %d partitions; the new total %d is above the maximum %d partitions of a topic", name, cur, total, engine.MaxPartitions)
	}
	c := meta.Command{Op: meta.OpCreatePartitions, Name: name, ID: t.ID, NewPartitions: make([]meta.Partition, total-cur)}
	if _, err := b.propose(c); err != nil {
		return engine.TopicInfo{}, err
	}
	return b.DescribeTopic(name)
}

// topicInfo is the metadata's view of t: config (with its replication
// factor), creation time and, with partitions, each partition's
// placement and no statistics.
func topicInfo(t *meta.Topic, partitions bool) engine.TopicInfo {
	ti := engine.TopicInfo{Name: t.Name, ID: t.ID, PartitionCount: len(t.Partitions), Config: t.Config, CreatedMs: t.CreatedMs}
	if !partitions {
		return ti
	}
	ti.Partitions = make([]engine.PartitionInfo, len(t.Partitions))
	for i, p := range t.Partitions {
		ti.Partitions[i] = engine.PartitionInfo{Partition: i, Leader: p.Leader, LeaderEpoch: p.LeaderEpoch,
			Replicas: append([]string(nil), p.Replicas...), ISR: append([]string(nil), p.ISR...)}
	}
	return ti
}

// ListTopics lists the topics of the metadata, sorted by name, without
// partition details, leaving out the internal offsets topic: the same
// list on every node.
func (b *Broker) ListTopics() []engine.TopicInfo {
	s := b.index().state
	if s == nil {
		return []engine.TopicInfo{}
	}
	out := make([]engine.TopicInfo, 0, len(s.Topics))
	for _, t := range s.Topics {
		if engine.IsInternalTopic(t.Name) {
			continue // the offsets topic: hidden, as Kafka's list hides __consumer_offsets by default
		}
		out = append(out, topicInfo(t, false))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// DescribeLocal is the storage's own describe of topic name with the
// placement of the metadata: statistics of the partitions this node
// holds, never asking another node. It is what a peer's PeerDescribe
// reaches. Errors: UNKNOWN_TOPIC (also when the local topic is not the
// metadata's: another id).
func (b *Broker) DescribeLocal(name string) (engine.TopicInfo, error) {
	t, err := b.metaTopic(name)
	if err != nil {
		return engine.TopicInfo{}, err
	}
	local, err := b.Storage.DescribeTopic(name)
	if err != nil {
		return engine.TopicInfo{}, err
	}
	if local.ID != t.ID {
		return engine.TopicInfo{}, api.NewError(api.CodeUnknownTopic, "topic %q: this node holds id %s, the metadata %s", name, local.ID, t.ID)
	}
	ti := topicInfo(t, true)
	for i := range ti.Partitions {
		if i < len(local.Partitions) {
			copyStats(&ti.Partitions[i], local.Partitions[i])
		}
	}
	return ti, nil
}

func copyStats(dst *engine.PartitionInfo, src engine.PartitionInfo) {
	dst.LogStartOffset, dst.HighWatermark, dst.LogEndOffset = src.LogStartOffset, src.HighWatermark, src.LogEndOffset
	dst.SizeBytes, dst.SegmentCount, dst.Err = src.SizeBytes, src.SegmentCount, src.Err
	dst.Remote = nil
	if src.Remote != nil {
		r := *src.Remote
		dst.Remote = &r
	}
}

// DescribeTopic returns topic name as the metadata places it, each
// partition's statistics from its leader: this node's storage for the
// partitions it leads, the leader's (PeerDescribe, one call per leader,
// in parallel) for the others, so every node describes a topic alike. A
// partition whose statistics are unavailable (no leader, a leader not
// alive or unreachable, a topic not yet created there) keeps zeros and
// has Err set to a LEADER_NOT_AVAILABLE error. Errors: UNKNOWN_TOPIC,
// INVALID_TOPIC_NAME.
func (b *Broker) DescribeTopic(name string) (engine.TopicInfo, error) {
	t, err := b.metaTopic(name)
	if err != nil {
		return engine.TopicInfo{}, err
	}
	ti := topicInfo(t, true)
	peers := map[string][]int{}
	for i, p := range t.Partitions {
		switch {
		case p.Leader == b.self:
			peers[b.self] = append(peers[b.self], i)
		case p.Leader == "":
			ti.Partitions[i].Err = api.NewError(api.CodeLeaderNotAvailable, "%s/%d has no leader", name, i)
		case !b.c.Alive(p.Leader):
			ti.Partitions[i].Err = api.NewError(api.CodeLeaderNotAvailable, "the leader of %s/%d, node %s, is not alive", name, i, p.Leader)
		default:
			peers[p.Leader] = append(peers[p.Leader], i)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), b.opts.DescribeTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for node, parts := range peers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b.fillStats(ctx, &ti, t.ID, node, parts)
		}()
	}
	wg.Wait()
	return ti, nil
}

// fillStats copies into ti the statistics of parts (distinct partitions,
// so goroutines write disjoint entries) as node describes them.
func (b *Broker) fillStats(ctx context.Context, ti *engine.TopicInfo, id api.TopicID, node string, parts []int) {
	src, err := b.describeOn(ctx, ti.Name, id, node, parts)
	for _, i := range parts {
		switch {
		case err != nil:
			ti.Partitions[i].Err = api.NewError(api.CodeLeaderNotAvailable, "the statistics of %s/%d are not available from its leader, node %s", ti.Name, i, node)
		case i < len(src.Partitions):
			copyStats(&ti.Partitions[i], src.Partitions[i])
		default:
			ti.Partitions[i].Err = api.NewError(api.CodeLeaderNotAvailable, "the leader of %s/%d, node %s, does not hold it yet", ti.Name, i, node)
		}
	}
	if err != nil && node != b.self {
		b.log.Debug("describe: a partition leader's statistics are unavailable", "topic", ti.Name, "node", node, "err", err)
	}
}

// describeOn returns topic name (id) as node's storage describes it. A
// node that lags behind this one in applying the metadata log (it does
// not know the topic yet, holds an older topic of that name, or fewer
// partitions than parts needs) is asked again, with a growing pause,
// until it answers or ctx (DescribeTimeout) ends: a describe right after
// a create or a partition increase, or against a node ahead of the
// leader, then shows the leader's statistics instead of an error.
func (b *Broker) describeOn(ctx context.Context, name string, id api.TopicID, node string, parts []int) (engine.TopicInfo, error) {
	pause := 10 * time.Millisecond
	for {
		var src engine.TopicInfo
		var err error
		if node == b.self {
			src, err = b.DescribeLocal(name)
		} else {
			src, err = b.c.PeerDescribe(ctx, node, name)
		}
		if err == nil && src.ID != id {
			err = api.NewError(api.CodeUnknownTopicID, "node %s holds topic %q with id %s, not %s", node, name, src.ID, id)
		}
		lags := errors.Is(err, api.ErrUnknownTopic) || errors.Is(err, api.ErrUnknownTopicID) ||
			(err == nil && len(parts) > 0 && slices.Max(parts) >= len(src.Partitions))
		if !lags {
			return src, err
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return src, err
		case <-t.C:
		}
		pause = min(2*pause, 200*time.Millisecond)
	}
}
