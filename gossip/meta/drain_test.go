package meta

import (
	"reflect"
	"slices"
	"testing"

	"github.com/seedqueue/sq/api"
)

// drainState is three nodes and topic "t" of 3 partitions at rf 3, all
// holding data: leaders n1, n2, n3, every replica in sync.
func drainState(t *testing.T) *State {
	t.Helper()
	s := withNodes(t, "n1", "n2", "n3")
	addTopic(t, s, "t", 1, 3, 3)
	for i := range 3 {
		mustApply(t, s, Command{Op: OpMarkData, Name: "t", ID: tid(1), Partition: i})
	}
	return s
}

func allAlive(string) bool { return true }

func TestLeadersForDrain(t *testing.T) {
	tests := []struct {
		name  string
		setup func(*State)
		node  string
		alive func(string) bool
		want  []LeaderChange
	}{
		{
			name: "to the first in-sync follower in replica order",
			node: "n1", alive: allAlive,
			want: []LeaderChange{{Topic: "t", ID: tid(1), Partition: 0, Leader: "n2", Epoch: 0}},
		},
		{
			name: "only to ISR members",
			setup: func(s *State) {
				mustApply(t, s, Command{Op: OpSetISR, Name: "t", ID: tid(1), Partition: 0, Epoch: 0, ISR: []string{"n1", "n3"}})
			},
			node: "n1", alive: allAlive,
			want: []LeaderChange{{Topic: "t", ID: tid(1), Partition: 0, Leader: "n3", Epoch: 0}},
		},
		{
			name: "no in-sync follower: the partition stays",
			setup: func(s *State) {
				mustApply(t, s, Command{Op: OpSetISR, Name: "t", ID: tid(1), Partition: 0, Epoch: 0, ISR: []string{"n1"}})
			},
			node: "n1", alive: allAlive,
			want: nil,
		},
		{
			name: "dead followers are skipped",
			node: "n1", alive: func(id string) bool { return id != "n2" },
			want: []LeaderChange{{Topic: "t", ID: tid(1), Partition: 0, Leader: "n3", Epoch: 0}},
		},
		{
			name: "drained followers are skipped",
			setup: func(s *State) {
				mustApply(t, s, Command{Op: OpDrainNode, NodeID: "n2"})
			},
			node: "n1", alive: allAlive,
			want: []LeaderChange{{Topic: "t", ID: tid(1), Partition: 0, Leader: "n3", Epoch: 0}},
		},
		{
			name: "a partition without data goes to the least loaded replica",
			setup: func(s *State) {
				addTopic(t, s, "u", 2, 1, 3) // led by n1: placement evens the leaders out
			},
			node: "n1", alive: allAlive,
			want: []LeaderChange{
				{Topic: "t", ID: tid(1), Partition: 0, Leader: "n2", Epoch: 0},
				{Topic: "u", ID: tid(2), Partition: 0, Leader: "n3", Epoch: 0},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := drainState(t)
			if tt.setup != nil {
				tt.setup(s)
			}
			got := LeadersForDrain(s, tt.node, tt.alive)
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("LeadersForDrain = %+v, want %+v", got, tt.want)
			}
			// Deterministic: the same state and liveness, the same answer.
			if again := LeadersForDrain(s.Clone(), tt.node, tt.alive); !reflect.DeepEqual(again, got) {
				t.Fatalf("second call = %+v, first %+v", again, got)
			}
		})
	}
}

func TestApplyDrainNode(t *testing.T) {
	tests := []struct {
		name     string
		shutdown bool
		// wantISR is partition 1's ISR (led by n2, followed by n1).
		wantISR []string
	}{
		{name: "operator drain keeps the node in the ISRs it follows", wantISR: []string{"n2", "n3", "n1"}},
		{name: "shutdown drain leaves them", shutdown: true, wantISR: []string{"n2", "n3"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := drainState(t)
			before := s.Topics["t"].Partitions[0]
			leaders := LeadersForDrain(s, "n1", allAlive)
			r := mustApply(t, s, Command{Op: OpDrainNode, NodeID: "n1", Leaders: leaders, Shutdown: tt.shutdown})
			if r.Moved != 1 {
				t.Fatalf("moved %d partitions, want 1", r.Moved)
			}
			p := s.Topics["t"].Partitions[0]
			if p.Leader != "n2" || p.LeaderEpoch != before.LeaderEpoch+1 {
				t.Fatalf("partition 0: leader %q epoch %d, want n2 at epoch %d", p.Leader, p.LeaderEpoch, before.LeaderEpoch+1)
			}
			if slices.Contains(p.ISR, "n1") {
				t.Fatalf("partition 0: the old leader stayed in the ISR %v", p.ISR)
			}
			if got := s.Topics["t"].Partitions[1].ISR; !sameSet(got, tt.wantISR) {
				t.Fatalf("partition 1 ISR = %v, want %v", got, tt.wantISR)
			}
			if !s.Drained("n1") || s.ShuttingDown("n1") != tt.shutdown {
				t.Fatalf("drained %v shutting down %v", s.Drained("n1"), s.ShuttingDown("n1"))
			}
			if got := LedBy(s, "n1"); len(got) != 0 {
				t.Fatalf("n1 still leads %v", got)
			}
			// A replayed (stale) change moves nothing again.
			if r := mustApply(t, s, Command{Op: OpDrainNode, NodeID: "n1", Leaders: leaders, Shutdown: tt.shutdown}); r.Moved != 0 {
				t.Fatalf("a stale drain moved %d partitions", r.Moved)
			}
		})
	}
}

