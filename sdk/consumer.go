package sdk

import (
	"context"
	"crypto/tls"
	"log/slog"
	"math"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/seedqueue/sq/api"
)

// Defaults of ConsumerConfig.
const (
	DefaultAutoCommitInterval = 5 * time.Second
	DefaultMaxPollRecords     = 500
	DefaultMaxWait            = 500 * time.Millisecond
	DefaultMaxPollInterval    = 5 * time.Minute
	// DefaultCloseTimeout bounds a consumer's Close: its final commit
	// and leaving the group together (ConsumerConfig.CloseTimeout,
	// GrpcConsumerConfig.CloseTimeout).
	DefaultCloseTimeout = 10 * time.Second
)

// StartPosition says where a consumer starts reading a partition for which
// its group has no committed offset (or when it has no group): StartEarliest
// (the zero value), StartLatest, StartAt(offset) or StartAtTime(t).
type StartPosition int64

const (
	// StartEarliest starts at the partition's log start offset: every
	// record still stored.
	StartEarliest StartPosition = 0
	// StartLatest starts at the high watermark: only records published
	// after the consumer started.
	StartLatest StartPosition = -1
)

// StartAt starts at offset (at most math.MaxInt64-2). An offset below the
// log start moves to the log start (logged as lost records); one above the
// high watermark moves to the high watermark.
func StartAt(offset uint64) StartPosition {
	return StartPosition(-2 - int64(min(offset, math.MaxInt64-2)))
}

// Offset returns the offset of a StartAt position and true, or 0 and false
// for StartEarliest and StartLatest.
func (s StartPosition) Offset() (uint64, bool) {
	if s <= -2 {
		return uint64(-(int64(s) + 2)), true
	}
	return 0, false
}

// String returns "earliest", "latest" or "offset N".
func (s StartPosition) String() string {
	if off, ok := s.Offset(); ok {
		return "offset " + strconv.FormatUint(off, 10)
	}
	if s == StartLatest {
		return "latest"
	}
	if ms, ok := s.Time(); ok {
		return "time " + time.UnixMilli(ms).UTC().Format(time.RFC3339Nano)
	}
	return "earliest"
}

