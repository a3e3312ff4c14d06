package sdk

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/api/batch"
)

// Defaults of ProducerConfig.
const (
	DefaultRetries         = 10
	DefaultRetryBackoff    = 100 * time.Millisecond
	DefaultRetryBackoffMax = 2 * time.Second
	DefaultMetadataMaxAge  = 5 * time.Minute
	// DefaultDeliveryTimeout bounds a record's time from Send to its
	// acknowledgement or failure, retries included.
	DefaultDeliveryTimeout = 30 * time.Second
)

// ErrDeliveryTimeout is wrapped by the error of a record that was not
// acknowledged within ProducerConfig.DeliveryTimeout; the same error also
// wraps the last failure seen, if any (errors.Is(err, ErrConnection) tells
// a server that could not be reached).
var ErrDeliveryTimeout = errors.New("sdk: delivery timeout")

// deliveryTimeoutError is a record that ran out of its delivery timeout.
type deliveryTimeoutError struct {
	timeout time.Duration
	last    error // the last failure before the timeout; may be nil
}

func (e *deliveryTimeoutError) Error() string {
	if e.last == nil {
		return fmt.Sprintf("sdk: not acknowledged within the delivery timeout of %v", e.timeout)
	}
	return fmt.Sprintf("sdk: not acknowledged within the delivery timeout of %v: %v", e.timeout, e.last)
}

func (e *deliveryTimeoutError) Unwrap() []error {
	if e.last == nil {
		return []error{ErrDeliveryTimeout}
	}
	return []error{ErrDeliveryTimeout, e.last}
}

// expired returns the error of a record whose delivery timeout passed
// after last (nil when no attempt failed yet). A last error that is
// already a delivery timeout is returned as is.
func (p *Producer) expired(last error) error {
	if errors.Is(last, ErrDeliveryTimeout) {
		return last
	}
	return &deliveryTimeoutError{timeout: p.cfg.DeliveryTimeout, last: last}
}

// ProducerConfig configures a Producer. The zero value is valid: every zero
// field takes the default named in its comment.
type ProducerConfig struct {
	// Addr is the server's data-plane address. Default "127.0.0.1:6064".
	Addr string
	// ClientID names this producer to the server. Default "sq-go".
	ClientID string
	// Partitioner places keyed records. Default HashPartitioner (FNV-1a 32
	// of the key, modulo the partition count).
	Partitioner Partitioner
	// Acks is when the partition's leader acknowledges a batch: AcksAll
	// (the default: every in-sync replica holds it, at least
	// min.insync.replicas of them) or AcksLeader (the leader alone).
	Acks Acks
	// DisableIdempotence turns the idempotent producer off (it is on by
	// default): batches then carry no producer id and sequence, and a
	// batch retried after its acknowledgement was lost (a connection
	// failure, a timeout) may be stored twice. With idempotence, the
	// producer obtains a producer id from the server at its first publish
	// and stamps each batch with it and a per-partition sequence, so that
	// a partition's leader stores a retried batch once and answers with
	// its original offsets (see Producer). Against a server that does not
	// grant producer ids the producer falls back to no idempotence, with
	// one warning in Logger.
	DisableIdempotence bool
	// Retries is how many times a batch that failed with a retriable error
	// (IsRetriable: connection loss, NOT_LEADER, NOT_ENOUGH_REPLICAS,
	// DISK_FULL, THROTTLED, ...)
	// is sent again. Default 10; RetriesNone sends each batch once (any
	// other negative value is refused by Validate).
	Retries int
	// RetryBackoff is the wait before the first retry; it doubles per
	// retry, with jitter, up to RetryBackoffMax. Defaults 100ms and 2s.
	RetryBackoff    time.Duration
	RetryBackoffMax time.Duration
	// MetadataMaxAge is how long a topic's metadata (id, partition count,
	// partition leaders) is cached before it is read again. It is also
	// read again, before the retry, after a request fails with
	// UNKNOWN_TOPIC, UNKNOWN_TOPIC_ID, UNKNOWN_PARTITION, NOT_LEADER
	// (unless it named the leader: the retry goes there),
	// LEADER_NOT_AVAILABLE or NO_QUORUM, or a publish with
	// MESSAGE_TOO_LARGE (the topic's record limit, cached with it, may
	// have been lowered). Default 5m.
	MetadataMaxAge time.Duration
	// DeliveryTimeout bounds the time from Send (SendBatch's call, or
	// BatchProducer.Send's acceptance of the record into its batch) to the
	// record's acknowledgement or failure, retries and redials included,
	// as Kafka's delivery.timeout.ms: no retry starts after it, a batch not
	// yet sent by then fails unsent, and the record's error wraps
	// ErrDeliveryTimeout and the last failure. So against a server that
	// cannot be reached, SendBatch, Flush and Close return within it (a
	// BatchProducer batch already in flight at that moment still gets up to
	// RequestTimeout for its response). Retries bounds the attempts within
	// it. Default 30s.
	DeliveryTimeout time.Duration
	// DialTimeout, RequestTimeout, ReconnectBackoff and
	// ReconnectBackoffMax are as in ClientConfig.
	DialTimeout         time.Duration
	RequestTimeout      time.Duration
	ReconnectBackoff    time.Duration
	ReconnectBackoffMax time.Duration
	// Logger receives retries and connection events. Default: discard.
	Logger *slog.Logger
	// Dialer opens every connection, to Addr and to partition leaders
	// (DialFunc). Default: net.Dialer.
	Dialer DialFunc
	// TLSConfig, when set, makes every connection TLS, as
	// ClientConfig.TLSConfig. Nil: plaintext.
	TLSConfig *tls.Config
	// SASL, when set, authenticates every connection, as
	// ClientConfig.SASL (SCRAM{User, Password}). Nil: anonymous.
	SASL SASLMechanism
}

