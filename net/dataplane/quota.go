package dataplane

import (
	"math"
	"time"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/internal/quota"
)

// recordQuota counts n bytes of kind k for the connection's principal
// against Options.Quotas and returns the throttle time (0 without a
// quota). A positive one mutes the connection for that long (KIP-219):
// the response goes out at once with the throttle time, and the
// publishes, fetches and subscriptions read from the connection
// meanwhile wait until it has passed before they are served
// (waitMuted).
func (c *conn) recordQuota(k quota.Kind, n int) time.Duration {
	m := c.srv.opts.Quotas
	if m == nil || !m.Active() {
		return 0
	}
	d := m.Record("dataplane", connPrincipal(c), k, int64(n))
	if d > 0 {
		until := time.Now().Add(d).UnixNano()
		for {
			cur := c.mutedUntil.Load()
			if cur >= until || c.mutedUntil.CompareAndSwap(cur, until) {
				break
			}
		}
	}
	return d
}

// throttleMs is d in whole milliseconds, rounded up so that a client
// that waits it is never early, for a throttleTimeMs field.
func throttleMs(d time.Duration) uint32 {
	if d <= 0 {
		return 0
	}
	ms := (d + time.Millisecond - 1) / time.Millisecond
	return uint32(min(int64(ms), math.MaxUint32))
}

// quotaKind reports whether requests of kind k are held back while a
// quota mutes the connection: the ones the quotas measure. Group,
// metadata and admin requests are served at once, so a throttled
// consumer keeps its group membership.
func quotaKind(k api.Frame_Which) bool {
	switch k {
	case api.Frame_Which_publishRequest, api.Frame_Which_publishBatchesRequest, api.Frame_Which_fetchRequest, api.Frame_Which_subscribeRequest:
		return true
	}
	return false
}

// waitMuted holds a request back while a quota mutes the connection
// (recordQuota). The wait ends early when the connection starts closing
// or the server shuts down: the request is then served at once, never
// dropped.
func (c *conn) waitMuted() {
	for {
		d := time.Until(time.Unix(0, c.mutedUntil.Load()))
		if d <= 0 {
			return
		}
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-c.pollCtx.Done():
			t.Stop()
			return
		case <-c.srv.drainCtx.Done():
			t.Stop()
			return
		}
	}
}
