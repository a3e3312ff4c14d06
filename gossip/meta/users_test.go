package meta

import (
	"bytes"
	"testing"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/internal/authn"
)

func testCredential(t *testing.T, password string) *authn.Credential {
	t.Helper()
	c, err := authn.NewCredential(password, 0)
	if err != nil {
		t.Fatal(err)
	}
	return &c
}

func TestApplyUsers(t *testing.T) {
	good := testCredential(t, "pw")
	weak := good.Clone()
	weak.Iterations = 1000
	s := NewState()
	steps := []struct {
		cmd  Command
		code api.Code // 0: applied
		want []string // users afterwards
	}{
		{Command{Op: OpUpsertUser, Name: "alice", Credential: good}, 0, []string{"alice"}},
		{Command{Op: OpUpsertUser, Name: "bob", Credential: good}, 0, []string{"alice", "bob"}},
		{Command{Op: OpUpsertUser, Name: "alice", Credential: testCredential(t, "new")}, 0, []string{"alice", "bob"}},
		{Command{Op: OpUpsertUser, Name: "carol"}, api.CodeInvalidRequest, []string{"alice", "bob"}},
		{Command{Op: OpUpsertUser, Name: "carol", Credential: &weak}, api.CodeInvalidRequest, []string{"alice", "bob"}},
		{Command{Op: OpUpsertUser, Name: "", Credential: good}, api.CodeInvalidRequest, []string{"alice", "bob"}},
		{Command{Op: OpDeleteUser, Name: "bob"}, 0, []string{"alice"}},
		{Command{Op: OpDeleteUser, Name: "bob"}, api.CodeInvalidRequest, []string{"alice"}},
		{Command{Op: OpDeleteUser, Name: "alice"}, 0, []string{}},
	}
	for i, st := range steps {
		r := s.Apply(st.cmd)
		if (r.Err == nil) != (st.code == 0) || (r.Err != nil && r.Err.Code != st.code) {
			t.Fatalf("step %d %s %q: %v, want code %v", i, st.cmd.Op, st.cmd.Name, r.Err, st.code)
		}
		if got := s.UserNames(); len(got) != len(st.want) || (len(got) > 0 && !equalStrings(got, st.want)) {
			t.Fatalf("step %d: users %v, want %v", i, got, st.want)
		}
	}
	// No users left: the State hashes as one that never had any.
	if s.Hash() != NewState().Hash() {
		t.Fatal("a state whose users were all deleted hashes differently from an empty one")
	}
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestUsersCloneMarshalHash: Clone shares no bytes, Marshal and
// UnmarshalState keep the Hash, and the order users were created in does
// not change it.
func TestUsersCloneMarshalHash(t *testing.T) {
	a, b := testCredential(t, "a"), testCredential(t, "b")
	s1, s2 := NewState(), NewState()
	s1.Apply(Command{Op: OpUpsertUser, Name: "a", Credential: a})
	s1.Apply(Command{Op: OpUpsertUser, Name: "b", Credential: b})
	s2.Apply(Command{Op: OpUpsertUser, Name: "b", Credential: b})
	s2.Apply(Command{Op: OpUpsertUser, Name: "a", Credential: a})
	if s1.Hash() != s2.Hash() {
		t.Fatal("the order of creation changed the hash")
	}
	c := s1.Clone()
	c.Users["a"].StoredKey[0] ^= 1
	if bytes.Equal(c.Users["a"].StoredKey, s1.Users["a"].StoredKey) || s1.Hash() != s2.Hash() {
		t.Fatal("Clone shares a key with its source")
	}
	a.StoredKey[0] ^= 1 // the command's credential after Apply
	if s1.Hash() != s2.Hash() {
		t.Fatal("Apply kept the command's slices")
	}
	b1, err := s1.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	back, err := UnmarshalState(b1)
	if err != nil || back.Hash() != s1.Hash() {
		t.Fatalf("round trip: %v", err)
	}
	enc, err := Encode(Command{Op: OpUpsertUser, Name: "a", Credential: b})
	if err != nil {
		t.Fatal(err)
	}
	dec, err := Decode(enc)
	if err != nil || dec.Credential == nil || !bytes.Equal(dec.Credential.ServerKey, b.ServerKey) {
		t.Fatalf("command round trip: %+v, %v", dec, err)
	}
	if bytes.Contains(enc, []byte(`"password"`)) {
		t.Fatal("a command holds a password field")
	}
}
