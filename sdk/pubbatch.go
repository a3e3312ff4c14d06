package sdk

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/seedqueue/sq/api"
)

// A connection to a server that speaks api.PublishBatchesVersion gathers
// the produce pipeline's batches, of every partition it leads, into
// publishBatches requests, as Kafka's sender drains every ready partition
// of a broker into one ProduceRequest (docs/architecture.md §4.2). A
// batch handed to startPublish joins the connection's queue; one sender
// goroutine takes, whenever its producer has a request token free, every
// queued batch that fits in one request (api.MaxPublishEntries entries,
// the server's maxBatchBytes of tail, its maxFrameBytes of frame) and
// writes them as one frame. Batches of one partition keep their order:
// the queue is first in, first out, and one goroutine writes the requests
// in the order it builds them. Each batch's waiter gets its own entry of
// the response, so the pipeline resolves and retries partitions one by
// one as before.

// errCallStopped fails, unsent, a batch of a SendBatch call that stopped
// waiting while the batch was queued on its connection: none of a call's
// records is written after the call returned.
var errCallStopped = errors.New("sdk: the SendBatch call stopped waiting before its batch was written")

// Per-entry sizes of a publishBatches frame, in bytes, for the bound on
// the frame (an estimate above the Cap'n Proto encoding: a struct entry of
// two data words and a pointer, the topic text, rounded up) and on its
// response (a PublishResponse with the topic and an error with its text).
const (
	pubEntryFrameBytes    = 40
	pubEntryResponseBytes = 320
	pubFrameBaseBytes     = 256
)

// pubQueue is a connection's queue of batches for publishBatches
// requests.
type pubQueue struct {
	mu     sync.Mutex
	q      []*pubItem
	closed error         // set once the sender ended: new batches fail with it
	wake   chan struct{} // buffered 1: wakes the sender
	// requests and entries count the publishBatches requests handed to
	// the writer and the batches they carried.
	requests, entries atomic.Uint64
}

// pubItem is one batch waiting in a pubQueue.
type pubItem struct {
	topic     string
	partition uint32
	data      []byte
	chained   bool
	acks      Acks
	cl        *call
	// sem is its producer's bound on requests in flight (nil: none): the
	// sender takes a token for the request that carries it, given back
	// with the response.
	sem chan struct{}
	// gate, when set, is the batch's SendBatch call: the sender holds it
	// while the request is handed to the writer, and drops the batch
	// unsent once the call stopped waiting (its stop error).
	gate *sendCall
}

// enqueuePublish queues one batch for the next publishBatches request and
// returns its call, whose channel receives the response (entry: its index
// in the results) or the connection's failure.
func (c *conn) enqueuePublish(it *pubItem) (*call, error) {
	it.cl = &call{ch: make(chan response, 1)}
	q := c.pubq
	q.mu.Lock()
	if q.closed != nil {
		q.mu.Unlock()
		return nil, fmt.Errorf("%w: %w", ErrConnection, q.closed)
	}
	q.q = append(q.q, it)
	q.mu.Unlock()
	signal(q.wake)
	return it.cl, nil
}

// pubSender is the goroutine that writes a connection's publishBatches
// requests. It ends with the connection (or its writer), failing the
// batches still queued.
func (c *conn) pubSender() {
	defer c.wg.Done()
	q := c.pubq
	for {
		q.mu.Lock()
		var sem chan struct{}
		if len(q.q) > 0 {
			sem = q.q[0].sem
		}
		empty := len(q.q) == 0
		q.mu.Unlock()
		if empty {
			select {
			case <-q.wake:
				continue
			case <-c.done:
			case <-c.wdone:
			}
			c.closePubQueue()
			return
		}
		if sem != nil {
			select {
			case sem <- struct{}{}:
			case <-c.done:
				c.closePubQueue()
				return
			case <-c.wdone:
				c.closePubQueue()
				return
			}
		}
		items := c.takePublishes(sem)
		if err := c.sendPublishes(items, sem); err != nil {
			c.closePubQueue()
			return
		}
	}
}

