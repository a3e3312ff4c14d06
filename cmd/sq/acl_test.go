package main

import (
	"context"
	"io"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/seedqueue/sq/control"
	"github.com/seedqueue/sq/engine"
	"github.com/seedqueue/sq/internal/acl"
)

// memACLStore is a control.ACLStore in memory.
type memACLStore struct {
	mu sync.Mutex
	bs []acl.Binding
}

func (m *memACLStore) CreateACLs(_ context.Context, bs []acl.Binding) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.bs = acl.Sorted(append(slices.Clone(m.bs), bs...))
	return nil
}

func (m *memACLStore) DeleteACLs(_ context.Context, fs []acl.Filter) ([]acl.Binding, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	gone := acl.Select(m.bs, fs)
	m.bs = slices.DeleteFunc(slices.Clone(m.bs), func(b acl.Binding) bool { return slices.Contains(gone, b) })
	return gone, nil
}

func (m *memACLStore) ACLs() []acl.Binding {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.bs
}

// startACLControl serves a control plane whose ACLs are store.
func startACLControl(t *testing.T, store control.ACLStore) string {
	t.Helper()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	srv, err := control.New(control.Options{NodeID: "a", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	eng, err := engine.Open(engine.Options{DataDir: t.TempDir(), Logger: quiet, Observer: srv.Observer()})
	if err != nil {
		t.Fatal(err)
	}
	srv.SetACLStore(store)
	srv.SetEngine(eng)
	srv.SetReady(true)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = srv.ServeGRPC(ln); close(done) }()
	t.Cleanup(func() {
		_ = srv.Shutdown(context.Background())
		<-done
		eng.Close()
	})
	return ln.Addr().String()
}

// TestACLCommands: sq acl add (arguments and flags), list (all and
// filtered) and remove (filtered; refused without a filter unless --all).
func TestACLCommands(t *testing.T) {
	store := &memACLStore{}
	ctl := startACLControl(t, store)
	run := func(args ...string) (string, error) {
		return runSQ(t, nil, append([]string{"--control", ctl, "acl"}, args...)...)
	}
	if _, err := run("add", "User:alice allow read topic:orders", `"User:CN=John Smith" deny all group:*`); err != nil {
		t.Fatal(err)
	}
	out, err := run("add", "--principal", "User:bob", "--principal", "User:carol", "--operation", "write", "--operation", "Describe",
		"--topic", "logs-", "--prefixed")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(out, "added: "); n != 4 {
		t.Fatalf("flags made %d ACLs, want 2 principals x 2 operations:\n%s", n, out)
	}
	if _, err := run("add", "--deny", "--principal", "User:*", "--operation", "alter", "--cluster"); err != nil {
		t.Fatal(err)
	}
	out, err = run("list")
	if err != nil {
		t.Fatal(err)
	}
	wantLines(t, out, "User:* deny alter cluster", `"User:CN=John Smith" deny all group:*`, "User:alice allow read topic:orders",
		"User:bob allow describe topic:logs-*", "User:bob allow write topic:logs-*", "User:carol allow describe topic:logs-*")
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if _, err := acl.Parse(line); err != nil {
			t.Errorf("list printed %q, which sq acl add cannot read: %v", line, err)
		}
	}
	out, err = run("list", "--topic", "logs-eu", "--resource-pattern-type", "match", "--operation", "write")
	if err != nil || strings.Count(out, "\n") != 2 || strings.Contains(out, "describe") {
		t.Fatalf("list matching logs-eu for write: %v\n%s", err, out)
	}
	if _, err := run("remove"); err == nil || !strings.Contains(err.Error(), "--all") {
		t.Fatalf("remove without a filter: %v", err)
	}
	out, err = run("remove", "--principal", "User:bob")
	if err != nil || strings.Count(out, "removed: ") != 2 {
		t.Fatalf("remove bob's: %v\n%s", err, out)
	}
	if out, err = run("remove", "--principal", "User:nobody"); err != nil || !strings.Contains(out, "no ACL matched") {
		t.Fatalf("remove nobody's: %v\n%s", err, out)
	}
	if out, err = run("remove", "--all"); err != nil || strings.Count(out, "removed: ") != 5 || len(store.ACLs()) != 0 {
		t.Fatalf("remove --all: %v\n%s", err, out)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"add"}, "no ACL given"},
		{[]string{"add", "alice allow read topic:t"}, `must start with "User:"`},
		{[]string{"add", "--principal", "User:a", "--topic", "t"}, "needs --principal, --operation and a resource"},
		{[]string{"add", "--principal", "User:a", "--operation", "write", "--group", "g"}, "does not apply to a group"},
		{[]string{"add", "--principal", "User:a", "--operation", "read", "--topic", "t", "--prefixed", "--resource-pattern-type", "literal"}, "disagree"},
		{[]string{"list", "--resource-pattern-type", "regex"}, `pattern type "regex"`},
		{[]string{"list", "--allow", "--deny"}, "exclude each other"},
	} {
		if _, err := run(tc.args...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("sq acl %v: %v, want %q", tc.args, err, tc.want)
		}
	}
}

// TestACLListIntoAdd: the output of sq acl list, given back whole as one
// argument ("$(sq acl list)"), adds the same ACLs; a bad line among
// them is named, and an argument of blank lines is refused.
func TestACLListIntoAdd(t *testing.T) {
	store := &memACLStore{}
	ctl := startACLControl(t, store)
	run := func(args ...string) (string, error) {
		return runSQ(t, nil, append([]string{"--control", ctl, "acl"}, args...)...)
	}
	if _, err := run("add", "User:alice allow read topic:orders", `"User:CN=John Smith,O=shop" deny all group:*`,
		"User:bob allow write topic:logs-*"); err != nil {
		t.Fatal(err)
	}
	listed, err := run("list")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run("remove", "--all"); err != nil {
		t.Fatal(err)
	}
	if out, err := run("add", strings.ReplaceAll(listed, "\n", "\r\n")+"\n\n"); err != nil || strings.Count(out, "added: ") != 3 {
		t.Fatalf("add of the listing: %v\n%s", err, out)
	}
	if again, err := run("list"); err != nil || again != listed {
		t.Fatalf("listed after the round trip:\n%s\nwant:\n%s (%v)", again, listed, err)
	}
	for _, tc := range []struct{ arg, want string }{
		{"User:a allow read topic:t\nUser:a allow wrte topic:t", `operation "wrte"`},
		{"\n \n", "want 4 fields"},
	} {
		if _, err := run("add", tc.arg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("sq acl add %q: %v, want %q", tc.arg, err, tc.want)
		}
	}
}
