package engine

import (
	"context"
	"time"
)

// Pending is one batch queued by AppendAsync and not yet waited for. Its
// place in the partition's log order is fixed: batches queued later on
// the same partition get higher offsets.
type Pending struct {
	e         *Engine
	part      *partition
	req       *appendReq
	ctx       context.Context // the caller's, for the observer
	topic     string
	partition int
	bytes     int
	records   uint32
	start     time.Time
	waited    bool
	acks      Acks // from the context of AppendAsync
}

// AppendAsync validates the batch b (docs/architecture.md §3.2) and queues it in the
// partition's append FIFO, returning once it is queued, not once it is
// committed: the order of AppendAsync calls on one partition is the order
// of the batches in the log. The engine takes ownership of b.
//
// after, when not nil, is an earlier Pending of the same partition (for
// example the previous publish of the same connection): if after fails,
// this batch fails with the same error without being written, so a chain
// of batches is stored as a prefix (its first failure ends it). Batches of
// one group commit succeed or fail together, so this holds within a commit
// too.
//
// Every Pending must be waited for exactly once with Wait. ctx bounds the
// wait for room in the queue (appendQueueLen batches). Errors, before
// anything is queued: UNKNOWN_TOPIC, UNKNOWN_PARTITION, MESSAGE_TOO_LARGE,
// CORRUPT_BATCH, DISK_FULL, PARTITION_FAILED, SHUTTING_DOWN,
// INVALID_REQUEST (after belongs to another partition), or ctx's error;
// with Options.Replication also NOT_LEADER (this node does not lead the
// partition) and, when ctx carries AcksAll (the default, AcksFrom),
// NOT_ENOUGH_REPLICAS (the in-sync set is below min.insync.replicas).
func (e *Engine) AppendAsync(ctx context.Context, topicName string, partition int, b []byte, after *Pending) (*Pending, error) {
	e.obs.inFlight.Add(1)
	pd := &Pending{e: e, ctx: ctx, topic: topicName, partition: partition, bytes: len(b), acks: AcksFrom(ctx)}
	if e.opts.Observer != nil {
		pd.start = time.Now()
	}
	part, req, n, err := e.enqueueBatch(ctx, topicName, partition, b, after)
	if err != nil {
		pd.done(AppendResult{}, err)
		return nil, err
	}
	// The partition the batch was queued to: looked up again, it may be
	// gone (the topic deleted meanwhile).
	pd.part, pd.req, pd.records = part, req, n
	return pd, nil
}

// Wait returns the outcome of the queued batch once the topic's sync policy
// is satisfied. Errors: STORAGE_ERROR, DISK_FULL, PARTITION_FAILED,
// SHUTTING_DOWN, the error of the batch it was chained behind, or ctx's
// error (the batch may still be appended after a cancelled wait). Wait
// must be called once; later calls return the same outcome without
// reporting it again.
//
// On a replicated leader (Options.Replication) with AcksAll in the
// context of AppendAsync, Wait returns once the high watermark has passed
// the batch, with Durability DurabilityReplicated and Replicas the size of
// the in-sync set; it fails with NOT_ENOUGH_REPLICAS when the in-sync set
// falls below min.insync.replicas first, and NOT_LEADER when the
// leadership moves first (the batch may or may not survive: a retry with
// an idempotent producer is safe). With AcksLeader it returns after the
// local commit, Replicas 1. A batch refused at its commit because this
// node stopped leading fails with NOT_LEADER, unwritten.
func (pd *Pending) Wait(ctx context.Context) (AppendResult, error) {
	res, err := pd.req.wait(ctx)
	if err == nil && pd.part.repl != nil && pd.acks == AcksAll {
		res, err = pd.part.awaitReplicated(ctx, res, pd.req.epoch)
	}
	if !pd.waited {
		pd.waited = true
		pd.done(res, err)
	}
	return res, err
}

// Done returns a channel that is closed once the engine no longer holds
// the batch given to AppendAsync: its commit wrote it (or refused it) and
// is over with it. Replicas and consumers read the log, never this
// buffer, so the caller may reuse the buffer once Done is closed, even
// before Wait returns (a replicated wait) and after a Wait cut short by
// its ctx (the batch was then still queued; Done closes once it is
// committed, or refused at the partition's close).
func (pd *Pending) Done() <-chan struct{} { return pd.req.done }

// done ends the append's in-flight count and reports it to the observer.
func (pd *Pending) done(res AppendResult, err error) {
	e := pd.e
	e.obs.inFlight.Add(-1)
	if o := e.opts.Observer; o != nil {
		o.AppendDone(pd.ctx, AppendEvent{Topic: pd.topic, Partition: pd.partition, Records: int(res.RecordCount), Bytes: pd.bytes,
			Start: pd.start, Duration: time.Since(pd.start), BaseOffset: res.BaseOffset, Err: err})
	}
}
