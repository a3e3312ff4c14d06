package main

import (
	"context"
	"io"
	"log/slog"
	"maps"
	"net"
	"strings"
	"sync"
	"testing"

	"github.com/spf13/cobra"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/control"
	"github.com/seedqueue/sq/engine"
	"github.com/seedqueue/sq/internal/authn"
	"github.com/seedqueue/sq/sdk"
)

// TestSASLConfig: --user and SQ_USER with SQ_PASSWORD or --password-stdin
// (whose first line only is taken, the rest left for the command).
func TestSASLConfig(t *testing.T) {
	cases := []struct {
		name    string
		args    []string
		env     map[string]string
		stdin   string
		owns    bool // sq user create
		want    sdk.SASLMechanism
		wantErr string
		rest    string // stdin left unread
	}{
		{name: "none"},
		{name: "flag and env password", args: []string{"--user", "alice"}, env: map[string]string{passwordEnv: "pw"}, want: sdk.SCRAM{User: "alice", Password: "pw"}},
		{name: "env user", env: map[string]string{userEnv: "bob", passwordEnv: "pw"}, want: sdk.SCRAM{User: "bob", Password: "pw"}},
		{name: "flag wins", args: []string{"--user", "alice"}, env: map[string]string{userEnv: "bob", passwordEnv: "pw"}, want: sdk.SCRAM{User: "alice", Password: "pw"}},
		{name: "stdin", args: []string{"--user", "alice", "--password-stdin"}, stdin: "from stdin\r\nrecord 1\n", want: sdk.SCRAM{User: "alice", Password: "from stdin"}, rest: "record 1\n"},
		{name: "no password", args: []string{"--user", "alice"}, wantErr: "needs a password"},
		{name: "empty stdin", args: []string{"--user", "alice", "--password-stdin"}, wantErr: "holds no password"},
		{name: "stdin without user", args: []string{"--password-stdin"}, wantErr: "needs --user"},
		{name: "user create owns stdin", args: []string{"--user", "alice", "--password-stdin"}, env: map[string]string{passwordEnv: "admin"}, stdin: "new\n", owns: true, want: sdk.SCRAM{User: "alice", Password: "admin"}, rest: "new\n"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in := strings.NewReader(c.stdin)
			g := &globals{getenv: func(k string) string { return c.env[k] }, stdin: in}
			cmd := &cobra.Command{Use: "x", Run: func(*cobra.Command, []string) {}}
			if c.owns {
				cmd.Annotations = map[string]string{ownsPasswordStdin: "yes"}
			}
			bindAuthFlags(cmd, &g.auth)
			if err := cmd.ParseFlags(c.args); err != nil {
				t.Fatal(err)
			}
			got, err := g.saslConfig(cmd)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("err %v, want %q", err, c.wantErr)
				}
				return
			}
			if err != nil || got != c.want {
				t.Fatalf("got %#v, %v; want %#v", got, err, c.want)
			}
			rest := make([]byte, 64)
			n, _ := in.Read(rest)
			if string(rest[:n]) != c.rest {
				t.Fatalf("stdin left %q, want %q", rest[:n], c.rest)
			}
		})
	}
}

// memUsers is a control.UserBackend over a map.
type memUsers struct {
	mu sync.Mutex
	m  map[string]authn.Credential
}

func (u *memUsers) Credential(name string) (authn.Credential, bool, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	c, ok := u.m[name]
	return c, ok, nil
}

func (u *memUsers) Users() map[string]authn.Credential {
	u.mu.Lock()
	defer u.mu.Unlock()
	return maps.Clone(u.m)
}

func (u *memUsers) UpsertUser(_ context.Context, name string, c authn.Credential) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.m[name] = c
	return nil
}

func (u *memUsers) DeleteUser(_ context.Context, name string) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	if _, ok := u.m[name]; !ok {
		return api.NewError(api.CodeInvalidRequest, "user %q does not exist", name)
	}
	delete(u.m, name)
	return nil
}

// TestUserCommands: sq user create, list and delete against a control
// plane that requires authentication, as --user admin.
func TestUserCommands(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	users := &memUsers{m: map[string]authn.Credential{}}
	admin, _ := authn.NewCredential("adminpw", 0)
	users.m["admin"] = admin
	srv, err := control.New(control.Options{NodeID: "cli-node", Logger: quiet, AuthRequired: true,
		Authenticator: authn.NewAuthenticator(users, nil)})
	if err != nil {
		t.Fatal(err)
	}
	eng, err := engine.Open(engine.Options{DataDir: t.TempDir(), Logger: quiet, Observer: srv.Observer()})
	if err != nil {
		t.Fatal(err)
	}
	srv.SetEngine(eng)
	srv.SetUsers(users)
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
	addr := ln.Addr().String()
	env := map[string]string{passwordEnv: "adminpw", userEnv: "admin"}
	steps := []struct {
		args    []string
		env     map[string]string
		want    string // in the output, or in the error when wantErr
		wantErr bool
	}{
		{[]string{"user", "create", "carol", "--password", "c4rol", "--iterations", "8192"}, env, "created user carol", false},
		{[]string{"user", "list"}, env, "carol  SCRAM-SHA-256  8192", false},
		{[]string{"user", "list"}, nil, "AUTHENTICATION_FAILED", true},
		{[]string{"user", "list"}, map[string]string{passwordEnv: "wrong", userEnv: "admin"}, "AUTHENTICATION_FAILED", true},
		{[]string{"user", "create", "dave"}, env, "exactly one of --password and --password-stdin", true},
		{[]string{"user", "delete", "carol"}, env, "deleted user carol", false},
		{[]string{"user", "delete", "carol"}, env, "INVALID_REQUEST", true},
	}
	for i, s := range steps {
		out, err := runSQ(t, s.env, append([]string{"--control", addr}, s.args...)...)
		if s.wantErr {
			if err == nil || !strings.Contains(err.Error(), s.want) {
				t.Errorf("step %d %v: %v, want an error with %q", i, s.args, err, s.want)
			}
			continue
		}
		if err != nil || !strings.Contains(out, s.want) {
			t.Errorf("step %d %v: %q, %v; want %q", i, s.args, out, err, s.want)
		}
	}
	if c, ok, _ := users.Credential("carol"); ok || c.Iterations != 0 {
		t.Error("carol not deleted")
	}
}