// ProducerMessage is one record to send. Build it with NewProducerMessage
// and WithKey/WithHeaders, or as a struct literal.
type ProducerMessage struct {
	Topic     string
	Key       []byte // nil: no key (spread over partitions)
	Value     []byte
	Headers   []Header
	Timestamp int64 // Unix ms; 0 means the time of the send; negative is refused (checkTimestamp)
}

// checkTimestamp refuses a record whose Timestamp is negative, as Kafka's
// ProducerRecord does. The server refuses a whole batch holding such a
// record (CORRUPT_BATCH over Cap'n Proto, INVALID_REQUEST over gRPC), so
// sent, it would fail every record batched with it; refused here, it
// fails alone and the others are sent.
func checkTimestamp(m *ProducerMessage) error {
	if m.Timestamp < 0 {
		return api.NewError(api.CodeInvalidRequest, "record timestamp %d is negative: want Unix milliseconds, or 0 for the time of the send", m.Timestamp)
	}
	return nil
}

// NewProducerMessage returns a keyless message for topic.
func NewProducerMessage(topic string, value []byte) ProducerMessage {
	return ProducerMessage{Topic: topic, Value: value}
}

// WithKey returns m with key set (nil removes the key).
func (m ProducerMessage) WithKey(key []byte) ProducerMessage {
	m.Key = key
	return m
}

// WithHeaders returns m with headers h.
func (m ProducerMessage) WithHeaders(h ...Header) ProducerMessage {
	m.Headers = h
	return m
}

// Ack is the outcome of one record. When Err is nil the record is stored at
// Offset of Partition with the stated Durability, held by Replicas
// replicas; otherwise Err says why it was not (Partition and Offset are
// then meaningless, except that Partition is the one chosen when the
// failure came from the server).
type Ack struct {
	Topic      string
	Partition  uint32
	Offset     uint64
	Durability Durability
	// Replicas is how many replicas held the record when it was
	// acknowledged: the in-sync set's size with DurabilityReplicated
	// (AcksAll on a replicated partition), else 1.
	Replicas uint32
	Err      error
}

