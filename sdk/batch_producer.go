package sdk

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/seedqueue/sq/api"
)

// Defaults of BatchProducerConfig.
const (
	DefaultLinger       = 5 * time.Millisecond
	DefaultBatchBytes   = 1 << 20 // 1 MiB, capped at the server's maxBatchBytes
	DefaultBatchRecords = 16384   // records per batch
	DefaultMaxInFlight  = 32      // publish requests in flight over all partitions
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
	// MaxInFlight bounds the publish requests sent and not yet answered,
	// over all partitions. Default 32. Against a server that speaks
	// publishBatches (protocol version 2) one request carries the ready
	// batches of every partition its connection's node leads (up to 1,024,
	// within the server's maxBatchBytes), so the batches in flight may be
	// many more; against an older server each batch is a request.
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
	// retries), with its records. It runs on the partition's goroutine
	// (see BatchProducer): a slow OnError delays that partition. It may call Send
	// (the batch's buffer space is already free); Flush and Close return
	// only after it. Default: the failure is logged to Logger.
	OnError func(BatchError)
	// OnAck, when set, is called once per acknowledged batch, in offset
	// order per partition, on the partition's goroutine, as OnError.
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
// BaseOffset+i of Partition with Durability, held by Replicas replicas
// (as Ack.Replicas).
type BatchAck struct {
	Topic      string
	Partition  uint32
	BaseOffset uint64
	Durability Durability
	Replicas   uint32
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
// A BatchProducer is the SDK's produce pipeline (the one behind Producer
// too) with Linger. Ordering: while a partition has records buffered or in
// flight, one goroutine closes and encodes its batches in order (the next
// full batch while earlier ones are in flight) and keeps up to
// MaxInFlightPerPartition of them in flight on one connection, written in
// order. When a batch fails, the server fails the later batches of the
// partition that were sent before the client saw the failure (they are
// chained), and the goroutine retries the failed batch (Retries, with
// backoff) and then resends the later ones, so the records of one
// partition are stored in the order of their Send calls. Delivery is as
// for Producer: idempotent by default, so when a connection is lost after
// the server appended some batches, their retries carry the same
// sequences and are not stored again. With DisableIdempotence (or a
// server that does not grant producer ids) delivery is at-least-once: the
// retries store them again, so a partition may hold a run of batches twice
// (each copy in order: for example 1 2 3 2 3 4).
//
// Memory is bounded by BufferBytes (see Send). A BatchProducer is safe for
// concurrent use.
type BatchProducer struct {
	p   *Producer
	pl  *pipeline
	cfg BatchProducerConfig

	ctx    context.Context // the pipeline's: cancelled by Close after the final flush
	cancel context.CancelFunc

	// Guarded by pl.mu.
	closed   bool
	sticky   map[string]uint32 // keyless partition per topic, until its batch closes
	lim      bpLimits
	buffered int           // bytes accepted and not yet finished
	records  int           // records accepted and not yet finished
	changed  chan struct{} // closed and replaced when buffered shrinks
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
		sticky:  map[string]uint32{},
		changed: make(chan struct{}),
	}
	bp.ctx, bp.cancel = context.WithCancel(context.Background())
	bp.pl = newPipeline(bp.ctx, p, cfg.Linger, cfg.MaxInFlightPerPartition, cfg.MaxInFlight)
	bp.pl.closing = bp.unstick
	bp.pl.lingered = bp.finishBatch
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
// over the server's maxRecordBytes or its topic's, when smaller
// (api.ErrMessageTooLarge), its Timestamp
// is negative (api.ErrInvalidRequest), the producer is
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
	if err := checkTimestamp(&m); err != nil {
		return err
	}
	now := time.Now()
	if m.Timestamp == 0 {
		m.Timestamp = now.UnixMilli()
	}
	size := recordEstimate(&m)
	tm, ok := bp.p.core.cachedAt(m.Topic, now)
	if !ok {
		var err error
		if tm, err = bp.p.meta(ctx, m.Topic, now.Add(bp.p.cfg.DeliveryTimeout)); err != nil {
			return err
		}
	}
	bp.pl.mu.Lock()
	lim := bp.limits(now)
	if err := checkRecordSize(&m, lim.maxRecord, tm); err != nil {
		bp.pl.mu.Unlock()
		return err
	}
	if err := bp.reserve(ctx, size); err != nil {
		bp.pl.mu.Unlock()
		return err
	}
	pp := bp.pl.part(topicPartition{m.Topic, bp.p.core.place(m.Topic, m.Key, tm, bp.sticky)})
	if len(pp.open) > 0 && (pp.bytes+size > lim.batchBytes || len(pp.open) >= bp.cfg.BatchRecords) {
		bp.pl.closeOpen(pp)
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
		bp.pl.kick(pp) // its linger starts
	}
	pp.open = append(pp.open, m)
	pp.bytes += size
	if len(pp.open) >= bp.cfg.BatchRecords {
		bp.pl.closeOpen(pp)
	}
	bp.pl.mu.Unlock()
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
// with bp.pl.mu held.
func (bp *BatchProducer) limits(now time.Time) bpLimits {
	if now.After(bp.lim.expires) {
		lim := bp.p.client.Limits()
		bp.lim = bpLimits{maxRecord: int(lim.MaxRecordBytes), batchBytes: min(bp.cfg.BatchBytes, int(lim.MaxBatchBytes)), expires: now.Add(limitsTTL)}
	}
	return bp.lim
}

// reserve takes size bytes of the buffer, waiting for space unless
// ErrorOnFull. It is called and returns with bp.pl.mu held.
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
		bp.pl.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			bp.pl.mu.Lock()
			return ctx.Err()
		}
		bp.pl.mu.Lock()
	}
}

