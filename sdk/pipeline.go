package sdk

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/seedqueue/sq/api/batch"
)

// pipeline is the produce pipeline of Producer and BatchProducer
// (docs/architecture.md §4.2): per partition, an open batch that gathers
// records for Linger (BatchProducer only), a queue of closed batches, and a
// window of up to window batches in flight on one connection, resolved and
// retried in order. sem bounds the requests in flight over all partitions:
// one per batch on a connection that sends each batch as a publish of its
// own, one per publishBatches request otherwise (pubbatch.go). One goroutine (run) serves a partition while it has
// batches open, queued or in flight, and ends when it is idle.
type pipeline struct {
	p      *Producer       // client, retry policy and metadata cache
	linger time.Duration   // how long an open batch waits; LingerNone: until the partition has nothing in flight
	window int             // batches of one partition in flight
	sem    chan struct{}   // one token per request in flight, over all partitions
	ctx    context.Context // ends the pipeline: nothing more is sent, waits stop

	// closing is called, with mu held, when a partition's open batch is
	// closed; lingered is the done of such batches.
	closing  func(tp topicPartition)
	lingered func(b *pbatch, res PublishResult, err error)

	wg    sync.WaitGroup // one per running partition goroutine
	mu    sync.Mutex
	parts map[topicPartition]*ppart
}

// ppart is one partition of a pipeline. Its fields are guarded by
// pipeline.mu.
type ppart struct {
	tp      topicPartition
	open    []ProducerMessage // the open batch (BatchProducer)
	bytes   int               // encoded estimate of open, with batch overhead
	first   time.Time         // when open got its first record
	lastLen int               // records of the last closed open batch
	queued  []*pbatch         // closed batches not yet taken by run
	busy    int               // batches taken by run and not yet finished
	running bool              // run is serving the partition
	wake    chan struct{}     // buffered 1: wakes run
	seq     partSeq           // idempotent sequences; touched only by run
}

// pbatch is a closed batch: its records, the context and deadline that
// bound its delivery, and done, called once on the partition's goroutine
// with the outcome.
type pbatch struct {
	tp       topicPartition
	msgs     []ProducerMessage
	ctx      context.Context // its waiter's: a SendBatch call's ctx, or the pipeline's
	deadline time.Time       // DeliveryTimeout after its first record was accepted
	group    *pgroup         // nil for a BatchProducer batch
	idx      []int           // the SendBatch indices of msgs (group != nil)
	done     func(b *pbatch, res PublishResult, err error)
}

// pgroup is the batches of one SendBatch call to one partition: once one
// fails for good, the later ones fail with the same error unsent, so no
// record of the call lands after a gap of its own call. It is touched only
// by the partition's goroutine, except call, which has its own lock.
type pgroup struct {
	failed error
	call   *sendCall
}

// flight is a batch taken by the partition's goroutine: encoded, queued
// to be sent, in flight, or failed before it could be sent.
type flight struct {
	b       *pbatch
	data    []byte
	err     error    // why it failed before being sent (or could not be encoded)
	final   bool     // err ends it without a retry
	attempt int      // failed attempts while it was first in line
	pc      *pubCall // nil until sent
	last    error    // the failure of its previous attempt
	held    bool     // holds a token of pipeline.sem
	leader  string   // the address of the connection it was last handed to
	// The idempotent producer identity and base sequence stamped on data
	// (zero pid: none yet), and whether an attempt may have been stored
	// (its outcome is unknown), so that its retries keep them.
	pid         producerID
	seq         int32
	maybeStored bool
}

// newPipeline returns an empty pipeline for p's client.
func newPipeline(ctx context.Context, p *Producer, linger time.Duration, window, maxInFlight int) *pipeline {
	return &pipeline{
		p:      p,
		linger: linger,
		window: window,
		sem:    make(chan struct{}, maxInFlight),
		ctx:    ctx,
		parts:  map[topicPartition]*ppart{},
	}
}

// part returns tp's state, creating it on first use. Called with mu held.
func (pl *pipeline) part(tp topicPartition) *ppart {
	pp := pl.parts[tp]
	if pp == nil {
		pp = &ppart{tp: tp, wake: make(chan struct{}, 1)}
		pl.parts[tp] = pp
	}
	return pp
}

// kick makes pp's goroutine look at pp again, starting it when it is not
// running. Called with mu held.
func (pl *pipeline) kick(pp *ppart) {
	if pp.running {
		signal(pp.wake)
		return
	}
	pp.running = true
	pl.wg.Add(1)
	go pl.run(pp)
}

