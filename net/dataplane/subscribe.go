package dataplane

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/api/batch"
	"github.com/seedqueue/sq/engine"
	"github.com/seedqueue/sq/internal/longpoll"
	"github.com/seedqueue/sq/internal/quota"
)

// maxSubscriptionCredit caps the credit a subscription may accumulate, in
// bytes: a consumer granting more cannot make the broker queue more.
const maxSubscriptionCredit = 64 << 20

// subReq holds the decoded fields of subscribe, grantCredit and
// unsubscribe frames.
type subReq struct {
	topic string
	// topicID is the subscribe's topic id (zero: by name; the first fetch
	// then pins the id of the topic found); idErr a malformed id.
	topicID   api.TopicID
	idErr     error
	partition uint32
	offset    uint64
	credit    uint32
	subID     uint64
}

func parseSubscribeFrames(f api.Frame, req *request) (bool, error) {
	s := &subReq{}
	var err error
	switch f.Which() {
	case api.Frame_Which_subscribeRequest:
		var r api.SubscribeRequest
		if r, err = f.SubscribeRequest(); err == nil {
			s.partition, s.offset, s.credit = r.Partition(), r.Offset(), r.CreditBytes()
			s.topicID, s.idErr = topicIDField(r.HasTopicId(), r.TopicId)
			s.topic, err = r.Topic()
		}
	case api.Frame_Which_grantCreditRequest:
		var r api.GrantCreditRequest
		if r, err = f.GrantCreditRequest(); err == nil {
			s.subID, s.credit = r.SubscriptionId(), r.CreditBytes()
		}
	case api.Frame_Which_unsubscribeRequest:
		var r api.UnsubscribeRequest
		if r, err = f.UnsubscribeRequest(); err == nil {
			s.subID = r.SubscriptionId()
		}
	default:
		return false, nil
	}
	req.ext = s
	return true, err
}

// subscriptions are a connection's push subscriptions by the correlation
// id of their subscribe frame.
type subscriptions struct {
	mu sync.Mutex
	m  map[uint64]*subscription
}

// subscription is one push subscription. The bytes it has pushed and the
// consumer has not yet granted back (unacked) are at most the credit
// window plus one batch (KIP-74); the push frames the broker holds for it
// (queued for the writer, referencing mapped segments) are a subset.
type subscription struct {
	mu        sync.Mutex
	credit    int64
	unacked   int64 // pushed minus granted back
	peakUnack int64
	more      chan struct{} // cap 1: credit was granted
	cancel    context.CancelFunc
}

func (s *subscriptions) add(id uint64, sub *subscription) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[uint64]*subscription{}
	}
	if _, dup := s.m[id]; dup {
		return false
	}
	s.m[id] = sub
	return true
}

func (s *subscriptions) get(id uint64) *subscription {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m[id]
}

func (s *subscriptions) remove(id uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, id)
}

func (sub *subscription) grant(n uint32) {
	sub.mu.Lock()
	sub.credit = min(sub.credit+int64(n), maxSubscriptionCredit)
	sub.unacked = max(sub.unacked-int64(n), 0)
	sub.mu.Unlock()
	select {
	case sub.more <- struct{}{}:
	default:
	}
}

