package dataplane

import (
	"math"
	"time"

	"github.com/seedqueue/sq/internal/quota"
)

// recordQuota counts n bytes of kind k for the connection's principal
// against Options.Quotas and returns the throttle time (0 without a
// quota). A positive one mutes the connection for that long (KIP-219):
// the response goes out at once with the throttle time, and the reader
// takes no further request until it has passed.
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

// waitMuted waits while a quota mutes the connection (recordQuota). It
// fails when the connection is closing.
func (c *conn) waitMuted() error {
	for {
		d := time.Until(time.Unix(0, c.mutedUntil.Load()))
		if d <= 0 {
			return nil
		}
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-c.readCtx.Done():
			t.Stop()
			return c.readCtx.Err()
		}
	}
}
