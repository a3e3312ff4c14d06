package sdk

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/seedqueue/sq/api/sqv1"
)

// GrpcProducerConfig configures a GrpcProducer. The zero value is valid:
// every zero field takes the default named in its comment.
type GrpcProducerConfig struct {
	GrpcConfig
	// Partitioner places keyed records. Default HashPartitioner.
	Partitioner Partitioner
	// Acks is when the partition's leader acknowledges a request's
	// records: AcksAll (the default) or AcksLeader, as
	// ProducerConfig.Acks.
	Acks Acks
	// DisableIdempotence turns the idempotent producer off (it is on by
	// default), as ProducerConfig.DisableIdempotence: requests then carry
	// no producer id and sequence, and a request retried after its
	// response was lost (a connection failure, RequestTimeout, a
	// failover) may be stored twice. With idempotence, the producer asks
	// the first partition leader it publishes to for a producer id
	// (Messaging.InitProducerId) and stamps each Publish with it and a
	// per-partition sequence (PublishRequest.idempotent and the fields
	// after it), so that the partition's leader stores a retried request
	// once and answers with its original offsets, and a partition has
	// one request in flight at a time (see GrpcProducer). Against a
	// server that does not grant producer ids (InitProducerId
	// Unimplemented) the producer falls back to no idempotence, with one
	// warning in Logger.
	DisableIdempotence bool
	// Retries is how many times a request that failed with a retriable
	// error is sent again. Default 10; RetriesNone sends each request
	// once (any other negative value is refused by Validate).
	Retries int
	// RetryBackoff is the wait before the first retry, doubled per retry
	// with jitter up to RetryBackoffMax. Defaults 100ms and 2s.
	RetryBackoff    time.Duration
	RetryBackoffMax time.Duration
	// MetadataMaxAge is how long a topic's metadata (id, partition count,
	// partition leaders, record limit) is cached. Default 5m; read again,
	// before the retry, after a publish fails with UNKNOWN_TOPIC,
	// UNKNOWN_TOPIC_ID, UNKNOWN_PARTITION, NOT_LEADER (unless it named
	// the leader), LEADER_NOT_AVAILABLE, NO_QUORUM or MESSAGE_TOO_LARGE.
	MetadataMaxAge time.Duration
	// BatchBytesMax bounds the record bytes (keys, values, headers) of one
	// Publish request; a partition's records above it go in several
	// requests, in order. Default 1 MiB.
	BatchBytesMax int
	// DeliveryTimeout bounds a SendBatch (or Send) from its call to every
	// record's acknowledgement or failure, metadata reads, retries and
	// reconnects included, as ProducerConfig.DeliveryTimeout (Kafka's
	// delivery.timeout.ms): no attempt runs past it, a request not yet
	// sent by then fails unsent, and the record's error wraps
	// ErrDeliveryTimeout and the last failure seen. Default 30s.
	DeliveryTimeout time.Duration
	// Logger receives retries. Default: discard.
	Logger *slog.Logger
}

