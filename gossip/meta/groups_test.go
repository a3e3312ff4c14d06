package meta

import (
	"fmt"
	"strings"
	"testing"

	"github.com/seedqueue/sq/api"
)

// TestApplyAssignGroup: the first assign of a group wins and a second is a
// no-op that answers the existing coordinator; a bad name or an unknown
// node is refused; the state round-trips through a snapshot.
func TestApplyAssignGroup(t *testing.T) {
	s := base(t)
	empty := s.Hash()
	r := mustApply(t, s, Command{Op: OpAssignGroup, Name: "billing", NodeID: "n2"})
	if r.Coordinator != "n2" || s.Groups["billing"] != "n2" {
		t.Fatalf("first assign: result %+v, groups %v", r, s.Groups)
	}
	if s.Hash() == empty {
		t.Fatal("assigning a group does not change the hash")
	}
	h := s.Hash()
	r = mustApply(t, s, Command{Op: OpAssignGroup, Name: "billing", NodeID: "n3"})
	if r.Coordinator != "n2" || s.Groups["billing"] != "n2" || s.Hash() != h {
		t.Fatalf("second assign: result %+v, groups %v; want the first owner kept", r, s.Groups)
	}
	for name, c := range map[string]Command{
		"empty name":   {Op: OpAssignGroup, Name: "", NodeID: "n1"},
		"long name":    {Op: OpAssignGroup, Name: strings.Repeat("g", 256), NodeID: "n1"},
		"unknown node": {Op: OpAssignGroup, Name: "other", NodeID: "n9"},
	} {
		if r := s.Apply(c); r.Err == nil || r.Err.Code != api.CodeInvalidRequest {
			t.Errorf("%s: %+v, want INVALID_REQUEST", name, r)
		}
	}
	if s.Hash() != h {
		t.Fatal("a refused assign changed the state")
	}
	snap, err := s.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	back, err := UnmarshalState(snap)
	if err != nil || back.Hash() != h || back.Groups["billing"] != "n2" {
		t.Fatalf("snapshot: %v, groups %v", err, back.Groups)
	}
	enc, err := Encode(Command{Op: OpAssignGroup, Name: "billing", NodeID: "n2"})
	if err != nil {
		t.Fatal(err)
	}
	if c, err := Decode(enc); err != nil || c.Op != OpAssignGroup || c.Name != "billing" || c.NodeID != "n2" {
		t.Fatalf("decode: %+v, %v", c, err)
	}
}

// TestGroupsOmittedWhenEmpty: a State without groups encodes without the
// field, so clusters that never assigned a group keep their hash.
func TestGroupsOmittedWhenEmpty(t *testing.T) {
	s := base(t)
	b, err := s.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "groups") {
		t.Fatalf("a state without groups encodes them: %s", b)
	}
	before := s.Hash()
	mustApply(t, s, Command{Op: OpAssignGroup, Name: "g", NodeID: "n3"})
	mustApply(t, s, Command{Op: OpRemoveNode, NodeID: "n3"})
	c := base(t)
	mustApply(t, c, Command{Op: OpRemoveNode, NodeID: "n3"})
	if s.Hash() != c.Hash() || s.Hash() == before {
		t.Fatalf("after the only coordinator left: hash %s, want %s (as if never assigned)", s.Hash(), c.Hash())
	}
}

// TestRemoveNodeUnassignsGroups: removing a node removes it as the
// coordinator of its groups and keeps the others' groups.
func TestRemoveNodeUnassignsGroups(t *testing.T) {
	s := base(t)
	for i, n := range []string{"n1", "n2", "n1", "n3"} {
		mustApply(t, s, Command{Op: OpAssignGroup, Name: fmt.Sprintf("g%d", i), NodeID: n})
	}
	mustApply(t, s, Command{Op: OpRemoveNode, NodeID: "n1"})
	want := map[string]string{"g1": "n2", "g3": "n3"}
	if fmt.Sprint(s.Groups) != fmt.Sprint(want) {
		t.Fatalf("groups after removing n1: %v, want %v", s.Groups, want)
	}
	// The unassigned group can be assigned again, to a live node.
	if r := mustApply(t, s, Command{Op: OpAssignGroup, Name: "g0", NodeID: "n2"}); r.Coordinator != "n2" {
		t.Fatalf("reassign: %+v", r)
	}
}

