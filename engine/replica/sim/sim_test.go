package sim

import (
	"bytes"
	"errors"
	"regexp"
	"strings"
	"testing"
)

// TestSimulation runs 10,000 steps for a few seeds over 3 and 5 nodes with
// the rules of package replica: every invariant holds after every step,
// and the runs went through what they are meant to (elections,
// truncations, ISR changes, crashes, acknowledged and consumed values).
func TestSimulation(t *testing.T) {
	var total Stats
	for _, nodes := range []int{3, 5} {
		for seed := uint64(1); seed <= 4; seed++ {
			s := New(Config{Seed: seed, Nodes: nodes})
			if err := s.Run(10000); err != nil {
				t.Fatalf("nodes=%d: %v (replay: go run ./cmd/sq-sim -seed %d -nodes %d -steps 10000 -v)", nodes, err, seed, nodes)
			}
			st := s.Stats()
			t.Logf("nodes=%d seed=%d: %+v", nodes, seed, st)
			total.Elections += st.Elections
			total.Truncations += st.Truncations
			total.ISRChanges += st.ISRChanges
			total.Crashes += st.Crashes
			total.Acked += st.Acked
			total.Consumed += st.Consumed
			if st.Acked == 0 || st.Elections == 0 {
				t.Errorf("nodes=%d seed=%d: no acknowledged value or no election in 10,000 steps: %+v", nodes, seed, st)
			}
		}
	}
	// min.insync.replicas other than the default: 1 lets the ISR shrink to
	// the leader alone, 3 of 5 holds the HW longer.
	for _, cfg := range []Config{{Seed: 5, Nodes: 3, MinISR: 1}, {Seed: 5, Nodes: 5, MinISR: 3}} {
		if err := New(cfg).Run(10000); err != nil {
			t.Fatalf("nodes=%d min.insync.replicas=%d: %v", cfg.Nodes, cfg.MinISR, err)
		}
	}
	if total.Truncations == 0 || total.ISRChanges == 0 || total.Crashes == 0 || total.Consumed == 0 {
		t.Errorf("the runs did not exercise truncation, ISR changes, crashes and reads: %+v", total)
	}
}

// lossOrDivergence matches the invariants of lost acknowledged values and
// of replicas that differ below their high watermarks.
const lossOrDivergence = `^acknowledged value \d+ at offset \d+ lost|^offset \d+ holds value \d+ on .* but value \d+ is committed there$`

// TestBrokenRulesFail shows the checker can fail: with each rule broken
// on purpose, every seed tried violates an invariant within the steps.
func TestBrokenRulesFail(t *testing.T) {
	for _, tc := range []struct {
		rule  Rule
		steps int
		want  string // a regexp of what the invariant violated says
		nodes []int
		seeds []uint64
	}{
		{BreakElectOutsideISR, 20000, lossOrDivergence, []int{3, 5}, []uint64{1, 2, 3}},
		{BreakLeaderAloneHW, 20000, lossOrDivergence, []int{3, 5}, []uint64{1, 2, 3}},
		{BreakSkipTruncation, 20000, lossOrDivergence, []int{3, 5}, []uint64{1, 2, 3}},
		{BreakFollowerHWUncapped, 20000, "is above its log end offset", []int{3, 5}, []uint64{1, 2, 3}},
		{BreakReadAboveHW, 20000, lossOrDivergence, []int{3, 5}, []uint64{1, 2, 3}},
		// Rarer: a leader must crash and restart before the controller
		// notices, with followers still on its epoch.
		{BreakResumeEpoch, 20000, lossOrDivergence, []int{3, 5}, []uint64{1, 2}},
		// Rarer still: a leader that appended nothing in its epoch must
		// become a follower holding an older uncommitted suffix.
		{BreakTruncationOneRound, 50000, lossOrDivergence, []int{5}, []uint64{79, 163}},
	} {
		for _, nodes := range tc.nodes {
			for _, seed := range tc.seeds {
				s := New(Config{Seed: seed, Nodes: nodes, Break: tc.rule})
				err := s.Run(tc.steps)
				var f *Failure
				if !errors.As(err, &f) {
					t.Errorf("rule %v nodes=%d seed=%d: %d steps passed (%v), want a failure", tc.rule, nodes, seed, tc.steps, err)
					continue
				}
				if f.Seed != seed || f.Step < 1 || f.Step > tc.steps || !regexp.MustCompile(tc.want).MatchString(f.Invariant) {
					t.Errorf("rule %v nodes=%d seed=%d: %v, want a failure within %d steps saying %q", tc.rule, nodes, seed, f, tc.steps, tc.want)
				}
			}
		}
	}
}

// TestReplay: a seed replays exactly, step for step.
func TestReplay(t *testing.T) {
	run := func(seed uint64, rule Rule) (string, error) {
		var b bytes.Buffer
		err := New(Config{Seed: seed, Nodes: 3, Break: rule, Trace: &b}).Run(3000)
		return b.String(), err
	}
	a, errA := run(7, BreakLeaderAloneHW)
	b, errB := run(7, BreakLeaderAloneHW)
	if a != b || errA == nil || errB == nil || errA.Error() != errB.Error() {
		t.Fatalf("seed 7 did not replay: errors %v and %v, traces equal: %v", errA, errB, a == b)
	}
	c, _ := run(8, BreakLeaderAloneHW)
	if c == a {
		t.Fatal("seeds 7 and 8 gave the same trace")
	}
}

func TestFailureMessage(t *testing.T) {
	f := &Failure{Seed: 42, Step: 7, Invariant: "x"}
	if got, want := f.Error(), "seed 42 failed at step 7: x"; got != want {
		t.Fatalf("Error() = %q, want %q", got, want)
	}
}

func TestParseRule(t *testing.T) {
	for _, name := range RuleNames() {
		r, err := ParseRule(name)
		if err != nil || r.String() != name {
			t.Errorf("ParseRule(%q) = %v, %v", name, r, err)
		}
	}
	if _, err := ParseRule("nope"); err == nil || !strings.Contains(err.Error(), "skip-truncation") {
		t.Errorf("ParseRule(nope) = %v, want an error listing the rules", err)
	}
}
