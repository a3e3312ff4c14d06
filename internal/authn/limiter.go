package authn

import (
	"net"
	"sync"
	"time"
)

// Defaults of a Limiter. Kafka waits a fixed
// connection.failed.authentication.delay.ms (100 ms) after a failure;
// here the wait doubles with every failure in a row, up to the maximum.
const (
	DefaultBaseDelay = 100 * time.Millisecond
	DefaultMaxDelay  = 10 * time.Second
	// DefaultForget: failures older than this are forgotten.
	DefaultForget = 10 * time.Minute
	// DefaultMaxEntries bounds the sources and users a Limiter tracks.
	DefaultMaxEntries = 65536
)

// Limiter slows brute-force attempts: after n failed authentications in a
// row from a source address (or for a user name), the next attempt from
// it (or for it) is checked no sooner than BaseDelay·2^(n-1), at most
// MaxDelay, after the last failure. A success resets both the source and
// the user. Failures older than Forget are forgotten, and at most
// MaxEntries sources and users are tracked (the oldest go first). Safe
// for concurrent use; the zero value is not: use NewLimiter.
type Limiter struct {
	base, max, forget time.Duration
	maxEntries        int
	now               func() time.Time

	mu sync.Mutex
	m  map[string]*failures // "addr:" + host or "user:" + name
}

// failures is the record of one source or user.
type failures struct {
	n    int       // failures in a row
	last time.Time // of the last one
}

// NewLimiter returns a Limiter with the default delays and bounds,
// reading the time from now (time.Now when nil).
func NewLimiter(now func() time.Time) *Limiter {
	if now == nil {
		now = time.Now
	}
	return &Limiter{base: DefaultBaseDelay, max: DefaultMaxDelay, forget: DefaultForget,
		maxEntries: DefaultMaxEntries, now: now, m: map[string]*failures{}}
}

// keys returns the records an attempt from source (host:port or host) for
// user counts against.
func keys(source, user string) [2]string {
	if h, _, err := net.SplitHostPort(source); err == nil {
		source = h
	}
	return [2]string{"addr:" + source, "user:" + user}
}

// delayAfter is the wait after n failures in a row.
func (l *Limiter) delayAfter(n int) time.Duration {
	if n <= 0 {
		return 0
	}
	d := l.base
	for i := 1; i < n && d < l.max; i++ {
		d *= 2
	}
	return min(d, l.max)
}

// Delay returns how long an attempt from source for user must wait before
// its proof is checked: the longest wait of its source and its user, 0
// when neither failed recently.
func (l *Limiter) Delay(source, user string) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	var wait time.Duration
	for _, k := range keys(source, user) {
		f, ok := l.m[k]
		if !ok || now.Sub(f.last) > l.forget {
			continue
		}
		if w := f.last.Add(l.delayAfter(f.n)).Sub(now); w > wait {
			wait = w
		}
	}
	return wait
}

// Failed records a failed authentication from source for user.
func (l *Limiter) Failed(source, user string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	for _, k := range keys(source, user) {
		f, ok := l.m[k]
		if !ok {
			l.makeRoom(now)
			f = &failures{}
			l.m[k] = f
		}
		if now.Sub(f.last) > l.forget {
			f.n = 0
		}
		f.n++
		f.last = now
	}
}

// Succeeded forgets the failures of source and of user.
func (l *Limiter) Succeeded(source, user string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, k := range keys(source, user) {
		delete(l.m, k)
	}
}

// makeRoom drops forgotten records when the map is full, and the oldest
// record when none is forgotten.
func (l *Limiter) makeRoom(now time.Time) {
	if len(l.m) < l.maxEntries {
		return
	}
	var oldest string
	for k, f := range l.m {
		if now.Sub(f.last) > l.forget {
			delete(l.m, k)
		} else if oldest == "" || f.last.Before(l.m[oldest].last) {
			oldest = k
		}
	}
	if len(l.m) >= l.maxEntries && oldest != "" {
		delete(l.m, oldest)
	}
}
