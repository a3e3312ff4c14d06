package replica

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// step is one call on a LeaderState and what it must return. at is the
// time in seconds after t0.
type step struct {
	op       string // "local", "fetch", "isr", "abort", "change"
	id       string
	leo, dur uint64
	at       int
	isr      []string
	minISR   int
	// The expected result: the high watermark and whether it advanced,
	// or for "change" the proposal (nil: none).
	hw       uint64
	advanced bool
	proposal []string
}

func (s step) String() string {
	return fmt.Sprintf("%s %s leo=%d dur=%d at=%ds isr=%v", s.op, s.id, s.leo, s.dur, s.at, s.isr)
}

const lag = 10 * time.Second

func runSteps(t *testing.T, l *LeaderState, steps []step) {
	t.Helper()
	for i, s := range steps {
		now := t0.Add(time.Duration(s.at) * time.Second)
		var hw uint64
		var adv bool
		switch s.op {
		case "local":
			hw, adv = l.SetLocal(s.leo, s.dur, now)
		case "fetch":
			hw, adv = l.UpdateFollower(s.id, s.leo, s.dur, now)
		case "isr":
			hw, adv = l.SetISR(s.isr, s.minISR)
		case "abort":
			l.AbortISRChange()
			hw = l.HighWatermark()
		case "change":
			p, ok := l.ISRChange(now, lag)
			if ok != (s.proposal != nil) || !slices.Equal(p, s.proposal) {
				t.Fatalf("step %d (%v): ISRChange = %v %v, want %v", i, s, p, ok, s.proposal)
			}
			continue
		default:
			t.Fatalf("step %d: unknown op %q", i, s.op)
		}
		if hw != s.hw || adv != s.advanced {
			t.Fatalf("step %d (%v): hw %d advanced %v, want %d %v", i, s, hw, adv, s.hw, s.advanced)
		}
		if l.HighWatermark() != hw {
			t.Fatalf("step %d: HighWatermark %d, returned %d", i, l.HighWatermark(), hw)
		}
	}
}

