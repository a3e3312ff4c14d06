// Package longpoll holds the pause that keeps a loop of long-poll fetches
// from spinning. Such a loop (a push subscription of the data plane, a
// Subscribe stream of the control plane, `sq consume --follow`) fetches
// again as soon as a fetch returns; a fetch that returns no records before
// its long poll ran out (the broker woke for records it could not return,
// caps the wait, or does not wait at all) would make it fetch again at
// once, forever, at the full speed of the CPU.
package longpoll

import (
	"context"
	"time"
)

// PauseMax bounds the pause of PauseAfterEmpty.
const PauseMax = 100 * time.Millisecond

// PauseAfterEmpty is called after a fetch that started at started, with a
// long poll of maxWait, returned no records. A fetch that waited its whole
// long poll may be sent again at once: PauseAfterEmpty returns true without
// waiting. One that returned early, or had no long poll (maxWait 0), is
// followed by a pause of a quarter of maxWait (at least 1 ms, at most
// PauseMax). It returns false, at once,
// when ctx is done or ends during the pause: the loop must stop.
func PauseAfterEmpty(ctx context.Context, started time.Time, maxWait time.Duration) bool {
	if ctx.Err() != nil {
		return false
	}
	if maxWait > 0 && time.Since(started) >= maxWait {
		return true
	}
	t := time.NewTimer(Pause(maxWait))
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// Pause is the pause PauseAfterEmpty takes after an early empty fetch with
// a long poll of maxWait.
func Pause(maxWait time.Duration) time.Duration {
	return min(max(maxWait/4, time.Millisecond), PauseMax)
}
