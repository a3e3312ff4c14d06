package gossip

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/internal/acl"
)

// TestACLsReplicated: ACLs created on a node that is not the controller
// (forwarded to it) and deleted on another reach every node's State; a
// refused binding changes nothing.
func TestACLsReplicated(t *testing.T) {
	nodes := startCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var follower, other *clusterNode
	for _, n := range nodes {
		if n != controllerOf(nodes) {
			if follower == nil {
				follower = n
			} else {
				other = n
			}
		}
	}
	if follower == nil || other == nil {
		t.Fatal("no two followers")
	}
	var bs []acl.Binding
	for _, l := range []string{"User:CN=alice allow read topic:orders", "User:CN=alice allow write topic:orders-*", "User:* deny delete group:*"} {
		b, err := acl.Parse(l)
		if err != nil {
			t.Fatal(err)
		}
		bs = append(bs, b)
	}
	if err := follower.CreateACLs(ctx, bs); err != nil {
		t.Fatalf("CreateACLs on a follower: %v", err)
	}
	want := acl.Sorted(bs)
	for _, n := range nodes {
		eventually(t, 20*time.Second, n.ID()+" holds the ACLs", func() bool { return slices.Equal(n.ACLs(), want) })
	}
	bad := []acl.Binding{{Principal: "alice", Permission: acl.Allow, Operation: acl.Read, Pattern: acl.Pattern{Type: acl.Topic, Name: "t", PatternType: acl.Literal}}}
	if err := other.CreateACLs(ctx, bad); err == nil || api.AsError(err).Code != api.CodeInvalidRequest {
		t.Fatalf("an invalid binding: %v, want INVALID_REQUEST", err)
	}
	gone, err := other.DeleteACLs(ctx, []acl.Filter{{Principal: "User:CN=alice"}})
	if err != nil || len(gone) != 2 {
		t.Fatalf("DeleteACLs: %v, %v", gone, err)
	}
	for _, n := range nodes {
		eventually(t, 20*time.Second, n.ID()+" holds the remaining ACL", func() bool { return slices.Equal(n.ACLs(), want[:1]) })
	}
}
