package gossip

import (
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
)

// TestSuspectAfterUnansweredPings checks the membership book on a fake
// clock: a member is alive while it answers pings, suspect once none was
// answered for suspectAfter, alive again at its next answer, and dead
// (not suspect) once memberlist declares it so.
func TestSuspectAfterUnansweredPings(t *testing.T) {
	clock := time.Unix(1000, 0)
	m := &membership{
		log: slog.New(slog.NewTextHandler(io.Discard, nil)), self: "a",
		status: map[string]string{}, nodes: map[string]memberlist.Node{}, heard: map[string]time.Time{},
		events: make(chan struct{}, 1), probeInterval: time.Second, probeTimeout: 500 * time.Millisecond,
		now: func() time.Time { return clock },
	}
	for _, id := range []string{"a", "b", "c"} {
		m.NotifyJoin(&memberlist.Node{Name: id})
	}
	if got := m.suspectAfter(); got != 3500*time.Millisecond {
		t.Fatalf("suspectAfter %v, want 3.5s", got)
	}
	clock = clock.Add(3500 * time.Millisecond)
	if s := m.state("b"); s != StateAlive {
		t.Fatalf("b %s after 3.5s unheard, want alive", s)
	}
	m.NotifyPingComplete(&memberlist.Node{Name: "c"}, time.Millisecond, nil)
	clock = clock.Add(time.Millisecond)
	if s, c := m.state("b"), m.state("c"); s != StateSuspect || c != StateAlive {
		t.Fatalf("b %s, c %s: want b suspect (no answer for longer than 3.5s), c alive", s, c)
	}
	if !m.alive("b") {
		t.Fatal("a suspect member must still count as alive for leadership and clients")
	}
	m.NotifyPingComplete(&memberlist.Node{Name: "b"}, time.Millisecond, nil)
	if s := m.state("b"); s != StateAlive {
		t.Fatalf("b %s after it answered, want alive", s)
	}
	clock = clock.Add(time.Minute)
	m.NotifyLeave(&memberlist.Node{Name: "b"})
	if s := m.state("b"); s != StateDead {
		t.Fatalf("b %s after memberlist declared it dead, want dead", s)
	}
	if s := m.state("z"); s != StateUnknown {
		t.Fatalf("a node gossip never met is %s, want unknown", s)
	}
}

// TestStoppedMemberShownSuspectThenDead crashes one node of three (no
// gossip leave): the others show it suspect first, while memberlist's
// suspicion lasts (made long here), then dead.
func TestStoppedMemberShownSuspectThenDead(t *testing.T) {
	long := func(o Options) Options {
		inner := o.Memberlist
		o.Memberlist = func(c *memberlist.Config) {
			inner(c)
			c.SuspicionMult = 20 // dead no sooner than 4 s after the suspicion
		}
		return o
	}
	first := mustStart(t, long(testOptions(t, "n1", t.TempDir())))
	nodes := []*clusterNode{first}
	for _, id := range []string{"n2", "n3"} {
		o := long(testOptions(t, id, t.TempDir()))
		o.Seeds = []string{first.addr}
		nodes = append(nodes, mustStart(t, o))
	}
	waitReady(t, nodes...)
	eventually(t, 20*time.Second, "every member alive everywhere", func() bool {
		for _, n := range nodes {
			for _, m := range nodes {
				if n.memberState(m.ID()) != StateAlive {
					return false
				}
			}
		}
		return true
	})
	victim := nodes[2]
	victim.crash(t)
	var seen []string
	eventually(t, 60*time.Second, "n3 dead on n1", func() bool {
		s := first.memberState(victim.ID())
		if len(seen) == 0 || seen[len(seen)-1] != s {
			seen = append(seen, s)
		}
		return s == StateDead
	})
	want := []string{StateAlive, StateSuspect, StateDead}
	if len(seen) != len(want) || seen[0] != want[0] || seen[1] != want[1] || seen[2] != want[2] {
		t.Fatalf("n3's states on n1 %v, want %v", seen, want)
	}
}