// ConsumerConfig configures a Consumer. Topic is required; every other zero
// field takes the default named in its comment.
type ConsumerConfig struct {
	// Addr is the server's data-plane address. Default "127.0.0.1:6064".
	Addr string
	// ClientID names this consumer to the server. Default "sq-go".
	ClientID string
	// Topic is the topic to read. Required.
	Topic string
	// MetadataMaxAge is how long the topic's metadata (id, partition
	// count, partition leaders) is cached. A consumer without a group
	// reads it again this often and starts reading the partitions added
	// to the topic since (a group member gets them from the broker's
	// assignment). It is also read again when a read fails with
	// UNKNOWN_TOPIC, UNKNOWN_TOPIC_ID, UNKNOWN_PARTITION, NOT_LEADER
	// (unless it named the leader), LEADER_NOT_AVAILABLE or NO_QUORUM.
	// Default 5m (DefaultMetadataMaxAge).
	MetadataMaxAge time.Duration
	// ConsumerGroup, when set, makes the consumer a member of the group
	// (docs/architecture.md §6): the broker assigns it a share of the topic's partitions,
	// moves partitions between members as they join and leave, and the
	// consumer resumes each newly assigned partition at the group's
	// committed offset read from the broker. Empty: the consumer reads
	// every partition, has no committed offsets, Commit fails with
	// ErrNoGroup and AutoCommit is ignored. Against a server without a
	// group coordinator the consumer reads every partition and commits as
	// a standalone consumer (generation -1).
	ConsumerGroup string
	// AutoCommit commits the position after the records returned by the
	// previous Poll (at-least-once, as Kafka's enable.auto.commit): at the
	// next Poll (at most once per AutoCommitInterval), when a partition is
	// revoked (before it is released to another member), and at Close. It
	// never commits records not yet returned by Poll, but it does commit
	// records Poll returned that the application has not finished with:
	// an application that fails halfway through a Poll's records should
	// call CloseWithoutCommit, or use AutoCommitMarked. Default false.
	AutoCommit bool
	// AutoCommitMarked makes every commit of the consumer (automatic,
	// at revocation, at Close, and Commit) store, per partition, the
	// position after the last record passed to MarkProcessed instead of
	// after the last record Poll returned; never beyond what Poll
	// returned. A partition with no marked record is not committed. It
	// implies AutoCommit. Default false.
	AutoCommitMarked bool
	// AutoCommitInterval is the least time between automatic commits at
	// Poll. Default 5s.
	AutoCommitInterval time.Duration
	// SessionTimeout is how long the broker keeps a member that stopped
	// heartbeating. 0: the server default (10 s); otherwise within the
	// server's bounds, 100 ms to 5 min (Validate refuses a value outside).
	SessionTimeout time.Duration
	// HeartbeatInterval, when set, is how often a group member
	// heartbeats (as Kafka's heartbeat.interval.ms) if that is more often
	// than the server asks (a third of the session timeout): a shorter
	// interval makes the member see assignment changes sooner, at the cost
	// of more requests. 0: the server's interval.
	HeartbeatInterval time.Duration
	// MaxPollInterval bounds how long a group member may go without
	// calling Poll (as Kafka's max.poll.interval.ms, KIP-62). Past it, the
	// heartbeat goroutine leaves the group (so a stalled application does
	// not hold its partitions, or block a rebalance waiting for it to
	// release a revoked one, while its process lives), logs a warning,
	// and drops its partitions without committing: positions after
	// records returned by Poll and not committed are reported by the next
	// Commit (or Close with AutoCommit) as not stored, wrapping
	// ErrMaxPollIntervalExceeded. The next Poll joins the group again;
	// the partitions then assigned start at the group's committed
	// offsets. A Poll in progress counts as polling. 0: the default, 5
	// min; MaxPollIntervalNone: no bound (any other negative value is
	// refused by Validate).
	MaxPollInterval time.Duration
	// OnPartitionsAssigned and OnPartitionsRevoked, when set, are called
	// with the partitions (sorted) added to and removed from this member's
	// assignment, after the change took effect (a revoked partition has
	// been committed, with AutoCommit, and released). They run on the
	// consumer's goroutines (the heartbeat loop or Poll) and must not
	// call Poll, Commit or Close. Poll returns no record of a partition
	// before OnPartitionsAssigned named it and returned.
	OnPartitionsAssigned func(partitions []uint32)
	OnPartitionsRevoked  func(partitions []uint32)
	// UseFetch reads with long-poll fetches instead of the default push
	// subscription (the server pushes new records within MaxBytes of
	// credit per partition).
	UseFetch bool
	// StartFrom applies to partitions without a committed offset. Default
	// StartEarliest.
	StartFrom StartPosition
	// Partitions is the subset of the topic's partitions a consumer
	// without a ConsumerGroup reads, each listed once (as Kafka's assign;
	// Validate refuses it with a group). Empty: every partition.
	// NewConsumer fails with api.ErrUnknownPartition for a partition the
	// topic does not have.
	Partitions []uint32
	// StartOffsets, without a ConsumerGroup, is the offset each listed
	// partition starts at, in place of StartFrom (as Kafka's seek after
	// assign). Its partitions must be read (in Partitions, when that is
	// set). An offset below the log start moves up to it (OnRecordsLost);
	// unlike StartAt, one above the high watermark is kept: the partition
	// is read from there once its log reaches it.
	StartOffsets map[uint32]uint64
	// EndOffsets, without a ConsumerGroup, bounds each listed partition:
	// it is read up to its end offset, exclusive (records at or past it
	// are not returned), and then no more (as kcat -e, with the high
	// watermarks seen at start). An end is not waited for: a partition
	// that has read all its log holds (a fetch finds nothing more, the
	// high watermark at or below its position) is at its end, whether its
	// end was set above the high watermark or the log lost records it had
	// when the end was set (a server restarted without having synced
	// them). Once every partition read has an end and has reached it,
	// Poll returns ErrEndOffsetsReached. Its partitions
	// must be read (in Partitions, when that is set). StartOffsets and
	// EndOffsets are offsets of the topic the consumer started on: when
	// it is deleted and created again, a bounded partition is at its end,
	// and an unbounded one starts over at StartFrom.
	EndOffsets map[uint32]uint64
	// MaxPollRecords caps the records one Poll returns. Default 500.
	MaxPollRecords int
	// MaxBytes is the soft cap, in bytes, of one partition's fetch, and the
	// credit window of a push subscription (one batch larger than it is
	// still delivered). Default 1 MiB.
	MaxBytes uint32
	// MaxWait is how long an idle Poll waits for records before it returns
	// none, and the long-poll wait of each fetch. Default 500ms.
	MaxWait time.Duration
	// DialTimeout, RequestTimeout, ReconnectBackoff and
	// ReconnectBackoffMax are as in ClientConfig. ReconnectBackoff also
	// paces fetch retries after errors.
	DialTimeout         time.Duration
	RequestTimeout      time.Duration
	ReconnectBackoff    time.Duration
	ReconnectBackoffMax time.Duration
	// Dialer opens every connection, to Addr and to partition leaders
	// (DialFunc). Default: net.Dialer.
	Dialer DialFunc
	// TLSConfig, when set, makes every connection TLS, as
	// ClientConfig.TLSConfig. Nil: plaintext.
	TLSConfig *tls.Config
	// SASL, when set, authenticates every connection, as
	// ClientConfig.SASL (SCRAM{User, Password}). Nil: anonymous.
	SASL SASLMechanism
	// CloseTimeout bounds Close as a whole, as the timeout of Kafka's
	// consumer close (KIP-102): the final commit (with AutoCommit) and
	// leaving the group share it, so against a server that stopped
	// answering Close returns within it, its error saying how many
	// partitions' positions were not committed. Leaving the group is
	// skipped once it is spent (the session timeout then removes the
	// member). CloseContext bounds Close by its context as well. Default
	// 10s; CloseTimeoutNone: no bound but RequestTimeout on each request
	// (any other negative value is refused by Validate).
	CloseTimeout time.Duration
	// Logger receives reconnections, retried errors, rebalances and offset
	// resets. Default: discard, except the warning about records lost to
	// retention (a position below the log start moved to it, with the
	// count skipped), which goes to slog.Default() when Logger is nil, so
	// it is never silent.
	Logger *slog.Logger
	// OnRecordsLost, when set, is called instead of the warning above
	// when a position of partition below the log start moves up to it:
	// the offsets [from, logStart) were removed by retention before they
	// were read, and logStart-from records are skipped (the policy of
	// Kafka's auto.offset.reset=earliest). It runs on a fetch goroutine of
	// the consumer, not on the caller of Poll, and must not block.
	OnRecordsLost func(partition uint32, from, logStart uint64)
	// OnFetchRetry, when set, is called at each fetch of partition that
	// failed with a retriable error (IsRetriable: its leader is not
	// available or cannot be reached, say) and that the consumer will
	// retry; the consumer goes on reading the other partitions meanwhile.
	// It runs on a fetch goroutine, not on the caller of Poll, and must
	// not block.
	OnFetchRetry func(partition uint32, err error)

	// now is the clock of AutoCommitInterval and MaxPollInterval; nil:
	// time.Now. Tests set it to step time by hand.
	now func() time.Time
}