// Producer sends records to topics. Keyed records go to the partition the
// Partitioner picks (default: FNV-1a 32 of the key modulo the partition
// count), so one key keeps its order; records without a key are spread
// round-robin, one partition per Send or SendBatch call for each topic
// (sticky, so a batch of keyless records stays one batch).
//
// Delivery: a batch that fails with a retriable error or a lost connection
// is sent again (Retries). The producer is idempotent by default (KIP-98):
// it stamps every batch with a producer id the server granted and a
// sequence per partition, and a retry keeps them, so when only the
// acknowledgement was lost the partition's leader stores the batch once
// and answers with its original offsets. That makes delivery exactly-once
// per partition for one producer id's session: every acknowledged record
// is stored once, in the order of the calls that sent it. It does not
// cover a record whose Send failed (its error says so; it may or may not
// be stored, and sending it again may store it twice), a keyless batch
// moved to another partition off a leader that could not be reached (it
// may also have been stored by that leader), a new Producer (a new
// producer id), or a server that does not grant producer ids (the
// producer then logs a warning and is at-least-once, as with
// DisableIdempotence). A batch refused with OUT_OF_ORDER_SEQUENCE or
// UNKNOWN_PRODUCER_ID (the leader lost the sequence of an earlier batch)
// fails with that error, and the partition goes on with a new producer
// id; INVALID_PRODUCER_EPOCH fences the producer (ErrProducerFenced).
// Within one Send or SendBatch
// call a partition's batches are sent one after the other, each after the
// previous one was acknowledged, so retries never reorder a partition's
// records; concurrent calls are not ordered with respect to each other.
//
// Send and SendBatch put their batches into the SDK's produce pipeline,
// the one a BatchProducer is built on, without linger: a call's batches
// go out as soon as their partition has room in its window of
// requests in flight (pipelined with the batches of concurrent calls, and
// chained, so a failed batch is retried before the later ones of its
// partition are stored), and the call waits for their results.
//
// A Producer is safe for concurrent use.
type Producer struct {
	client *Client  // the bootstrap connection, to cfg.Addr
	core   *cluster // metadata, placement and connections
	cfg    ProducerConfig

	pl *pipeline // without linger; its goroutines end once idle

	idem *idempotence // nil with DisableIdempotence
}

