package sdk

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/api/batch"
)

// Defaults of BatchProducerConfig.
const (
	DefaultLinger       = 5 * time.Millisecond
	DefaultBatchBytes   = 1 << 20 // 1 MiB, capped at the server's maxBatchBytes
	DefaultBatchRecords = 16384   // records per batch
	DefaultMaxInFlight  = 32      // batches in flight over all partitions
	// DefaultMaxInFlightPerPartition is the batches of one partition in
	// flight at once (pipelined on one connection).
	DefaultMaxInFlightPerPartition = 4
	DefaultBufferBytes             = 64 << 20 // 64 MiB buffered and in flight
)

// ErrBufferFull is returned by BatchProducer.Send when the buffer holds
// BufferBytes already and BatchProducerConfig.ErrorOnFull is set.
var ErrBufferFull = errors.New("sdk: batch producer buffer full")

// BatchProducerConfig configures a BatchProducer. The zero value is valid:
// every zero field takes the default named in its comment.
type BatchProducerConfig struct {
	// ProducerConfig holds the connection, partitioner and retry settings
	// (Addr, Retries, RetryBackoff, ...), as for NewProducer.
	ProducerConfig

	// Linger is how long a partition's open batch waits for more records
	// after its first record before it is sent (franz-go's linger, Kafka's
	// linger.ms). Default 5ms; LingerNone means no wait: the open batch is
	// sent as soon as the partition has no batch in flight, so it holds the
	// records sent while the previous one was in flight. Any other
	// negative value is refused by Validate.
	Linger time.Duration
	// BatchBytes closes a batch when its encoded size would exceed it.
	// Default 1 MiB; never above the server's maxBatchBytes.
	BatchBytes int
	// BatchRecords closes a batch when it holds this many records. Default
	// 16384.
	BatchRecords int
	// MaxInFlight bounds the batches sent and not yet acknowledged, over all
	// partitions. Default 32.
	MaxInFlight int
	// MaxInFlightPerPartition bounds the batches of one partition sent and
	// not yet acknowledged (Kafka's max.in.flight.requests.per.connection).
	// Default 4; 1 sends each batch after the previous one is acknowledged.
	// Above 1, batches are pipelined on one connection and a retry still
	// never lets a later batch overtake an earlier one (see BatchProducer);
	// this needs a server that honours PublishRequest.chained (this
	// version's), else a retried batch may be stored after later ones (a
	// warning is logged when that happens).
	MaxInFlightPerPartition int
	// BufferBytes bounds the memory of records accepted by Send and not
	// yet acknowledged or failed (by their encoded-size estimate). When it
	// is reached Send blocks until space frees, or fails with
	// ErrBufferFull when ErrorOnFull is set. A record larger than the
	// whole buffer is accepted only into an empty buffer. Default 64 MiB.
	BufferBytes int
	// ErrorOnFull makes Send fail with ErrBufferFull instead of blocking
	// when the buffer is full.
	ErrorOnFull bool

	// OnError is called once per batch that failed for good (after the
	// retries), with its records. It runs on the partition's sender
	// goroutine: a slow OnError delays that partition. It may call Send
	// (the batch's buffer space is already free); Flush and Close return
	// only after it. Default: the failure is logged to Logger.
	OnError func(BatchError)
	// OnAck, when set, is called once per acknowledged batch, in offset
	// order per partition, on the partition's sender goroutine, as OnError.
	OnAck func(BatchAck)
}

// BatchError is a batch that could not be stored: Err says why (an
// *api.Error from the server, an error wrapping ErrConnection once the
// retries ran out, ErrClosed, or a context error from Close). Messages
// are the records of the batch, in the order they were sent.
type BatchError struct {
	Topic     string
	Partition uint32
	Messages  []ProducerMessage
	Err       error
}

// Error implements error.
func (e BatchError) Error() string {
	return fmt.Sprintf("sdk: batch of %d records to %s/%d failed: %v", len(e.Messages), e.Topic, e.Partition, e.Err)
}

// Unwrap returns Err.
func (e BatchError) Unwrap() error { return e.Err }

// BatchAck is one acknowledged batch: Messages[i] is stored at offset
// BaseOffset+i of Partition with Durability.
type BatchAck struct {
	Topic      string
	Partition  uint32
	BaseOffset uint64
	Durability Durability
	Messages   []ProducerMessage
}

