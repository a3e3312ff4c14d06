package quota

import "time"

// rate measures the bytes one principal moved through one quota over a
// sliding window of samples, as Kafka's SampledStat and Rate do
// (org.apache.kafka.common.metrics.stats.Rate): Samples windows of Window
// each; the current sample takes the bytes recorded while it is less than
// Window old, then the oldest sample is reused; a sample that started more
// than Samples x Window ago counts for nothing.
type rate struct {
	samples []sample
	cur     int // index of the current sample
}

// sample is the bytes recorded from start (zero: never used).
type sample struct {
	start time.Time
	bytes int64
}

func newRate(samples int) *rate { return &rate{samples: make([]sample, samples)} }

// record adds n bytes at now and returns the bytes of the live samples
// and the window they are measured over (see windowSize).
func (r *rate) record(now time.Time, n int64, window time.Duration) (total int64, span time.Duration) {
	c := &r.samples[r.cur]
	if c.start.IsZero() || now.Sub(c.start) >= window {
		r.cur = (r.cur + 1) % len(r.samples)
		r.samples[r.cur] = sample{start: now}
		c = &r.samples[r.cur]
	}
	c.bytes += n
	return r.measure(now, window)
}

// measure returns the bytes of the samples still in the window at now and
// the span they cover (windowSize).
func (r *rate) measure(now time.Time, window time.Duration) (total int64, span time.Duration) {
	full := time.Duration(len(r.samples)) * window
	oldest := now
	for _, s := range r.samples {
		if s.start.IsZero() || now.Sub(s.start) >= full {
			continue
		}
		total += s.bytes
		if s.start.Before(oldest) {
			oldest = s.start
		}
	}
	return total, windowSize(now.Sub(oldest), len(r.samples), window)
}

// idle reports whether every sample has left the window at now: the rate
// is zero and may be forgotten.
func (r *rate) idle(now time.Time, window time.Duration) bool {
	full := time.Duration(len(r.samples)) * window
	for _, s := range r.samples {
		if !s.start.IsZero() && now.Sub(s.start) < full {
			return false
		}
	}
	return true
}

// windowSize is the span a rate is measured over, Kafka's
// Rate.windowSize: the time elapsed since the oldest live sample started,
// raised by the full windows missing to make samples-1 of them, so that
// the first bytes of a new client are spread over most of the window
// rather than over the few milliseconds since they came.
func windowSize(elapsed time.Duration, samples int, window time.Duration) time.Duration {
	full := int(elapsed / window)
	if min := samples - 1; full < min {
		elapsed += time.Duration(min-full) * window
	}
	return elapsed
}

// ThrottleTime is how long a client whose live samples hold total bytes
// over span must wait for its rate to fall back to bound bytes per
// second, Kafka's ClientQuotaManager.throttleTime (KIP-13): with rate =
// total / span, (rate - bound) / bound x span, which is the time the
// bytes above bound x span take at bound. Zero when the rate is within
// bound or bound is not positive (no quota); never more than max.
func ThrottleTime(total int64, span time.Duration, bound int64, max time.Duration) time.Duration {
	if bound <= 0 || span <= 0 {
		return 0
	}
	allowed := float64(bound) * span.Seconds()
	over := float64(total) - allowed
	if over <= 0 {
		return 0
	}
	d := time.Duration(over / float64(bound) * float64(time.Second))
	return min(d, max)
}