// NewProducer connects to cfg.Addr. It fails with ErrInvalidConfig when
// Validate refuses cfg, else as Dial does.
func NewProducer(ctx context.Context, cfg ProducerConfig) (*Producer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Partitioner == nil {
		cfg.Partitioner = HashPartitioner{}
	}
	if cfg.Retries == 0 {
		cfg.Retries = DefaultRetries
	}
	if cfg.RetryBackoff <= 0 {
		cfg.RetryBackoff = DefaultRetryBackoff
	}
	if cfg.RetryBackoffMax < cfg.RetryBackoff {
		cfg.RetryBackoffMax = max(DefaultRetryBackoffMax, cfg.RetryBackoff)
	}
	if cfg.MetadataMaxAge <= 0 {
		cfg.MetadataMaxAge = DefaultMetadataMaxAge
	}
	if cfg.DeliveryTimeout <= 0 {
		cfg.DeliveryTimeout = DefaultDeliveryTimeout
	}
	c, err := Dial(ctx, ClientConfig{
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
	cfg.Logger = c.cfg.Logger
	p := &Producer{client: c, core: newCapnpCluster(c, cfg.MetadataMaxAge, cfg.Partitioner), cfg: cfg}
	if !cfg.DisableIdempotence {
		p.idem = &idempotence{logger: p.cfg.Logger}
	}
	// Every request of a connection may be one of the partitions' batches
	// in flight, as when each SendBatch call sent its own.
	p.pl = newPipeline(context.Background(), p, LingerNone, producerWindow, producerWindow)
	return p, nil
}

// producerWindow is the batches a Producer keeps in flight per partition
// and over all partitions: the connection's default bound on requests in
// flight, so that concurrent calls to one partition are pipelined as far
// as the connection allows.
const producerWindow = defaultMaxInFlight

// Client returns the producer's underlying Client (for admin requests).
func (p *Producer) Client() *Client { return p.client }

// Close closes the connections; sends in flight fail with ErrClosed. It
// returns at once: a Producer has nothing buffered (each Send and SendBatch
// waits for its own records), and its partition goroutines end as soon as
// the batches of the calls still waiting have failed.
func (p *Producer) Close() error { return p.core.close() }

// Send sends one record and waits for its acknowledgement. key nil means no
// key. The error is the Ack's Err.
func (p *Producer) Send(ctx context.Context, topic string, key, value []byte) (Ack, error) {
	acks, _ := p.SendBatch(ctx, []ProducerMessage{{Topic: topic, Key: key, Value: value}})
	return acks[0], acks[0].Err
}

// SendBatch sends msgs, which may span topics and partitions, and waits for
// all of them. It builds one batch per partition (split to stay under the
// server's maxBatchBytes) and sends the partitions in parallel. It returns
// one Ack per message, in the order of msgs, each with its own Err; the
// error is nil when every record was stored, and otherwise counts the
// failures and wraps the first one. It returns when ctx ends or within
// DeliveryTimeout, whatever the server does: the records not acknowledged
// by then fail (see ProducerConfig.DeliveryTimeout).
//
// A record over the server's maxRecordBytes, or over its topic's
// (TopicConfig.MaxRecordBytes) when smaller, fails with an
// api.ErrMessageTooLarge error, and one with a negative Timestamp with an
// api.ErrInvalidRequest error, without being sent, and the others are sent.
// When a partition's batch fails for good, its later batches in this call
// fail with the same error, so no record lands after a gap of its own call.
func (p *Producer) SendBatch(ctx context.Context, msgs []ProducerMessage) ([]Ack, error) {
	acks := make([]Ack, len(msgs))
	for i := range msgs {
		acks[i].Topic = msgs[i].Topic
	}
	deadline := time.Now().Add(p.cfg.DeliveryTimeout)
	groups := p.assign(ctx, msgs, acks, deadline)
	if len(groups) > 0 {
		sc := &sendCall{acks: acks, done: make(chan struct{})}
		parts := make(map[topicPartition][]*pbatch, len(groups))
		for tp, idx := range groups {
			parts[tp] = p.split(ctx, tp, msgs, idx, deadline, sc)
			sc.left += len(parts[tp])
		}
		for tp, bs := range parts {
			p.pl.enqueue(tp, bs)
		}
		sc.await(ctx, deadline, p)
	}
	var first error
	failed := 0
	for _, a := range acks {
		if a.Err != nil {
			failed++
			if first == nil {
				first = a.Err
			}
		}
	}
	if failed > 0 {
		return acks, fmt.Errorf("sdk: %d of %d records failed: %w", failed, len(msgs), first)
	}
	return acks, nil
}

// topicPartition names one partition.
type topicPartition struct {
	topic     string
	partition uint32
}

// assign picks each message's partition and groups message indices by
// partition, in input order. Messages that cannot be sent get their Err.
func (p *Producer) assign(ctx context.Context, msgs []ProducerMessage, acks []Ack, deadline time.Time) map[topicPartition][]int {
	maxRecord := int(p.client.Limits().MaxRecordBytes)
	groups := map[topicPartition][]int{}
	metas := map[string]topicMeta{}
	sticky := map[string]uint32{}
	errs := map[string]error{}
	for i := range msgs {
		m := &msgs[i]
		if m.Topic == "" {
			acks[i].Err = api.NewError(api.CodeInvalidTopicName, "empty topic name")
			continue
		}
		if err, ok := errs[m.Topic]; ok {
			acks[i].Err = err
			continue
		}
		if err := checkTimestamp(m); err != nil {
			acks[i].Err = err
			continue
		}
		tm, ok := metas[m.Topic]
		if !ok {
			var err error
			if tm, err = p.meta(ctx, m.Topic, deadline); err != nil {
				errs[m.Topic] = err
				acks[i].Err = err
				continue
			}
			metas[m.Topic] = tm
		}
		if err := checkRecordSize(m, maxRecord, tm); err != nil {
			acks[i].Err = err
			continue
		}
		part := p.core.place(m.Topic, m.Key, tm, sticky)
		acks[i].Partition = part
		tp := topicPartition{m.Topic, part}
		groups[tp] = append(groups[tp], i)
	}
	return groups
}

// meta returns topic's metadata (partition count, record limit) from the
// core (cached, or read from the server), retrying retriable failures
// until deadline. A topic absent from the metadata is UNKNOWN_TOPIC. When
// no node answers (a connection failure, or no answer by deadline) and
// the topic was known before, it returns the last known metadata: the
// records are then placed as before and fail, through their own delivery
// timeout, where the caller reports a record's failure (SendBatch's acks,
// BatchProducer's OnError), rather than failing the call that places them.
func (p *Producer) meta(ctx context.Context, topic string, deadline time.Time) (topicMeta, error) {
	if tm, ok := p.core.cached(topic); ok {
		return tm, nil // without the deadline's timer: BatchProducer.Send's fast path
	}
	var last error
	for attempt := 1; ; attempt++ {
		tm, err := attemptRequest(p, ctx, deadline, last, func(ctx context.Context) (topicMeta, error) { return p.core.topic(ctx, topic) })
		if err == nil {
			return tm, nil
		}
		if old, ok := p.core.lastKnown(topic); ok && (leaderGone(err) || errors.Is(err, ErrDeliveryTimeout)) {
			// No node answers (the metadata was marked stale by a
			// leader's connection failure), or none answered before the
			// delivery deadline: place with what was known; the sends
			// fail or move on their own, within their delivery timeout.
			return old, nil
		}
		if rerr := p.retry(ctx, err, attempt, deadline, "metadata "+topic); rerr != nil {
			return topicMeta{}, rerr
		}
		last = err
	}
}

// checkRecordSize refuses m when its key, value and headers are over the
// limit the server applies to its topic: the server's maxRecordBytes
// (serverMax; 0 when unknown, as on the gRPC plane), or the topic's
// max.record.bytes (TopicConfig.MaxRecordBytes, from the metadata) when
// smaller. The server refuses a whole batch holding such a record, so
// sent, it would fail every record batched with it; refused here, it
// fails alone.
func checkRecordSize(m *ProducerMessage, serverMax int, tm topicMeta) error {
	size := batch.RecordSize(m.Key, m.Value, toRecordHeaders(m.Headers))
	if tm.maxRecord > 0 && (serverMax <= 0 || tm.maxRecord < serverMax) {
		if size > tm.maxRecord {
			return api.NewError(api.CodeMessageTooLarge, "record of %d bytes (key+value+headers) over the maxRecordBytes %d of topic %q", size, tm.maxRecord, m.Topic)
		}
		return nil
	}
	if serverMax > 0 && size > serverMax {
		return api.NewError(api.CodeMessageTooLarge, "record of %d bytes (key+value+headers) over the server's maxRecordBytes %d", size, serverMax)
	}
	return nil
}

// attemptRequest runs one try of a request, bounded by deadline: when the
// deadline (and not ctx) cuts it short, the error is the delivery timeout
// wrapping last, the failure of the previous try.
func attemptRequest[T any](p *Producer, ctx context.Context, deadline time.Time, last error, do func(context.Context) (T, error)) (T, error) {
	dctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	v, err := do(dctx)
	if err != nil && dctx.Err() != nil && ctx.Err() == nil {
		return v, p.expired(last)
	}
	return v, err
}

// retry decides about a request that failed with err on its attempt-th
// try. It returns nil, after waiting the backoff, when the request should
// be sent again; otherwise the error to fail with: err itself when err is
// not retriable, the retries are spent or the producer is closed; an
// error wrapping both ctx's error and err when ctx ends (or Close comes)
// during the wait; the delivery timeout wrapping err when the next try
// would start after deadline.
func (p *Producer) retry(ctx context.Context, err error, attempt int, deadline time.Time, what string) error {
	if !IsRetriable(err) || p.cfg.Retries < 0 || attempt > p.cfg.Retries || p.client.isClosed() {
		return err
	}
	d := backoff(attempt, p.cfg.RetryBackoff, p.cfg.RetryBackoffMax)
	if time.Now().Add(d).After(deadline) {
		return p.expired(err)
	}
	p.cfg.Logger.Debug("sdk: retrying", "request", what, "attempt", attempt, "in", d, "err", err)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(p.client.closeCtx, cancel)()
	if serr := sleep(ctx, d); serr != nil {
		// Both stay visible: why the retries stopped (errors.Is with
		// context.Canceled, say) and what was being retried.
		return &retryStoppedError{stopped: serr, last: err}
	}
	return nil
}

// retryStoppedError is a request whose wait for its retry was cut short
// by its context or by Close: it wraps both that context's error and the
// failure being retried.
type retryStoppedError struct {
	stopped, last error
}

func (e *retryStoppedError) Error() string {
	return fmt.Sprintf("%v while waiting to retry after: %v", e.stopped, e.last)
}

func (e *retryStoppedError) Unwrap() []error { return []error{e.stopped, e.last} }

// split cuts the messages idx (all for tp, in order) into batches under
// the server's maxBatchBytes, for the pipeline, as one group of sc.
func (p *Producer) split(ctx context.Context, tp topicPartition, msgs []ProducerMessage, idx []int, deadline time.Time, sc *sendCall) []*pbatch {
	maxBatch := int(p.client.Limits().MaxBatchBytes)
	g := &pgroup{call: sc}
	var (
		bs   []*pbatch
		cur  *pbatch
		size int
	)
	for _, i := range idx {
		n := recordEstimate(&msgs[i])
		if cur == nil || (len(cur.idx) > 0 && size+n > maxBatch) {
			cur = &pbatch{tp: tp, ctx: ctx, deadline: deadline, group: g, done: sc.batchDone}
			bs = append(bs, cur)
			size = batchOverhead
		}
		cur.idx = append(cur.idx, i)
		cur.msgs = append(cur.msgs, msgs[i])
		size += n
	}
	return bs
}

// sendCall is one SendBatch call waiting for its batches in the
// pipeline. Its fields are guarded by mu.
type sendCall struct {
	// gate is held for reading while one of the call's batches is handed
	// to a connection, and for writing by await when the caller stops
	// waiting, so that no batch is handed over once the call returned.
	gate sync.RWMutex
	mu   sync.Mutex
	acks []Ack
	left int           // batches not yet finished
	over bool          // the caller stopped waiting: acks are its own again
	last error         // the latest failed attempt of one of its batches
	done chan struct{} // closed when left reaches 0
	bs   []*pbatch     // the finished batches, to tell the records left
}

// batchDone fills the acks of b's records (the pipeline's done of the
// call's batches).
func (sc *sendCall) batchDone(b *pbatch, res PublishResult, err error) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if sc.over {
		return
	}
	for j, i := range b.idx {
		if err != nil {
			sc.acks[i].Err = err
			continue
		}
		sc.acks[i].Offset = res.BaseOffset + uint64(j)
		sc.acks[i].Durability = res.Durability
		sc.acks[i].Replicas = res.Replicas
	}
	sc.bs = append(sc.bs, b)
	sc.left--
	if sc.left == 0 {
		close(sc.done)
	}
}

// moved records that b, one of the call's batches, now goes to the
// partition b.tp (its keyless records were moved off a failed leader):
// its acks name that partition, unless the caller stopped waiting.
func (sc *sendCall) moved(b *pbatch) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if sc.over {
		return
	}
	for _, i := range b.idx {
		sc.acks[i].Partition = b.tp.partition
	}
}