// BatchProducer sends records without waiting for each one: Send buffers
// the record in its partition's open batch and returns; a batch is sent
// when it reaches BatchBytes or BatchRecords, when it has waited Linger,
// or at Flush and Close. Results arrive through OnAck and OnError.
//
// Placement is as for Producer (the Partitioner for keyed records), except
// that keyless records stick to one partition per topic until that
// partition's batch is closed, then move to the next partition (the sticky
// partitioner of KIP-480), so they form large batches.
//
// Ordering: each partition has a sender goroutine, which closes and
// encodes its batches in order (the next full batch while earlier ones are
// in flight), and a publisher goroutine with up to MaxInFlightPerPartition
// batches in flight on one connection, written in order. When a batch
// fails, the server fails the later batches of the partition that were
// sent before the client saw the failure (they are chained), and the
// publisher retries the failed batch (Retries, with backoff) and then
// resends the later ones, so the records of one partition are stored in
// the order of their Send calls. Delivery is at-least-once: when a
// connection is lost after the server appended some batches, the retries
// store them again, so a partition may hold a run of batches twice (each
// copy in order: for example 1 2 3 2 3 4).
//
// Memory is bounded by BufferBytes (see Send). A BatchProducer is safe for
// concurrent use.
type BatchProducer struct {
	p   *Producer
	cfg BatchProducerConfig

	ctx    context.Context // cancelled by Close after the final flush
	cancel context.CancelFunc
	wg     sync.WaitGroup
	sem    chan struct{} // one token per batch in flight

	mu       sync.Mutex
	closed   bool
	parts    map[topicPartition]*bpPartition
	sticky   map[string]uint32 // keyless partition per topic, until its batch closes
	lim      bpLimits
	buffered int           // bytes accepted and not yet finished
	records  int           // records accepted and not yet finished
	changed  chan struct{} // closed and replaced when buffered shrinks
}

// bpPartition is one partition's open batch, closed batches and sender.
// Its fields are guarded by BatchProducer.mu.
type bpPartition struct {
	tp      topicPartition
	open    []ProducerMessage
	bytes   int       // encoded estimate of open, with batch overhead
	first   time.Time // when open got its first record
	lastLen int       // records of the last closed batch
	busy    int       // batches taken by the sender and not yet published
	closed  []bpBatch
	wake    chan struct{} // buffered 1
}

// bpBatch is a closed batch waiting for the sender: its records, and the
// time its first record was accepted, from which its DeliveryTimeout runs.
type bpBatch struct {
	msgs  []ProducerMessage
	first time.Time
}

// NewBatchProducer connects to cfg.Addr and starts the producer. It fails
// with ErrInvalidConfig when Validate refuses cfg, else as Dial does.
func NewBatchProducer(ctx context.Context, cfg BatchProducerConfig) (*BatchProducer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	p, err := NewProducer(ctx, cfg.ProducerConfig)
	if err != nil {
		return nil, err
	}
	cfg.ProducerConfig = p.cfg
	if cfg.Linger == 0 {
		cfg.Linger = DefaultLinger
	}
	if cfg.BatchBytes <= 0 {
		cfg.BatchBytes = DefaultBatchBytes
	}
	if cfg.BatchRecords <= 0 {
		cfg.BatchRecords = DefaultBatchRecords
	}
	if cfg.MaxInFlight <= 0 {
		cfg.MaxInFlight = DefaultMaxInFlight
	}
	if cfg.BufferBytes <= 0 {
		cfg.BufferBytes = DefaultBufferBytes
	}
	if cfg.MaxInFlightPerPartition <= 0 {
		cfg.MaxInFlightPerPartition = DefaultMaxInFlightPerPartition
	}
	bp := &BatchProducer{
		p:       p,
		cfg:     cfg,
		sem:     make(chan struct{}, cfg.MaxInFlight),
		parts:   map[topicPartition]*bpPartition{},
		sticky:  map[string]uint32{},
		changed: make(chan struct{}),
	}
	bp.ctx, bp.cancel = context.WithCancel(context.Background())
	return bp, nil
}

// Client returns the producer's underlying Client (for admin requests).
func (bp *BatchProducer) Client() *Client { return bp.p.client }

// Send queues one record for topic; key nil means no key. Send keeps
// references to key and value until the record is acknowledged or failed:
// do not modify them in between. See SendMessage.
func (bp *BatchProducer) Send(ctx context.Context, topic string, key, value []byte) error {
	return bp.SendMessage(ctx, ProducerMessage{Topic: topic, Key: key, Value: value})
}

