package main

import (
	"context"
	"crypto/tls"
	"errors"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/internal/tlstest"
	"github.com/seedqueue/sq/sdk"
)

// metricsStatus is the status of GET /metrics at addr with Basic
// credentials user/password (none when user is empty).
func metricsStatus(t *testing.T, addr, user, password string) int {
	t.Helper()
	req, _ := http.NewRequest("GET", "http://"+addr+"/metrics", nil)
	if user != "" {
		req.SetBasicAuth(user, password)
	}
	c := &http.Client{Timeout: 30 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestAuthFromZero follows docs/security.md: create a user on a server
// without authentication, restart it with --auth-required and
// --metrics-auth, then only that user's clients get through on both
// planes; health stays anonymous.
func TestAuthFromZero(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s1 := startServer(t, "--data-dir", dir)
	a, err := sdk.NewAdmin(sdk.AdminConfig{GrpcConfig: sdk.GrpcConfig{Addr: s1.addrs["grpc"]}})
	if err != nil {
		t.Fatal(err)
	}
	poll(t, 30*time.Second, "the user created", func() bool { return a.CreateUser(ctx, "alice", "s3cret", 0) == nil })
	a.Close()
	s1.stop()

	s := startServer(t, "--data-dir", dir, "--auth-required", "--metrics-auth")
	alice := sdk.SCRAM{User: "alice", Password: "s3cret"}
	admin := func(m sdk.SASLMechanism) *sdk.Admin {
		a, err := sdk.NewAdmin(sdk.AdminConfig{GrpcConfig: sdk.GrpcConfig{Addr: s.addrs["grpc"], SASL: m}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { a.Close() })
		return a
	}
	var last error
	poll(t, 30*time.Second, "a topic created as alice", func() bool {
		_, last = admin(alice).CreateTopic(ctx, "orders", 1, sdk.TopicConfig{})
		return last == nil
	})
	if _, err := admin(nil).ListTopics(ctx); !errors.Is(err, api.ErrAuthenticationFailed) {
		t.Fatalf("anonymous admin: %v", err)
	}
	if _, err := admin(sdk.SCRAM{User: "alice", Password: "guess"}).ListTopics(ctx); !errors.Is(err, api.ErrAuthenticationFailed) {
		t.Fatalf("wrong password: %v", err)
	}
	p, err := sdk.NewProducer(ctx, sdk.ProducerConfig{Addr: s.addrs["capnp"], SASL: alice})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, err := p.Send(ctx, "orders", nil, []byte("paid")); err != nil {
		t.Fatalf("publish as alice: %v", err)
	}
	anon, err := sdk.NewProducer(ctx, sdk.ProducerConfig{Addr: s.addrs["capnp"]})
	if err == nil {
		_, err = anon.Send(ctx, "orders", nil, []byte("x"))
		anon.Close()
	}
	if !errors.Is(err, api.ErrAuthenticationFailed) {
		t.Fatalf("anonymous publish: %v", err)
	}
	if resp, err := http.Get("http://" + s.addrs["http"] + "/healthz"); err != nil || resp.StatusCode != 200 {
		t.Fatalf("healthz: %v, %v", resp, err)
	} else {
		resp.Body.Close()
	}
	if got := metricsStatus(t, s.addrs["http"], "", ""); got != 401 {
		t.Fatalf("anonymous /metrics: %d", got)
	}
	if got := metricsStatus(t, s.addrs["http"], "alice", "s3cret"); got != 200 {
		t.Fatalf("/metrics as alice: %d", got)
	}
}

// TestAuthCluster: two nodes with mutual TLS and --auth-required: they
// join and replicate (authenticated by their certificates), and a user
// created through one node authenticates on the other.
func TestAuthCluster(t *testing.T) {
	ca := tlstest.NewCA(t, "SQ test CA")
	dir := t.TempDir()
	_, flags := tlsFiles(t, ca, dir, tlstest.Options{})
	caFile := filepath.Join(dir, "ca.pem")
	tlstest.WriteFile(t, caFile, ca.PEM)
	flags = append(flags, "--tls-client-ca", caFile, "--auth-required")
	n1 := startServer(t, append(flags, "--node-id", "n1")...)
	n2 := startServer(t, append(flags, "--node-id", "n2", "--seeds", n1.addrs["grpc"])...)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin := ca.Issue(t, tlstest.Options{CommonName: "admin"})
	withCert := &tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{admin.TLS(t)}}
	noCert := &tls.Config{RootCAs: ca.Pool()}
	a1, err := sdk.NewAdmin(sdk.AdminConfig{GrpcConfig: sdk.GrpcConfig{Addr: n1.addrs["grpc"], TLSConfig: withCert}})
	if err != nil {
		t.Fatal(err)
	}
	defer a1.Close()
	poll(t, 30*time.Second, "the user created by certificate", func() bool { return a1.CreateUser(ctx, "bob", "pw", 0) == nil })
	bob := sdk.SCRAM{User: "bob", Password: "pw"}
	a2, err := sdk.NewAdmin(sdk.AdminConfig{GrpcConfig: sdk.GrpcConfig{Addr: n2.addrs["grpc"], TLSConfig: noCert, SASL: bob}})
	if err != nil {
		t.Fatal(err)
	}
	defer a2.Close()
	var last error
	poll(t, 30*time.Second, "a replicated topic created as bob on n2", func() bool {
		_, last = a2.CreateTopic(ctx, "replicated", 2, sdk.TopicConfig{ReplicationFactor: 2, MinInsyncReplicas: 2})
		return last == nil || errors.Is(last, api.ErrTopicExists)
	})
	p, err := sdk.NewProducer(ctx, sdk.ProducerConfig{Addr: n1.addrs["capnp"], TLSConfig: noCert, SASL: bob})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var msgs []sdk.ProducerMessage
	for i := range 8 {
		msgs = append(msgs, sdk.ProducerMessage{Topic: "replicated", Key: []byte{byte(i)}, Value: []byte("v")})
	}
	// acks all with 2 in-sync replicas: the followers' fetches went
	// through under --auth-required.
	poll(t, 45*time.Second, "an acknowledged publish with 2 in-sync replicas", func() bool {
		_, last = p.SendBatch(ctx, msgs)
		return last == nil
	})
	if _, err := sdk.NewProducer(ctx, sdk.ProducerConfig{Addr: n2.addrs["capnp"], TLSConfig: noCert, SASL: sdk.SCRAM{User: "bob", Password: "no"}}); !errors.Is(err, api.ErrAuthenticationFailed) {
		t.Fatalf("wrong password on n2: %v", err)
	}
	// Without a certificate and without SCRAM: refused.
	anon, err := sdk.NewAdmin(sdk.AdminConfig{GrpcConfig: sdk.GrpcConfig{Addr: n2.addrs["grpc"], TLSConfig: noCert}})
	if err != nil {
		t.Fatal(err)
	}
	defer anon.Close()
	if _, err := anon.ListTopics(ctx); !errors.Is(err, api.ErrAuthenticationFailed) {
		t.Fatalf("no certificate, no user: %v", err)
	}
}

// TestAuthConfig: the start errors and warnings of the authentication
// flags.
func TestAuthConfig(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--auth-required", "--seeds", "127.0.0.1:1"}, "--auth-required in a cluster (--seeds) needs --tls-client-ca"},
		{[]string{"--auth-required", "--grpc-host", ""}, "--auth-required without --grpc-host needs --tls-client-ca"},
	} {
		if _, err := parseConfig(t, nil, tc.args...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("config with %v: %v, want %q", tc.args, err, tc.want)
		}
	}
	if _, err := parseConfig(t, map[string]string{"SQ_AUTH_REQUIRED": "true"}); err != nil {
		t.Errorf("SQ_AUTH_REQUIRED on a single node: %v", err)
	}
	s := startServer(t, "--capnp-host", "0.0.0.0:0")
	if !strings.Contains(s.logs.String(), "beyond loopback without --auth-required") {
		t.Error("no warning for a data plane on 0.0.0.0 without --auth-required")
	}
	q := startServer(t)
	if strings.Contains(q.logs.String(), "beyond loopback") {
		t.Error("a warning for loopback listeners")
	}
	for addr, want := range map[string]bool{"127.0.0.1:1": true, "[::1]:1": true, "localhost:1": true, ":1": false, "0.0.0.0:1": false, "10.0.0.1:1": false, "example.com:1": false} {
		if got := loopbackOnly(addr); got != want {
			t.Errorf("loopbackOnly(%q) = %v", addr, got)
		}
	}
}
