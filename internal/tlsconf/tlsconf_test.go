package tlsconf

import (
	"bytes"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

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
