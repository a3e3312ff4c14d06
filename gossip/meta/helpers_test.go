package meta

import (
	"errors"
	"testing"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/engine"
)

// tid returns a distinct non-zero topic id per b.
func tid(b byte) api.TopicID {
	var id api.TopicID
	id[0], id[15] = b, 0xee
	return id
}

// withNodes returns a State with the given nodes registered.
func withNodes(t testing.TB, ids ...string) *State {
	t.Helper()
	s := NewState()
	for _, id := range ids {
		mustApply(t, s, Command{Op: OpRegisterNode, Node: &Node{ID: id, DataAddr: id + ":6064", GRPCAddr: id + ":6060"}})
	}
	return s
}

// mustApply applies c and fails the test if it is refused.
func mustApply(t testing.TB, s *State, c Command) Result {
	t.Helper()
	r := s.Apply(c)
	if r.Err != nil {
		t.Fatalf("apply %s: %v", c.Op, r.Err)
	}
	return r
}

// addTopic creates topic name (id tid(b)) with partitions and rf over all
// registered nodes, through PrepareCreate and Apply.
func addTopic(t testing.TB, s *State, name string, b byte, partitions, rf int) *Topic {
	t.Helper()
	var ids []string
	for id := range s.Nodes {
		ids = append(ids, id)
	}
	c, err := PrepareCreate(s, name, tid(b), partitions, engine.TopicConfig{ReplicationFactor: int32(rf)}, ids, 1000)
	if err != nil {
		t.Fatalf("prepare create %s: %v", name, err)
	}
	return mustApply(t, s, c).Topic
}

// base is three nodes n1..n3 and topic "orders" (id tid(1)), 3 partitions
// at rf 2: leaders n1, n2, n3; replicas [n1 n2], [n2 n3], [n3 n1].
func base(t testing.TB) *State {
	t.Helper()
	s := withNodes(t, "n1", "n2", "n3")
	addTopic(t, s, "orders", 1, 3, 2)
	return s
}

// wantCode fails unless err is an *api.Error with code c (c 0: err nil).
func wantCode(t testing.TB, err error, c api.Code) {
	t.Helper()
	if c == 0 {
		if err != nil {
			t.Fatalf("err = %v, want nil", err)
		}
		return
	}
	var e *api.Error
	if !errors.As(err, &e) || e.Code != c {
		t.Fatalf("err = %v, want %s", err, c)
	}
}

// errOf returns r.Err as an error (a nil interface when r.Err is nil).
func errOf(r Result) error {
	if r.Err == nil {
		return nil
	}
	return r.Err
}

// alive returns a liveness function true for ids only.
func alive(ids ...string) func(string) bool {
	set := map[string]bool{}
	for _, id := range ids {
		set[id] = true
	}
	return func(id string) bool { return set[id] }
}
