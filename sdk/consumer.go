package sdk

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"sync"
	"time"
)

// Defaults of ConsumerConfig.
const (
	DefaultAutoCommitInterval = 5 * time.Second
	DefaultMaxPollRecords     = 500
	DefaultMaxWait            = 500 * time.Millisecond
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
	// Topic is the topic to read, all of its partitions. Required.
	Topic string
	// ConsumerGroup, when set, is the group whose committed offsets the
	// consumer resumes from and commits to (as a standalone consumer:
	// generation -1, DESIGN §6). Empty: no committed offsets; Commit fails
	// with ErrNoGroup and AutoCommit is ignored.
	ConsumerGroup string
	// AutoCommit commits, at the next Poll (at most once per
	// AutoCommitInterval) and at Close, the position after the records
	// returned by earlier Polls, never records not yet returned
	// (at-least-once). Default false.
	AutoCommit bool
	// AutoCommitInterval is the least time between automatic commits.
	// Default 5s.
	AutoCommitInterval time.Duration
	// StartFrom applies to partitions without a committed offset. Default
	// StartEarliest.
	StartFrom StartPosition
	// MaxPollRecords caps the records one Poll returns. Default 500.
	MaxPollRecords int
	// MaxBytes is the soft cap, in bytes, of one partition's fetch (one
	// batch larger than it is still returned). Default 1 MiB.
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
	// Logger receives reconnections, retried errors and offset resets
	// (records lost to retention are always logged). Default: discard.
	Logger *slog.Logger
}