// TestChooseCoordinator: the choice is among the alive registered nodes,
// the least loaded in groups, the same for the same State and name, and
// spreads new groups over tied nodes.
func TestChooseCoordinator(t *testing.T) {
	s := withNodes(t, "n1", "n2", "n3")
	if got := ChooseCoordinator(NewState(), "g", nil); got != "" {
		t.Fatalf("no nodes: %q", got)
	}
	if got := ChooseCoordinator(s, "g", func(string) bool { return false }); got != "" {
		t.Fatalf("none alive: %q", got)
	}
	// Ties are broken by the name: over many names every node is chosen.
	seen := map[string]bool{}
	for i := range 30 {
		name := fmt.Sprintf("group-%d", i)
		a, b := ChooseCoordinator(s, name, nil), ChooseCoordinator(s.Clone(), name, nil)
		if a != b || a == "" {
			t.Fatalf("%s: %q and %q", name, a, b)
		}
		seen[a] = true
	}
	if len(seen) != 3 {
		t.Fatalf("30 names on 3 idle nodes chose only %v", seen)
	}
	// The least loaded wins whatever the name.
	mustApply(t, s, Command{Op: OpAssignGroup, Name: "a", NodeID: "n1"})
	mustApply(t, s, Command{Op: OpAssignGroup, Name: "b", NodeID: "n2"})
	for i := range 10 {
		if got := ChooseCoordinator(s, fmt.Sprintf("x%d", i), nil); got != "n3" {
			t.Fatalf("x%d: %q, want the node with no group n3", i, got)
		}
	}
	// A dead node is never chosen, even the least loaded.
	alive := func(id string) bool { return id != "n3" }
	for i := range 10 {
		if got := ChooseCoordinator(s, fmt.Sprintf("x%d", i), alive); got != "n1" && got != "n2" {
			t.Fatalf("x%d with n3 dead: %q", i, got)
		}
	}
	// Assigning through the log keeps the balance: 30 groups over 3 nodes.
	for i := range 27 {
		name := fmt.Sprintf("y%d", i)
		mustApply(t, s, Command{Op: OpAssignGroup, Name: name, NodeID: ChooseCoordinator(s, name, nil)})
	}
	for n, c := range s.GroupCounts() {
		if c < 9 || c > 10 {
			t.Fatalf("node %s coordinates %d of 29 groups: %v", n, c, s.GroupCounts())
		}
	}
}

// TestApplyUnassignGroup checks that only the group's coordinator
// unassigns it, and that the last unassign leaves the encoding of a state
// that never had groups.
func TestApplyUnassignGroup(t *testing.T) {
	s := base(t)
	empty := s.Hash()
	mustApply(t, s, Command{Op: OpAssignGroup, Name: "billing", NodeID: "n2"})
	mustApply(t, s, Command{Op: OpAssignGroup, Name: "audit", NodeID: "n3"})
	mustApply(t, s, Command{Op: OpUnassignGroup, Name: "billing", NodeID: "n3"})
	if s.Groups["billing"] != "n2" {
		t.Fatalf("an unassign by another node than the coordinator removed it: %v", s.Groups)
	}
	mustApply(t, s, Command{Op: OpUnassignGroup, Name: "billing", NodeID: "n2"})
	if _, ok := s.Groups["billing"]; ok || s.Groups["audit"] != "n3" {
		t.Fatalf("groups %v, want only audit", s.Groups)
	}
	mustApply(t, s, Command{Op: OpUnassignGroup, Name: "never", NodeID: "n2"})
	mustApply(t, s, Command{Op: OpUnassignGroup, Name: "audit", NodeID: "n3"})
	if s.Groups != nil || s.Hash() != empty {
		t.Fatalf("groups %v; hash differs from a state without groups: %v", s.Groups, s.Hash() != empty)
	}
	if r := s.Apply(Command{Op: OpUnassignGroup, Name: "", NodeID: "n1"}); r.Err == nil || r.Err.Code != api.CodeInvalidRequest {
		t.Fatalf("empty group name: %+v, want INVALID_REQUEST", r)
	}
}