// enqueue appends closed batches bs, in order, to the queue of the
// already chosen partition tp. This is the pipeline's entry point for
// records placed by the caller.
func (pl *pipeline) enqueue(tp topicPartition, bs []*pbatch) {
	pl.mu.Lock()
	pp := pl.part(tp)
	pp.queued = append(pp.queued, bs...)
	pl.kick(pp)
	pl.mu.Unlock()
}

// closeOpen moves pp's open batch to its queue. Called with mu held.
func (pl *pipeline) closeOpen(pp *ppart) {
	if len(pp.open) == 0 {
		return
	}
	pp.queued = append(pp.queued, &pbatch{
		tp:       pp.tp,
		msgs:     pp.open,
		ctx:      pl.ctx,
		deadline: pp.first.Add(pl.p.cfg.DeliveryTimeout),
		done:     pl.lingered,
	})
	pp.lastLen = len(pp.open)
	pp.open = nil
	pp.bytes = 0
	if pl.closing != nil {
		pl.closing(pp.tp)
	}
	pl.kick(pp)
}

// signal wakes the owner of ch (buffered 1) without blocking.
func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// next takes pp's next queued batch, closing the open one first when its
// linger has passed and the window has room. With nothing to take it
// returns how long the open batch may still linger, or -1.
func (pl *pipeline) next(pp *ppart) (*pbatch, time.Duration) {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	if len(pp.queued) == 0 && len(pp.open) > 0 {
		if pp.busy >= pl.window || (pp.busy > 0 && pl.linger < 0) {
			// The window is full (or, without linger, a batch is in
			// flight: the open one gathers the records sent meanwhile
			// instead of going out as many tiny batches): the open batch
			// grows until it is full or a batch is done, as a Kafka
			// producer's ready batch waits for its in-flight slot.
			return nil, -1
		}
		if left := pl.linger - time.Since(pp.first); left > 0 {
			return nil, left
		}
		pl.closeOpen(pp)
	}
	if len(pp.queued) == 0 {
		return nil, -1
	}
	b := pp.queued[0]
	pp.queued[0] = nil
	pp.queued = pp.queued[1:]
	pp.busy++
	return b, 0
}

// idle ends pp's goroutine when pp has nothing left, or when the pipeline
// has ended (what is left is then failed by its owner). Called by run with
// an empty window.
func (pl *pipeline) idle(pp *ppart) bool {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	if pl.ctx.Err() == nil && (len(pp.open) > 0 || len(pp.queued) > 0) {
		return false
	}
	pp.running = false
	return true
}

// window is a partition goroutine's state: batches taken and encoded, to
// send in order (retries first), and the batches in flight, oldest first.
type window struct {
	pl    *pipeline
	pp    *ppart
	queue []*flight
	win   []*flight
	// stalled: a batch of win failed before it was sent; nothing more is
	// sent until it is first in line, so nothing overtakes it.
	stalled bool
	// batching: the last batch sent went to a connection that gathers
	// batches into publishBatches requests, so the next one takes no
	// token of pipeline.sem of its own.
	batching bool
	builder  batch.Builder
}

// run is the goroutine of one partition: it takes the partition's batches
// in order, encodes each (the next one while the window is full, so the
// build is off the serial path), sends up to window of them on one
// connection, and resolves them in order.
//
// Order: batches are written to the connection in order; every batch sent
// while an earlier one of the window is unanswered is marked chained, and
// the server fails it unwritten if that earlier one failed. So when the
// oldest batch fails, every later batch of the window fails too (or, from
// a server without that guarantee, is stored and a warning is logged); run
// then waits for the whole window, retries the failed batch (Retries, with
// backoff) and resends the later ones after it, in order. When the
// connection changes, the window drains before anything is sent on the
// new one.
func (pl *pipeline) run(pp *ppart) {
	defer pl.wg.Done()
	w := &window{pl: pl, pp: pp}
	linger := time.NewTimer(time.Hour)
	linger.Stop()
	defer linger.Stop()
	for {
		wait := w.fill()
		var lc <-chan time.Time
		if wait >= 0 {
			linger.Reset(wait)
			lc = linger.C
		}
		if len(w.win) == 0 {
			if w.pl.idle(pp) {
				return
			}
			select {
			case <-pp.wake:
			case <-lc:
			case <-pl.ctx.Done():
			}
			linger.Stop()
			continue
		}
		w.await(lc)
		linger.Stop()
	}
}

