package sdk

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/api/sqv1"
)

// GrpcConsumerConfig configures a GrpcConsumer. Topic is required; every
// other zero field takes the default named in its comment.
type GrpcConsumerConfig struct {
	GrpcConfig
	// Topic is the topic to read, every partition of it. Required.
	Topic string
	// ConsumerGroup, when set, is the group whose committed offsets the
	// consumer resumes from and commits to, as a standalone consumer
	// (generation -1: no membership or partition assignment over gRPC).
	// Empty: Commit fails with ErrNoGroup and AutoCommit is ignored.
	ConsumerGroup string
	// AutoCommit commits, at the next Poll (at most once per
	// AutoCommitInterval) and at Close, the position after the records
	// returned by earlier Polls (at-least-once). Default false.
	AutoCommit bool
	// AutoCommitInterval is the least time between automatic commits.
	// Default 5s.
	AutoCommitInterval time.Duration
	// StartFrom applies to partitions without a committed offset. Default
	// StartEarliest; StartAtTime is not supported over gRPC.
	StartFrom StartPosition
	// MaxPollRecords caps the records one Poll returns. Default 500.
	MaxPollRecords int
	// MaxBytes is the soft cap, in bytes, of one streamed response (at
	// least one batch). Default 1 MiB.
	MaxBytes uint32
	// MaxWait is how long an idle Poll waits for records before it returns
	// none. Default 500ms.
	MaxWait time.Duration
	// RetryBackoff and RetryBackoffMax pace the re-subscription of a
	// partition after an error. Defaults 100ms and 2s.
	RetryBackoff    time.Duration
	RetryBackoffMax time.Duration
	// Logger receives re-subscriptions and offset resets (records lost to
	// retention are always logged). Default: discard.
	Logger *slog.Logger
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
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// GrpcConsumer is the Consumer for clients that use the gRPC plane
// (Messaging.Subscribe, one server stream per partition) instead of
// Cap'n Proto: the same Poll, Commit and Close, each partition's records in
// offset order. Poll and Commit must not be called concurrently with each
// other; Close may be called from any goroutine.
type GrpcConsumer struct {
	cfg    GrpcConsumerConfig
	admin  *Admin
	msg    sqv1.MessagingClient
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	batch  chan grpcBatch // from the partition goroutines, at most one each

	pending    []Message
	pos        map[uint32]uint64 // next offset after the records returned
	committed  map[uint32]uint64
	lastCommit time.Time
	closeOnce  sync.Once
	closeErr   error
}

type grpcBatch struct {
	msgs []Message
	err  error
}

// NewGrpcConsumer connects to cfg.Addr, reads the topic's partitions and
// the group's committed offsets, and starts one subscription per
// partition. It fails with ErrInvalidConfig when Topic is empty or
// StartFrom is a time, api.ErrUnknownTopic when the topic does not exist,
// or ErrConnection.
func NewGrpcConsumer(ctx context.Context, cfg GrpcConsumerConfig) (*GrpcConsumer, error) {
	cfg.defaults()
	if cfg.Topic == "" {
		return nil, fmt.Errorf("%w: GrpcConsumerConfig.Topic is empty", ErrInvalidConfig)
	}
	if _, ok := cfg.StartFrom.Time(); ok {
		return nil, fmt.Errorf("%w: StartAtTime is not supported by GrpcConsumer", ErrInvalidConfig)
	}
	conn, err := dialGrpc(cfg.GrpcConfig)
	if err != nil {
		return nil, err
	}
	c := &GrpcConsumer{cfg: cfg, admin: newAdminConn(AdminConfig{cfg.GrpcConfig}, conn), msg: sqv1.NewMessagingClient(conn),
		pos: map[uint32]uint64{}, committed: map[uint32]uint64{}, lastCommit: time.Now()}
	starts, err := c.startOffsets(ctx)
	if err != nil {
		conn.Close()
		return nil, err
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.batch = make(chan grpcBatch, len(starts))
	for p, off := range starts {
		c.wg.Go(func() { c.run(uint32(p), off) })
	}
	return c, nil
}

// Admin returns the Admin sharing the consumer's connection.
func (c *GrpcConsumer) Admin() *Admin { return c.admin }

// startOffsets resolves each partition's first offset: the committed
// offset of the group, else StartFrom.
func (c *GrpcConsumer) startOffsets(ctx context.Context) ([]uint64, error) {
	ti, err := c.admin.DescribeTopic(ctx, c.cfg.Topic)
	if err != nil {
		return nil, err
	}
	committed := map[uint32]uint64{}
	if c.cfg.ConsumerGroup != "" {
		r, err := unary(ctx, c.cfg.RequestTimeout, c.msg.FetchOffsets, &sqv1.FetchOffsetsRequest{Group: c.cfg.ConsumerGroup, Topic: c.cfg.Topic})
		if err != nil {
			return nil, err
		}
		for _, o := range r.Offsets {
			committed[uint32(o.Partition)] = o.Offset
		}
	}
	out := make([]uint64, len(ti.PartitionInfos))
	for i, pi := range ti.PartitionInfos {
		off, explicit := c.cfg.StartFrom.Offset()
		switch o, ok := committed[pi.Partition]; {
		case ok:
			off = o
			c.committed[pi.Partition] = o
		case explicit:
		case c.cfg.StartFrom == StartLatest:
			off = pi.HighWatermark
		default:
			off = pi.LogStartOffset
		}
		out[i] = max(min(off, pi.HighWatermark), pi.LogStartOffset)
	}
	return out, nil
}

// run streams partition p from off, re-subscribing after errors.
func (c *GrpcConsumer) run(p uint32, off uint64) {
	for attempt := 0; c.ctx.Err() == nil; attempt++ {
		next, got, err := c.stream(p, off)
		off = next
		if got {
			attempt = 0
		}
		if c.ctx.Err() != nil {
			return
		}
		var e *api.Error
		oor := errors.As(err, &e) && e.Code == api.CodeOffsetOutOfRange && e.HasRange
		if oor && off < e.RangeStart {
			c.cfg.Logger.Warn("offset below the log start: records lost to retention", "topic", c.cfg.Topic,
				"partition", p, "offset", off, "log_start", e.RangeStart, "skipped", e.RangeStart-off)
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
			case c.batch <- grpcBatch{err: err}:
			case <-c.ctx.Done():
				return
			}
		}
		c.cfg.Logger.Info("re-subscribing", "topic", c.cfg.Topic, "partition", p, "offset", off, "err", err)
		if sleep(c.ctx, backoff(attempt+1, c.cfg.RetryBackoff, c.cfg.RetryBackoffMax)) != nil {
			return
		}
	}
}

// stream reads one Subscribe stream of partition p from off until it
// fails; it returns the offset to resume at and whether records came.
func (c *GrpcConsumer) stream(p uint32, off uint64) (uint64, bool, error) {
	st, err := c.msg.Subscribe(c.ctx, &sqv1.SubscribeRequest{Topic: c.cfg.Topic, Partition: int32(p),
		From: sqv1.StartFrom_START_FROM_OFFSET, Offset: off, MaxBytes: int32(min(c.cfg.MaxBytes, 1<<30))})
	if err != nil {
		return off, false, fromStatus(err)
	}
	got := false
	for {
		r, err := st.Recv()
		if err != nil {
			return off, got, fromStatus(err)
		}
		msgs := make([]Message, 0, len(r.Records))
		for _, rec := range r.Records {
			m := Message{Topic: c.cfg.Topic, Partition: p, Offset: rec.Offset, Timestamp: rec.TimestampMs, Key: rec.Key, Value: rec.Value}
			if m.Value == nil {
				m.Value = []byte{}
			}
			for _, h := range rec.Headers {
				m.Headers = append(m.Headers, Header{Key: h.Key, Value: h.Value})
			}
			msgs = append(msgs, m)
		}
		if len(msgs) == 0 {
			continue
		}
		select {
		case c.batch <- grpcBatch{msgs: msgs}:
		case <-c.ctx.Done():
			return off, got, c.ctx.Err()
		}
		off, got = msgs[len(msgs)-1].Offset+1, true
	}
}

// Poll returns the records that have arrived, up to MaxPollRecords, waiting
// up to MaxWait when none has. It returns a partition's non-retriable
// error (the partition is re-subscribed after a backoff) or ErrClosed.
func (c *GrpcConsumer) Poll(ctx context.Context) ([]Message, error) {
	if c.ctx.Err() != nil {
		return nil, ErrClosed
	}
	if c.cfg.AutoCommit && c.cfg.ConsumerGroup != "" && time.Since(c.lastCommit) >= c.cfg.AutoCommitInterval {
		if err := c.Commit(ctx); err != nil {
			c.cfg.Logger.Warn("auto-commit failed", "err", err)
		}
	}
	if len(c.pending) == 0 {
		t := time.NewTimer(c.cfg.MaxWait)
		defer t.Stop()
		select {
		case b := <-c.batch:
			if b.err != nil {
				return nil, b.err
			}
			c.pending = b.msgs
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
		case b := <-c.batch:
			if b.err != nil {
				c.cfg.Logger.Warn("partition error", "err", b.err)
				continue
			}
			c.pending = append(c.pending, b.msgs...)
			continue
		default:
		}
		break
	}
	n := min(len(c.pending), c.cfg.MaxPollRecords)
	out := c.pending[:n:n]
	c.pending = c.pending[n:]
	for _, m := range out {
		c.pos[m.Partition] = m.Offset + 1
	}
	return out, nil
}

// Commit stores, for each partition, the offset after the last record
// Poll returned. It fails with ErrNoGroup without a ConsumerGroup, or with
// the first per-partition error.
func (c *GrpcConsumer) Commit(ctx context.Context) error {
	if c.cfg.ConsumerGroup == "" {
		return ErrNoGroup
	}
	req := &sqv1.CommitOffsetsRequest{Group: c.cfg.ConsumerGroup}
	for p, off := range c.pos {
		if c.committed[p] != off {
			req.Offsets = append(req.Offsets, &sqv1.OffsetEntry{Topic: c.cfg.Topic, Partition: int32(p), Offset: off})
		}
	}
	c.lastCommit = time.Now()
	if len(req.Offsets) == 0 {
		return nil
	}
	r, err := unary(ctx, c.cfg.RequestTimeout, c.msg.CommitOffsets, req)
	if err != nil {
		return err
	}
	var first error
	for _, o := range r.Offsets {
		if o.Error != "" {
			if first == nil {
				first = fmt.Errorf("sdk: commit %s/%d: %s", o.Topic, o.Partition, o.Error)
			}
			continue
		}
		c.committed[uint32(o.Partition)] = o.Offset
	}
	return first
}

// Close commits (with AutoCommit), stops the subscriptions and closes the
// connection. It is idempotent.
func (c *GrpcConsumer) Close() error {
	c.closeOnce.Do(func() {
		if c.cfg.AutoCommit && c.cfg.ConsumerGroup != "" {
			ctx, cancel := context.WithTimeout(context.Background(), c.cfg.RequestTimeout)
			c.closeErr = c.Commit(ctx)
			cancel()
		}
		c.cancel()
		c.wg.Wait()
		c.closeErr = errors.Join(c.closeErr, c.admin.Close())
	})
	return c.closeErr
}