// unstick moves the topic's keyless records on to the next partition
// when tp's open batch is closed (the pipeline's closing). Called with
// bp.pl.mu held.
func (bp *BatchProducer) unstick(tp topicPartition) {
	if s, ok := bp.sticky[tp.topic]; ok && s == tp.partition {
		delete(bp.sticky, tp.topic)
	}
}

// releaseBytes returns the buffer space of finished records and wakes the
// Sends waiting for it. Called with bp.pl.mu held, before the callbacks, so a
// callback may Send.
func (bp *BatchProducer) releaseBytes(msgs []ProducerMessage) {
	for i := range msgs {
		bp.buffered -= recordEstimate(&msgs[i])
	}
	bp.notify()
}

// releaseRecords counts n records finished once their callback returned,
// so Flush and Close return after the callbacks. Called with bp.pl.mu held.
func (bp *BatchProducer) releaseRecords(n int) {
	bp.records -= n
	bp.notify()
}

// notify wakes every waiter on bp.changed. Called with bp.pl.mu held.
func (bp *BatchProducer) notify() {
	close(bp.changed)
	bp.changed = make(chan struct{})
}

// Buffered returns the records accepted by Send and not yet acknowledged or
// failed.
func (bp *BatchProducer) Buffered() int {
	bp.pl.mu.Lock()
	defer bp.pl.mu.Unlock()
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
	bp.pl.mu.Lock()
	defer bp.pl.mu.Unlock()
	for {
		for _, pp := range bp.pl.parts {
			bp.pl.closeOpen(pp)
		}
		if bp.records == 0 {
			return nil
		}
		ch := bp.changed
		bp.pl.mu.Unlock()
		select {
		case <-ch:
			bp.pl.mu.Lock()
		case <-ctx.Done():
			bp.pl.mu.Lock()
			return ctx.Err()
		}
	}
}

// Close flushes (waiting for every buffered record, bounded by
// DeliveryTimeout as for Flush), waits for the partition goroutines to
// end and closes the connection. Send fails with ErrClosed from the start
// of Close. Close is idempotent; it returns the
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
	bp.pl.mu.Lock()
	if bp.closed {
		bp.pl.mu.Unlock()
		return nil
	}
	bp.closed = true
	bp.notify() // Sends waiting for buffer space fail with ErrClosed now
	bp.pl.mu.Unlock()
	ferr := bp.Flush(ctx)
	bp.cancel()
	bp.pl.wg.Wait()
	bp.failUnsent(bp.ctx.Err())
	return errors.Join(ferr, bp.p.Close())
}

// failUnsent reports the records that the partition goroutines did not
// take before they stopped (CloseContext's ctx ended) through OnError with
// err.
func (bp *BatchProducer) failUnsent(err error) {
	type left struct {
		tp   topicPartition
		msgs []ProducerMessage
	}
	var ls []left
	bp.pl.mu.Lock()
	for _, pp := range bp.pl.parts {
		if len(pp.open) > 0 {
			ls = append(ls, left{pp.tp, pp.open})
			bp.releaseBytes(pp.open)
		}
		for _, b := range pp.queued {
			ls = append(ls, left{pp.tp, b.msgs})
			bp.releaseBytes(b.msgs)
		}
		pp.open, pp.queued = nil, nil
	}
	bp.pl.mu.Unlock()
	for _, l := range ls {
		bp.reportFailed(l.tp, l.msgs, err)
		bp.pl.mu.Lock()
		bp.releaseRecords(len(l.msgs))
		bp.pl.mu.Unlock()
	}
}

// finishBatch frees a resolved batch's buffer space, reports it through
// OnAck or OnError and then counts its records as done (the pipeline's
// done of the batches it closed). It runs on the partition's goroutine.
func (bp *BatchProducer) finishBatch(b *pbatch, res PublishResult, err error) {
	msgs := b.msgs
	bp.pl.mu.Lock()
	bp.releaseBytes(msgs)
	bp.pl.mu.Unlock()
	tp := b.tp
	switch {
	case err != nil:
		bp.reportFailed(tp, msgs, err)
	case bp.cfg.OnAck != nil:
		bp.cfg.OnAck(BatchAck{Topic: tp.topic, Partition: tp.partition, BaseOffset: res.BaseOffset, Durability: res.Durability, Replicas: res.Replicas, Messages: msgs})
	}
	bp.pl.mu.Lock()
	bp.releaseRecords(len(msgs))
	bp.pl.mu.Unlock()
}

// reportFailed reports a batch that failed for good through OnError, or
// logs it.
func (bp *BatchProducer) reportFailed(tp topicPartition, msgs []ProducerMessage, err error) {
	if bp.cfg.OnError != nil {
		bp.cfg.OnError(BatchError{Topic: tp.topic, Partition: tp.partition, Messages: msgs, Err: err})
		return
	}
	bp.p.cfg.Logger.Error("sdk: batch failed", "topic", tp.topic, "partition", tp.partition, "records", len(msgs), "err", err)
}
