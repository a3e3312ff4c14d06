package meta

import (
	"strconv"
	"strings"
	"testing"

	"github.com/seedqueue/sq/api"
)

// A removed node's data directory cannot register again, under its old
// id or another one; a new data directory of the same id can, and the
// refusal changes nothing and says what to do.
func TestRemovedDataDirCannotRegister(t *testing.T) {
	s := NewState()
	mustApply(t, s, Command{Op: OpRegisterNode, Node: &Node{ID: "n1", DataDirID: "d1"}})
	mustApply(t, s, Command{Op: OpRegisterNode, Node: &Node{ID: "n2", DataDirID: "d2"}})
	mustApply(t, s, Command{Op: OpRemoveNode, NodeID: "n2"})
	if r, ok := s.RemovedDataDir("d2"); !ok || r.ID != "n2" {
		t.Fatalf("removed data dir d2: %+v %v", r, ok)
	}
	if _, ok := s.RemovedDataDir(""); ok {
		t.Fatal("the empty data dir id is listed as removed")
	}
	for _, id := range []string{"n2", "n3"} {
		before := s.Hash()
		r := s.Apply(Command{Op: OpRegisterNode, Node: &Node{ID: id, DataDirID: "d2"}})
		if r.Err == nil || r.Err.Code != api.CodeInvalidRequest {
			t.Fatalf("register %s with the removed data dir: %v, want INVALID_REQUEST", id, r.Err)
		}
		for _, w := range []string{`"n2"`, "removed", "--data-dir"} {
			if !strings.Contains(r.Err.Message, w) {
				t.Errorf("refusal %q does not contain %s", r.Err.Message, w)
			}
		}
		if s.Hash() != before {
			t.Fatal("a refused register-node changed the state")
		}
	}
	mustApply(t, s, Command{Op: OpRegisterNode, Node: &Node{ID: "n2", DataDirID: "d2-new"}})
	// The list survives a snapshot.
	b, err := s.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	back, err := UnmarshalState(b)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := back.RemovedDataDir("d2"); !ok || back.Hash() != s.Hash() {
		t.Fatalf("after a snapshot: removed %+v, hash %s want %s", back.Removed, back.Hash(), s.Hash())
	}
}

// State.Removed keeps the newest MaxRemovedNodes removals.
func TestRemovedNodesBounded(t *testing.T) {
	s := NewState()
	total := MaxRemovedNodes + 3
	for i := range total {
		id := "n" + itoa(i)
		mustApply(t, s, Command{Op: OpRegisterNode, Node: &Node{ID: id, DataDirID: "d" + itoa(i)}})
		mustApply(t, s, Command{Op: OpRemoveNode, NodeID: id})
	}
	if len(s.Removed) != MaxRemovedNodes {
		t.Fatalf("%d removed nodes listed, want %d", len(s.Removed), MaxRemovedNodes)
	}
	if s.Removed[0].ID != "n3" || s.Removed[len(s.Removed)-1].ID != "n"+itoa(total-1) {
		t.Fatalf("oldest %+v, newest %+v: want n3 and n%d", s.Removed[0], s.Removed[len(s.Removed)-1], total-1)
	}
	if _, ok := s.RemovedDataDir("d0"); ok {
		t.Error("the oldest removal is still listed")
	}
	mustApply(t, s, Command{Op: OpRegisterNode, Node: &Node{ID: "n0", DataDirID: "d0"}})
}

func itoa(i int) string { return strconv.Itoa(i) }

// TestRegisterKeepsTheDataDir: a node id registered with a data
// directory cannot be registered with another (its partitions' records
// are in the first); the same directory registers again (new addresses).
func TestRegisterKeepsTheDataDir(t *testing.T) {
	s := NewState()
	mustApply(t, s, Command{Op: OpRegisterNode, Node: &Node{ID: "n1", DataDirID: "d1", GRPCAddr: "a:1"}})
	h := s.Hash()
	r := s.Apply(Command{Op: OpRegisterNode, Node: &Node{ID: "n1", DataDirID: "d9", GRPCAddr: "b:1"}})
	if r.Err == nil || r.Err.Code != api.CodeInvalidRequest || s.Hash() != h {
		t.Fatalf("register with another data dir: %+v, state changed %v", r, s.Hash() != h)
	}
	mustApply(t, s, Command{Op: OpRegisterNode, Node: &Node{ID: "n1", DataDirID: "d1", GRPCAddr: "b:1"}})
	if s.Nodes["n1"].GRPCAddr != "b:1" {
		t.Fatalf("re-register with new addresses: %+v", s.Nodes["n1"])
	}
}
