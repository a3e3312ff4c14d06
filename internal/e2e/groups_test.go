package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/seedqueue/sq/sdk"
)

// TestGroupOffsetsSurviveSIGKILL commits as a group member, kills the
// server with SIGKILL, and finds the commit after a restart, through the
// SDK and `sq group describe`; then resets and deletes the group with the
// CLI.
func TestGroupOffsetsSurviveSIGKILL(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	srv := startServer(t, dir)
	sqOK(t, srv.addr, nil, "topic", "create", "gk", "--partitions", "2")
	sqOK(t, srv.addr, []byte("a\nb\nc\nd\n"), "produce", "--topic", "gk")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// The server's default session (10 s): a short one could end, on a
	// loaded machine, between Poll and Commit, and fence the Commit.
	c, err := sdk.NewConsumer(ctx, sdk.ConsumerConfig{Addr: srv.addr, Topic: "gk", ConsumerGroup: "g", MaxWait: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for n < 4 && ctx.Err() == nil {
		msgs, err := c.Poll(ctx)
		if err != nil {
			t.Fatal(err)
		}
		n += len(msgs)
	}
	if err := c.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	srv.kill()
	c.Close() // the server is gone: its commit and leave fail, nothing else
	srv = startServer(t, dir)
	cl, err := sdk.Dial(ctx, sdk.ClientConfig{Addr: srv.addr})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	offs, err := cl.FetchOffsets(ctx, "g", "gk")
	total := uint64(0)
	for _, o := range offs {
		total += o.Offset
	}
	if err != nil || total != 4 {
		t.Fatalf("offsets after SIGKILL: %+v %v", offs, err)
	}
	out := sqOK(t, srv.addr, nil, "group", "describe", "g")
	if !strings.Contains(out, "COMMITTED") || !strings.Contains(out, "gk") {
		t.Fatalf("describe:\n%s", out)
	}
	sqOK(t, srv.addr, nil, "group", "reset-offsets", "g", "--topic", "gk", "--to", "earliest")
	if out := sqOK(t, srv.addr, nil, "group", "list"); !strings.Contains(out, "g ") {
		t.Fatalf("list:\n%s", out)
	}
	sqOK(t, srv.addr, nil, "group", "delete", "g")
	if offs, _ := cl.FetchOffsets(ctx, "g", ""); len(offs) != 0 {
		t.Fatalf("offsets after delete: %+v", offs)
	}
	// A group with no members and no offsets: exit status 1, UNKNOWN_GROUP.
	for _, args := range [][]string{{"group", "describe", "g"}, {"group", "delete", "g"}, {"group", "describe", "nosuch"}} {
		if stderr := sqFails(t, srv.addr, nil, args...); !strings.HasPrefix(stderr, "sq: UNKNOWN_GROUP: ") {
			t.Errorf("sq %v: stderr %q, want sq: UNKNOWN_GROUP: ...", args, stderr)
		}
	}
}
