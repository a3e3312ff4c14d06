package quota

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// fakeClock is a clock that moves only when told.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }

// at is n bytes recorded ms milliseconds after the start.
type at struct {
	ms    int64
	bytes int64
}

// TestThrottleTable: bytes recorded at given times against a produce
// quota of 1000 B/s over 11 samples of 1 s give the throttle time of the
// last record (KIP-13's (rate - bound) / bound x window).
func TestThrottleTable(t *testing.T) {
	tests := []struct {
		name   string
		events []at
		want   time.Duration
	}{
		{"first bytes within the window's allowance", []at{{0, 1000}}, 0},
		{"exactly the allowance of 10 full windows", []at{{0, 10000}}, 0},
		{"one byte over the allowance", []at{{0, 10001}}, time.Millisecond},
		{"twice the allowance", []at{{0, 20000}}, 10 * time.Second},
		{"far over: capped at the window", []at{{0, 1 << 30}}, 11 * time.Second},
		{"steady at the quota for 10 s", []at{{0, 1000}, {1000, 1000}, {2000, 1000}, {3000, 1000}, {4000, 1000},
			{5000, 1000}, {6000, 1000}, {7000, 1000}, {8000, 1000}, {9000, 1000}, {10000, 1000}}, time.Second},
		{"steady at half the quota", []at{{0, 500}, {1000, 500}, {2000, 500}, {3000, 500}, {4000, 500},
			{5000, 500}, {6000, 500}, {7000, 500}, {8000, 500}, {9000, 500}, {10000, 500}}, 0},
		{"a burst that left the window counts for nothing", []at{{0, 1 << 30}, {11000, 1}}, 0},
		{"a burst 5 s ago still counts", []at{{0, 20000}, {5000, 1}}, 10*time.Second + time.Millisecond},
		{"within one sample: spread over the window", []at{{0, 6000}, {300, 6000}}, 1700 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := &fakeClock{t: time.Unix(1000, 0)}
			start := clk.t
			m := New(Options{Now: clk.now})
			m.SetTable(Table{Principals: map[string]Limits{"User:a": {ProduceBytesPerSec: 1000}}})
			var got time.Duration
			for _, e := range tt.events {
				clk.t = start.Add(time.Duration(e.ms) * time.Millisecond)
				got = m.Record("dataplane", "User:a", Produce, e.bytes)
			}
			if got != tt.want {
				t.Fatalf("throttle %v, want %v", got, tt.want)
			}
		})
	}
}

// TestLookup: a principal's own quota wins over the default, the default
// applies to the others, a kind without a quota is not measured, and no
// table throttles nothing.
func TestLookup(t *testing.T) {
	over := int64(1 << 30)
	tests := []struct {
		name      string
		table     Table
		principal string
		kind      Kind
		throttled bool
	}{
		{"no quotas", Table{}, "User:a", Produce, false},
		{"own produce quota", Table{Principals: map[string]Limits{"User:a": {ProduceBytesPerSec: 10}}}, "User:a", Produce, true},
		{"own quota of the other kind", Table{Principals: map[string]Limits{"User:a": {ProduceBytesPerSec: 10}}}, "User:a", Fetch, false},
		{"another principal's quota", Table{Principals: map[string]Limits{"User:b": {FetchBytesPerSec: 10}}}, "User:a", Fetch, false},
		{"default quota", Table{Default: &Limits{FetchBytesPerSec: 10}}, "User:a", Fetch, true},
		{"own entry overrides the default", Table{Principals: map[string]Limits{"User:a": {ProduceBytesPerSec: 10}},
			Default: &Limits{FetchBytesPerSec: 10}}, "User:a", Fetch, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := New(Options{})
			m.SetTable(tt.table)
			got := m.Record("grpc", tt.principal, tt.kind, over) > 0
			if got != tt.throttled {
				t.Fatalf("throttled %v, want %v", got, tt.throttled)
			}
		})
	}
	var nilM *Manager
	if nilM.Record("grpc", "User:a", Produce, over) != 0 {
		t.Fatal("a nil Manager throttles")
	}
}

// TestSweepAndMetrics: rates of principals gone quiet are forgotten after
// a window; a throttled record is observed in sq_throttle_time_seconds
// and its bytes in sq_quota_bytes_total.
func TestSweepAndMetrics(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1000, 0)}
	reg := prometheus.NewRegistry()
	m := New(Options{Now: clk.now, Samples: 2, Window: 100 * time.Millisecond})
	reg.MustRegister(m.Collectors()...)
	m.SetTable(Table{Default: &Limits{ProduceBytesPerSec: 100, FetchBytesPerSec: 100}})
	if d := m.Record("dataplane", "User:a", Produce, 1000); d != 200*time.Millisecond {
		t.Fatalf("throttle %v, want the cap of 2 x 100ms", d)
	}
	m.Record("grpc", "User:b", Fetch, 1)
	if n := m.tracked(); n != 2 {
		t.Fatalf("%d rates tracked, want 2", n)
	}
	clk.t = clk.t.Add(time.Second)
	m.Record("grpc", "User:c", Fetch, 1)
	if n := m.tracked(); n != 1 {
		t.Fatalf("%d rates tracked after the window, want 1 (the others swept)", n)
	}
	want := `
# HELP sq_quota_bytes_total Bytes measured against a byte-rate quota (of principals that have one), by plane and quota.
# TYPE sq_quota_bytes_total counter
sq_quota_bytes_total{plane="dataplane",quota="produce"} 1000
sq_quota_bytes_total{plane="grpc",quota="fetch"} 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "sq_quota_bytes_total"); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(m.throttle); n != 1 {
		t.Fatalf("%d throttle series, want 1 (dataplane produce)", n)
	}
}