func (c *GrpcProducerConfig) defaults() {
	c.GrpcConfig.defaults()
	if c.Partitioner == nil {
		c.Partitioner = HashPartitioner{}
	}
	if c.Retries == 0 {
		c.Retries = 10
	}
	if c.RetryBackoff == 0 {
		c.RetryBackoff = 100 * time.Millisecond
	}
	if c.RetryBackoffMax == 0 {
		c.RetryBackoffMax = 2 * time.Second
	}
	if c.MetadataMaxAge == 0 {
		c.MetadataMaxAge = 5 * time.Minute
	}
	if c.BatchBytesMax == 0 {
		c.BatchBytesMax = 1 << 20
	}
	if c.DeliveryTimeout == 0 {
		c.DeliveryTimeout = DefaultDeliveryTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// GrpcProducer is the Producer for clients that use the gRPC plane
// (Messaging.Publish) instead of Cap'n Proto: the same Send and SendBatch,
// partitioning, ordering and retries as Producer, and Acks.
//
// It is idempotent by default, as Producer (KIP-98; see
// GrpcProducerConfig.DisableIdempotence): every Publish carries the
// producer's id and epoch and the partition's next sequence, and a retry
// (after a lost response, RequestTimeout, NOT_LEADER or a failover) keeps
// its sequence, so a leader that stored the first attempt answers with the
// original offsets: each acknowledged record is stored once, in order, per
// partition, for the producer's life. The guarantee does not cover a
// record whose send failed (it may or may not be stored), keyless records
// moved to another partition off a leader that could not be reached (that
// leader may have stored them too), nor a server from before
// PublishRequest.idempotent, which ignores the stamp. A request refused
// with OUT_OF_ORDER_SEQUENCE or UNKNOWN_PRODUCER_ID fails, and its
// partition goes on with a new producer id; INVALID_PRODUCER_EPOCH fences
// the producer (ErrProducerFenced). With idempotence a partition has one
// request in flight at a time: a request waits for the previous one of
// its partition (of any SendBatch call) to be acknowledged or to fail, so
// retries never reorder a partition's sequences; requests to different
// partitions run in parallel. A GrpcProducer is safe for concurrent use.
type GrpcProducer struct {
	cfg   GrpcProducerConfig
	admin *Admin
	core  *cluster     // metadata and placement, as for Producer
	route *grpcLeaders // a connection per partition leader
	runs  *grpcRuns    // nil with DisableIdempotence

	closeCtx    context.Context // cancelled by Close: ends the retry waits
	closeCancel context.CancelFunc

	throttle throttleCounters // ThrottleStats
}

// ThrottleStats returns the publishes the servers throttled for the
// principal's produce byte-rate quota (PublishResponse.throttle_time_ms).
// Over gRPC the server itself holds a throttled response back for that
// long, so the producer does not wait again.
func (p *GrpcProducer) ThrottleStats() ThrottleStats { return p.throttle.snapshot() }

// NewGrpcProducer returns a producer for cfg.Addr. It does not contact the
// server: the first send connects. It fails with ErrInvalidConfig when
// Validate refuses cfg.
func NewGrpcProducer(cfg GrpcProducerConfig) (*GrpcProducer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.defaults()
	conn, err := dialGrpc(cfg.GrpcConfig)
	if err != nil {
		return nil, err
	}
	admin := newAdminConn(AdminConfig{cfg.GrpcConfig}, conn)
	p := &GrpcProducer{cfg: cfg, admin: admin, core: newCluster(grpcMetadata{admin}, nil, cfg.MetadataMaxAge, cfg.Partitioner)}
	p.route = newGrpcLeaders(cfg.GrpcConfig, p.core, conn)
	if !cfg.DisableIdempotence {
		p.runs = &grpcRuns{idem: &idempotence{logger: cfg.Logger}, runs: map[topicPartition]*grpcSeq{}}
	}
	p.closeCtx, p.closeCancel = context.WithCancel(context.Background())
	return p, nil
}

// Admin returns the Admin sharing the producer's connection.
func (p *GrpcProducer) Admin() *Admin { return p.admin }

// Close closes the connection; sends in flight fail, those waiting to
// retry at once.
func (p *GrpcProducer) Close() error {
	p.closeCancel()
	p.core.close()
	p.route.close()
	return p.admin.Close()
}

// Send sends one record and waits for its acknowledgement. The error is
// the Ack's Err.
func (p *GrpcProducer) Send(ctx context.Context, topic string, key, value []byte) (Ack, error) {
	acks, err := p.SendBatch(ctx, []ProducerMessage{{Topic: topic, Key: key, Value: value}})
	if err != nil {
		return Ack{Topic: topic, Err: err}, err
	}
	return acks[0], acks[0].Err
}

// SendBatch sends msgs, one Publish per partition (several when over
// BatchBytesMax), and returns one Ack per message in input order. The
// error is non-nil only when no message could be placed (ctx done before
// any send); per-record failures are in the Acks. It returns within
// DeliveryTimeout whatever the server does: the records not acknowledged
// by then fail with an error wrapping ErrDeliveryTimeout. A record with a
// negative Timestamp (api.ErrInvalidRequest), or over its topic's
// maxRecordBytes (TopicConfig.MaxRecordBytes; api.ErrMessageTooLarge),
// fails unsent, and the others are sent.
func (p *GrpcProducer) SendBatch(ctx context.Context, msgs []ProducerMessage) ([]Ack, error) {
	acks := make([]Ack, len(msgs))
	deadline := time.Now().Add(p.cfg.DeliveryTimeout)
	groups, order, err := p.place(ctx, msgs, acks, deadline)
	if err != nil {
		return nil, err
	}
	var wg sync.WaitGroup
	for _, k := range order {
		idx := groups[k]
		wg.Go(func() { p.sendPartition(ctx, k, msgs, idx, acks, deadline) })
	}
	wg.Wait()
	return acks, nil
}

// expired returns the error of a record whose delivery timeout passed
// after last (nil when no attempt failed yet).
func (p *GrpcProducer) expired(last error) error {
	if errors.Is(last, ErrDeliveryTimeout) {
		return last
	}
	return &deliveryTimeoutError{timeout: p.cfg.DeliveryTimeout, last: last}
}

// place picks each message's partition, grouping the indexes of msgs by
// partition in input order. Messages of unknown topics get their Ack.Err.
func (p *GrpcProducer) place(ctx context.Context, msgs []ProducerMessage, acks []Ack, deadline time.Time) (map[topicPartition][]int, []topicPartition, error) {
	groups := map[topicPartition][]int{}
	var order []topicPartition
	sticky := map[string]uint32{}
	errs := map[string]error{} // a topic whose metadata failed fails once
	for i, m := range msgs {
		acks[i].Topic = m.Topic
		if err := errs[m.Topic]; err != nil {
			acks[i].Err = err
			continue
		}
		if err := checkTimestamp(&msgs[i]); err != nil {
			acks[i].Err = err
			continue
		}
		tm, err := p.topicMeta(ctx, m.Topic, deadline)
		if err != nil {
			if ctx.Err() != nil {
				return nil, nil, ctx.Err()
			}
			errs[m.Topic] = err
			acks[i].Err = err
			continue
		}
		if err := checkRecordSize(&msgs[i], 0, tm); err != nil {
			acks[i].Err = err
			continue
		}
		k := topicPartition{m.Topic, p.core.place(m.Topic, m.Key, tm, sticky)}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], i)
	}
	return groups, order, nil
}