// sameSet reports whether a and b hold the same ids.
func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

func TestDrainRefusals(t *testing.T) {
	tests := []struct {
		name string
		cmd  Command
		want api.Code
	}{
		{"drain of an unknown node", Command{Op: OpDrainNode, NodeID: "n9"}, api.CodeInvalidRequest},
		{"undrain of an unknown node", Command{Op: OpUndrainNode, NodeID: "n9"}, api.CodeInvalidRequest},
		{"a change of an unknown topic", Command{Op: OpDrainNode, NodeID: "n1", Leaders: []LeaderChange{{Topic: "x", ID: tid(9), Leader: "n2"}}}, api.CodeUnknownTopic},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := drainState(t)
			h := s.Hash()
			wantCode(t, errOf(s.Apply(tt.cmd)), tt.want)
			if s.Hash() != h {
				t.Fatal("a refused command changed the state")
			}
		})
	}
}

func TestDrainedNodeLeadsOnlyWithoutAnother(t *testing.T) {
	s := drainState(t)
	mustApply(t, s, Command{Op: OpDrainNode, NodeID: "n1", Leaders: LeadersForDrain(s, "n1", allAlive)})

	// A failover skips the drained node: n2 dies, partition 1 (replicas
	// n2 n3 n1) goes to n3, not n1.
	dead := func(id string) bool { return id != "n2" }
	got := LeadersAfterDeath(s, dead)
	for _, ch := range got {
		if ch.Leader == "n1" {
			t.Fatalf("failover chose the drained node: %+v", got)
		}
	}
	// With n3 dead too, the drained node is the only candidate and leads.
	got = LeadersAfterDeath(s, func(id string) bool { return id == "n1" })
	if len(got) == 0 || got[0].Leader != "n1" {
		t.Fatalf("with only the drained node alive: %+v, want it to lead", got)
	}

	// New topics are not led by it.
	top := addTopic(t, s, "new", 3, 6, 3)
	for i, p := range top.Partitions {
		if p.Leader == "n1" {
			t.Fatalf("partition %d of a new topic is led by the drained node", i)
		}
	}

	// After undrain it is a candidate again; leadership does not move back
	// by itself.
	mustApply(t, s, Command{Op: OpUndrainNode, NodeID: "n1"})
	if s.Drained("n1") || s.DrainedNodes != nil {
		t.Fatalf("still drained after undrain: %v", s.DrainedNodes)
	}
	if got := LedBy(s, "n1"); len(got) != 0 {
		t.Fatalf("undrain moved leadership back: %v", got)
	}
}

func TestShutdownDrainEndsAtRegister(t *testing.T) {
	s := drainState(t)
	mustApply(t, s, Command{Op: OpDrainNode, NodeID: "n1", Leaders: LeadersForDrain(s, "n1", allAlive), Shutdown: true})
	// While it shuts down, its leader cannot add it back to the ISR.
	p := s.Topics["t"].Partitions[1]
	mustApply(t, s, Command{Op: OpSetISR, Name: "t", ID: tid(1), Partition: 1, Epoch: p.LeaderEpoch, ISR: []string{"n1", "n2", "n3"}})
	if got := s.Topics["t"].Partitions[1].ISR; slices.Contains(got, "n1") {
		t.Fatalf("set-isr added a node in controlled shutdown: %v", got)
	}
	// Its restart (register-node) ends the shutdown drain, so the ISR
	// takes it back.
	mustApply(t, s, Command{Op: OpRegisterNode, Node: &Node{ID: "n1", DataAddr: "n1:6064"}})
	if s.Drained("n1") {
		t.Fatal("a restarted node is still drained by its shutdown")
	}
	mustApply(t, s, Command{Op: OpSetISR, Name: "t", ID: tid(1), Partition: 1, Epoch: p.LeaderEpoch, ISR: []string{"n1", "n2", "n3"}})
	if got := s.Topics["t"].Partitions[1].ISR; !slices.Contains(got, "n1") {
		t.Fatalf("ISR %v after the restart, want n1 back", got)
	}

	// An operator drain survives a restart.
	mustApply(t, s, Command{Op: OpDrainNode, NodeID: "n2"})
	mustApply(t, s, Command{Op: OpRegisterNode, Node: &Node{ID: "n2", DataAddr: "n2:6064"}})
	if !s.Drained("n2") {
		t.Fatal("a restart ended an operator drain")
	}
}

func TestDrainedRoundTrip(t *testing.T) {
	s := drainState(t)
	h0 := s.Hash()
	mustApply(t, s, Command{Op: OpDrainNode, NodeID: "n3", Shutdown: true})
	if s.Hash() == h0 {
		t.Fatal("draining did not change the hash")
	}
	b, err := s.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	back, err := UnmarshalState(b)
	if err != nil {
		t.Fatal(err)
	}
	if back.Hash() != s.Hash() || !back.ShuttingDown("n3") {
		t.Fatalf("snapshot round trip lost the drain: %v", back.DrainedNodes)
	}
	mustApply(t, s, Command{Op: OpUndrainNode, NodeID: "n3"})
	if s.Hash() != s.Clone().Hash() {
		t.Fatal("clone hash differs")
	}
	for _, op := range []Op{OpDrainNode, OpUndrainNode} {
		enc, err := Encode(Command{Op: op, NodeID: "n1", Shutdown: op == OpDrainNode})
		if err != nil {
			t.Fatal(err)
		}
		if c, err := Decode(enc); err != nil || c.Op != op {
			t.Fatalf("decode %s: %+v %v", op, c, err)
		}
	}
}