// await waits for the first event of a non-empty window: the oldest
// batch's response, its timeout or its waiter giving up, or (when nothing
// is queued) new work or the end of the open batch's linger (lc).
func (w *window) await(lc <-chan time.Time) {
	head := w.win[0]
	if head.pc == nil {
		w.resolve(PublishResult{}, head.err)
		return
	}
	var wake <-chan struct{}
	if len(w.queue) == 0 {
		wake = w.pp.wake
	}
	dl, strict := head.waitUntil()
	timer := time.NewTimer(time.Until(dl))
	defer timer.Stop()
	c := head.pc.c
	select {
	case r := <-head.pc.cl.ch:
		res, err := c.pubResult(head.pc, r)
		w.resolve(res, err)
	case <-wake:
	case <-lc:
	case <-timer.C:
		if strict {
			w.abandon(w.pl.p.expired(head.last))
		} else {
			// Closing the connection fails every call on it.
			c.timedOut(head.pc)
		}
	case <-head.b.ctx.Done():
		w.abandon(stopped(head.b.ctx.Err(), head.last))
	}
}

// waitUntil returns how long to wait for f's response: RequestTimeout
// after it was sent, or, for a SendBatch call's batch, its delivery
// deadline when that comes first (strict), since SendBatch returns by then.
func (f *flight) waitUntil() (time.Time, bool) {
	if f.b.group != nil && f.b.deadline.Before(f.pc.deadline) {
		return f.b.deadline, true
	}
	return f.pc.deadline, false
}

// stopped is the error of a batch whose waiter gave up (its context ended)
// after last, the failure of its previous attempt (nil if none).
func stopped(err, last error) error {
	if last == nil {
		return err
	}
	return &retryStoppedError{stopped: err, last: last}
}

// fill takes and sends batches while the window has room, and takes and
// encodes one more ahead when it is full. It returns how long the open
// batch may still linger, or -1.
func (w *window) fill() time.Duration {
	pl := w.pl
	for {
		if len(w.queue) == 0 {
			if pl.ctx.Err() != nil {
				return -1
			}
			b, wait := pl.next(w.pp)
			if b == nil {
				return wait
			}
			w.queue = append(w.queue, w.encode(b))
		}
		if len(w.win) >= pl.window || w.stalled || w.waitsForGroup(w.queue[0]) || !w.send(w.queue[0]) {
			return -1
		}
		w.queue[0] = nil
		w.queue = w.queue[1:]
	}
}

// encode builds b's batch. The records of a SendBatch call that stopped
// waiting are not read (they are the caller's again): b then fails.
func (w *window) encode(b *pbatch) *flight {
	f := &flight{b: b}
	if g := b.group; g != nil {
		g.call.mu.Lock()
		defer g.call.mu.Unlock()
		if g.call.over {
			f.err, f.final = context.Cause(b.ctx), true
			if f.err == nil {
				f.err = w.pl.p.expired(nil)
			}
			return f
		}
	}
	f.data, f.err = encodeMessages(&w.builder, b.msgs)
	f.final = f.err != nil
	return f
}

// waitsForGroup reports whether an earlier batch of f's SendBatch call is
// in flight: a call's batches of one partition are sent one after the
// other, each after the previous one was acknowledged (Producer), so a
// failed one never has a later one of its call stored behind it, even by
// a server that does not fail chained publishes.
func (w *window) waitsForGroup(f *flight) bool {
	if f.b.group == nil {
		return false
	}
	for _, g := range w.win {
		if g.b.group == f.b.group {
			return true
		}
	}
	return false
}

// send sends f (or records why it cannot be) and adds it to the window; it
// returns false, leaving f queued, when it must wait for the window.
func (w *window) send(f *flight) bool {
	pl := w.pl
	var want *conn
	if n := len(w.win); n > 0 {
		want = w.win[n-1].pc.cn // not stalled: every flight of win was sent
	}
	// A batch takes a token of the bound on requests in flight when it is
	// a request of its own; on a connection that gathers batches into
	// publishBatches requests, the request takes it (pubbatch.go).
	if !w.batching {
		if want != nil {
			select {
			case pl.sem <- struct{}{}:
			default:
				return false // other partitions hold the tokens: wait for ours
			}
		} else {
			pl.sem <- struct{}{}
		}
		f.held = true
	}
	b := f.b
	switch {
	case f.err != nil:
	case b.group != nil && b.group.failed != nil:
		f.err, f.final = b.group.failed, true
	case b.ctx.Err() != nil:
		f.err, f.final = stopped(b.ctx.Err(), f.last), true
	case !time.Now().Before(b.deadline):
		// Its delivery timeout passed while it waited: it fails unsent.
		f.err, f.final = pl.p.expired(f.last), true
	default:
		w.publish(f, want)
	}
	if f.pc != nil {
		if f.pc.batched && f.held {
			f.held = false
			<-pl.sem
		}
		w.batching = f.pc.batched
	}
	if errors.Is(f.err, errConnSwitched) {
		f.err = nil
		if f.held {
			f.held = false
			<-pl.sem
		}
		return false
	}
	if f.err != nil {
		f.pc = nil
		w.stalled = true
	}
	w.win = append(w.win, f)
	return true
}

