package control

import (
	"context"
	"math"
	"strconv"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/seedqueue/sq/internal/quota"
)

// ThrottleHeader is the response header in which Publish reports the
// milliseconds the server held it for the produce byte-rate quota (also
// in PublishResponse.throttle_time_ms); absent when not throttled.
const ThrottleHeader = "sq-throttle-time-ms"

// recordQuota counts n bytes of kind k for the principal of the call ctx
// belongs to against Options.Quotas and returns the throttle time (0
// without a quota). gRPC has no connection to mute (the data plane's
// KIP-219 way): the caller holds its next response or read back for that
// long (holdFor), as a Kafka broker did before KIP-219.
func (s *Server) recordQuota(ctx context.Context, k quota.Kind, n int) time.Duration {
	m := s.opts.Quotas
	if m == nil || !m.Active() {
		return 0
	}
	return m.Record("grpc", requestPrincipal(ctx), k, int64(n))
}

// holdFor waits d (nothing for d <= 0); ctx's error when it ends first.
func holdFor(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
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

// throttleMs is d in whole milliseconds, rounded up, for a
// throttle_time_ms field.
func throttleMs(d time.Duration) int32 {
	if d <= 0 {
		return 0
	}
	ms := (d + time.Millisecond - 1) / time.Millisecond
	return int32(min(int64(ms), math.MaxInt32))
}

// setThrottleHeader sends ThrottleHeader for a throttled unary call.
func setThrottleHeader(ctx context.Context, d time.Duration) {
	if d > 0 {
		_ = grpc.SetHeader(ctx, metadata.Pairs(ThrottleHeader, strconv.Itoa(int(throttleMs(d)))))
	}
}
