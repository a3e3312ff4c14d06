package tlsconf

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"log/slog"
	"math/big"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/seedqueue/sq/internal/tlstest"
)

// TestLoadErrorsNameTheFlag: a file that does not load at start fails New
// with the flag and the file named.
func TestLoadErrorsNameTheFlag(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "test CA")
	certFile, keyFile := ca.Issue(t, tlstest.Options{}).Write(t, dir)
	garbage := filepath.Join(dir, "garbage.pem")
	tlstest.WriteFile(t, garbage, []byte("not PEM"))
	missing := filepath.Join(dir, "missing.pem")
	for _, tc := range []struct {
		files Files
		want  string
	}{
		{Files{CertFile: missing, KeyFile: keyFile}, "--tls-cert " + missing},
		{Files{CertFile: certFile, KeyFile: missing}, "--tls-key " + missing},
		{Files{CertFile: garbage, KeyFile: keyFile}, "--tls-cert " + garbage + " and --tls-key " + keyFile},
		{Files{CertFile: certFile, KeyFile: keyFile, ClientCAFile: garbage}, "--tls-client-ca " + garbage + ": no PEM certificate"},
		{Files{CertFile: certFile}, "--tls-cert and --tls-key must be given together"},
	} {
		if _, err := New(tc.files, nil); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v) = %v, want an error with %q", tc.files, err, tc.want)
		}
	}
}

// TestReloadKeepsThePairOnFailure: a reload of a broken file keeps the
// current pair and logs an ERROR naming the file; Poll reloads a changed
// pair, and does nothing while the files are unchanged.
func TestReloadKeepsThePairOnFailure(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "test CA")
	first := ca.Issue(t, tlstest.Options{})
	certFile, keyFile := first.Write(t, dir)
	var logs bytes.Buffer
	r, err := New(Files{CertFile: certFile, KeyFile: keyFile}, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if tried, _ := r.Poll(); tried {
		t.Fatal("Poll reloaded unchanged files")
	}
	tlstest.WriteFile(t, certFile, []byte("broken"))
	if err := r.Reload(); err == nil {
		t.Fatal("Reload of a broken certificate succeeded")
	}
	if got := r.Certificate().Leaf.SerialNumber; got.Cmp(first.Cert.SerialNumber) != 0 {
		t.Fatalf("serial %v after a failed reload, want the first %v", got, first.Cert.SerialNumber)
	}
	if !strings.Contains(logs.String(), "level=ERROR") || !strings.Contains(logs.String(), certFile) {
		t.Fatalf("no ERROR naming %s in the log:\n%s", certFile, logs.String())
	}
	second := ca.Issue(t, tlstest.Options{})
	second.Write(t, dir)
	if tried, err := r.Poll(); !tried || err != nil {
		t.Fatalf("Poll after a change: tried %v, err %v", tried, err)
	}
	if got := r.Certificate().Leaf.SerialNumber; got.Cmp(second.Cert.SerialNumber) != 0 {
		t.Fatalf("serial %v after the reload, want %v", got, second.Cert.SerialNumber)
	}
}

// TestListenerBoundsTheHandshake: a connection that never completes its
// handshake fails its first Read once the handshake bound has passed,
// and a client that completes it is served.
func TestListenerBoundsTheHandshake(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "test CA")
	certFile, keyFile := ca.Issue(t, tlstest.Options{}).Write(t, dir)
	r, err := New(Files{CertFile: certFile, KeyFile: keyFile}, nil)
	if err != nil {
		t.Fatal(err)
	}
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := NewListener(inner, r.ServerConfig(), 50*time.Millisecond)
	defer ln.Close()

	silent, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	sc, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	done := make(chan error, 1)
	go func() {
		_, err := sc.Read(make([]byte, 1))
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("Read of a connection without a handshake succeeded")
		}
	case <-time.After(time.Minute): // guards against a hang only
		t.Fatal("Read of a connection without a handshake did not return")
	}

	go func() {
		c, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{RootCAs: ca.Pool()})
		if err == nil {
			_, _ = c.Write([]byte("x"))
			c.Close()
		}
	}()
	sc2, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer sc2.Close()
	b := make([]byte, 1)
	if _, err := sc2.Read(b); err != nil || b[0] != 'x' {
		t.Fatalf("Read after a handshake: %q, %v", b, err)
	}
}

// TestPeerConfigFollowsTheClientCA: a node's dial verifies the peer
// against the client CAs of the latest reload, names included.
func TestPeerConfigFollowsTheClientCA(t *testing.T) {
	dir := t.TempDir()
	oldCA, newCA := tlstest.NewCA(t, "old CA"), tlstest.NewCA(t, "new CA")
	certFile, keyFile := oldCA.Issue(t, tlstest.Options{}).Write(t, dir)
	caFile := dir + "/ca.pem"
	tlstest.WriteFile(t, caFile, oldCA.PEM)
	r, err := New(Files{CertFile: certFile, KeyFile: keyFile, ClientCAFile: caFile}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// A peer serving a certificate of the new CA, and asking for none.
	peer := newCA.Issue(t, tlstest.Options{})
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{peer.TLS(t)}})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { _ = c.(*tls.Conn).Handshake(); c.Close() }()
		}
	}()
	dial := func(cfg *tls.Config) error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		c, err := Dialer(cfg, nil)(ctx, "tcp", ln.Addr().String())
		if err == nil {
			c.Close()
		}
		return err
	}
	if err := dial(r.PeerConfig()); err == nil {
		t.Fatal("a peer of another CA was accepted")
	}
	tlstest.WriteFile(t, caFile, newCA.PEM)
	if err := r.Reload(); err != nil {
		t.Fatal(err)
	}
	if err := dial(r.PeerConfig()); err != nil {
		t.Fatalf("a peer of the reloaded CA: %v", err)
	}
	named := r.PeerConfig()
	named.ServerName = "elsewhere.example"
	if err := dial(named); err == nil {
		t.Fatal("a peer whose certificate does not hold the name dialed was accepted")
	}
}

// TestWarnValidity: an expired, not yet valid or soon expiring
// certificate gets one WARN naming it; a valid one none.
func TestWarnValidity(t *testing.T) {
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	cert := func(from, to time.Time) *x509.Certificate {
		return &x509.Certificate{SerialNumber: big.NewInt(0xBEEF), NotBefore: from, NotAfter: to}
	}
	for _, tc := range []struct {
		name string
		leaf *x509.Certificate
		want string // "" for no line
	}{
		{"valid", cert(now.AddDate(0, -1, 0), now.AddDate(1, 0, 0)), ""},
		{"expired", cert(now.AddDate(-1, 0, 0), now.Add(-time.Hour)), "has expired"},
		{"not yet valid", cert(now.Add(time.Hour), now.AddDate(1, 0, 0)), "not valid yet"},
		{"expires soon", cert(now.AddDate(0, -1, 0), now.AddDate(0, 0, 3)), "expires soon"},
		{"none", nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			WarnValidity(slog.New(slog.NewTextHandler(&buf, nil)), tc.leaf, now)
			out := buf.String()
			switch {
			case tc.want == "" && out != "":
				t.Errorf("logged %q", out)
			case tc.want != "" && (!strings.Contains(out, "level=WARN") || !strings.Contains(out, tc.want) || !strings.Contains(out, "serial=BEEF")):
				t.Errorf("logged %q, want a WARN with %q and serial=BEEF", out, tc.want)
			}
		})
	}
}
