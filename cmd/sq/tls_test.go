package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"testing"

	"github.com/seedqueue/sq/control"
	"github.com/seedqueue/sq/engine"
	"github.com/seedqueue/sq/internal/tlstest"
	"github.com/seedqueue/sq/net/dataplane"
)

// serveTLS serves the data plane and the gRPC control plane of a fresh
// engine (topic "orders") over TLS with cert, asking for a client
// certificate signed by clientCA when it is not nil; both stop at the end
// of the test. It returns the data and control addresses.
func serveTLS(t *testing.T, cert tls.Certificate, clientCA *tlstest.CA) (data, ctl string) {
	t.Helper()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}
	if clientCA != nil {
		cfg.ClientCAs, cfg.ClientAuth = clientCA.Pool(), tls.RequireAndVerifyClientCert
	}
	srv, err := control.New(control.Options{NodeID: "cli-node", ClusterID: "cli-cluster", Version: "cli-test", Logger: quiet, TLS: cfg})
	if err != nil {
		t.Fatal(err)
	}
	eng, err := engine.Open(engine.Options{DataDir: t.TempDir(), Logger: quiet, Observer: srv.Observer()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := eng.CreateTopic("orders", 2, engine.TopicConfig{}); err != nil {
		t.Fatal(err)
	}
	srv.SetEngine(eng)
	srv.SetReady(true)
	dp, err := dataplane.New(eng, dataplane.Options{NodeID: "cli-node", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	gln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gdone, ddone := make(chan struct{}), make(chan struct{})
	go func() { _ = srv.ServeGRPC(gln); close(gdone) }()
	go func() { _ = dp.Serve(tls.NewListener(dln, cfg)); close(ddone) }()
	t.Cleanup(func() {
		_ = srv.Shutdown(context.Background())
		dp.Close()
		<-gdone
		<-ddone
		eng.Close()
	})
	return dln.Addr().String(), gln.Addr().String()
}

// sq runs the CLI with args and env and returns its output and error.
func sq(env map[string]string, args ...string) (string, error) {
	var out, errOut bytes.Buffer
	root := newRootCommand(nil, &out, &errOut, func(k string) string { return env[k] })
	root.SetArgs(args)
	err := root.ExecuteContext(context.Background())
	return out.String(), err
}

// TestTLSFlags: --tls-ca (or SQ_TLS_CA) reaches both planes of a TLS
// server; without it the CLI says the port speaks TLS; --tls-cert and
// --tls-key present a client certificate to a server that requires one;
// --tls-server-name is the name checked; bad files are named.
func TestTLSFlags(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "SQ test CA")
	caFile := filepath.Join(dir, "ca.pem")
	tlstest.WriteFile(t, caFile, ca.PEM)
	data, ctl := serveTLS(t, ca.Issue(t, tlstest.Options{}).TLS(t), ca)
	clientDir := t.TempDir()
	cert, key := ca.Issue(t, tlstest.Options{CommonName: "cli"}).Write(t, clientDir)

	withCert := []string{"--server", data, "--control", ctl, "--tls-ca", caFile, "--tls-cert", cert, "--tls-key", key}
	if out, err := sq(nil, append(withCert, "topic", "list")...); err != nil || !strings.Contains(out, "orders") {
		t.Errorf("topic list over mutual TLS: %v\n%s", err, out)
	}
	if out, err := sq(nil, append(withCert, "cluster", "info")...); err != nil || !strings.Contains(out, "cli-node") {
		t.Errorf("cluster info over mutual TLS: %v\n%s", err, out)
	}
	env := map[string]string{"SQ_SERVER": data, "SQ_TLS_CA": caFile, "SQ_TLS_CERT": cert, "SQ_TLS_KEY": key}
	if out, err := sq(env, "topic", "list"); err != nil || !strings.Contains(out, "orders") {
		t.Errorf("topic list with SQ_TLS_*: %v\n%s", err, out)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--server", data, "topic", "list"}, "is not an SQ data plane (it speaks TLS; a server with TLS on needs TLSConfig"},
		{[]string{"--server", data, "--tls-ca", caFile, "topic", "list"}, "the server refused it"},
		{[]string{"--server", data, "--tls-ca", caFile, "--tls-cert", cert, "--tls-key", key, "--tls-server-name", "elsewhere.example", "topic", "list"},
			"certificate is valid for localhost, not elsewhere.example"},
		{[]string{"--server", data, "--tls-ca", filepath.Join(dir, "missing.pem"), "topic", "list"}, "--tls-ca: open"},
		{[]string{"--server", data, "--tls-ca", caFile, "--tls-cert", cert, "topic", "list"}, "--tls-cert and --tls-key must be given together"},
		{[]string{"--server", data, "--tls", "topic", "list"}, "certificate signed by unknown authority"},
	} {
		if _, err := sq(nil, tc.args...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("sq %v: %v, want %q", tc.args, err, tc.want)
		}
	}
}