// topicMeta returns topic's metadata (cached, or read from the server),
// retrying retriable failures (the server restarting, say) with backoff
// as publish does, until deadline: a read cut short by the deadline, or a
// retry that would start after it, fails with the delivery timeout
// wrapping the last failure.
func (p *GrpcProducer) topicMeta(ctx context.Context, topic string, deadline time.Time) (topicMeta, error) {
	var last error
	for attempt := 0; ; attempt++ {
		dctx, cancel := context.WithDeadline(ctx, deadline)
		tm, err := p.core.topic(dctx, topic)
		cut := err != nil && dctx.Err() != nil && ctx.Err() == nil
		cancel()
		if cut {
			return tm, p.expired(last)
		}
		if old, ok := p.core.lastKnown(topic); err != nil && ok && leaderGone(err) {
			return old, nil // no node answers: place with what was known, as Producer does
		}
		if err == nil || !IsRetriable(err) || attempt >= p.cfg.Retries || p.cfg.Retries < 0 {
			return tm, err
		}
		d := backoff(attempt+1, p.cfg.RetryBackoff, p.cfg.RetryBackoffMax)
		if time.Now().Add(d).After(deadline) {
			return tm, p.expired(err)
		}
		p.cfg.Logger.Warn("retrying metadata", "topic", topic, "attempt", attempt+1, "err", err)
		if !p.sleep(ctx, d) {
			return tm, err
		}
		last = err
	}
}

// sendPartition publishes the messages idx of one partition, in order, in
// requests of at most BatchBytesMax record bytes, each after the previous
// one was acknowledged. When the partition's leader cannot be reached (or
// is shutting down), a request that holds only keyless records moves, with
// the records after it, to another partition whose leader is available
// (cluster.replace), as the pipeline of Producer does; keyed records fail
// with a *LeaderConnectionError. With idempotence each request holds its
// partition's turn (grpcRuns) from its stamp to its last attempt; a moved
// request leaves its partition's run broken and takes the next sequence
// of its new partition.
func (p *GrpcProducer) sendPartition(ctx context.Context, k topicPartition, msgs []ProducerMessage, idx []int, acks []Ack, deadline time.Time) {
	const maxMoves = 16 // each move follows a leader marked unavailable: a bound, not a policy
	moves := 0
	for len(idx) > 0 {
		n, size := 0, 0
		for n < len(idx) && (n == 0 || size+recordBytes(msgs[idx[n]]) <= p.cfg.BatchBytesMax) {
			size += recordBytes(msgs[idx[n]])
			n++
		}
		chunk := idx[:n]
		free := true // every record of chunk is keyless
		req := &sqv1.PublishRequest{Topic: k.topic, Partition: int32(k.partition), Records: make([]*sqv1.Record, len(chunk)), Acks: p.cfg.Acks.proto()}
		for j, i := range chunk {
			req.Records[j] = recordToProto(msgs[i])
			free = free && msgs[i].Key == nil
		}
		run, err := p.runs.take(ctx, p.closeCtx, k, deadline, func() error { return p.expired(nil) })
		var res *sqv1.PublishResponse
		if err == nil {
			res, err = p.publish(ctx, req, deadline, free, run)
		}
		if free && err != nil && leaderGone(err) {
			if np, ok := p.core.replace(k.topic, k.partition); ok && moves < maxMoves && ctx.Err() == nil && time.Now().Before(deadline) {
				_ = p.broke(run, k, req, err)
				run.release()
				moves++
				p.cfg.Logger.Debug("keyless records moved off a failed leader", "topic", k.topic, "from", k.partition, "to", np)
				k.partition = np
				continue // the same chunk, on np
			}
			res, err = p.publish(ctx, req, deadline, false, run)
		}
		if err != nil {
			err = leaderConnErr(k, p.core.leaderName(k.topic, k.partition, p.cfg.Addr), p.broke(run, k, req, err))
		} else {
			p.core.noteDelivered(k.topic, k.partition)
		}
		run.release()
		idx = idx[n:]
		p.ack(k, chunk, idx, res, err, acks)
		if err != nil {
			return
		}
	}
}

