package sdk

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// flight is one encoded batch of a partition on its way: queued, sent and
// waiting for its response, or failed before it could be sent.
type flight struct {
	bb      builtBatch
	attempt int      // failed attempts while it was first in line
	pc      *pubCall // nil until sent
	err     error    // set when it failed before being sent
	last    error    // the failure of its previous attempt, for the delivery timeout
	held    bool     // holds a token of bp.sem
}

// pipe is a partition's publisher state: batches to send, in order, and
// the window of batches in flight, in the order they were sent.
type pipe struct {
	bp    *BatchProducer
	pp    *bpPartition
	queue []*flight // to send, in order (retries first)
	win   []*flight // in flight, oldest first
	// stalled: a batch of win failed before it was sent; nothing more is
	// sent until it is first in line, so nothing overtakes it.
	stalled bool
}

// publisher is the goroutine that sends a partition's encoded batches, up
// to MaxInFlightPerPartition at a time on one connection, and resolves
// them in order.
//
// Order: batches are written to the connection in order; every batch sent
// while an earlier one of the window is unanswered is marked chained, and
// the server fails it unwritten if that earlier one failed. So when the
// oldest batch fails, every later batch of the window fails too (or, from
// a server without that guarantee, is stored and a warning is logged); the
// publisher then waits for the whole window, retries the failed batch
// (Retries, with backoff) and resends the later ones after it, in order.
// When the connection changes, the window drains before anything is sent
// on the new one.
func (bp *BatchProducer) publisher(pp *bpPartition, built <-chan builtBatch) {
	p := &pipe{bp: bp, pp: pp}
	for {
		built = p.fill(built)
		if len(p.win) == 0 {
			if built == nil && len(p.queue) == 0 {
				return
			}
			continue
		}
		var in <-chan builtBatch
		if len(p.queue) == 0 && len(p.win) < bp.cfg.MaxInFlightPerPartition && !p.stalled {
			in = built
		}
		head := p.win[0]
		if head.pc == nil {
			p.resolve(PublishResult{}, head.err)
			continue
		}
		timer := time.NewTimer(time.Until(head.pc.deadline))
		select {
		case r := <-head.pc.cl.ch:
			timer.Stop()
			res, err := bp.p.client.pubResult(head.pc, r)
			p.resolve(res, err)
		case bb, ok := <-in:
			timer.Stop()
			if !ok {
				built = nil
			} else {
				p.queue = append(p.queue, &flight{bb: bb})
			}
		case <-timer.C:
			// Closing the connection fails every call on it.
			bp.p.client.timedOut(head.pc)
		case <-bp.ctx.Done():
			timer.Stop()
			p.resolve(PublishResult{}, bp.ctx.Err())
		}
	}
}

// fill sends queued and newly built batches while the window has room. It
// blocks for a built batch only when nothing is in flight. It returns
// built, or nil once built is closed.
func (p *pipe) fill(built <-chan builtBatch) <-chan builtBatch {
	bp := p.bp
	for len(p.win) < bp.cfg.MaxInFlightPerPartition && !p.stalled {
		if len(p.queue) == 0 {
			if built == nil {
				return nil
			}
			if len(p.win) == 0 {
				bb, ok := <-built
				if !ok {
					return nil
				}
				p.queue = append(p.queue, &flight{bb: bb})
			} else {
				select {
				case bb, ok := <-built:
					if !ok {
						return nil
					}
					p.queue = append(p.queue, &flight{bb: bb})
				default:
					return built
				}
			}
		}
		if !p.send(p.queue[0]) {
			return built
		}
		p.queue[0] = nil
		p.queue = p.queue[1:]
	}
	return built
}

