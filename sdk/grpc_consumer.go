package sdk

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"time"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/api/sqv1"
)

// GrpcConsumerConfig configures a GrpcConsumer. Topic is required; every
// other zero field takes the default named in its comment.
type GrpcConsumerConfig struct {
	GrpcConfig
	// Topic is the topic to read: every partition of it, or those the
	// ConsumerGroup assigns. Required.
	Topic string
	// ConsumerGroup, when set, makes the consumer a member of the group
	// (Groups.JoinGroup, Heartbeat, LeaveGroup and CommitGroupOffsets;
	// docs/architecture.md §5, §6), as Consumer: it reads the partitions
	// the group assigns to it, each from the group's committed offset,
	// commits fenced by its member id and generation, and shares the
	// group with Consumer members over Cap'n Proto. A revoked partition
	// stops being read at once and is released at the next Poll (an idle
	// Poll returns at once, empty, to release it), Commit or Close (with
	// AutoCommit after committing the position after the
	// records returned). A member the coordinator removed (its session
	// expired) drops its partitions without committing and joins again.
	// Against a server without a group coordinator (Unimplemented) the
	// consumer reads every partition as a standalone consumer of the
	// group's committed offsets (generation -1), with a warning. Empty:
	// every partition, Commit fails with ErrNoGroup and AutoCommit is
	// ignored.
	ConsumerGroup string
	// ClientID names the member in DescribeGroup. Default "sq-go".
	ClientID string
	// SessionTimeout is how long the coordinator keeps a member that
	// stopped heartbeating. 0: the server default (10 s); the server
	// clamps it to its bounds (100 ms to 5 min).
	SessionTimeout time.Duration
	// HeartbeatInterval, when set and shorter than the server's interval
	// (a third of the session timeout), is how often the member
	// heartbeats. 0: the server's interval.
	HeartbeatInterval time.Duration
	// OnPartitionsAssigned and OnPartitionsRevoked, when set, are called
	// with the partitions the group gives this member and takes from it
	// (after their positions were committed, with AutoCommit), from Poll,
	// Commit or Close, or from NewGrpcConsumer for the first assignment;
	// a partition is named to OnPartitionsAssigned before Poll returns
	// any of its records.
	OnPartitionsAssigned func(partitions []uint32)
	OnPartitionsRevoked  func(partitions []uint32)
	// AutoCommit commits, at the next Poll (at most once per
	// AutoCommitInterval) and at Close, the position after the records
	// returned by earlier Polls (at-least-once). Default false.
	AutoCommit bool
	// AutoCommitMarked makes every commit of the consumer (automatic,
	// at revocation, at Close, and Commit) store, per partition, the
	// position after the last record passed to MarkProcessed instead of
	// after the last record Poll returned; never beyond what Poll
	// returned. A partition with no marked record is not committed. It
	// implies AutoCommit. Default false.
	AutoCommitMarked bool
	// AutoCommitInterval is the least time between automatic commits.
	// Default 5s.
	AutoCommitInterval time.Duration
	// MaxPollInterval bounds how long a group member may go without
	// calling Poll (as Kafka's max.poll.interval.ms, KIP-62), as
	// ConsumerConfig.MaxPollInterval: past it the heartbeat goroutine
	// leaves the group (its partitions move at once), logs a warning and
	// drops its partitions without committing; the next Commit (or Close
	// with AutoCommit) reports the positions returned by Poll and not
	// stored, wrapping ErrMaxPollIntervalExceeded, and the next Poll joins
	// the group again. A Poll in progress counts as polling. 0: the
	// default, 5 min; MaxPollIntervalNone: no bound (any other negative
	// value is refused by Validate).
	MaxPollInterval time.Duration
	// StartFrom applies to partitions without a committed offset. Default
	// StartEarliest; StartAtTime is not supported over gRPC.
	StartFrom StartPosition
	// MaxPollRecords caps the records one Poll returns. Default 500.
	MaxPollRecords int
	// MaxBytes is the soft cap, in bytes, of what the server reads at a
	// time for one partition (at least one batch); the server splits it
	// into responses below NodeInfo.GrpcMaxMessageBytes. Default 1 MiB.
	MaxBytes uint32
	// MaxWait is how long an idle Poll waits for records before it returns
	// none. Default 500ms.
	MaxWait time.Duration
	// MetadataMaxAge is how long the topic's metadata (id, partition
	// count) is cached; a consumer without a group member id (no
	// ConsumerGroup, or a server without a coordinator) reads it again
	// this often, from Poll, and starts reading the partitions added to
	// the topic since (at the group's committed offset, else StartFrom).
	// A group member gets added partitions from the coordinator instead.
	// Default 5m (DefaultMetadataMaxAge).
	MetadataMaxAge time.Duration
	// RetryBackoff and RetryBackoffMax pace the re-subscription of a
	// partition after an error. Defaults 100ms and 2s.
	RetryBackoff    time.Duration
	RetryBackoffMax time.Duration
	// CloseTimeout bounds Close as a whole, its final commit (with
	// AutoCommit) included: against a server that stopped answering
	// Close returns within it, with a *CloseCommitError. CloseContext
	// bounds Close by its context as well. Default 10s; CloseTimeoutNone:
	// no bound but RequestTimeout on the commit (any other negative value
	// is refused by Validate).
	CloseTimeout time.Duration
	// Logger receives re-subscriptions and offset resets. Default: discard,
	// except the warning about records lost to retention (a position below
	// the log start moved to it, with the count skipped), which goes to
	// slog.Default() when Logger is nil, so it is never silent.
	Logger *slog.Logger
	// OnRecordsLost, when set, is called instead of the warning above
	// when a position of partition below the log start moves up to it:
	// the offsets [from, logStart) were removed by retention before they
	// were read, and logStart-from records are skipped (the policy of
	// Kafka's auto.offset.reset=earliest). It runs on a goroutine of the
	// consumer (a partition's reader, or the heartbeat goroutine), not on
	// the caller of Poll, possibly for several partitions at once, and
	// must not block.
	OnRecordsLost func(partition uint32, from, logStart uint64)
	// lossLog receives the retention warnings: Logger, or slog.Default().
	lossLog *slog.Logger
	// now is the clock of MaxPollInterval; nil: time.Now. Tests set it to
	// step time by hand.
	now func() time.Time
}

