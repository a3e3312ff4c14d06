package sdk

import (
	"context"
	"math/rand/v2"
	"time"
)

// backoff returns the wait before attempt n (n >= 1 is the first retry):
// base doubled per attempt, capped at max, with jitter that draws the wait
// uniformly from [d/2, d] so that clients restarted together do not retry in
// lockstep ("equal jitter", AWS Architecture Blog, "Exponential Backoff and
// Jitter", 2015).
func backoff(n int, base, max time.Duration) time.Duration {
	if n < 1 {
		n = 1
	}
	d := base
	for i := 1; i < n && d < max; i++ {
		d *= 2
	}
	if d > max {
		d = max
	}
	if d <= 1 {
		return d
	}
	half := d / 2
	return half + rand.N(d-half+1)
}

// sleep waits for d or until ctx is done, returning ctx's error then.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
