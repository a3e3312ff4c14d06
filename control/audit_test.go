package control_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seedqueue/sq/api/sqv1"
	"github.com/seedqueue/sq/control"
)

// lockedBuffer is a bytes.Buffer safe for concurrent writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// auditLines returns the audit lines logged as JSON into l.
func (l *lockedBuffer) auditLines(t *testing.T) []map[string]any {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(l.b.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			continue
		}
		if m["msg"] == "audit" {
			out = append(out, m)
		}
	}
	return out
}

// Every gRPC call that creates, alters or deletes something is logged
// once with its action, resource, principal, client address and result;
// reads are not.
func TestGRPCAuditLog(t *testing.T) {
	var logs lockedBuffer
	n := startNode(t, control.Options{Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	topics := sqv1.NewTopicsClient(n.conn)
	if _, err := topics.CreateTopic(ctx, &sqv1.CreateTopicRequest{Name: "audited", Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := topics.CreateTopic(ctx, &sqv1.CreateTopicRequest{Name: "audited", Partitions: 1}); err == nil {
		t.Fatal("second create succeeded")
	}
	if _, err := topics.ListTopics(ctx, &sqv1.ListTopicsRequest{}); err != nil {
		t.Fatal(err)
	}
	if _, err := topics.DeleteTopic(ctx, &sqv1.DeleteTopicRequest{Name: "audited"}); err != nil {
		t.Fatal(err)
	}
	if _, err := sqv1.NewGroupsClient(n.conn).DeleteGroup(ctx, &sqv1.DeleteGroupRequest{Group: "nobody"}); err == nil {
		t.Fatal("deleting an unknown group succeeded")
	}
	want := []struct{ action, resource, result string }{
		{"topic.create", "audited", "ok"},
		{"topic.create", "audited", "TOPIC_EXISTS: "},
		{"topic.delete", "audited", "ok"},
		{"group.delete", "nobody", "UNKNOWN_GROUP: "},
	}
	got := logs.auditLines(t)
	if len(got) != len(want) {
		t.Fatalf("%d audit lines, want %d: %v", len(got), len(want), got)
	}
	for i, w := range want {
		g := got[i]
		result, _ := g["result"].(string)
		if g["action"] != w.action || g["resource"] != w.resource || g["plane"] != "grpc" ||
			g["principal"] != "User:ANONYMOUS" || !strings.HasPrefix(result, w.result) ||
			!strings.HasPrefix(g["remote"].(string), "127.0.0.1:") {
			t.Errorf("audit line %d: %v, want %s %s %s… from 127.0.0.1 by User:ANONYMOUS", i, g, w.action, w.resource, w.result)
		}
	}
}