func (c ConsumerConfig) withDefaults() ConsumerConfig {
	if c.AutoCommitInterval <= 0 {
		c.AutoCommitInterval = DefaultAutoCommitInterval
	}
	if c.MetadataMaxAge <= 0 {
		c.MetadataMaxAge = DefaultMetadataMaxAge
	}
	if c.MaxPollRecords <= 0 {
		c.MaxPollRecords = DefaultMaxPollRecords
	}
	if c.MaxBytes == 0 {
		c.MaxBytes = DefaultFetchMaxBytes
	}
	if c.MaxWait <= 0 {
		c.MaxWait = DefaultMaxWait
	}
	if c.MaxPollInterval == 0 {
		c.MaxPollInterval = DefaultMaxPollInterval
	}
	if c.CloseTimeout == 0 {
		c.CloseTimeout = DefaultCloseTimeout
	}
	if c.AutoCommitMarked {
		c.AutoCommit = true
	}
	if c.now == nil {
		c.now = time.Now
	}
	return c
}

// Consumer reads the partitions of one topic: all of them, or with a
// ConsumerGroup the ones the broker assigns to this member. Each partition
// is read in the background (a push subscription, or a long poll of
// MaxWait with UseFetch; at most one response buffered per partition), and
// Poll hands out what has arrived, each partition's records in offset
// order. After a lost connection the consumer reconnects and goes on from
// its in-memory position.
//
// With a ConsumerGroup, a heartbeat goroutine applies assignment changes
// as they come: partitions that do not move keep being read. A revoked
// partition stops being read at once (records fetched but not yet
// returned are dropped); with AutoCommit it is committed and released at
// the next Poll (or Close), so the commit covers exactly the records the
// application has finished with; without AutoCommit it is released at
// once. A newly assigned partition starts at the group's committed offset
// read from the broker. A member that does not call Poll for
// MaxPollInterval leaves the group and joins again at its next Poll.
//
// Delivery is at-least-once when committing: Commit (and AutoCommit) store
// the position after the records already returned, so records returned but
// not yet processed when the process dies are read again after a restart.
// What a commit covers is the application's choice: every record Poll
// returned (the default, as Kafka's), only the records passed to
// MarkProcessed (AutoCommitMarked), or explicit positions (CommitOffsets);
// CloseWithoutCommit closes without committing.
//
// The partition count is read by NewConsumer, in the standalone mode, and
// again when the topic is deleted and created again (the consumer then
// starts over on the new topic; see the package doc); group members get
// partitions added later through the assignment.
//
// Poll, Commit and CommitOffsets must not be called concurrently with each
// other; MarkProcessed, Close and CloseWithoutCommit may be called from any
// goroutine. Close is bounded by CloseTimeout (CloseContext also by its
// context).
type Consumer struct {
	client *Client  // the bootstrap connection, to cfg.Addr
	core   *cluster // the topic's metadata and the connections to its leaders
	cfg    ConsumerConfig
	log    *slog.Logger
	// lossLog receives the retention warnings: cfg.Logger or slog.Default().
	lossLog *slog.Logger

	ctx    context.Context // cancelled by Close; stops the fetchers
	cancel context.CancelFunc
	wg     sync.WaitGroup
	ready  chan struct{} // cap 1: a fetcher posted records or an error
	// withheld holds the partitions whose OnPartitionsAssigned has not
	// returned yet: Poll returns none of their records before it has.
	// Guarded by mu.
	withheld map[uint32]bool
	// revoke is signalled (cap 1) when partitions wait for Poll to
	// commit and release them.
	revoke chan struct{}
	// hbNow asks the heartbeat loop for an immediate heartbeat (cap 1).
	hbNow chan struct{}

	mu        sync.Mutex
	parts     map[uint32]*partFetcher
	order     []uint32          // keys of parts, sorted
	consumed  map[uint32]uint64 // offset after the records returned
	committed map[uint32]uint64 // last offset committed
	// marked is, per partition, the offset after the last record passed
	// to MarkProcessed (AutoCommitMarked), at most consumed.
	marked map[uint32]uint64
	// from is, per partition, where its current assignment started
	// reading: records below it were returned under an earlier
	// assignment, and may not be marked.
	from map[uint32]uint64
	// posID is the id of the topic each consumed position belongs to
	// (KIP-516): fetches, subscriptions and commits carry it, and a
	// position of a topic since deleted is dropped (consumer_topicid.go).
	posID map[uint32]api.TopicID
	// restartPending is set when a read or commit was refused with
	// UNKNOWN_TOPIC_ID, until restartTopic has started over on the topic
	// now under the name; restartCh (cap 1) wakes the goroutine that
	// does it. topicErr is an error for Poll: the topic does not exist.
	restartPending bool
	restartCh      chan struct{}
	topicErr       error
	// topicID is the id of the topic the consumer last started partitions
	// of; a different one at assign is logged as a start-over.
	topicID api.TopicID
	// boundsID is the id of the topic StartOffsets and EndOffsets are
	// offsets of: the first the consumer read (consumer_partitions.go).
	boundsID api.TopicID
	revoking map[uint32]bool // revoked, waiting for Poll to commit and release
	// returned marks partitions with records returned by Poll since their
	// last stored commit. lost holds positions that were never stored
	// because the member was fenced (its partitions dropped) or the commit
	// of a revoked partition failed; Commit (and Close with AutoCommit)
	// report them once, with lostErr as the cause.
	returned   map[uint32]bool
	lost       map[uint32]uint64
	lostID     map[uint32]api.TopicID // the topic id of each lost position
	lostErr    error
	rrNext     int
	lastCommit time.Time
	failed     bool // Poll's last answer was a non-retriable error
	// polling is true while Poll runs; lastPoll is when Poll last
	// started or returned (at first, when the consumer started). The heartbeat loop
	// leaves the group when neither holds within MaxPollInterval.
	polling  bool
	lastPoll time.Time

	group groupState

	closeOnce sync.Once
	closeErr  error
}

