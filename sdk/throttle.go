package sdk

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/seedqueue/sq/api"
)

// ThrottleStats counts the responses a server throttled because the
// client's principal went over a byte-rate quota (docs/security.md,
// "Quotas"; Kafka's produce-throttle-time and fetch-throttle-time).
type ThrottleStats struct {
	// Responses is the number of throttled responses.
	Responses uint64
	// Total is the sum of their throttle times.
	Total time.Duration
	// Last is the throttle time of the latest one.
	Last time.Duration
}

// throttleCounters are the ThrottleStats of a Client and of the Clients
// made from its config (a Producer's or Consumer's connections to the
// partition leaders share their bootstrap Client's).
type throttleCounters struct {
	responses atomic.Uint64
	totalNs   atomic.Int64
	lastNs    atomic.Int64
}

func (t *throttleCounters) add(d time.Duration) {
	t.responses.Add(1)
	t.totalNs.Add(int64(d))
	t.lastNs.Store(int64(d))
}

func (t *throttleCounters) snapshot() ThrottleStats {
	return ThrottleStats{Responses: t.responses.Load(), Total: time.Duration(t.totalNs.Load()), Last: time.Duration(t.lastNs.Load())}
}

// throttleState is one node's throttle: until when the client must not
// send it a request (Unix ns), and the counters it adds to.
type throttleState struct {
	until atomic.Int64
	stats *throttleCounters
}

// ThrottleStats returns the throttled responses this Client and the
// Clients made from it (the leaders' connections of a Producer, a
// BatchProducer or a Consumer whose Client this is) received so far.
// Before its next publish, fetch or subscription to a node that throttled
// a response, a Client waits out the throttle time (KIP-219); the server
// holds back such requests for that long anyway.
func (c *Client) ThrottleStats() ThrottleStats {
	return c.throttle.stats.snapshot()
}

// frameThrottle returns the throttle time a response frame reports: the
// throttleTimeMs of a publish, publishBatches or fetch response or of a push.
func frameThrottle(f api.Frame) time.Duration {
	var ms uint32
	switch f.Which() {
	case api.Frame_Which_publishResponse:
		if r, err := f.PublishResponse(); err == nil {
			ms = r.ThrottleTimeMs()
		}
	case api.Frame_Which_publishBatchesResponse:
		if r, err := f.PublishBatchesResponse(); err == nil {
			ms = r.ThrottleTimeMs()
		}
	case api.Frame_Which_fetchResponse:
		if r, err := f.FetchResponse(); err == nil {
			ms = r.ThrottleTimeMs()
		}
	case api.Frame_Which_pushBatches:
		if r, err := f.PushBatches(); err == nil {
			ms = r.ThrottleTimeMs()
		}
	}
	return time.Duration(ms) * time.Millisecond
}

// noteThrottle records the throttle a response frame reports.
func (c *conn) noteThrottle(f api.Frame) {
	t := c.throttle.Load()
	d := frameThrottle(f)
	if t == nil || d <= 0 {
		return
	}
	until := time.Now().Add(d).UnixNano()
	for {
		cur := t.until.Load()
		if cur >= until || t.until.CompareAndSwap(cur, until) {
			break
		}
	}
	t.stats.add(d)
}

// waitThrottle waits until the node's throttle has passed: publishes,
// fetches and subscriptions call it before they send, so that the
// requests the quotas do not cover (group heartbeats and commits,
// metadata) still go out at once. ctx's error, or ErrClosed when the
// Client closes first.
func (c *Client) waitThrottle(ctx context.Context) error {
	for {
		d := time.Until(time.Unix(0, c.throttle.until.Load()))
		if d <= 0 {
			return nil
		}
		tm := time.NewTimer(d)
		select {
		case <-tm.C:
		case <-ctx.Done():
			tm.Stop()
			return ctx.Err()
		case <-c.closed:
			tm.Stop()
			return ErrClosed
		}
	}
}