// SendMessage queues m and returns once it is buffered; its outcome is
// reported later through OnAck or OnError. A zero Timestamp becomes the
// time of the call. It returns an error, and the record is not queued, when
// the topic name is empty or unknown (api.ErrUnknownTopic), the record is
// over the server's maxRecordBytes (api.ErrMessageTooLarge), the producer is
// closed (ErrClosed), the buffer is full and ErrorOnFull is set
// (ErrBufferFull), or ctx has ended (ctx.Err(), also when buffer space is
// free, so a loop of sends stops at Ctrl-C) or ends while Send waits for
// buffer space.
func (bp *BatchProducer) SendMessage(ctx context.Context, m ProducerMessage) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if m.Topic == "" {
		return api.NewError(api.CodeInvalidTopicName, "empty topic name")
	}
	now := time.Now()
	if m.Timestamp == 0 {
		m.Timestamp = now.UnixMilli()
	}
	size := recordEstimate(&m)
	tm, ok := bp.p.core.cachedAt(m.Topic, now)
	n := tm.partitions
	if !ok {
		var err error
		if n, err = bp.p.partitions(ctx, m.Topic, now.Add(bp.p.cfg.DeliveryTimeout)); err != nil {
			return err
		}
	}
	bp.mu.Lock()
	lim := bp.limits(now)
	if rs := batch.RecordSize(m.Key, m.Value, toRecordHeaders(m.Headers)); rs > lim.maxRecord {
		bp.mu.Unlock()
		return api.NewError(api.CodeMessageTooLarge, "record of %d bytes (key+value+headers) over the server's maxRecordBytes %d", rs, lim.maxRecord)
	}
	if err := bp.reserve(ctx, size); err != nil {
		bp.mu.Unlock()
		return err
	}
	pp := bp.partition(topicPartition{m.Topic, bp.p.core.place(m.Topic, m.Key, n, bp.sticky)})
	if len(pp.open) > 0 && (pp.bytes+size > lim.batchBytes || len(pp.open) >= bp.cfg.BatchRecords) {
		bp.closeOpen(pp)
	}
	if len(pp.open) == 0 {
		if pp.open == nil {
			// Sized like the previous batch: growing a slice of
			// thousands of messages record by record showed as ~9% of
			// the CPU of BenchmarkBatchProducerPublish.
			pp.open = make([]ProducerMessage, 0, max(pp.lastLen, 16))
		}
		pp.first = now
		pp.bytes = batchOverhead
		signal(pp.wake)
	}
	pp.open = append(pp.open, m)
	pp.bytes += size
	if len(pp.open) >= bp.cfg.BatchRecords {
		bp.closeOpen(pp)
	}
	bp.mu.Unlock()
	return nil
}

// limitsTTL is how long Send uses the server's limits before reading them
// from the connection again.
const limitsTTL = time.Second

// bpLimits is what Send needs of the server's limits, kept so that a Send
// takes one lock.
type bpLimits struct {
	maxRecord  int // the server's maxRecordBytes
	batchBytes int // BatchBytes capped at the server's maxBatchBytes
	expires    time.Time
}

// limits returns the server's limits as of at most limitsTTL ago. Called
// with bp.mu held.
func (bp *BatchProducer) limits(now time.Time) bpLimits {
	if now.After(bp.lim.expires) {
		lim := bp.p.client.Limits()
		bp.lim = bpLimits{maxRecord: int(lim.MaxRecordBytes), batchBytes: min(bp.cfg.BatchBytes, int(lim.MaxBatchBytes)), expires: now.Add(limitsTTL)}
	}
	return bp.lim
}

// forgetTopic marks topic's metadata stale (after a publish failed with
// an error that says it is wrong, see refreshes): the next Send reads it
// again.
func (bp *BatchProducer) forgetTopic(topic string) { bp.p.core.invalidate(topic) }

// reserve takes size bytes of the buffer, waiting for space unless
// ErrorOnFull. It is called and returns with bp.mu held.
func (bp *BatchProducer) reserve(ctx context.Context, size int) error {
	for {
		if bp.closed {
			return ErrClosed
		}
		if bp.buffered == 0 || bp.buffered+size <= bp.cfg.BufferBytes {
			bp.buffered += size
			bp.records++
			return nil
		}
		if bp.cfg.ErrorOnFull {
			return ErrBufferFull
		}
		ch := bp.changed
		bp.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			bp.mu.Lock()
			return ctx.Err()
		}
		bp.mu.Lock()
	}
}

// partition returns tp's state, starting its sender on first use. Called
// with bp.mu held.
func (bp *BatchProducer) partition(tp topicPartition) *bpPartition {
	pp := bp.parts[tp]
	if pp == nil {
		pp = &bpPartition{tp: tp, wake: make(chan struct{}, 1)}
		bp.parts[tp] = pp
		bp.wg.Add(1)
		go bp.sender(pp)
	}
	return pp
}

