package quota

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Kind is the quota a request is measured against.
type Kind int

const (
	// Produce is the produce byte rate: the records tails of publishes.
	Produce Kind = iota
	// Fetch is the fetch byte rate: the records of fetch responses and
	// pushes (replica fetches between nodes are never counted).
	Fetch
)

// String returns "produce" or "fetch", the metric label.
func (k Kind) String() string {
	if k == Fetch {
		return "fetch"
	}
	return "produce"
}

// Limits are the byte-rate quotas of one principal, in bytes per second;
// 0 is no quota of that kind.
type Limits struct {
	ProduceBytesPerSec int64
	FetchBytesPerSec   int64
}

// of returns the bound of kind k.
func (l Limits) of(k Kind) int64 {
	if k == Fetch {
		return l.FetchBytesPerSec
	}
	return l.ProduceBytesPerSec
}

// Table is the quotas a Manager enforces: each principal's own, and
// Default for principals without one (Kafka's <default> user entity). A
// principal listed with a zero kind has no quota of that kind, even when
// Default has one (Kafka: the most specific entity wins).
type Table struct {
	Principals map[string]Limits
	// Default applies to every principal not in Principals; nil: none.
	Default *Limits
}

// lookup returns the quotas of principal.
func (t *Table) lookup(principal string) Limits {
	if l, ok := t.Principals[principal]; ok {
		return l
	}
	if t.Default != nil {
		return *t.Default
	}
	return Limits{}
}

// Defaults of Options.
const (
	// DefaultSamples is Kafka's quota.window.num.
	DefaultSamples = 11
	// DefaultWindow is Kafka's quota.window.size.seconds.
	DefaultWindow = time.Second
)

// Options configure a Manager; the zero value is valid.
type Options struct {
	// Samples is the number of sample windows the rate is measured over.
	// Default DefaultSamples; at least 2.
	Samples int
	// Window is the length of one sample. Default DefaultWindow.
	Window time.Duration
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

// Manager measures and throttles the principals that have a quota. A nil
// *Manager enforces nothing. It is safe for concurrent use.
type Manager struct {
	samples int
	window  time.Duration
	now     func() time.Time

	table atomic.Pointer[Table]

	mu        sync.Mutex
	rates     map[key]*rate
	lastSweep time.Time

	throttle *prometheus.HistogramVec // {plane, quota}
	bytes    *prometheus.CounterVec   // {plane, quota}
}

type key struct {
	principal string
	kind      Kind
}

// New returns a Manager without quotas (SetTable sets them).
func New(o Options) *Manager {
	if o.Samples < 2 {
		o.Samples = DefaultSamples
	}
	if o.Window <= 0 {
		o.Window = DefaultWindow
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	m := &Manager{samples: o.Samples, window: o.Window, now: o.Now, rates: map[key]*rate{}}
	m.table.Store(&Table{})
	labels := []string{"plane", "quota"}
	m.throttle = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "sq_throttle_time_seconds",
		Help:    "Throttle time of the responses a byte-rate quota delayed, by plane (dataplane, grpc) and quota (produce, fetch).",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 15)}, labels)
	m.bytes = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sq_quota_bytes_total",
		Help: "Bytes measured against a byte-rate quota (of principals that have one), by plane and quota."}, labels)
	return m
}

// Collectors returns the Manager's metrics, for a Prometheus registry:
// sq_throttle_time_seconds{plane,quota}, a histogram of the throttle
// times returned (zero ones are not observed), and
// sq_quota_bytes_total{plane,quota}, the bytes measured. They carry no
// principal label: principals are not a bounded set.
func (m *Manager) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.throttle, m.bytes}
}

// MaxThrottle is the longest throttle time the Manager returns: the whole
// window, Samples x Window (11 s by default).
func (m *Manager) MaxThrottle() time.Duration {
	return time.Duration(m.samples) * m.window
}

// SetTable replaces the quotas; rates measured so far are kept.
func (m *Manager) SetTable(t Table) {
	if m == nil {
		return
	}
	m.table.Store(&t)
}

// Active reports whether any quota is set: the planes skip finding a
// request's principal when none is.
func (m *Manager) Active() bool {
	if m == nil {
		return false
	}
	t := m.table.Load()
	return len(t.Principals) > 0 || t.Default != nil
}

// Limits returns the quotas that apply to principal.
func (m *Manager) Limits(principal string) Limits {
	if m == nil {
		return Limits{}
	}
	return m.table.Load().lookup(principal)
}

// Record counts n bytes of kind k that principal moved on plane
// ("dataplane" or "grpc") and returns how long the client must now wait
// for its rate to come back under its quota (0 without a quota or within
// it; at most MaxThrottle). A throttle is observed in
// sq_throttle_time_seconds.
func (m *Manager) Record(plane, principal string, k Kind, n int64) time.Duration {
	if m == nil || n <= 0 {
		return 0
	}
	bound := m.Limits(principal).of(k)
	if bound <= 0 {
		return 0
	}
	now := m.now()
	m.mu.Lock()
	m.sweep(now)
	kk := key{principal, k}
	r := m.rates[kk]
	if r == nil {
		r = newRate(m.samples)
		m.rates[kk] = r
	}
	total, span := r.record(now, n, m.window)
	m.mu.Unlock()
	d := ThrottleTime(total, span, bound, m.MaxThrottle())
	m.bytes.WithLabelValues(plane, k.String()).Add(float64(n))
	if d > 0 {
		m.throttle.WithLabelValues(plane, k.String()).Observe(d.Seconds())
	}
	return d
}

// sweep forgets the rates that fell out of the window, at most once per
// window length, so that the principals seen once do not stay in memory.
// m.mu is held.
func (m *Manager) sweep(now time.Time) {
	full := m.MaxThrottle()
	if now.Sub(m.lastSweep) < full {
		return
	}
	m.lastSweep = now
	for k, r := range m.rates {
		if r.idle(now, m.window) {
			delete(m.rates, k)
		}
	}
}

// tracked returns how many (principal, kind) rates are held (tests).
func (m *Manager) tracked() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.rates)
}
