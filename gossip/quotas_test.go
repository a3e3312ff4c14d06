package gossip

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/seedqueue/sq/api/sqv1"
	"github.com/seedqueue/sq/gossip/meta"
	"github.com/seedqueue/sq/internal/quota"
)

// listed is a node's ListQuotas as "principal:produce/fetch ...".
func listed(t *testing.T, n *clusterNode) string {
	t.Helper()
	r, err := n.ListQuotas(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range r.Quotas {
		name := e.Principal
		if e.DefaultEntity {
			name = "<default>"
		}
		out = append(out, fmt.Sprintf("%s:%d/%d", name, e.ProduceBytesPerSec, e.FetchBytesPerSec))
	}
	return strings.Join(out, " ")
}

// TestQuotasReplicated: a quota set on a follower (forwarded to the
// controller) and one removed on another node reach every node's
// metadata; a refused change is the catalog error and changes nothing.
func TestQuotasReplicated(t *testing.T) {
	nodes := startCluster(t, 3)
	eventually(t, 10*time.Second, "a controller", func() bool { return controllerOf(nodes) != nil })
	var follower *clusterNode
	for _, n := range nodes {
		if n.raft.State() != raft.Leader {
			follower = n
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r, err := follower.SetQuota(ctx, &sqv1.SetQuotaRequest{Principal: "User:alice", ProduceBytesPerSec: 100})
	if err != nil || r.Quota.GetPrincipal() != "User:alice" || r.Quota.GetProduceBytesPerSec() != 100 {
		t.Fatalf("SetQuota on a follower: %v, %v", r, err)
	}
	if _, err := follower.SetQuota(ctx, &sqv1.SetQuotaRequest{DefaultEntity: true, FetchBytesPerSec: 7}); err != nil {
		t.Fatal(err)
	}
	want := "<default>:0/7 User:alice:100/0"
	for _, n := range nodes {
		eventually(t, 20*time.Second, n.ID()+" lists the quotas", func() bool { return listed(t, n) == want })
	}
	if _, err := nodes[0].SetQuota(ctx, &sqv1.SetQuotaRequest{Principal: "User:bob", FetchBytesPerSec: -3}); err == nil ||
		!strings.Contains(err.Error(), "INVALID_CONFIG: fetch_bytes_per_sec -3") {
		t.Fatalf("negative rate: %v", err)
	}
	if _, err := nodes[2].RemoveQuota(ctx, &sqv1.RemoveQuotaRequest{Principal: "User:alice"}); err != nil {
		t.Fatal(err)
	}
	if _, err := nodes[2].RemoveQuota(ctx, &sqv1.RemoveQuotaRequest{Principal: "User:alice"}); err == nil ||
		!strings.Contains(err.Error(), "has no quota") {
		t.Fatalf("removing twice: %v", err)
	}
	for _, n := range nodes {
		eventually(t, 20*time.Second, n.ID()+" lists the default only", func() bool { return listed(t, n) == "<default>:0/7" })
	}
}

// TestQuotaTable: the metadata's quotas as a quota.Manager enforces them.
func TestQuotaTable(t *testing.T) {
	s := meta.NewState()
	s.Quotas = map[string]meta.Quota{"User:a": {ProduceBytesPerSec: 5}, meta.DefaultQuotaEntity: {FetchBytesPerSec: 9}}
	tb := QuotaTable(s)
	if tb.Default == nil || *tb.Default != (quota.Limits{FetchBytesPerSec: 9}) || len(tb.Principals) != 1 ||
		tb.Principals["User:a"] != (quota.Limits{ProduceBytesPerSec: 5}) {
		t.Fatalf("table %+v", tb)
	}
	if tb := QuotaTable(meta.NewState()); tb.Default != nil || len(tb.Principals) != 0 {
		t.Fatalf("a state without quotas: %+v", tb)
	}
}