// partFetcher reads one partition in the background. buf and err are
// guarded by Consumer.mu; pos is owned by the fetch goroutine.
type partFetcher struct {
	partition uint32
	topicID   api.TopicID // the id of the topic read; zero: by name
	pos       uint64
	buf       []Message
	err       error
	wake      chan struct{} // cap 1: Poll drained buf or took err
	ctx       context.Context
	cancel    context.CancelFunc
	done      chan struct{} // closed when the goroutine returned
	bounds    partBounds    // ConsumerConfig.StartOffsets and EndOffsets
}

// NewConsumer connects to cfg.Addr and starts reading: every partition, or
// with a ConsumerGroup the partitions the broker assigns after a join. It
// fails with ErrInvalidConfig when Validate refuses cfg (an empty Topic, say), api.ErrUnknownTopic when
// the topic does not exist, or as Dial does.
func NewConsumer(ctx context.Context, cfg ConsumerConfig) (*Consumer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	client, err := Dial(ctx, ClientConfig{
		Addr:                cfg.Addr,
		ClientID:            cfg.ClientID,
		DialTimeout:         cfg.DialTimeout,
		RequestTimeout:      cfg.RequestTimeout,
		ReconnectBackoff:    cfg.ReconnectBackoff,
		ReconnectBackoffMax: cfg.ReconnectBackoffMax,
		Logger:              cfg.Logger,
		Dialer:              cfg.Dialer,
		TLSConfig:           cfg.TLSConfig,
		SASL:                cfg.SASL,
	})
	if err != nil {
		return nil, err
	}
	c := &Consumer{
		client: client, core: newCapnpCluster(client, cfg.MetadataMaxAge, nil), cfg: cfg, log: client.cfg.Logger, lossLog: lossLogger(cfg.Logger),
		ready: make(chan struct{}, 1), revoke: make(chan struct{}, 1), hbNow: make(chan struct{}, 1), restartCh: make(chan struct{}, 1),
		lastCommit: cfg.now(),
		parts:      map[uint32]*partFetcher{}, consumed: map[uint32]uint64{}, committed: map[uint32]uint64{},
		marked: map[uint32]uint64{}, from: map[uint32]uint64{},
		revoking: map[uint32]bool{}, returned: map[uint32]bool{}, lost: map[uint32]uint64{}, lostID: map[uint32]api.TopicID{}, posID: map[uint32]api.TopicID{},
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	if err := c.start(ctx); err != nil {
		c.cancel()
		c.stopAll()
		c.core.close()
		return nil, err
	}
	return c, nil
}

// start joins the group, or without one (or without a coordinator on the
// server) starts reading every partition.
func (c *Consumer) start(ctx context.Context) error {
	tm, err := c.core.topic(ctx, c.cfg.Topic)
	if err != nil {
		return err
	}
	if c.cfg.ConsumerGroup != "" {
		c.mu.Lock()
		c.lastPoll = c.cfg.now() // MaxPollInterval runs from the start
		c.mu.Unlock()
		joined, err := c.join(ctx)
		if err == nil && joined {
			c.wg.Go(c.heartbeatLoop)
			return nil
		}
		if err != nil {
			return err
		}
	}
	all, err := c.standalonePartitions(tm.partitions)
	if err != nil {
		return err
	}
	if err := c.assign(ctx, all, TopicInfo{}); err != nil {
		return err
	}
	c.wg.Go(c.restartLoop)
	return nil
}

// assign starts reading partitions: at the group's committed offset when
// there is one, else at StartFrom. ti may be zero: it is described then.
func (c *Consumer) assign(ctx context.Context, partitions []uint32, ti TopicInfo) error {
	if len(partitions) == 0 {
		return nil
	}
	if ti.Name == "" {
		var err error
		if ti, err = c.client.DescribeTopic(ctx, c.cfg.Topic); err != nil {
			return err
		}
	}
	committed := map[uint32]uint64{}
	if c.cfg.ConsumerGroup != "" {
		offs, err := c.client.FetchOffsets(ctx, c.cfg.ConsumerGroup, c.cfg.Topic)
		if err != nil {
			return err
		}
		for _, o := range offs {
			// An offset of another topic id is of an earlier topic of
			// the name (a server clears those; this guards a race).
			if o.Topic == c.cfg.Topic && o.Err == nil && (o.TopicID.IsZero() || o.TopicID == ti.ID) {
				committed[o.Partition] = o.Offset
			}
		}
	}
	infos := map[uint32]PartitionInfo{}
	for _, pi := range ti.PartitionInfos {
		infos[pi.Partition] = pi
	}
	times, err := c.timeStarts(ctx, partitions, committed)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.topicID.IsZero() && ti.ID != c.topicID {
		c.log.Warn("sdk: topic was deleted and created again; starting over on the new topic "+
			"(positions and committed offsets of the old topic are gone; partitions start at the group's committed offset of the new topic, else at StartFrom)",
			"topic", c.cfg.Topic, "group", c.cfg.ConsumerGroup, "old_topic_id", c.topicID, "topic_id", ti.ID,
			"partitions", partitions, "start_from", c.cfg.StartFrom.String())
	}
	c.topicID = ti.ID
	c.forgetLostOfOtherTopicsLocked(ti.ID)
	for _, p := range partitions {
		start, ok := committed[p]
		if ok {
			c.committed[p] = start
		} else if off, ok := c.configuredStart(p, ti.ID); ok {
			delete(c.committed, p)
			start = off
		} else if off, ok := times[p]; ok {
			delete(c.committed, p)
			start = off
		} else {
			delete(c.committed, p)
			pi, known := infos[p]
			start = c.startOffset(pi, known)
		}
		c.consumed[p] = start
		c.posID[p] = ti.ID
		delete(c.returned, p)
		delete(c.marked, p)
		c.from[p] = start
		c.startFetcher(p, start)
	}
	c.log.Debug("sdk: consumer reading", "topic", c.cfg.Topic, "topic_id", ti.ID, "group", c.cfg.ConsumerGroup, "partitions", partitions, "start_from", c.cfg.StartFrom.String())
	return nil
}

// startOffset applies StartFrom to a partition without a committed offset.
func (c *Consumer) startOffset(pi PartitionInfo, known bool) uint64 {
	switch off, at := c.cfg.StartFrom.Offset(); {
	case at:
		return off
	case c.cfg.StartFrom == StartLatest && known:
		return pi.HighWatermark
	case c.cfg.StartFrom == StartLatest:
		// No partition state in the describe: the fetcher turns the
		// out-of-range answer into the high watermark.
		return math.MaxUint64
	case known:
		return pi.LogStartOffset
	}
	return 0
}

// startFetcher starts the goroutine of partition p at pos, reading the
// topic with id c.posID[p]; c.mu held.
func (c *Consumer) startFetcher(p uint32, pos uint64) {
	ctx, cancel := context.WithCancel(c.ctx)
	pf := &partFetcher{partition: p, pos: pos, topicID: c.posID[p], wake: make(chan struct{}, 1), ctx: ctx, cancel: cancel, done: make(chan struct{})}
	c.bound(pf)
	c.parts[p] = pf
	c.order = sortedKeys(c.parts)
	c.wg.Go(func() {
		defer close(pf.done)
		c.readLoop(pf)
	})
}

// stopFetcher stops partition p's goroutine and drops what it buffered;
// c.mu held. The caller waits on the returned channel without c.mu.
func (c *Consumer) stopFetcher(p uint32) chan struct{} {
	pf := c.parts[p]
	if pf == nil {
		return nil
	}
	pf.cancel()
	pf.buf, pf.err = nil, nil
	delete(c.parts, p)
	c.order = sortedKeys(c.parts)
	return pf.done
}

// stopAll stops every fetcher and waits for them.
func (c *Consumer) stopAll() {
	c.mu.Lock()
	var dones []chan struct{}
	for p := range c.parts {
		dones = append(dones, c.stopFetcher(p))
	}
	c.mu.Unlock()
	for _, d := range dones {
		<-d
	}
}

func sortedKeys(m map[uint32]*partFetcher) []uint32 {
	out := make([]uint32, 0, len(m))
	for p := range m {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// Client returns the consumer's underlying Client (for admin requests).
func (c *Consumer) Client() *Client { return c.client }

// Assignment returns the partitions this consumer reads now, sorted.
func (c *Consumer) Assignment() []uint32 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]uint32(nil), c.order...)
}

