package dataplane

import (
	"capnproto.org/go/capnp/v3"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/engine"
	"github.com/seedqueue/sq/internal/quota"
)

// entryOverheadBytes is charged to the server budget for each entry of a
// publishBatches request on top of its batch: its decoded fields, its
// chain link and the engine's Pending.
const entryOverheadBytes = 512

// pubEntry is one entry of a publishBatches request: a batch of length
// bytes of the request's tail for one partition, with its place in the
// connection's chain of publishes to that partition (chainPublish).
type pubEntry struct {
	topic      string
	partition  uint32
	length     uint32
	chained    bool
	prev, link *pubLink
}

// parsePublishBatches decodes a publishBatches request. A request with no
// entries or more than api.MaxPublishEntries parses (its tail is read and
// dropped) and is refused whole by the handler.
func parsePublishBatches(f api.Frame, req *request) error {
	r, err := f.PublishBatchesRequest()
	if err != nil {
		return err
	}
	req.acks = r.Acks()
	l, err := r.Entries()
	if err != nil {
		return err
	}
	if err := checkListLen(capnp.List(l), 8); err != nil {
		return err
	}
	req.tailLen = api.PublishBatchesTail(l)
	switch n := l.Len(); {
	case n == 0:
		req.entriesErr = api.NewError(api.CodeInvalidRequest, "publishBatches without entries")
		return nil
	case n > api.MaxPublishEntries:
		req.entriesErr = api.NewError(api.CodeInvalidRequest, "publishBatches of %d entries, at most %d", n, api.MaxPublishEntries)
		return nil
	}
	req.entries = make([]pubEntry, l.Len())
	for i := range req.entries {
		e := l.At(i)
		topic, err := e.Topic()
		if err != nil {
			return err
		}
		req.entries[i] = pubEntry{topic: boundTopic(topic), partition: e.Partition(), length: e.RecordsLength(), chained: e.Chained()}
	}
	return nil
}

// entryRequest is entry i of a publishBatches request as the publish it
// stands for: its topic, partition, chained flag and link, the request's
// acks, and its batch, the part of the tail at off (capacity cut at its
// end, so that the engine, which owns it, never writes past it).
func (req *request) entryRequest(i, off int) request {
	e := &req.entries[i]
	end := off + int(e.length)
	return request{
		corrID:    req.corrID,
		kind:      api.Frame_Which_publishRequest,
		topic:     e.topic,
		partition: e.partition,
		chained:   e.chained,
		acks:      req.acks,
		prev:      e.prev,
		link:      e.link,
		tail:      req.tail[off:end:end],
		// A part of the request's buffer, which queueEntries gives
		// back whole.
		sharedTail: true,
	}
}

// publishBatches serves a publishBatches request: each entry is checked
// and queued exactly as a publish of its own (queueLinked: chain order,
// validation, authorization, the engine's checks of sequence numbers,
// leadership and limits), all of them before any is waited for, so that
// every partition's append and sync proceed at once; the response then
// answers every entry with its own outcome, and the whole request counts
// once against the produce byte-rate quota.
func (c *conn) publishBatches(req request) (*response, error) {
	n := len(req.entries)
	results := make([]engine.AppendResult, n)
	errs := make([]error, n)
	if req.entriesErr == nil {
		c.queueEntries(req, results, errs)
	}
	r, f, err := newResponse(req)
	if err != nil {
		return nil, err
	}
	pb, err := f.NewPublishBatchesResponse()
	if err != nil {
		return nil, err
	}
	pb.SetThrottleTimeMs(throttleMs(c.recordQuota(quota.Produce, len(req.tail))))
	if req.entriesErr != nil {
		c.releaseTail(req.tail) // nothing was queued from it
		return r, setErr(req.entriesErr, pb.NewError)
	}
	l, err := pb.NewResults(int32(n))
	if err != nil {
		return nil, err
	}
	for i, e := range req.entries {
		p := l.At(i)
		if err := p.SetTopic(e.topic); err != nil {
			return nil, err
		}
		p.SetPartition(e.partition)
		if errs[i] == nil {
			res := results[i]
			p.SetBaseOffset(res.BaseOffset)
			p.SetRecordCount(res.RecordCount)
			p.SetLogAppendTime(res.LogAppendTime)
			p.SetDurability(api.Durability(res.Durability))
			p.SetReplicas(uint32(max(res.Replicas, 1)))
		}
		if err := setErr(errs[i], p.NewError); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// queueEntries queues every entry of req in order, then waits for each
// queued one, and records the outcomes in results and errs. Every entry's
// link is released (queued or failed) even when queuing panics, so that
// the later publishes of those partitions on this connection never wait
// for it.
func (c *conn) queueEntries(req request, results []engine.AppendResult, errs []error) {
	subs := make([]request, len(req.entries))
	pending := make([]*engine.Pending, len(req.entries))
	queued := 0
	defer func() {
		if p := recover(); p != nil {
			for _, e := range req.entries[queued:] {
				select {
				case <-e.link.queued:
				default:
					e.link.err = api.NewError(api.CodeUnknown, "internal error")
					close(e.link.queued)
				}
			}
			panic(p)
		}
	}()
	off := 0
	for i := range req.entries {
		subs[i] = req.entryRequest(i, off)
		off += int(req.entries[i].length)
		pending[i], results[i], errs[i] = c.queueLinked(subs[i])
		queued = i + 1
	}
	for i, pd := range pending {
		if errs[i] == nil && pd != nil {
			results[i], errs[i] = pd.Wait(c.ctx)
		}
		c.unchainPublish(subs[i], errs[i])
	}
	c.releaseEntriesTail(req.tail, pending, errs)
}

// releaseEntriesTail gives the records tail of a publishBatches request
// back to the pool once the engine is over with every entry queued from
// it (each one's Pending.Done): at once when all are, otherwise from a
// goroutine that waits for them. An entry appended synchronously (a
// broker without AppendAsync: no Pending and no error) may still be held
// past its wait, so the tail is then left to the garbage collector.
func (c *conn) releaseEntriesTail(tail []byte, pending []*engine.Pending, errs []error) {
	var held []*engine.Pending
	for i, pd := range pending {
		switch {
		case pd != nil:
			select {
			case <-pd.Done():
			default:
				held = append(held, pd)
			}
		case errs[i] == nil:
			return // appended synchronously
		}
	}
	if len(held) == 0 {
		c.releaseTail(tail)
		return
	}
	go func() {
		for _, pd := range held {
			<-pd.Done()
		}
		c.releaseTail(tail)
	}()
}