// takePublishes removes from the head of the queue the batches of one
// request: those of producer sem, up to api.MaxPublishEntries, whose tails
// fit the server's maxBatchBytes and whose entries (and their results) fit
// its maxFrameBytes. The first batch is always taken.
func (c *conn) takePublishes(sem chan struct{}) []*pubItem {
	q := c.pubq
	q.mu.Lock()
	defer q.mu.Unlock()
	tailLimit := uint64(c.limits.MaxBatchBytes)
	frameLimit := uint64(c.limits.MaxFrameBytes)
	var tail, frame, resp uint64 = 0, pubFrameBaseBytes, pubFrameBaseBytes
	n := 0
	for n < len(q.q) && n < api.MaxPublishEntries {
		it := q.q[n]
		t := uint64(len(it.data))
		f := uint64(pubEntryFrameBytes + len(it.topic))
		r := uint64(pubEntryResponseBytes + len(it.topic))
		if n > 0 && (it.sem != sem || it.acks != q.q[0].acks || tail+t > tailLimit || frame+f > frameLimit || resp+r > frameLimit) {
			break
		}
		tail, frame, resp = tail+t, frame+f, resp+r
		n++
	}
	items := make([]*pubItem, n)
	copy(items, q.q)
	clear(q.q[:n])
	q.q = q.q[n:]
	return items
}

// sendPublishes writes items as one publishBatches request holding a
// token of sem (given back with the response). Batches of a SendBatch call
// that stopped waiting fail unsent. It returns an error only when the
// connection can no longer send; the items have then been failed.
func (c *conn) sendPublishes(items []*pubItem, sem chan struct{}) error {
	var gates []*sendCall
	held := map[*sendCall]bool{}
	for _, it := range items {
		if g := it.gate; g != nil && !held[g] {
			held[g] = true
			g.gate.RLock()
			gates = append(gates, g)
		}
	}
	defer func() {
		for _, g := range gates {
			g.gate.RUnlock()
		}
	}()
	live := items[:0:0]
	for _, it := range items {
		if it.gate != nil && it.gate.stopped() {
			it.cl.deliver(response{err: errCallStopped})
			continue
		}
		live = append(live, it)
	}
	release := func() {
		if sem != nil {
			<-sem
		}
	}
	if len(live) == 0 {
		release()
		return nil
	}
	cl := &call{fan: make([]*call, len(live)), onDone: release}
	tails := make([][]byte, len(live))
	for i, it := range live {
		cl.fan[i] = it.cl
		tails[i] = it.data
	}
	_, err := c.issue(context.Background(), cl, func(f api.Frame) error {
		req, err := f.NewPublishBatchesRequest()
		if err != nil {
			return err
		}
		req.SetAcks(live[0].acks.wire())
		l, err := req.NewEntries(int32(len(live)))
		if err != nil {
			return err
		}
		for i, it := range live {
			e := l.At(i)
			e.SetPartition(it.partition)
			e.SetRecordsLength(uint32(len(it.data)))
			e.SetChained(it.chained)
			if err := e.SetTopic(it.topic); err != nil {
				return err
			}
		}
		return nil
	}, tails...)
	if err != nil {
		// Not registered: nothing else delivers to it.
		cl.deliver(response{err: err})
		return err
	}
	c.pubq.requests.Add(1)
	c.pubq.entries.Add(uint64(len(live)))
	return nil
}

// closePubQueue fails the batches still queued with the connection's
// failure and makes later ones fail at once.
func (c *conn) closePubQueue() {
	err := c.failure()
	q := c.pubq
	q.mu.Lock()
	q.closed = err
	items := q.q
	q.q = nil
	q.mu.Unlock()
	for _, it := range items {
		it.cl.deliver(response{err: err})
	}
}
