package dataplane

import (
	"testing"

	"github.com/seedqueue/sq/api"
)

// A data-plane request that creates or deletes something is logged once
// with its action, resource, principal, client address and result; a
// read is not.
func TestDataPlaneAuditLog(t *testing.T) {
	h := startServer(t, newMemBroker(), Options{})
	c, _ := connect(t, h.addr)
	c.createTopic("audited", 1)
	if r := c.call(listTopicsReq, nil); r.f.Which() != api.Frame_Which_listTopicsResponse {
		t.Fatalf("answered %v", r.f.Which())
	}
	c.call(deleteTopicReq("audited"), nil)
	c.call(deleteTopicReq("audited"), nil) // unknown now
	for _, want := range [][]string{
		{"action=topic.create", "resource=audited", "result=ok"},
		{"action=topic.delete", "resource=audited", "result=ok"},
		{"action=topic.delete", "resource=audited", `result="UNKNOWN_TOPIC: `},
	} {
		lines := h.logs.lines(append(want, "msg=audit", "plane=dataplane", "principal=User:ANONYMOUS", "remote=127.0.0.1:")...)
		if len(lines) != 1 {
			t.Errorf("%d audit lines with %v, want 1; log:\n%s", len(lines), want, h.logs)
		}
	}
	if n := len(h.logs.lines("msg=audit")); n != 3 {
		t.Errorf("%d audit lines, want 3; log:\n%s", n, h.logs)
	}
}