func (c *GrpcConsumerConfig) defaults() {
	c.GrpcConfig.defaults()
	if c.AutoCommitInterval == 0 {
		c.AutoCommitInterval = 5 * time.Second
	}
	if c.MaxPollRecords == 0 {
		c.MaxPollRecords = 500
	}
	if c.MaxBytes == 0 {
		c.MaxBytes = 1 << 20
	}
	if c.MaxWait == 0 {
		c.MaxWait = 500 * time.Millisecond
	}
	if c.RetryBackoff == 0 {
		c.RetryBackoff = 100 * time.Millisecond
	}
	if c.RetryBackoffMax == 0 {
		c.RetryBackoffMax = 2 * time.Second
	}
	if c.CloseTimeout == 0 {
		c.CloseTimeout = DefaultCloseTimeout
	}
	if c.MaxPollInterval == 0 {
		c.MaxPollInterval = DefaultMaxPollInterval
	}
	if c.MetadataMaxAge == 0 {
		c.MetadataMaxAge = DefaultMetadataMaxAge
	}
	if c.AutoCommitMarked {
		c.AutoCommit = true
	}
	if c.now == nil {
		c.now = time.Now
	}
	if c.ClientID == "" {
		c.ClientID = "sq-go"
	}
	c.lossLog = lossLogger(c.Logger)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// GrpcConsumer is the Consumer for clients that use the gRPC plane
// (Messaging.Subscribe, one server stream per partition) instead of
// Cap'n Proto: the same Poll, Commit and Close, each partition's records in
// offset order. Poll and Commit must not be called concurrently with each
// other; Close may be called from any goroutine. A group member
// heartbeats from a goroutine of its own; OnPartitionsAssigned and
// OnPartitionsRevoked run on the goroutine calling NewGrpcConsumer, Poll,
// Commit or Close.
//
// As Consumer, it reads and commits with the topic's id (KIP-516): when
// the topic is deleted and created again under the same name, Poll drops
// what it holds of the old topic and starts over on the new one (its
// partitions at the group's committed offsets of the new topic, else at
// StartFrom), with a log line.
type GrpcConsumer struct {
	// throttle counts the responses throttled for the fetch quota.
	throttle throttleCounters

	cfg    GrpcConsumerConfig
	admin  *Admin
	core   *cluster             // the topic's metadata, as for Consumer
	msg    sqv1.MessagingClient // the bootstrap node's: offsets and commits
	route  *grpcLeaders         // a connection per partition leader: Subscribe
	groups sqv1.GroupsClient
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	// mu guards run, the partition goroutines of the current topic id,
	// against Close, and the membership (group) against the heartbeat
	// goroutine.
	mu    sync.Mutex
	run   *grpcRun
	group grpcGroup
	// hbCancel stops the heartbeat goroutine; hbDone is closed when it
	// has returned (nil without membership).
	hbCancel context.CancelFunc
	hbDone   chan struct{}

	// Guarded by mu as well: pos, the next offset after the records
	// returned, per partition held; marked, the offset after the last
	// record passed to MarkProcessed; from, the first offset of each
	// partition's current assignment; lastPoll and polling, for
	// MaxPollInterval.
	pos      map[uint32]uint64
	marked   map[uint32]uint64
	from     map[uint32]uint64
	lastPoll time.Time
	polling  bool

	pending []Message
	// pendingPart holds, for each pending record, the goroutine that
	// read it: a record of a partition since stopped is not returned.
	pendingPart []*grpcPart
	committed   map[uint32]uint64
	// lost holds positions returned by Poll that the group will never
	// store (the member was fenced or left, or the automatic commit of a
	// revoked partition failed), with lostErr, the cause; the next Commit
	// reports them once.
	lost       map[uint32]uint64
	lostErr    error
	restart    bool // a read or commit met UNKNOWN_TOPIC_ID: Poll starts over
	lastCommit time.Time
	lastMeta   time.Time // the last look for added partitions (growStandalone)
	closeOnce  sync.Once
	closeErr   error
}

// grpcRun is the set of partition goroutines reading one topic id.
type grpcRun struct {
	id     api.TopicID
	batch  chan grpcBatch // from the partition goroutines
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	// parts holds the partitions read now, each by one goroutine; a batch
	// counts only while its part is the partition's current one.
	parts map[uint32]*grpcPart
}

// grpcPart is one partition goroutine of a run.
type grpcPart struct {
	cancel context.CancelFunc
}

type grpcBatch struct {
	part *grpcPart
	p    uint32
	msgs []Message
	err  error
	// gone: the topic id is not current any more (UNKNOWN_TOPIC_ID).
	gone bool
}

// NewGrpcConsumer connects to cfg.Addr, joins the ConsumerGroup (when
// set), reads the topic's partitions and the group's committed offsets,
// and starts one subscription per partition read (every one, or those the
// group assigned). It fails with ErrInvalidConfig when Validate refuses cfg
// (an empty Topic, a StartFrom that is a time, ...), api.ErrUnknownTopic
// when the topic does not exist, api.ErrThrottled when the server holds
// its maximum of group members, or ErrConnection.
func NewGrpcConsumer(ctx context.Context, cfg GrpcConsumerConfig) (*GrpcConsumer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.defaults()
	conn, err := dialGrpc(cfg.GrpcConfig)
	if err != nil {
		return nil, err
	}
	admin := newAdminConn(AdminConfig{cfg.GrpcConfig}, conn)
	c := &GrpcConsumer{cfg: cfg, admin: admin, core: newCluster(grpcMetadata{admin}, nil, cfg.MetadataMaxAge, nil), msg: sqv1.NewMessagingClient(conn),
		groups: sqv1.NewGroupsClient(conn), pos: map[uint32]uint64{}, marked: map[uint32]uint64{}, from: map[uint32]uint64{},
		committed: map[uint32]uint64{}, lost: map[uint32]uint64{}, lastCommit: time.Now(), lastPoll: cfg.now()}
	c.route = newGrpcLeaders(cfg.GrpcConfig, c.core, conn)
	c.ctx, c.cancel = context.WithCancel(context.Background())
	fail := func(err error) (*GrpcConsumer, error) {
		c.cancel()
		c.core.close()
		c.route.close()
		conn.Close()
		return nil, err
	}
	var parts []uint32 // nil: every partition
	if cfg.ConsumerGroup != "" {
		m, member, err := c.join(ctx)
		if err != nil {
			return fail(err)
		}
		if member {
			parts = m
			if parts == nil {
				parts = []uint32{}
			}
		}
	}
	if err := c.startRun(ctx, parts); err != nil {
		if c.group.memberID != "" {
			lctx, cancel := context.WithTimeout(context.Background(), cfg.RequestTimeout)
			_, _ = c.groups.LeaveGroup(lctx, &sqv1.LeaveGroupRequest{Group: cfg.ConsumerGroup, MemberId: c.group.memberID})
			cancel()
		}
		return fail(err)
	}
	if c.group.memberID != "" {
		if len(parts) > 0 && cfg.OnPartitionsAssigned != nil {
			cfg.OnPartitionsAssigned(parts)
		}
		c.startHeartbeat()
	}
	return c, nil
}

// startRun reads the topic's metadata and the committed offsets of parts
// (nil: every partition) and starts one goroutine per partition, as the
// current run.
func (c *GrpcConsumer) startRun(ctx context.Context, parts []uint32) error {
	id, starts, committed, err := c.startOffsets(ctx, parts)
	if err != nil {
		return err
	}
	maps.Copy(c.committed, committed)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ctx.Err() != nil {
		return ErrClosed
	}
	rctx, cancel := context.WithCancel(c.ctx)
	r := &grpcRun{id: id, batch: make(chan grpcBatch, max(len(starts), 1)), ctx: rctx, cancel: cancel, parts: map[uint32]*grpcPart{}}
	c.run = r
	for p, off := range starts {
		c.startPartitionLocked(r, p, off)
	}
	return nil
}

// startPartitionLocked starts the goroutine reading partition p of run r
// from off; c.mu held.
func (c *GrpcConsumer) startPartitionLocked(r *grpcRun, p uint32, off uint64) {
	pctx, cancel := context.WithCancel(r.ctx)
	part := &grpcPart{cancel: cancel}
	r.parts[p] = part
	c.from[p] = off
	c.wg.Add(1)
	r.wg.Go(func() {
		defer c.wg.Done()
		c.readPartition(pctx, r, part, p, off)
	})
}

// startOver stops the current run, drops every position and record of the
// old topic id, and starts a run on the topic now under the name.
func (c *GrpcConsumer) startOver(ctx context.Context) error {
	c.core.invalidate(c.cfg.Topic) // its id is no longer current
	c.mu.Lock()
	old := c.run
	c.mu.Unlock()
	old.cancel()
	old.wg.Wait()
	var parts []uint32
	c.mu.Lock()
	if c.group.memberID != "" {
		parts = partitionsOf(old.parts)
	}
	c.mu.Unlock()
	dropped := len(c.pending)
	c.pending, c.pendingPart = nil, nil
	c.mu.Lock()
	clear(c.pos)
	clear(c.marked)
	c.mu.Unlock()
	clear(c.committed)
	clear(c.lost) // positions of the old topic: nothing can store them
	if err := c.startRun(ctx, parts); err != nil {
		c.cfg.Logger.Warn("topic id no longer current and the topic cannot be read; retrying at the next Poll", "topic", c.cfg.Topic, "err", err)
		return err
	}
	c.restart = false
	c.mu.Lock()
	id := c.run.id
	c.mu.Unlock()
	c.cfg.Logger.Warn("topic was deleted and created again; starting over on the new topic "+
		"(positions and committed offsets of the old topic are gone; partitions start at the group's committed offset of the new topic, else at StartFrom)",
		"topic", c.cfg.Topic, "group", c.cfg.ConsumerGroup, "old_topic_id", old.id, "topic_id", id, "dropped_records", dropped,
		"start_from", c.cfg.StartFrom.String())
	return nil
}

// Admin returns the Admin sharing the consumer's connection.
func (c *GrpcConsumer) Admin() *Admin { return c.admin }

// ThrottleStats returns the Subscribe responses the servers throttled for
// the principal's fetch byte-rate quota (SubscribeResponse.throttle_time_ms);
// the server holds the stream's next read back for that long.
func (c *GrpcConsumer) ThrottleStats() ThrottleStats { return c.throttle.snapshot() }

// startOffsets resolves the topic's id and the first offset of each of
// parts (nil: every partition): the committed offset of the group (of
// that topic id), else StartFrom. It returns as well the committed
// offsets it found of those partitions.
func (c *GrpcConsumer) startOffsets(ctx context.Context, parts []uint32) (api.TopicID, map[uint32]uint64, map[uint32]uint64, error) {
	ti, err := c.describe(ctx)
	if err != nil {
		return api.TopicID{}, nil, nil, err
	}
	committed := map[uint32]uint64{}
	if c.cfg.ConsumerGroup != "" {
		r, err := retryUnary(ctx, c.cfg.RequestTimeout, c.msg.FetchOffsets, &sqv1.FetchOffsetsRequest{Group: c.cfg.ConsumerGroup, Topic: c.cfg.Topic})
		if err != nil {
			return api.TopicID{}, nil, nil, err
		}
		for _, o := range r.Offsets {
			if id, _ := api.TopicIDFromBytes(o.TopicId); o.Topic == c.cfg.Topic && (id.IsZero() || id == ti.ID) {
				committed[uint32(o.Partition)] = o.Offset
			}
		}
	}
	found := map[uint32]uint64{}
	want := map[uint32]bool{}
	for _, p := range parts {
		want[p] = true
	}
	out := make(map[uint32]uint64, len(ti.PartitionInfos))
	for _, pi := range ti.PartitionInfos {
		if parts != nil && !want[pi.Partition] {
			continue
		}
		off, explicit := c.cfg.StartFrom.Offset()
		switch o, ok := committed[pi.Partition]; {
		case ok:
			off = o
			found[pi.Partition] = o
		case explicit:
		case c.cfg.StartFrom == StartLatest:
			off = pi.HighWatermark
		default:
			off = pi.LogStartOffset
		}
		if off < pi.LogStartOffset {
			c.recordsLost(pi.Partition, off, pi.LogStartOffset)
		}
		out[pi.Partition] = max(min(off, pi.HighWatermark), pi.LogStartOffset)
	}
	return ti.ID, out, found, nil
}

// describe returns the topic's partitions with their offsets, of the
// topic id the core's metadata holds: when the topic was created again
// between the two reads, the metadata is read again, up to three times.
func (c *GrpcConsumer) describe(ctx context.Context) (TopicInfo, error) {
	tm, err := c.core.topic(ctx, c.cfg.Topic)
	for range 3 {
		if err != nil {
			return TopicInfo{}, err
		}
		var ti TopicInfo
		if ti, err = c.admin.DescribeTopic(ctx, c.cfg.Topic); err != nil || ti.ID == tm.id {
			return ti, err
		}
		tm, err = c.core.refresh(ctx, c.cfg.Topic)
	}
	return TopicInfo{}, fmt.Errorf("sdk: topic %q keeps changing its id while the consumer starts; try again", c.cfg.Topic)
}

// readPartition streams partition p of run r from off, re-subscribing
// after errors, until ctx ends or the topic id is no longer current.
func (c *GrpcConsumer) readPartition(ctx context.Context, r *grpcRun, part *grpcPart, p uint32, off uint64) {
	for attempt := 0; ctx.Err() == nil; attempt++ {
		next, got, err := c.stream(ctx, r, part, p, off)
		off = next
		if got {
			attempt = 0
		}
		if ctx.Err() != nil {
			return
		}
		// The next stream goes to the leader a NOT_LEADER named, or to
		// the one the metadata, read again, names.
		c.core.notePartitionError(c.cfg.Topic, p, err)
		if errors.Is(err, api.ErrUnknownTopicID) {
			c.cfg.Logger.Info("topic id no longer current", "topic", c.cfg.Topic, "partition", p, "topic_id", r.id, "err", err)
			select {
			case r.batch <- grpcBatch{part: part, p: p, gone: true}:
			case <-ctx.Done():
			}
			return
		}
		var e *api.Error
		oor := errors.As(err, &e) && e.Code == api.CodeOffsetOutOfRange && e.HasRange
		if oor && off < e.RangeStart {
			c.recordsLost(p, off, e.RangeStart)
			off = e.RangeStart
			continue
		}
		if oor && off > e.RangeEnd {
			off = e.RangeEnd
			continue
		}
		// Out of range at a position inside the range it names (a server
		// racing retention, say) is retried after the backoff, not at once.
		if !oor && !IsRetriable(err) {
			select {
			case r.batch <- grpcBatch{part: part, p: p, err: err}:
			case <-ctx.Done():
				return
			}
		}
		c.cfg.Logger.Info("re-subscribing", "topic", c.cfg.Topic, "partition", p, "offset", off, "err", err)
		if sleep(ctx, backoff(attempt+1, c.cfg.RetryBackoff, c.cfg.RetryBackoffMax)) != nil {
			return
		}
	}
}

// stream reads one Subscribe stream of partition p of run r from off until
// it fails; it returns the offset to resume at and whether records came.
func (c *GrpcConsumer) stream(ctx context.Context, r *grpcRun, part *grpcPart, p uint32, off uint64) (uint64, bool, error) {
	st, err := c.route.messaging(ctx, c.cfg.Topic, p).Subscribe(ctx, &sqv1.SubscribeRequest{Topic: c.cfg.Topic, Partition: int32(p), TopicId: r.id.Bytes(),
		From: sqv1.StartFrom_START_FROM_OFFSET, Offset: off, MaxBytes: int32(min(c.cfg.MaxBytes, 1<<30))})
	if err != nil {
		return off, false, fromStatus(err)
	}
	got := false
	for {
		resp, err := st.Recv()
		if err != nil {
			return off, got, fromStatus(err)
		}
		if ms := resp.GetThrottleTimeMs(); ms > 0 {
			c.throttle.add(time.Duration(ms) * time.Millisecond)
		}
		msgs := make([]Message, 0, len(resp.Records))
		for _, rec := range resp.Records {
			m := Message{Topic: c.cfg.Topic, Partition: p, Offset: rec.Offset, Timestamp: rec.TimestampMs, Key: rec.Key, Value: rec.Value}
			if m.Value == nil {
				m.Value = []byte{}
			}
			for _, h := range rec.Headers {
				m.Headers = append(m.Headers, Header{Key: string(h.Key), Value: h.Value})
			}
			msgs = append(msgs, m)
		}
		if len(msgs) == 0 {
			continue
		}
		if first := msgs[0].Offset; first > off && resp.LogStartOffset > off {
			// The server moved the stream up to the log start: retention
			// removed [off, first) before it was read.
			c.recordsLost(p, off, first)
		}
		select {
		case r.batch <- grpcBatch{part: part, p: p, msgs: msgs}:
		case <-ctx.Done():
			return off, got, ctx.Err()
		}
		off, got = msgs[len(msgs)-1].Offset+1, true
	}
}

// Poll returns the records that have arrived, up to MaxPollRecords, waiting
// up to MaxWait when none has. It returns a partition's non-retriable
// error (the partition is re-subscribed after a backoff) or ErrClosed.
// When the topic was deleted and created again it starts over on the new
// topic; while no topic has the name it returns api.ErrUnknownTopic and
// tries again at the next Poll.
func (c *GrpcConsumer) Poll(ctx context.Context) ([]Message, error) {
	if c.ctx.Err() != nil {
		return nil, ErrClosed
	}
	c.pollStarts()
	defer c.pollEnds()
	c.sync(ctx)
	if c.cfg.AutoCommit && c.cfg.ConsumerGroup != "" && time.Since(c.lastCommit) >= c.cfg.AutoCommitInterval {
		// Not Commit: positions lost meanwhile are Commit's to report.
		if err := c.commitPositions(ctx, nil); err != nil {
			c.cfg.Logger.Warn("auto-commit failed", "err", err)
		}
	}
	if c.restart {
		if err := c.startOver(ctx); err != nil {
			return nil, err
		}
	}
	c.growStandalone(ctx)
	c.mu.Lock()
	batch, revoked := c.run.batch, c.group.revokeNow
	c.mu.Unlock()
	if len(c.pending) == 0 {
		t := time.NewTimer(c.cfg.MaxWait)
		defer t.Stop()
		select {
		case <-revoked:
			// Release the revoked partitions now rather than after
			// MaxWait, so that their new owner need not wait.
			c.sync(ctx)
			return nil, nil
		case b := <-batch:
			if !c.current(b) {
				return nil, nil
			}
			if b.gone {
				c.restart = true
				return nil, c.startOver(ctx)
			}
			if b.err != nil {
				return nil, b.err
			}
			c.addPending(b)
		case <-t.C:
			return nil, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-c.ctx.Done():
			return nil, ErrClosed
		}
	}
	for len(c.pending) < c.cfg.MaxPollRecords {
		select {
		case b := <-batch:
			if !c.current(b) {
				continue
			}
			if b.gone {
				c.restart = true // at the next Poll: these records were read before
				continue
			}
			if b.err != nil {
				c.cfg.Logger.Warn("partition error", "err", b.err)
				continue
			}
			c.addPending(b)
			continue
		default:
		}
		break
	}
	// The heartbeat goroutine may have changed the assignment while Poll
	// waited: OnPartitionsAssigned names a partition before any of its
	// records is returned, and records of partitions revoked meanwhile
	// are dropped.
	c.sync(ctx)
	c.dropStale()
	n := min(len(c.pending), c.cfg.MaxPollRecords)
	out := c.pending[:n:n]
	c.pending = c.pending[n:]
	c.pendingPart = c.pendingPart[n:]
	c.mu.Lock()
	for _, m := range out {
		c.pos[m.Partition] = m.Offset + 1
	}
	c.mu.Unlock()
	return out, nil
}