// TestLeaderHighWatermark: HW is the minimum durable LEO over the maximal
// ISR (KIP-497) including the leader, never moves back, and advances only
// while that set has min.insync.replicas members.
func TestLeaderHighWatermark(t *testing.T) {
	abc := []string{"a", "b", "c"}
	for _, tc := range []struct {
		name   string
		isr    []string
		minISR int
		hw     uint64
		steps  []step
	}{
		{"min durable over the ISR", abc, 2, 0, []step{
			{op: "local", leo: 10, dur: 10, hw: 0},
			{op: "fetch", id: "b", leo: 10, dur: 6, hw: 0},
			{op: "fetch", id: "c", leo: 4, dur: 4, hw: 4, advanced: true},
			{op: "fetch", id: "c", leo: 10, dur: 8, hw: 6, advanced: true},
			{op: "fetch", id: "b", leo: 10, dur: 10, hw: 8, advanced: true},
			{op: "local", leo: 12, dur: 9, hw: 8},
			{op: "fetch", id: "c", leo: 12, dur: 12, hw: 9, advanced: true},
		}},
		{"durable not LEO counts", []string{"a", "b"}, 1, 0, []step{
			{op: "local", leo: 10, dur: 3, hw: 0},
			{op: "fetch", id: "b", leo: 10, dur: 10, hw: 3, advanced: true},
			{op: "local", leo: 10, dur: 10, hw: 10, advanced: true},
		}},
		{"durable above leo is capped", []string{"a", "b"}, 1, 0, []step{
			{op: "local", leo: 10, dur: 10, hw: 0},
			{op: "fetch", id: "b", leo: 5, dur: 9, hw: 5, advanced: true},
		}},
		{"never moves back", abc, 2, 7, []step{
			{op: "local", leo: 10, dur: 10, hw: 7},
			{op: "fetch", id: "b", leo: 3, dur: 3, hw: 7},
			{op: "fetch", id: "c", leo: 9, dur: 9, hw: 7},
			{op: "fetch", id: "b", leo: 10, dur: 10, hw: 9, advanced: true},
			{op: "isr", isr: []string{"a", "b"}, minISR: 2, hw: 10, advanced: true},
			{op: "local", leo: 10, dur: 2, hw: 10},
		}},
		{"followers outside the ISR do not count", []string{"a", "b"}, 2, 0, []step{
			{op: "local", leo: 10, dur: 10, hw: 0},
			{op: "fetch", id: "c", leo: 0, dur: 0, hw: 0},
			{op: "fetch", id: "b", leo: 10, dur: 10, hw: 10, advanced: true},
		}},
		{"not held below min.insync.replicas", []string{"a"}, 2, 0, []step{
			{op: "local", leo: 10, dur: 10, hw: 10, advanced: true},
			{op: "fetch", id: "b", leo: 10, dur: 10, hw: 10},
			{op: "isr", isr: []string{"a"}, minISR: 1, hw: 10},
		}},
		{"a committed shrink lets HW advance", abc, 2, 0, []step{
			{op: "local", leo: 10, dur: 10, hw: 0},
			{op: "fetch", id: "b", leo: 10, dur: 10, hw: 0},
			{op: "isr", isr: []string{"a", "b"}, minISR: 2, hw: 10, advanced: true},
		}},
		{"a shrink below minISR does not hold HW", abc, 2, 0, []step{
			{op: "local", leo: 10, dur: 10, hw: 0},
			{op: "isr", isr: []string{"a"}, minISR: 2, hw: 10, advanced: true},
			{op: "fetch", id: "b", leo: 10, dur: 10, hw: 10},
		}},
		{"fetch from a stranger changes nothing", []string{"a", "b"}, 1, 0, []step{
			{op: "local", leo: 10, dur: 10, hw: 0},
			{op: "fetch", id: "z", leo: 10, dur: 10, hw: 0},
			{op: "fetch", id: "b", leo: 4, dur: 4, hw: 4, advanced: true},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := NewLeaderState("a", abc, tc.isr, 3, 0, tc.hw, tc.minISR, t0)
			runSteps(t, l, tc.steps)
		})
	}
}