// publish hands f to its partition's connection (want, when not nil),
// bounded by its waiter's context and its delivery deadline. The batch of
// a SendBatch call is handed over under the call's gate, and not at all
// once the call stopped waiting: so no record of a call that has returned
// is written afterwards.
func (w *window) publish(f *flight, want *conn) {
	pl, b := w.pl, f.b
	if g := b.group; g != nil {
		g.call.gate.RLock()
		defer g.call.gate.RUnlock()
		if g.call.stopped() {
			f.err, f.final = context.Cause(b.ctx), true
			if f.err == nil {
				f.err = pl.p.expired(f.last)
			}
			return
		}
	}
	// The dial and the wait for the writer end at the deadline too.
	ctx, cancel := context.WithDeadline(b.ctx, b.deadline)
	defer cancel()
	tp := w.pp.tp
	c := pl.p.core.client(ctx, tp.topic, tp.partition)
	f.leader = c.cfg.Addr
	if err := w.stamp(ctx, f, c); err != nil {
		f.err, f.final = err, !IsRetriable(err)
		if ctx.Err() != nil && b.ctx.Err() == nil {
			f.err, f.final = pl.p.expired(f.last), true
		}
		return
	}
	var gate *sendCall
	if g := b.group; g != nil {
		gate = g.call
	}
	f.pc, f.err = c.startPublish(ctx, want, tp.topic, tp.partition, f.data, want != nil, pl.p.cfg.Acks, pl.sem, gate)
	if f.err != nil && ctx.Err() != nil && b.ctx.Err() == nil {
		f.err, f.final = pl.p.expired(f.last), true
	}
}

// resolve handles the outcome of the oldest batch in flight.
func (w *window) resolve(res PublishResult, err error) {
	pl := w.pl
	head := w.win[0]
	w.pop()
	if err == nil {
		w.finish(head, res, nil)
		return
	}
	tp := w.pp.tp
	pl.p.core.noteProduceError(tp.topic, tp.partition, err) // the retry goes to the leader named, or reads the metadata again
	if head.pc != nil && outcomeUnknown(err) {
		head.maybeStored = true
	}
	if g := head.b.group; g != nil {
		g.call.note(err)
	}
	// The later batches in flight fail too (chained): collect them, in
	// order, to resend after head.
	var again []*flight
	for len(w.win) > 0 {
		f := w.win[0]
		ferr := f.err
		var fres PublishResult
		if f.pc != nil {
			fres, ferr = w.wait(f)
		}
		w.pop()
		if f.pc != nil && ferr != nil && outcomeUnknown(ferr) {
			f.maybeStored = true
		}
		if ferr == nil {
			pl.p.cfg.Logger.Warn("sdk: a batch sent after a failed one was stored before its retry (the server does not fail chained publishes)",
				"topic", tp.topic, "partition", tp.partition)
			w.finish(f, fres, nil)
			continue
		}
		if f.final {
			w.finish(f, PublishResult{}, ferr)
			continue
		}
		f.pc, f.err, f.last = nil, nil, ferr
		again = append(again, f)
	}
	w.stalled = false
	if !head.final && leaderGone(err) && w.replace(head, again) {
		return
	}
	head.attempt++
	head.pc, head.err, head.last = nil, nil, err
	if head.final {
		w.finish(head, PublishResult{}, err)
	} else if rerr := pl.p.retry(head.b.ctx, err, head.attempt, head.b.deadline, fmt.Sprintf("publish %s/%d", tp.topic, tp.partition)); rerr != nil {
		w.finish(head, PublishResult{}, rerr)
	} else {
		again = append([]*flight{head}, again...)
	}
	w.queue = append(again, w.queue...)
}