// send sends f (or records why it cannot be) and adds it to the window; it
// returns false, leaving f queued, when it must wait for the window.
func (p *pipe) send(f *flight) bool {
	bp := p.bp
	var want *conn
	if n := len(p.win); n > 0 {
		want = p.win[n-1].pc.cn // stalled is false: every flight of win was sent
		select {
		case bp.sem <- struct{}{}:
		default:
			return false // other partitions hold the tokens: wait for ours
		}
	} else {
		bp.sem <- struct{}{}
	}
	f.held = true
	f.err = f.bb.err
	if f.err == nil && !time.Now().Before(f.bb.deadline) {
		// Its delivery timeout passed while it waited: it fails unsent.
		f.err = bp.p.expired(f.last)
	}
	if f.err == nil {
		// The dial and the wait for the writer end at the deadline too.
		ctx, cancel := context.WithDeadline(bp.ctx, f.bb.deadline)
		f.pc, f.err = bp.p.core.client(p.pp.tp.topic, p.pp.tp.partition).startPublish(ctx, want, p.pp.tp.topic, p.pp.tp.partition, f.bb.data, want != nil)
		if f.err != nil && ctx.Err() != nil && bp.ctx.Err() == nil {
			f.err = bp.p.expired(f.last)
		}
		cancel()
	}
	if errors.Is(f.err, errConnSwitched) {
		f.err, f.held = nil, false
		<-bp.sem
		return false
	}
	if f.err != nil {
		f.pc = nil
		p.stalled = true
	}
	p.win = append(p.win, f)
	return true
}

// resolve handles the outcome of the oldest batch in flight.
func (p *pipe) resolve(res PublishResult, err error) {
	bp := p.bp
	head := p.win[0]
	p.pop()
	if err == nil {
		bp.finishBatch(p.pp, head.bb.msgs, res, nil)
		return
	}
	tp := p.pp.tp
	if refreshes(err) {
		bp.forgetTopic(tp.topic)
	}
	// The later batches in flight fail too (chained): collect them, in
	// order, to resend after head.
	var again []*flight
	for len(p.win) > 0 {
		f := p.win[0]
		ferr := f.err
		var fres PublishResult
		if f.pc != nil {
			fres, ferr = p.wait(f.pc)
		}
		p.pop()
		if ferr == nil {
			bp.p.cfg.Logger.Warn("sdk: a batch sent after a failed one was stored before its retry (the server does not fail chained publishes)",
				"topic", tp.topic, "partition", tp.partition)
			bp.finishBatch(p.pp, f.bb.msgs, fres, nil)
			continue
		}
		f.pc, f.err, f.last = nil, nil, ferr
		again = append(again, f)
	}
	p.stalled = false
	head.attempt++
	head.pc, head.err, head.last = nil, nil, err
	if head.bb.err != nil {
		bp.finishBatch(p.pp, head.bb.msgs, PublishResult{}, err)
	} else if rerr := bp.p.retry(bp.ctx, err, head.attempt, head.bb.deadline, fmt.Sprintf("publish %s/%d", tp.topic, tp.partition)); rerr != nil {
		bp.finishBatch(p.pp, head.bb.msgs, PublishResult{}, rerr)
	} else {
		again = append([]*flight{head}, again...)
	}
	p.queue = append(again, p.queue...)
}

// wait blocks for pc's response, closing its connection at the deadline.
// It stops waiting when the producer's context ends (CloseContext): the
// response is then dropped by the connection's reader.
func (p *pipe) wait(pc *pubCall) (PublishResult, error) {
	c := p.bp.p.client
	timer := time.NewTimer(time.Until(pc.deadline))
	defer timer.Stop()
	for {
		select {
		case r := <-pc.cl.ch:
			return c.pubResult(pc, r)
		case <-timer.C:
			c.timedOut(pc)
		case <-p.bp.ctx.Done():
			return PublishResult{}, p.bp.ctx.Err()
		}
	}
}

// pop removes the oldest flight of the window and returns its token.
func (p *pipe) pop() {
	f := p.win[0]
	p.win[0] = nil
	p.win = p.win[1:]
	if f.held {
		f.held = false
		<-p.bp.sem
	}
}

// finishBatch frees a resolved batch's buffer space, reports it through
// OnAck or OnError and then counts its records as done.
func (bp *BatchProducer) finishBatch(pp *bpPartition, msgs []ProducerMessage, res PublishResult, err error) {
	tp := pp.tp
	bp.mu.Lock()
	bp.releaseBytes(msgs)
	pp.busy--
	signal(pp.wake) // the open batch may go now
	bp.mu.Unlock()
	switch {
	case err != nil:
		bp.reportFailed(tp, msgs, err)
	case bp.cfg.OnAck != nil:
		bp.cfg.OnAck(BatchAck{Topic: tp.topic, Partition: tp.partition, BaseOffset: res.BaseOffset, Durability: res.Durability, Messages: msgs})
	}
	bp.mu.Lock()
	bp.releaseRecords(len(msgs))
	bp.mu.Unlock()
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