func (c ConsumerConfig) withDefaults() ConsumerConfig {
	if c.AutoCommitInterval <= 0 {
		c.AutoCommitInterval = DefaultAutoCommitInterval
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
	return c
}

// Consumer reads every partition of one topic. Each partition is fetched in
// the background (a long poll of MaxWait, at most one response buffered per
// partition), and Poll hands out what has arrived, each partition's records
// in offset order. After a lost connection the consumer reconnects and goes
// on from its in-memory position.
//
// Delivery is at-least-once when committing: Commit (and AutoCommit) store
// the position after the records already returned, so records returned but
// not yet processed when the process dies are read again after a restart.
//
// The partition count is read once, by NewConsumer: partitions added to the
// topic later are not read until a new Consumer is made. Group membership
// and partition assignment (DESIGN §6) are not implemented yet: every
// consumer reads all partitions and commits as a standalone consumer.
//
// Poll and Commit must not be called concurrently with each other; Close may
// be called from any goroutine.
type Consumer struct {
	client *Client
	cfg    ConsumerConfig
	log    *slog.Logger

	ctx    context.Context // cancelled by Close; stops the fetchers
	cancel context.CancelFunc
	wg     sync.WaitGroup
	ready  chan struct{} // cap 1: a fetcher posted records or an error

	mu         sync.Mutex
	parts      []*partFetcher
	consumed   []uint64 // per partition: offset after the records returned
	committed  []uint64 // per partition: last offset committed
	hasCommit  []bool
	rrNext     int
	lastCommit time.Time

	closeOnce sync.Once
	closeErr  error
}

// partFetcher fetches one partition in the background. buf and err are
// guarded by Consumer.mu; pos is owned by the fetch goroutine.
type partFetcher struct {
	partition uint32
	pos       uint64
	buf       []Message
	err       error
	wake      chan struct{} // cap 1: Poll drained buf or took err
}

// NewConsumer connects to cfg.Addr, reads the topic's partitions and, with a
// ConsumerGroup, the group's committed offsets, and starts fetching. It
// fails with ErrInvalidConfig when Topic is empty, api.ErrUnknownTopic when
// the topic does not exist, or as Dial does.
func NewConsumer(ctx context.Context, cfg ConsumerConfig) (*Consumer, error) {
	if cfg.Topic == "" {
		return nil, fmt.Errorf("%w: ConsumerConfig.Topic is required", ErrInvalidConfig)
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
	})
	if err != nil {
		return nil, err
	}
	c := &Consumer{client: client, cfg: cfg, log: client.cfg.Logger, ready: make(chan struct{}, 1), lastCommit: time.Now()}
	starts, committed, err := c.startOffsets(ctx)
	if err != nil {
		client.Close()
		return nil, err
	}
	n := len(starts)
	c.consumed = starts
	c.committed = make([]uint64, n)
	c.hasCommit = make([]bool, n)
	for p, off := range committed {
		if int(p) < n {
			c.committed[p], c.hasCommit[p] = off, true
		}
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	for p := range n {
		pf := &partFetcher{partition: uint32(p), pos: starts[p], wake: make(chan struct{}, 1)}
		c.parts = append(c.parts, pf)
		c.wg.Go(func() { c.fetchLoop(pf) })
	}
	return c, nil
}

// startOffsets returns each partition's first offset to fetch, and the
// group's committed offsets.
func (c *Consumer) startOffsets(ctx context.Context) ([]uint64, map[uint32]uint64, error) {
	ti, err := c.client.DescribeTopic(ctx, c.cfg.Topic)
	if err != nil {
		return nil, nil, err
	}
	if ti.Partitions == 0 {
		return nil, nil, fmt.Errorf("sdk: topic %q has no partitions", c.cfg.Topic)
	}
	committed := map[uint32]uint64{}
	if c.cfg.ConsumerGroup != "" {
		offs, err := c.client.FetchOffsets(ctx, c.cfg.ConsumerGroup, c.cfg.Topic)
		if err != nil {
			return nil, nil, err
		}
		for _, o := range offs {
			if o.Topic == c.cfg.Topic && o.Err == nil {
				committed[o.Partition] = o.Offset
			}
		}
	}
	infos := map[uint32]PartitionInfo{}
	for _, pi := range ti.PartitionInfos {
		infos[pi.Partition] = pi
	}
	all := make([]uint32, ti.Partitions)
	for p := range all {
		all[p] = uint32(p)
	}
	times, err := c.timeStarts(ctx, all, committed)
	if err != nil {
		return nil, nil, err
	}
	starts := make([]uint64, ti.Partitions)
	for p := range starts {
		if off, ok := committed[uint32(p)]; ok {
			starts[p] = off
			continue
		}
		if off, ok := times[uint32(p)]; ok {
			starts[p] = off
			continue
		}
		pi, known := infos[uint32(p)]
		switch off, at := c.cfg.StartFrom.Offset(); {
		case at:
			starts[p] = off
		case c.cfg.StartFrom == StartLatest && known:
			starts[p] = pi.HighWatermark
		case c.cfg.StartFrom == StartLatest:
			// No partition state in the describe: the fetcher turns the
			// out-of-range answer into the high watermark.
			starts[p] = math.MaxUint64
		case known:
			starts[p] = pi.LogStartOffset
		}
	}
	c.log.Debug("sdk: consumer start", "topic", c.cfg.Topic, "group", c.cfg.ConsumerGroup, "start_from", c.cfg.StartFrom.String(), "offsets", starts)
	return starts, committed, nil
}

// Client returns the consumer's underlying Client (for admin requests).
func (c *Consumer) Client() *Client { return c.client }

// Poll returns the records that have arrived, at most MaxPollRecords, each
// partition's in offset order. When none has, it waits up to MaxWait and
// then returns none and a nil error. Connection losses and retriable errors
// are retried in the background (and logged); Poll returns an error for a
// failure that retrying does not cure (for example api.ErrUnknownTopic when
// the topic was deleted, or batch.ErrCorrupt), for ctx, or ErrClosed.
func (c *Consumer) Poll(ctx context.Context) ([]Message, error) {
	if c.ctx.Err() != nil {
		return nil, ErrClosed
	}
	c.maybeAutoCommit(ctx)
	timer := time.NewTimer(c.cfg.MaxWait)
	defer timer.Stop()
	for {
		msgs, err := c.drain()
		if len(msgs) > 0 || err != nil {
			return msgs, err
		}
		select {
		case <-c.ready:
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
	n := len(c.parts)
	for k := 0; k < n && len(out) < c.cfg.MaxPollRecords; k++ {
		pf := c.parts[(c.rrNext+k)%n]
		if len(pf.buf) == 0 {
			continue
		}
		take := min(len(pf.buf), c.cfg.MaxPollRecords-len(out))
		out = append(out, pf.buf[:take]...)
		c.consumed[pf.partition] = pf.buf[take-1].Offset + 1
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
	for _, pf := range c.parts {
		if pf.err != nil {
			err := pf.err
			pf.err = nil
			notify(pf.wake)
			return nil, err
		}
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

// fetchLoop fetches one partition until Close, keeping at most one fetched
// response buffered.
func (c *Consumer) fetchLoop(pf *partFetcher) {
	failures := 0
	for {
		c.mu.Lock()
		busy := len(pf.buf) > 0 || pf.err != nil
		c.mu.Unlock()
		if busy {
			select {
			case <-pf.wake:
				continue
			case <-c.ctx.Done():
				return
			}
		}
		started := time.Now()
		res, err := c.client.Fetch(c.ctx, FetchRequest{
			Topic:     c.cfg.Topic,
			Partition: pf.partition,
			Offset:    pf.pos,
			MaxBytes:  c.cfg.MaxBytes,
			MaxWait:   c.cfg.MaxWait,
		})
		if c.ctx.Err() != nil {
			return
		}
		if err != nil {
			failures++
			if !c.fetchFailed(pf, err) {
				d := backoff(failures, c.client.cfg.ReconnectBackoff, c.client.cfg.ReconnectBackoffMax)
				if sleep(c.ctx, d) != nil {
					return
				}
			}
			continue
		}
		failures = 0
		pf.pos = res.NextOffset
		if len(res.Messages) == 0 {
			// A server that does not hold an empty fetch for MaxWait
			// must not make this loop spin.
			if time.Since(started) < c.cfg.MaxWait/4 && sleep(c.ctx, min(c.cfg.MaxWait/4, 100*time.Millisecond)) != nil {
				return
			}
			continue
		}
		c.mu.Lock()
		pf.buf = res.Messages
		c.mu.Unlock()
		notify(c.ready)
	}
}

// fetchFailed handles a failed fetch. It returns true when the fetch can be
// retried at once (the position was moved), false to back off first.
func (c *Consumer) fetchFailed(pf *partFetcher, err error) bool {
	if start, end, ok := c.validRange(err, pf.partition); ok && c.reposition(pf, start, end) {
		return true
	}
	if IsRetriable(err) {
		c.log.Warn("sdk: fetch failed, retrying", "topic", c.cfg.Topic, "partition", pf.partition, "offset", pf.pos, "err", err)
		return false
	}
	c.log.Error("sdk: fetch failed", "topic", c.cfg.Topic, "partition", pf.partition, "offset", pf.pos, "err", err)
	c.mu.Lock()
	pf.err = err
	c.mu.Unlock()
	notify(c.ready)
	return false
}

// reposition moves an out-of-range position into [start, end] and reports
// whether it moved. Nothing is buffered for the partition (fetches happen
// only with an empty buffer), so the consumed position moves with it.
func (c *Consumer) reposition(pf *partFetcher, start, end uint64) bool {
	old := pf.pos
	switch {
	case old < start:
		pf.pos = start
		c.log.Warn("sdk: offset below the log start: records lost to retention are skipped",
			"topic", c.cfg.Topic, "partition", pf.partition, "offset", old, "log_start", start, "skipped", start-old)
	case old > end:
		pf.pos = end
		if old != math.MaxUint64 {
			c.log.Warn("sdk: offset beyond the high watermark: moving to the high watermark",
				"topic", c.cfg.Topic, "partition", pf.partition, "offset", old, "high_watermark", end)
		}
	default:
		return false
	}
	c.mu.Lock()
	c.consumed[pf.partition] = pf.pos
	c.mu.Unlock()
	return true
}
