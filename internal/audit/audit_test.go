package audit

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"errors"
	"log/slog"
	"testing"

	"github.com/seedqueue/sq/api"
)

func TestPrincipal(t *testing.T) {
	if got := Principal(nil); got != Anonymous {
		t.Errorf("no TLS: %q", got)
	}
	if got := Principal(&tls.ConnectionState{}); got != Anonymous {
		t.Errorf("TLS without a client certificate: %q", got)
	}
	// A certificate presented but not verified (no client CA) is not a
	// principal.
	cert := &x509.Certificate{Subject: pkix.Name{CommonName: "orders-app", Organization: []string{"shop"}}}
	if got := Principal(&tls.ConnectionState{PeerCertificates: []*x509.Certificate{cert}}); got != Anonymous {
		t.Errorf("unverified certificate: %q", got)
	}
	got := Principal(&tls.ConnectionState{PeerCertificates: []*x509.Certificate{cert}, VerifiedChains: [][]*x509.Certificate{{cert}}})
	if got != "User:CN=orders-app,O=shop" {
		t.Errorf("verified certificate: %q", got)
	}
}

func TestLog(t *testing.T) {
	var buf bytes.Buffer
	l := slog.New(slog.NewJSONHandler(&buf, nil))
	Log(l, Event{Plane: "grpc", Action: "topic.delete", Resource: "t", Remote: "10.0.0.1:5000",
		Err: api.NewError(api.CodeUnknownTopic, "topic %q does not exist", "t")})
	Log(l, Event{Plane: "dataplane", Action: "topic.create", Resource: "u", Principal: "User:CN=a", Remote: "10.0.0.2:1"})
	Log(l, Event{Plane: "grpc", Action: "group.delete", Resource: "g", Err: errors.New("boom"), Result: "NotFound: gone"})
	Log(l, Event{Plane: "grpc", Action: "topic.alter", Resource: "v", Err: errors.New("disk on fire")})
	want := []map[string]string{
		{"action": "topic.delete", "resource": "t", "principal": Anonymous, "remote": "10.0.0.1:5000", "plane": "grpc", "result": `UNKNOWN_TOPIC: topic "t" does not exist`},
		{"action": "topic.create", "resource": "u", "principal": "User:CN=a", "remote": "10.0.0.2:1", "plane": "dataplane", "result": "ok"},
		{"action": "group.delete", "resource": "g", "result": "NotFound: gone"},
		{"action": "topic.alter", "resource": "v", "result": "UNKNOWN: disk on fire"},
	}
	dec := json.NewDecoder(&buf)
	for i, w := range want {
		var got map[string]any
		if err := dec.Decode(&got); err != nil {
			t.Fatalf("line %d: %v", i, err)
		}
		if got["msg"] != "audit" || got["level"] != "INFO" {
			t.Errorf("line %d: %v", i, got)
		}
		for k, v := range w {
			if got[k] != v {
				t.Errorf("line %d: %s = %v, want %q", i, k, got[k], v)
			}
		}
	}
}