// TestISRChange: Kafka's ISR rules (replica.lag.time.max.ms, the
// expansion test isFollowerInSync) with one change in flight at a time
// whose additions count in HW until committed (KIP-497).
func TestISRChange(t *testing.T) {
	abc := []string{"a", "b", "c"}
	for _, tc := range []struct {
		name       string
		isr        []string
		epochStart uint64
		steps      []step
	}{
		{"nothing to change", abc, 0, []step{
			{op: "fetch", id: "b", at: 1},
			{op: "fetch", id: "c", at: 1},
			{op: "change", at: 5},
		}},
		{"a follower never seen lags from the creation time", abc, 0, []step{
			{op: "fetch", id: "b", at: 9},
			{op: "change", at: 10},
			{op: "change", at: 11, proposal: []string{"a", "b"}},
		}},
		{"the lag is measured from the last caught-up fetch", abc, 0, []step{
			{op: "local", leo: 10, dur: 10},
			{op: "fetch", id: "b", leo: 10, dur: 10, at: 8, hw: 0},
			{op: "fetch", id: "c", leo: 10, dur: 10, at: 8, hw: 10, advanced: true},
			{op: "local", leo: 20, dur: 20, at: 9, hw: 10},
			// b reaches 10, the LEO as of its fetch at 8: caught up at 8, no later.
			{op: "fetch", id: "b", leo: 15, dur: 15, at: 12, hw: 10},
			{op: "fetch", id: "c", leo: 20, dur: 20, at: 12, hw: 15, advanced: true},
			{op: "change", at: 18},
			{op: "change", at: 19, proposal: []string{"a", "c"}},
		}},
		{"caught up with the LEO as of the previous fetch (steady load)", abc, 0, []step{
			{op: "local", leo: 10, dur: 10},
			{op: "fetch", id: "b", leo: 5, dur: 5, at: 5},
			{op: "local", leo: 20, dur: 20, at: 6},
			{op: "fetch", id: "b", leo: 10, dur: 10, at: 7}, // reached 10, the LEO at its fetch at 5
			{op: "local", leo: 30, dur: 30, at: 8},
			{op: "fetch", id: "b", leo: 20, dur: 20, at: 9}, // reached 20 (its fetch at 7)
			{op: "fetch", id: "c", leo: 30, dur: 30, at: 9, hw: 20, advanced: true},
			{op: "change", at: 17},
			{op: "change", at: 18, proposal: []string{"a", "c"}}, // b last caught up at 7
		}},
		{"the leader never leaves", []string{"a"}, 0, []step{
			{op: "change", at: 100},
		}},
		{"the leader joins an ISR without it", []string{"b", "c"}, 0, []step{
			{op: "fetch", id: "b", at: 1},
			{op: "fetch", id: "c", at: 1},
			{op: "change", at: 2, proposal: []string{"a", "b", "c"}},
		}},
		{"expand a caught-up follower", []string{"a", "b"}, 0, []step{
			{op: "local", leo: 10, dur: 10},
			{op: "fetch", id: "b", leo: 10, dur: 10, at: 1, hw: 10, advanced: true},
			{op: "fetch", id: "c", leo: 9, dur: 9, at: 1, hw: 10},
			{op: "change", at: 2}, // LEO 9 < HW 10
			{op: "fetch", id: "c", leo: 12, dur: 9, at: 3, hw: 10},
			{op: "change", at: 4}, // durable 9 < HW 10: a crash would lose offset 9
			{op: "fetch", id: "c", leo: 12, dur: 10, at: 4, hw: 10},
			{op: "change", at: 4, proposal: []string{"a", "b", "c"}},
			// The addition in flight counts: HW waits for c.
			{op: "local", leo: 12, dur: 12, at: 5, hw: 10},
			{op: "fetch", id: "b", leo: 12, dur: 12, at: 5, hw: 10},
			{op: "fetch", id: "c", leo: 12, dur: 11, at: 5, hw: 11, advanced: true},
			{op: "isr", isr: []string{"a", "b", "c"}, minISR: 2, hw: 11},
		}},
		{"no expansion below the epoch start", []string{"a", "b"}, 8, []step{
			// A new leader's HW (5) lags the old leader's: the epoch start
			// (8) bounds what was committed.
			{op: "local", leo: 8, dur: 8},
			{op: "fetch", id: "b", leo: 5, dur: 5, at: 1, hw: 5, advanced: true},
			{op: "fetch", id: "c", leo: 8, dur: 7, at: 1, hw: 5},
			{op: "change", at: 2},
			{op: "fetch", id: "c", leo: 8, dur: 8, at: 2, hw: 5},
			{op: "change", at: 2, proposal: []string{"a", "b", "c"}},
		}},
		{"no expansion of a follower never seen", []string{"a", "b"}, 0, []step{
			{op: "fetch", id: "b", at: 1},
			{op: "change", at: 2},
		}},
		{"no expansion of a lagging follower", []string{"a"}, 0, []step{
			{op: "isr", isr: []string{"a"}, minISR: 2},
			{op: "fetch", id: "b", leo: 0, dur: 0, at: 1},
			{op: "change", at: 12}, // LEO 0 >= HW 0 but not caught up for 11s
		}},
		{"one change in flight", abc, 0, []step{
			{op: "fetch", id: "b", at: 1},
			{op: "change", at: 11, proposal: []string{"a", "b"}},
			{op: "change", at: 30},
			{op: "isr", isr: []string{"a", "b"}, minISR: 2},
			{op: "change", at: 31, proposal: []string{"a"}},
		}},
		{"an aborted change may be proposed again", abc, 0, []step{
			{op: "fetch", id: "b", at: 5},
			{op: "change", at: 11, proposal: []string{"a", "b"}},
			{op: "abort"},
			{op: "change", at: 12, proposal: []string{"a", "b"}},
		}},
		{"an aborted addition stops counting", []string{"a"}, 0, []step{
			{op: "fetch", id: "b", leo: 0, dur: 0, at: 1},
			{op: "change", at: 2, proposal: []string{"a", "b"}},
			{op: "local", leo: 10, dur: 10, at: 3, hw: 0},
			{op: "abort"},
			{op: "local", leo: 10, dur: 10, at: 3, hw: 10, advanced: true},
		}},
		{"shrink and expand in one proposal", []string{"a", "b"}, 0, []step{
			{op: "fetch", id: "c", at: 9},
			{op: "change", at: 11, proposal: []string{"a", "c"}},
		}},
		{"a non-replica in the ISR is dropped", []string{"a", "b", "z"}, 0, []step{
			{op: "fetch", id: "b", at: 1},
			{op: "change", at: 2, proposal: []string{"a", "b"}},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := NewLeaderState("a", abc, tc.isr, 3, tc.epochStart, 0, 1, t0)
			runSteps(t, l, tc.steps)
		})
	}
}