// Poll returns the records that have arrived, at most MaxPollRecords, each
// partition's in offset order. When none has, it waits up to MaxWait and
// then returns none and a nil error. Connection losses and retriable errors
// are retried in the background (and logged); Poll returns an error for a
// failure that retrying does not cure (for example api.ErrUnknownTopic while
// the topic does not exist, or batch.ErrCorrupt), for ctx, or ErrClosed. A
// topic deleted and created again is not an error: the consumer starts over
// on the new topic (see the package doc).
// Revoked partitions are committed (with AutoCommit) and released here,
// and a member that left its group after MaxPollInterval joins it again.
func (c *Consumer) Poll(ctx context.Context) ([]Message, error) {
	if c.ctx.Err() != nil {
		return nil, ErrClosed
	}
	c.pollStarted()
	defer c.pollEnded()
	// Polling again after an error means the application went on: Close
	// commits again (only the last answer of Poll being an error skips it).
	c.mu.Lock()
	c.failed = false
	c.mu.Unlock()
	c.releaseRevoked(ctx)
	c.maybeAutoCommit(ctx)
	timer := time.NewTimer(c.cfg.MaxWait)
	defer timer.Stop()
	for {
		msgs, err := c.drain()
		if len(msgs) > 0 || err != nil {
			if err != nil {
				c.mu.Lock()
				c.failed = true
				c.mu.Unlock()
			}
			return msgs, err
		}
		select {
		case <-c.ready:
		case <-c.revoke:
			c.releaseRevoked(ctx)
		case <-timer.C:
			return nil, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-c.ctx.Done():
			return nil, ErrClosed
		}
	}
}