// stopped reports whether the caller stopped waiting.
func (sc *sendCall) stopped() bool {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	return sc.over
}

// note records err, a failed attempt of one of the call's batches, for the
// error of the records left when the caller stops waiting.
func (sc *sendCall) note(err error) {
	sc.mu.Lock()
	sc.last = err
	sc.mu.Unlock()
}

// await waits until every batch of the call is finished, ctx ends (the
// records left fail with ctx's error, wrapping the last failure) or the
// delivery deadline passes (they fail with the delivery timeout).
// Batches still in the pipeline then fail there unsent, or, in flight,
// are no longer awaited.
func (sc *sendCall) await(ctx context.Context, deadline time.Time, p *Producer) {
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	var stop func(last error) error
	select {
	case <-sc.done:
		return
	case <-ctx.Done():
		stop = func(last error) error { return stopped(ctx.Err(), last) }
	case <-timer.C:
		stop = p.expired
	}
	// A batch being handed to a connection is bounded by ctx and the
	// deadline too: the gate is free at once.
	sc.gate.Lock()
	defer sc.gate.Unlock()
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if sc.left == 0 {
		return
	}
	sc.over = true
	finished := make(map[int]bool)
	for _, b := range sc.bs {
		for _, i := range b.idx {
			finished[i] = true
		}
	}
	err := stop(sc.last)
	for i := range sc.acks {
		if sc.acks[i].Err == nil && !finished[i] {
			sc.acks[i].Err = err
		}
	}
}

func toRecordHeaders(hs []Header) []batch.RecordHeader {
	if len(hs) == 0 {
		return nil
	}
	out := make([]batch.RecordHeader, len(hs))
	for i, h := range hs {
		out[i] = batch.RecordHeader{Key: h.Key, Value: h.Value}
	}
	return out
}