func TestFollowers(t *testing.T) {
	l := NewLeaderState("b", []string{"a", "b", "c"}, []string{"b", "c"}, 1, 0, 0, 1, t0)
	l.UpdateFollower("c", 7, 5, t0.Add(time.Second))
	got := l.Followers()
	want := []FollowerState{
		{ID: "a", LastCaughtUp: t0},
		{ID: "c", LEO: 7, Durable: 5, LastCaughtUp: t0.Add(time.Second), LastFetch: t0.Add(time.Second), InISR: true},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("Followers = %+v, want %+v", got, want)
	}
	l.SetISR([]string{"a", "b"}, 1)
	var in []string
	for _, f := range l.Followers() {
		if f.InISR {
			in = append(in, f.ID)
		}
	}
	if strings.Join(in, ",") != "a" || !slices.Equal(l.ISR(), []string{"a", "b"}) {
		t.Fatalf("after SetISR: InISR %v, ISR %v", in, l.ISR())
	}
}

func TestChooseLeader(t *testing.T) {
	abc := []string{"a", "b", "c"}
	alive := func(ids ...string) func(string) bool {
		return func(id string) bool { return slices.Contains(ids, id) }
	}
	for _, tc := range []struct {
		name     string
		isr      []string
		eligible func(string) bool
		unclean  bool
		leader   string
		clean    bool
		ok       bool
	}{
		{"first ISR member in replica order", []string{"c", "b"}, nil, false, "b", true, true},
		{"skips the ineligible", []string{"a", "b", "c"}, alive("c"), false, "c", true, true},
		{"not outside the ISR", []string{"a"}, alive("b", "c"), false, "", false, false},
		{"unclean: first eligible", []string{"a"}, alive("c", "b"), true, "b", false, true},
		{"unclean still prefers the ISR", []string{"a", "c"}, alive("b", "c"), true, "c", true, true},
		{"nobody eligible", abc, alive(), true, "", false, false},
		{"empty ISR", nil, nil, false, "", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			leader, clean, ok := ChooseLeader(abc, tc.isr, tc.eligible, tc.unclean)
			if leader != tc.leader || clean != tc.clean || ok != tc.ok {
				t.Errorf("ChooseLeader = %q %v %v, want %q %v %v", leader, clean, ok, tc.leader, tc.clean, tc.ok)
			}
		})
	}
}

func TestFollowerHighWatermark(t *testing.T) {
	for _, tc := range []struct{ hw, leo, want uint64 }{
		{10, 20, 10}, {20, 10, 10}, {0, 5, 0}, {7, 7, 7},
	} {
		if got := FollowerHighWatermark(tc.hw, tc.leo); got != tc.want {
			t.Errorf("FollowerHighWatermark(%d, %d) = %d, want %d", tc.hw, tc.leo, got, tc.want)
		}
	}
}