// take waits for positive credit and returns it (at most limit).
func (sub *subscription) take(ctx context.Context, limit int) (int, error) {
	for {
		sub.mu.Lock()
		c := sub.credit
		sub.mu.Unlock()
		if c > 0 {
			return int(min(c, int64(limit))), nil
		}
		select {
		case <-sub.more:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

func (sub *subscription) spend(n int) {
	sub.mu.Lock()
	sub.credit -= int64(n)
	sub.unacked += int64(n)
	sub.peakUnack = max(sub.peakUnack, sub.unacked)
	sub.mu.Unlock()
}

func (c *conn) dispatchSubscribe(req request) (*response, error) {
	s, _ := req.ext.(*subReq)
	if s == nil {
		s = &subReq{}
	}
	switch req.kind {
	case api.Frame_Which_grantCreditRequest:
		if sub := c.subs.get(s.subID); sub != nil {
			sub.grant(s.credit)
		}
		return &response{}, nil // no answer; the slot is returned
	case api.Frame_Which_unsubscribeRequest:
		if sub := c.subs.get(s.subID); sub != nil {
			sub.cancel()
		}
		r, f, err := newResponse(req)
		if err != nil {
			return nil, err
		}
		_, err = f.NewUnsubscribeResponse()
		return r, err
	default:
		return c.subscribe(req, s)
	}
}

// subscribe starts one subscription on its own goroutine and answers
// nothing: a subscription holds no request slot, so a consumer may keep
// more of them open than MaxInFlightPerConn. It holds requestOverheadBytes
// of the server's budget for its life, taken without waiting and only while
// the largest request still fits beside it (byteBudget.tryAcquire), so
// subscriptions, which may last for ever, can never keep a reader waiting
// for good; when they cannot have it the subscribe is refused with
// THROTTLED (retriable). The goroutine runs until
// unsubscribe, an error, Shutdown or the connection's end: it fetches what
// is readable from the position, within the credit, and queues it as push
// frames. Its final frame is a push without records, with the error that
// ended it, if any.
func (c *conn) subscribe(req request, s *subReq) (*response, error) {
	ctx, cancel := context.WithCancel(c.pollCtx)
	sub := &subscription{credit: int64(s.credit), more: make(chan struct{}, 1), cancel: cancel}
	if !c.srv.budget.tryAcquire(requestOverheadBytes, c.srv.largestCharge) {
		cancel()
		return c.pushFrame(req, s, nil, api.NewError(api.CodeThrottled,
			"the server's request budget has no room for another subscription; subscribe again later"), 0)
	}
	if !c.subs.add(req.corrID, sub) {
		cancel()
		c.srv.budget.release(requestOverheadBytes)
		return c.pushFrame(req, s, nil, api.NewError(api.CodeInvalidRequest, "subscription %d already exists", req.corrID), 0)
	}
	// handle is counted in c.handlers, so this Add precedes its Wait.
	c.handlers.Add(1)
	go func() {
		defer c.handlers.Done()
		defer c.srv.budget.release(requestOverheadBytes)
		defer cancel()
		defer c.subs.remove(req.corrID)
		c.push(ctx, req, s, sub)
	}()
	return &response{}, nil
}

// push runs a subscription; see subscribe.
func (c *conn) push(ctx context.Context, req request, s *subReq, sub *subscription) {
	stop := context.AfterFunc(c.srv.drainCtx, sub.cancel)
	defer stop()
	offset := s.offset
	// A subscription reads one topic: the id it names, or the id of the
	// topic its first fetch finds, so it ends with UNKNOWN_TOPIC_ID rather
	// than read on in a topic created again under the name (KIP-516).
	id := s.topicID
	berr := s.idErr
	// The loop ends when ctx does (unsubscribe, the connection's end,
	// Shutdown), whatever the broker answers: a broker may answer a
	// cancelled long poll with an empty result rather than an error.
	for berr == nil && ctx.Err() == nil {
		limit, err := sub.take(ctx, int(c.srv.maxBatchBytes))
		if err != nil {
			break
		}
		started := time.Now()
		res, err := c.srv.broker.FetchID(ctx, s.topic, id, int(s.partition), offset, limit, c.srv.opts.MaxFetchWait)
		if err != nil {
			if ctx.Err() == nil || !isContextErr(err) {
				berr = err
			}
			break
		}
		if id.IsZero() {
			id = res.TopicID
		}
		if len(res.Bufs) == 0 {
			res.Release()
			if !longpoll.PauseAfterEmpty(ctx, started, c.srv.opts.MaxFetchWait) {
				break
			}
			continue
		}
		next, n := nextOffset(res.Bufs, offset)
		if n > math.MaxUint32 {
			res.Release()
			berr = api.NewError(api.CodeUnknown, "push over 4 GiB")
			break
		}
		sub.spend(n)
		throttle := c.recordQuota(quota.Fetch, n)
		if !c.sendPush(req, s, res, nil, throttle) {
			return
		}
		offset = next
		if !sleepCtx(ctx, throttle) {
			break
		}
	}
	if berr == nil && c.srv.shutting.Load() {
		berr = api.NewError(api.CodeShuttingDown, "server is shutting down")
	}
	c.sendPush(req, s, nil, berr, 0)
}

// sendPush queues a push frame for the writer; false when it could not be
// built (the connection is then closed).
func (c *conn) sendPush(req request, s *subReq, res *engine.FetchResult, berr error, throttle time.Duration) bool {
	r, err := c.pushFrame(req, s, res, berr, throttle)
	if err != nil {
		if r != nil {
			r.release()
		}
		c.forceClose(fmt.Errorf("build push frame: %w", err))
		return false
	}
	r.push = true
	c.out <- r
	return true
}

// nextOffset returns the offset after the last whole batch in bufs (from
// when there is none) and the bytes of bufs.
func nextOffset(bufs [][]byte, from uint64) (uint64, int) {
	n := 0
	next := from
	for _, b := range bufs {
		n += len(b)
		for len(b) > 0 {
			_, rest, h, err := batch.Split(b, 0)
			if err != nil {
				break
			}
			next = max(next, h.NextOffset())
			b = rest
		}
	}
	return next, n
}

// pushFrame builds a pushBatches frame carrying res's batches (res may be
// nil) or berr, and the throttle time of a fetch quota.
func (c *conn) pushFrame(req request, s *subReq, res *engine.FetchResult, berr error, throttle time.Duration) (*response, error) {
	r, f, err := newResponse(req)
	if err != nil {
		if res != nil {
			res.Release()
		}
		return nil, err
	}
	r.fetch = res
	p, err := f.NewPushBatches()
	if err != nil {
		return r, err
	}
	if err := p.SetTopic(s.topic); err != nil {
		return r, err
	}
	p.SetPartition(s.partition)
	if res != nil {
		p.SetHighWatermark(res.HighWatermark)
		p.SetLogStartOffset(res.LogStartOffset)
		p.SetRecordsLength(uint32(res.Bytes()))
	}
	p.SetThrottleTimeMs(throttleMs(throttle))
	if berr != nil && errors.Is(berr, context.Canceled) {
		berr = nil
	}
	return r, setErr(berr, p.NewError)
}

// sleepCtx waits d (nothing for d <= 0); false when ctx ended first.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