// closeOpen moves pp's open batch to its queue of closed batches and moves
// the topic's keyless records on to the next partition. Called with bp.mu
// held.
func (bp *BatchProducer) closeOpen(pp *bpPartition) {
	if len(pp.open) == 0 {
		return
	}
	pp.closed = append(pp.closed, bpBatch{msgs: pp.open, first: pp.first})
	pp.lastLen = len(pp.open)
	pp.open = nil
	pp.bytes = 0
	if s, ok := bp.sticky[pp.tp.topic]; ok && s == pp.tp.partition {
		delete(bp.sticky, pp.tp.topic)
	}
	signal(pp.wake)
}

// signal wakes the owner of ch (buffered 1) without blocking.
func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// releaseBytes returns the buffer space of finished records and wakes the
// Sends waiting for it. Called with bp.mu held, before the callbacks, so a
// callback may Send.
func (bp *BatchProducer) releaseBytes(msgs []ProducerMessage) {
	for i := range msgs {
		bp.buffered -= recordEstimate(&msgs[i])
	}
	bp.notify()
}

// releaseRecords counts n records finished once their callback returned,
// so Flush and Close return after the callbacks. Called with bp.mu held.
func (bp *BatchProducer) releaseRecords(n int) {
	bp.records -= n
	bp.notify()
}

// notify wakes every waiter on bp.changed. Called with bp.mu held.
func (bp *BatchProducer) notify() {
	close(bp.changed)
	bp.changed = make(chan struct{})
}

// Buffered returns the records accepted by Send and not yet acknowledged or
// failed.
func (bp *BatchProducer) Buffered() int {
	bp.mu.Lock()
	defer bp.mu.Unlock()
	return bp.records
}

// Flush sends every open batch at once and waits until every record
// accepted so far, and any accepted while Flush waits, is acknowledged or
// failed. It returns ctx's error when ctx ends first (the records stay
// queued). Without a ctx deadline it is still bounded: every record is
// acknowledged or failed within DeliveryTimeout of its Send (plus up to
// RequestTimeout for a batch in flight then), so Flush returns at the
// latest that long after the last Send it waits for.
func (bp *BatchProducer) Flush(ctx context.Context) error {
	bp.mu.Lock()
	defer bp.mu.Unlock()
	for {
		for _, pp := range bp.parts {
			bp.closeOpen(pp)
		}
		if bp.records == 0 {
			return nil
		}
		ch := bp.changed
		bp.mu.Unlock()
		select {
		case <-ch:
			bp.mu.Lock()
		case <-ctx.Done():
			bp.mu.Lock()
			return ctx.Err()
		}
	}
}

// Close flushes (waiting for every buffered record, bounded by
// DeliveryTimeout as for Flush), stops the senders and closes the
// connection. Send fails with
// ErrClosed from the start of Close. Close is idempotent; it returns the
// connection's close error. CloseContext bounds the wait.
func (bp *BatchProducer) Close() error {
	return bp.CloseContext(context.Background())
}

// CloseContext is Close with the flush bounded by ctx: when ctx ends
// before every buffered record is acknowledged or failed, the retries and
// the waits for responses stop at once and each record left is reported
// through OnError with context.Canceled (a batch whose response was not
// awaited may still have been stored: delivery stays at-least-once). It
// then returns ctx's error, joined with the connection's close error.
func (bp *BatchProducer) CloseContext(ctx context.Context) error {
	bp.mu.Lock()
	if bp.closed {
		bp.mu.Unlock()
		return nil
	}
	bp.closed = true
	bp.notify() // Sends waiting for buffer space fail with ErrClosed now
	bp.mu.Unlock()
	ferr := bp.Flush(ctx)
	bp.cancel()
	bp.wg.Wait()
	bp.failUnsent(bp.ctx.Err())
	return errors.Join(ferr, bp.p.Close())
}

// failUnsent reports the records that no sender took before the senders
// stopped (CloseContext's ctx ended) through OnError with err.
func (bp *BatchProducer) failUnsent(err error) {
	type left struct {
		tp   topicPartition
		msgs []ProducerMessage
	}
	var ls []left
	bp.mu.Lock()
	for _, pp := range bp.parts {
		if len(pp.open) > 0 {
			pp.closed = append(pp.closed, bpBatch{msgs: pp.open, first: pp.first})
		}
		for _, b := range pp.closed {
			ls = append(ls, left{pp.tp, b.msgs})
			bp.releaseBytes(b.msgs)
		}
		pp.open, pp.closed = nil, nil
	}
	bp.mu.Unlock()
	for _, l := range ls {
		bp.reportFailed(l.tp, l.msgs, err)
		bp.mu.Lock()
		bp.releaseRecords(len(l.msgs))
		bp.mu.Unlock()
	}
}
