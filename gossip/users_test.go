package gossip

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/internal/authn"
)

// TestUsersReplicated: a user created or deleted through any node of a
// three-node cluster reaches every node's store, so each node
// authenticates it.
func TestUsersReplicated(t *testing.T) {
	nodes := startCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cred, err := authn.NewCredential("pw", 0)
	if err != nil {
		t.Fatal(err)
	}
	// Through a node that may not be the controller: forwarded.
	if err := nodes[2].UpsertUser(ctx, "alice", cred); err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		eventually(t, 20*time.Second, n.ID()+" has alice", func() bool {
			c, ok, err := n.Credential("alice")
			return ok && err == nil && bytes.Equal(c.StoredKey, cred.StoredKey)
		})
	}
	if err := nodes[1].DeleteUser(ctx, "bob"); codeOf(err) != api.CodeInvalidRequest {
		t.Fatalf("delete of an unknown user: %v", err)
	}
	bad := cred.Clone()
	bad.Iterations = 10
	if err := nodes[0].UpsertUser(ctx, "carol", bad); codeOf(err) != api.CodeInvalidRequest {
		t.Fatalf("weak credential: %v", err)
	}
	if err := nodes[0].DeleteUser(ctx, "alice"); err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		eventually(t, 20*time.Second, n.ID()+" lost alice", func() bool {
			_, ok, _ := n.Credential("alice")
			return !ok && len(n.Users()) == 0
		})
	}
}
