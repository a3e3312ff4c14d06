package main

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/spf13/pflag"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/api/sqv1"
	"github.com/seedqueue/sq/internal/acl"
	"github.com/seedqueue/sq/internal/tlstest"
	"github.com/seedqueue/sq/sdk"
)

// grpcConn dials addr with tc; closed at the end of the test.
func grpcConn(t *testing.T, addr string, tc *tls.Config) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(tc)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// within polls f until it returns nil or 20 s pass, and returns its last
// error.
func within(f func() error) error {
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := f()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestAuthorizationEndToEnd: sq-server with --authorization under
// mutual TLS. A client certificate's subject is its principal: CN=alice
// is refused until an ACL created through the Acls service (stored in
// the metadata log) allows her, on the data plane and on gRPC; the
// --super-users principal and the node's own certificate are allowed
// everything; refusals are counted in sq_authorization_denied_total.
func TestAuthorizationEndToEnd(t *testing.T) {
	ca := tlstest.NewCA(t, "SQ test CA")
	dir := t.TempDir()
	node, flags := tlsFiles(t, ca, dir, tlstest.Options{CommonName: "localhost"})
	caFile := filepath.Join(dir, "ca.pem")
	tlstest.WriteFile(t, caFile, ca.PEM)
	s := startServer(t, append(flags, "--tls-client-ca", caFile, "--authorization", "--super-users", "User:CN=admin")...)
	if !strings.Contains(s.logs.String(), "authorization on") {
		t.Fatalf("no start line for authorization:\n%s", s.logs)
	}
	as := func(cn string) *tls.Config {
		return &tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{ca.Issue(t, tlstest.Options{CommonName: cn}).TLS(t)}}
	}
	admin, alice := as("admin"), as("alice")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	adminACLs := sqv1.NewAclsClient(grpcConn(t, s.addrs["grpc"], admin))
	if err := within(func() error {
		_, err := sqv1.NewTopicsClient(grpcConn(t, s.addrs["grpc"], admin)).CreateTopic(ctx, &sqv1.CreateTopicRequest{Name: "orders", Partitions: 1})
		return err
	}); err != nil {
		t.Fatalf("the super user creating a topic: %v", err)
	}

	p, err := sdk.NewProducer(ctx, sdk.ProducerConfig{Addr: s.addrs["capnp"], TLSConfig: alice})
	if err != nil {
		t.Fatalf("alice's producer: %v", err)
	}
	defer p.Close()
	if _, err := p.Send(ctx, "orders", nil, []byte("v")); !errors.Is(err, api.ErrAuthorizationFailed) {
		t.Fatalf("alice publishing without an ACL: %v, want AUTHORIZATION_FAILED", err)
	}
	aliceTopics := sqv1.NewTopicsClient(grpcConn(t, s.addrs["grpc"], alice))
	if l, err := aliceTopics.ListTopics(ctx, &sqv1.ListTopicsRequest{}); err != nil || len(l.GetTopics()) != 0 {
		t.Fatalf("alice listing topics without an ACL: %v, %v; want none", l.GetTopics(), err)
	}

	b, err := acl.Parse("User:CN=alice allow write topic:ord*")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := adminACLs.CreateAcls(ctx, &sqv1.CreateAclsRequest{Acls: []*sqv1.AclBinding{acl.ToProto(b)}}); err != nil {
		t.Fatalf("CreateAcls: %v", err)
	}
	if err := within(func() error { _, err := p.Send(ctx, "orders", nil, []byte("v")); return err }); err != nil {
		t.Fatalf("alice publishing with an ACL: %v", err)
	}
	if l, err := aliceTopics.ListTopics(ctx, &sqv1.ListTopicsRequest{}); err != nil || len(l.GetTopics()) != 1 {
		t.Fatalf("alice listing topics with write (implies describe): %v, %v", l.GetTopics(), err)
	}
	if _, err := p.Client().Fetch(ctx, sdk.FetchRequest{Topic: "orders"}); !errors.Is(err, api.ErrAuthorizationFailed) {
		t.Fatalf("alice fetching with only write: %v, want AUTHORIZATION_FAILED", err)
	}

	// The node's own certificate is a super user (nodes call each other).
	nodeTLS := &tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{node.TLS(t)}}
	l, err := sqv1.NewAclsClient(grpcConn(t, s.addrs["grpc"], nodeTLS)).ListAcls(ctx, &sqv1.ListAclsRequest{})
	if err != nil || len(l.GetAcls()) != 1 || acl.Format(acl.FromProto(l.GetAcls()[0])) != "User:CN=alice allow write topic:ord*" {
		t.Fatalf("ListAcls with the node's certificate: %v, %v", l.GetAcls(), err)
	}
	if _, err := sqv1.NewAclsClient(grpcConn(t, s.addrs["grpc"], alice)).ListAcls(ctx, &sqv1.ListAclsRequest{}); err == nil {
		t.Fatal("alice listed the ACLs")
	}

	tr := &http.Transport{TLSClientConfig: admin}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Get("https://" + s.addrs["http"] + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`sq_authorization_denied_total{operation="describe",resource_type="topic"}`,
		`sq_authorization_denied_total{operation="read",resource_type="topic"}`,
		`sq_authorization_denied_total{operation="describe",resource_type="cluster"}`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

func TestAuthorizationFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--super-users", "admin"}, `--super-users: invalid ACL: principal "admin" must start with "User:"`},
		{[]string{"--authorization", "--seeds", "127.0.0.1:7000"}, "--authorization with --seeds needs --tls-client-ca"},
	} {
		var c config
		fs := flagSet(&c)
		if err := fs.Parse(append([]string{"--data-dir", t.TempDir()}, tc.args...)); err != nil {
			t.Fatal(err)
		}
		if err := c.validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want %q", tc.args, err, tc.want)
		}
	}
	env := map[string]string{"SQ_AUTHORIZATION": "true", "SQ_SUPER_USERS": "User:CN=a,O=b,User:root"}
	var c config
	fs := flagSet(&c)
	if err := applyEnv(fs, func(k string) string { return env[k] }); err != nil {
		t.Fatal(err)
	}
	got, err := acl.ParseSuperUsers(c.SuperUsers)
	if !c.Authorization || err != nil || len(got) != 2 || got[0] != "User:CN=a,O=b" {
		t.Fatalf("from SQ_AUTHORIZATION and SQ_SUPER_USERS: %v %q %v", c.Authorization, got, err)
	}
}

// flagSet binds the server's flags to c.
func flagSet(c *config) *pflag.FlagSet {
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	bindFlags(fs, c)
	return fs
}
