package main

import (
	"bytes"
	"crypto/tls"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/seedqueue/sq/internal/tlstest"
)

// probeNode answers /healthz 200 and /readyz with readyCode, as a node's
// HTTP listener does.
func probeNode(readyCode int) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/healthz":
			_, _ = w.Write([]byte("ok\n"))
		case "/readyz":
			w.WriteHeader(readyCode)
			if readyCode == http.StatusOK {
				_, _ = w.Write([]byte("ready\n"))
			} else {
				_, _ = w.Write([]byte("not ready: cluster: not joined yet\nmore\n"))
			}
		default:
			http.NotFound(w, r)
		}
	})
}

// runProbe runs `sq-server <args>` and returns its stdout and error.
func runProbe(t *testing.T, args ...string) (string, error) {
	t.Helper()
	t.Setenv("SQ_HTTP_HOST", "")
	root := newRootCommand()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(args)
	err := root.Execute()
	return out.String(), err
}

// anyHost returns the server's address with the host 0.0.0.0, as a
// container's --http-host is: the probe must ask the loopback address.
func anyHost(t *testing.T, url string) string {
	t.Helper()
	_, port, err := net.SplitHostPort(strings.TrimPrefix(strings.TrimPrefix(url, "https://"), "http://"))
	if err != nil {
		t.Fatal(err)
	}
	return net.JoinHostPort("0.0.0.0", port)
}

func TestProbe(t *testing.T) {
	ready := httptest.NewServer(probeNode(http.StatusOK))
	defer ready.Close()
	notReady := httptest.NewServer(probeNode(http.StatusServiceUnavailable))
	defer notReady.Close()
	for _, tc := range []struct {
		name    string
		args    []string
		wantOut string // in stdout on success
		wantErr string // in the error; "" for success
	}{
		{"ready", []string{"--http-host", anyHost(t, ready.URL), "probe", "--ready"}, "/readyz 200 ready", ""},
		{"ready by default", []string{"--http-host", anyHost(t, ready.URL), "probe"}, "/readyz 200 ready", ""},
		{"not ready", []string{"--http-host", anyHost(t, notReady.URL), "probe", "--ready"}, "", "/readyz 503 not ready: cluster: not joined yet"},
		{"live while not ready", []string{"--http-host", anyHost(t, notReady.URL), "probe", "--live"}, "/healthz 200 ok", ""},
		{"both", []string{"--http-host", anyHost(t, ready.URL), "probe", "--live", "--ready"}, "", "exclude each other"},
		{"HTTP off", []string{"--http-host", "", "probe"}, "", "HTTP is off"},
		{"port 0", []string{"--http-host", "127.0.0.1:0", "probe"}, "", "port 0"},
		{"bad address", []string{"--http-host", "nocolon", "probe"}, "", `--http-host "nocolon"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := runProbe(t, tc.args...)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one containing %q (stdout %q)", err, tc.wantErr, out)
				}
				if strings.Contains(err.Error(), "\n") {
					t.Errorf("err %q is more than one line", err)
				}
				return
			}
			if err != nil || !strings.Contains(out, tc.wantOut) || strings.Count(out, "\n") != 1 {
				t.Fatalf("stdout %q, err %v; want one line containing %q", out, err, tc.wantOut)
			}
		})
	}
}

func TestProbeNodeDown(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	if _, err := runProbe(t, "--http-host", addr, "probe", "--live"); err == nil || !strings.Contains(err.Error(), "/healthz") {
		t.Fatalf("err = %v, want a failure naming /healthz", err)
	}
}

func TestProbeTLS(t *testing.T) {
	ca := tlstest.NewCA(t, "probe CA")
	node := ca.Issue(t, tlstest.Options{CommonName: "sq-1"})
	other := ca.Issue(t, tlstest.Options{CommonName: "sq-2"})
	dir := t.TempDir()
	nodeCert, nodeKey := node.Write(t, t.TempDir())
	otherCert, otherKey := other.Write(t, t.TempDir())
	caFile := dir + "/ca.pem"
	tlstest.WriteFile(t, caFile, ca.PEM)

	srv := httptest.NewUnstartedServer(probeNode(http.StatusOK))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{node.TLS(t)}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: ca.Pool()}
	srv.StartTLS()
	defer srv.Close()
	host := anyHost(t, srv.URL)
	for _, tc := range []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"own certificate, mutual TLS", []string{"--tls-cert", nodeCert, "--tls-key", nodeKey, "--tls-client-ca", caFile}, ""},
		{"another node's certificate", []string{"--tls-cert", otherCert, "--tls-key", otherKey, "--tls-client-ca", caFile}, "not the one in --tls-cert"},
		{"no client certificate", []string{"--tls-cert", nodeCert, "--tls-key", nodeKey}, "/readyz"},
		{"missing key file", []string{"--tls-cert", nodeCert, "--tls-key", dir + "/none.pem"}, "--tls-key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append(append([]string{"--http-host", host}, tc.args...), "probe", "--ready")
			out, err := runProbe(t, args...)
			if tc.wantErr == "" {
				if err != nil || !strings.HasPrefix(out, "https://127.0.0.1:") {
					t.Fatalf("stdout %q, err %v; want success over https", out, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}