// ack gives the records chunk of partition k their Acks from res, or
// err; on err the records rest after them fail with it too, since later
// records must not overtake a failed one.
func (p *GrpcProducer) ack(k topicPartition, chunk, rest []int, res *sqv1.PublishResponse, err error, acks []Ack) {
	for j, i := range chunk {
		acks[i].Partition = k.partition
		if err != nil {
			acks[i].Err = err
			continue
		}
		acks[i].Offset = res.BaseOffset + uint64(j)
		acks[i].Durability = Durability(res.Durability)
		acks[i].Replicas = uint32(max(res.Replicas, 1)) // 0: a server from before replication
	}
	if err != nil {
		for _, i := range rest {
			acks[i].Partition, acks[i].Err = k.partition, err
		}
	}
}

// publish sends req to its partition's leader, retrying retriable errors
// with backoff until deadline: an attempt cut short by the deadline, or a
// retry that would start after it, fails with the delivery timeout
// wrapping the last failure. Each attempt goes to the leader as the core
// knows it then: after a NOT_LEADER, the node it named, else the one the
// metadata, read again, names. With run (idempotence; the caller holds
// its turn) each attempt is stamped first (stamp): the first with the
// run's next sequence, the retries with the same one. With movable (a
// request of keyless records only) a leader that cannot be reached or is
// shutting down (leaderGone) ends the attempts at once: the caller moves
// the records to another partition.
func (p *GrpcProducer) publish(ctx context.Context, req *sqv1.PublishRequest, deadline time.Time, movable bool, run *grpcSeq) (*sqv1.PublishResponse, error) {
	var last error
	for attempt := 0; ; attempt++ {
		dctx, cancel := context.WithDeadline(ctx, deadline)
		msg := p.route.messaging(dctx, req.Topic, uint32(req.Partition))
		var res *sqv1.PublishResponse
		err := p.stamp(dctx, run, req, msg, p.core.leaderName(req.Topic, uint32(req.Partition), p.cfg.Addr))
		if err == nil {
			res, err = unary(dctx, p.cfg.RequestTimeout, msg.Publish, req)
		}
		if ms := res.GetThrottleTimeMs(); ms > 0 {
			p.throttle.add(time.Duration(ms) * time.Millisecond)
		}
		if err != nil {
			p.core.noteProduceError(req.Topic, uint32(req.Partition), err)
		}
		cut := err != nil && dctx.Err() != nil && ctx.Err() == nil
		cancel()
		if cut {
			return nil, p.expired(last)
		}
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			// RequestTimeout ran out: the server did not answer in time,
			// retried as a lost connection is (with idempotence under the
			// same sequence, so a leader that stored it answers with its
			// offsets; without, it may be stored twice).
			err = fmt.Errorf("%w: no response within %v", ErrConnection, p.cfg.RequestTimeout)
		}
		if err == nil || !IsRetriable(err) || attempt >= p.cfg.Retries || p.cfg.Retries < 0 || (movable && leaderGone(err)) {
			return res, err
		}
		d := backoff(attempt+1, p.cfg.RetryBackoff, p.cfg.RetryBackoffMax)
		if time.Now().Add(d).After(deadline) {
			return nil, p.expired(err)
		}
		p.cfg.Logger.Warn("retrying publish", "topic", req.Topic, "partition", req.Partition, "attempt", attempt+1, "err", err)
		if !p.sleep(ctx, d) {
			return nil, err
		}
		last = err
	}
}

// sleep waits for d; false when ctx ended or the producer was closed first.
func (p *GrpcProducer) sleep(ctx context.Context, d time.Duration) bool {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(p.closeCtx, cancel)()
	return sleep(ctx, d) == nil
}

// recordBytes is the payload size of m (key, value, headers).
func recordBytes(m ProducerMessage) int {
	n := len(m.Key) + len(m.Value)
	for _, h := range m.Headers {
		n += len(h.Key) + len(h.Value)
	}
	return n
}

func recordToProto(m ProducerMessage) *sqv1.Record {
	r := &sqv1.Record{Key: m.Key, Value: m.Value, TimestampMs: m.Timestamp}
	if m.Key != nil && len(m.Key) == 0 {
		r.Key = []byte{} // keep "empty key" distinct from "no key"
	}
	for _, h := range m.Headers {
		r.Headers = append(r.Headers, &sqv1.RecordHeader{Key: []byte(h.Key), Value: h.Value})
	}
	return r
}