// drain takes up to MaxPollRecords buffered records, starting at a
// rotating partition for fairness, and advances the consumed positions.
// With no records it returns the first partition error, if any.
func (c *Consumer) drain() ([]Message, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []Message
	n := len(c.order)
	if n == 0 {
		return nil, nil
	}
	for k := 0; k < n && len(out) < c.cfg.MaxPollRecords; k++ {
		pf := c.parts[c.order[(c.rrNext+k)%n]]
		if len(pf.buf) == 0 || c.withheld[pf.partition] {
			continue
		}
		take := min(len(pf.buf), c.cfg.MaxPollRecords-len(out))
		out = append(out, pf.buf[:take]...)
		c.consumed[pf.partition] = pf.buf[take-1].Offset + 1
		c.returned[pf.partition] = true
		pf.buf = pf.buf[take:]
		if len(pf.buf) == 0 {
			pf.buf = nil
			notify(pf.wake)
		}
	}
	c.rrNext = (c.rrNext + 1) % n
	if len(out) > 0 {
		return out, nil
	}
	for _, p := range c.order {
		pf := c.parts[p]
		if pf.err != nil {
			err := pf.err
			pf.err = nil
			notify(pf.wake)
			return nil, err
		}
	}
	if err := c.topicErr; err != nil {
		c.topicErr = nil
		return nil, err
	}
	if c.allEndedLocked() {
		return nil, ErrEndOffsetsReached
	}
	return nil, nil
}

// notify signals ch without blocking.
func notify(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