// replace moves head, which failed because its leader could not be
// reached or is shutting down, to another partition whose leader is
// available, when it holds only keyless records (which may go to any
// partition), with the flights of again (the later ones that failed with
// it) that hold only keyless records too; the others are queued to be
// sent again here, in order. It returns false, changing nothing, when
// head has a keyed record or no other partition's leader is available:
// head is then retried here. A moved batch may have been stored by the
// leader that failed (its answer was lost): it is delivered at least
// once, idempotent producer or not. It is encoded again on its new
// partition and takes that partition's next sequence when sent; the
// partition it left goes on with a new producer id (its run of sequences
// has a hole).
func (w *window) replace(head *flight, again []*flight) bool {
	pl, tp := w.pl, w.pp.tp
	if !keyless(head.b.msgs) {
		return false
	}
	np, ok := pl.p.core.replace(tp.topic, tp.partition)
	if !ok {
		return false
	}
	to := topicPartition{tp.topic, np}
	moved := []*pbatch{head.b}
	_ = w.broke(head, nil) // its sequence leaves the partition: a hole in the run
	var kept []*flight
	for _, f := range again {
		if keyless(f.b.msgs) && !f.final {
			moved = append(moved, f.b)
			_ = w.broke(f, nil)
		} else {
			kept = append(kept, f)
		}
	}
	groups := map[*pgroup]*pgroup{}
	for _, b := range moved {
		b.tp = to
		if g := b.group; g != nil {
			ng := groups[g]
			if ng == nil {
				ng = &pgroup{call: g.call}
				groups[g] = ng
			}
			b.group = ng
			g.call.moved(b)
		}
	}
	pl.p.cfg.Logger.Debug("sdk: keyless batches moved off a failed leader", "topic", tp.topic,
		"from", tp.partition, "to", np, "batches", len(moved), "leader", head.leader)
	pl.mu.Lock()
	w.pp.busy -= len(moved)
	pl.mu.Unlock()
	pl.enqueue(to, moved)
	w.queue = append(kept, w.queue...)
	return true
}

// abandon fails the oldest batch in flight, whose waiter gave up, with
// err without waiting for its response. The later batches of the window
// stay: their responses tell whether they were stored.
func (w *window) abandon(err error) {
	head := w.win[0]
	w.pop()
	w.finish(head, PublishResult{}, err)
}

// wait blocks for f's response, closing its connection at the deadline.
// It stops waiting when f's waiter gives up: the response is then dropped
// by the connection's reader.
func (w *window) wait(f *flight) (PublishResult, error) {
	c := f.pc.c
	dl, strict := f.waitUntil()
	timer := time.NewTimer(time.Until(dl))
	defer timer.Stop()
	for {
		select {
		case r := <-f.pc.cl.ch:
			return c.pubResult(f.pc, r)
		case <-timer.C:
			if strict {
				f.final = true
				return PublishResult{}, w.pl.p.expired(f.last)
			}
			c.timedOut(f.pc)
		case <-f.b.ctx.Done():
			f.final = true
			return PublishResult{}, stopped(f.b.ctx.Err(), f.last)
		}
	}
}

// pop removes the oldest flight of the window and returns its token.
func (w *window) pop() {
	f := w.win[0]
	w.win[0] = nil
	w.win = w.win[1:]
	if f.held {
		f.held = false
		<-w.pl.sem
	}
}

// finish ends a batch: it leaves the partition's count of busy batches,
// a failure fails the later batches of its SendBatch call, and its done
// reports the outcome.
func (w *window) finish(f *flight, res PublishResult, err error) {
	tp := f.b.tp
	if err == nil {
		w.pl.p.core.noteDelivered(tp.topic, tp.partition)
		if f.attempt == 0 && f.last == nil {
			// Sent once, on one connection, and acknowledged: the server
			// read every byte before it answered, so the connection's
			// writer is done with them. A batch sent more than once is
			// left to the garbage collector (an earlier attempt's write
			// may still be under way).
			batch.ReleaseBuffer(f.data)
			f.data = nil
		}
	} else {
		err = w.broke(f, err)
		leader := f.leader
		if leader == "" {
			leader = w.pl.p.core.leaderName(tp.topic, tp.partition, w.pl.p.client.cfg.Addr)
		}
		err = leaderConnErr(tp, leader, err)
	}
	w.pl.mu.Lock()
	w.pp.busy--
	w.pl.mu.Unlock()
	if g := f.b.group; err != nil && g != nil && g.failed == nil {
		g.failed = err
	}
	f.b.done(f.b, res, err)
}
