package control_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/seedqueue/sq/api/sqv1"
	"github.com/seedqueue/sq/control"
)

// Drains and undrains are audited whatever their outcome; outside a
// cluster they are refused with FailedPrecondition.
func TestDrainAudited(t *testing.T) {
	var logs lockedBuffer
	n := startNode(t, control.Options{Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cl := sqv1.NewClusterClient(n.conn)
	calls := []struct {
		name string
		call func() error
		code codes.Code
	}{
		{"drain", func() error { _, err := cl.DrainNode(ctx, &sqv1.DrainNodeRequest{NodeId: "n2"}); return err }, codes.FailedPrecondition},
		{"undrain", func() error { _, err := cl.UndrainNode(ctx, &sqv1.UndrainNodeRequest{NodeId: "n2"}); return err }, codes.FailedPrecondition},
	}
	for _, c := range calls {
		if err := c.call(); status.Code(err) != c.code {
			t.Errorf("%s: %v, want %s", c.name, err, c.code)
		}
	}
	want := []struct{ action, resource string }{{"cluster.drain", "n2"}, {"cluster.undrain", "n2"}}
	got := logs.auditLines(t)
	if len(got) != len(want) {
		t.Fatalf("%d audit lines, want %d: %v", len(got), len(want), got)
	}
	for i, w := range want {
		g := got[i]
		result, _ := g["result"].(string)
		if g["action"] != w.action || g["resource"] != w.resource || g["principal"] != "User:ANONYMOUS" ||
			!strings.HasPrefix(result, "FailedPrecondition: ") {
			t.Errorf("audit line %d: %v, want %s %s FailedPrecondition", i, g, w.action, w.resource)
		}
	}
}
