package authn

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/xdg-go/scram"

	"github.com/seedqueue/sq/api"
)

// mapStore is a Store over a map; err, when set, is returned for every
// lookup.
type mapStore struct {
	users map[string]Credential
	err   error
}

func (m mapStore) Credential(name string) (Credential, bool, error) {
	if m.err != nil {
		return Credential{}, false, m.err
	}
	c, ok := m.users[name]
	return c, ok, nil
}

func newStore(t testing.TB, users map[string]string) mapStore {
	t.Helper()
	m := mapStore{users: map[string]Credential{}}
	for u, p := range users {
		c, err := NewCredential(p, 0)
		if err != nil {
			t.Fatal(err)
		}
		m.users[u] = c
	}
	return m
}

// login runs a whole exchange as user with password and returns the
// error of the first failing step (nil: authenticated, the server's
// signature checked by the client).
func login(ctx context.Context, a *Authenticator, source, user, password string) (*Exchange, error) {
	cl, err := scram.SHA256.NewClient(user, password, "")
	if err != nil {
		return nil, err
	}
	conv := cl.NewConversation()
	e, err := a.Start(MechanismSCRAMSHA256, source)
	if err != nil {
		return nil, err
	}
	msg, err := conv.Step("")
	for err == nil {
		var resp []byte
		var done bool
		resp, done, err = e.Step(ctx, []byte(msg))
		if err != nil {
			return e, err
		}
		msg, err = conv.Step(string(resp))
		if done {
			if err == nil && !conv.Valid() {
				err = errors.New("server signature not valid")
			}
			return e, err
		}
	}
	return e, err
}

func TestExchange(t *testing.T) {
	store := newStore(t, map[string]string{"alice": "s3cret", "bob": "hunter2"})
	cases := []struct {
		name, user, password string
		ok                   bool
	}{
		{"right password", "alice", "s3cret", true},
		{"other user", "bob", "hunter2", true},
		{"wrong password", "alice", "hunter2", false},
		{"unknown user", "mallory", "s3cret", false},
		{"empty password", "alice", "x", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := NewAuthenticator(store, nil)
			e, err := login(context.Background(), a, "10.0.0.1:5000", c.user, c.password)
			if c.ok {
				if err != nil || e.User() != c.user {
					t.Fatalf("login: %v, user %q", err, e.User())
				}
				return
			}
			if !errors.Is(err, api.ErrAuthenticationFailed) {
				t.Fatalf("login: %v, want AUTHENTICATION_FAILED", err)
			}
			if e.User() != "" {
				t.Fatalf("failed exchange reports user %q", e.User())
			}
		})
	}
}

func TestExchangeRefusals(t *testing.T) {
	a := NewAuthenticator(newStore(t, nil), nil)
	if _, err := a.Start("PLAIN", "h:1"); !errors.Is(err, api.ErrAuthenticationFailed) {
		t.Fatalf("PLAIN: %v", err)
	}
	// A node without users says so.
	b := NewAuthenticator(mapStore{err: ErrUnavailable}, nil)
	_, err := login(context.Background(), b, "h:1", "alice", "pw")
	if !errors.Is(err, api.ErrAuthenticationFailed) || !errors.Is(err, ErrUnavailable) {
		t.Fatalf("without users: %v", err)
	}
	// An unknown user gets the same salt on every attempt, as a real one.
	salt := func() string {
		e, _ := a.Start(MechanismSCRAMSHA256, "h:1")
		out, _, err := e.Step(context.Background(), []byte("n,,n=ghost,r=abcdefgh"))
		if err != nil {
			t.Fatal(err)
		}
		_, rest, _ := strings.Cut(string(out), ",s=")
		salt, _, _ := strings.Cut(rest, ",")
		return salt
	}
	if s1, s2 := salt(), salt(); s1 != s2 || s1 == "" {
		t.Fatalf("fake salts %q, %q", s1, s2)
	}
	// An authorization identity other than the user is refused.
	e, _ := a.Start(MechanismSCRAMSHA256, "h:1")
	if _, _, err := e.Step(context.Background(), []byte("n,a=root,n=ghost,r=abcdefgh")); !errors.Is(err, api.ErrAuthenticationFailed) {
		t.Fatalf("authzid: %v", err)
	}
}

// TestBruteForceDelay: each wrong password makes the next proof wait
// twice as long, for the same address and for the same user from
// another address; a success resets the wait. Time is synctest's fake
// clock.
func TestBruteForceDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := NewAuthenticator(newStore(t, map[string]string{"alice": "right"}), nil)
		ctx := context.Background()
		attempt := func(source, password string) (time.Duration, error) {
			start := time.Now()
			_, err := login(ctx, a, source, "alice", password)
			return time.Since(start), err
		}
		want := []time.Duration{0, DefaultBaseDelay, 2 * DefaultBaseDelay, 4 * DefaultBaseDelay}
		for i, w := range want {
			d, err := attempt("10.0.0.1:1", "wrong")
			if err == nil || d != w {
				t.Fatalf("attempt %d: waited %v, %v; want %v and a failure", i, d, err, w)
			}
		}
		// The user's record slows another address too.
		if d, err := attempt("10.0.0.2:1", "right"); err != nil || d != 8*DefaultBaseDelay {
			t.Fatalf("other address: waited %v, %v", d, err)
		}
		// That success reset the user and its address.
		if d, err := attempt("10.0.0.2:2", "wrong"); err == nil || d != 0 {
			t.Fatalf("after success: waited %v, %v", d, err)
		}
		// A cancelled wait ends the exchange.
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		if _, err := login(cctx, a, "10.0.0.2:3", "alice", "right"); !errors.Is(err, api.ErrAuthenticationFailed) {
			t.Fatalf("cancelled: %v", err)
		}
	})
}

// TestExchangeBadUserName: a client-first message whose user name no user
// can have fails with AUTHENTICATION_FAILED saying why, without echoing
// the name and without the Limiter keeping it.
func TestExchangeBadUserName(t *testing.T) {
	tests := []struct{ name, user, want string }{
		{"a megabyte", strings.Repeat("u", 1<<20), "at most 255"},
		{"just over the bound", strings.Repeat("u", MaxUserNameBytes+1), "at most 255"},
		{"control character", "al\x01ice", "control character"},
		{"the anonymous principal's name", "ANONYMOUS", "reserved"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := NewAuthenticator(newStore(t, map[string]string{"alice": "pw"}), nil)
			e, err := a.Start(MechanismSCRAMSHA256, "h:1")
			if err != nil {
				t.Fatal(err)
			}
			_, _, err = e.Step(context.Background(), []byte("n,,n="+tt.user+",r=abcdefgh"))
			if !errors.Is(err, api.ErrAuthenticationFailed) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Step = %v, want AUTHENTICATION_FAILED saying %q", err, tt.want)
			}
			if len(err.Error()) > 200 {
				t.Errorf("error of %d bytes echoes the name", len(err.Error()))
			}
			a.limiter.mu.Lock()
			defer a.limiter.mu.Unlock()
			for k := range a.limiter.m {
				if len(k) > 100 {
					t.Errorf("the Limiter keeps a key of %d bytes", len(k))
				}
			}
			if len(a.limiter.m) == 0 {
				t.Error("the failure was not counted against the source")
			}
		})
	}
}

// TestCheckPasswordBadUserName: HTTP Basic credentials with a user name no
// user can have fail without the Limiter keeping the name.
func TestCheckPasswordBadUserName(t *testing.T) {
	for _, user := range []string{strings.Repeat("u", 1<<20), "al\x00ice", ""} {
		a := NewAuthenticator(newStore(t, map[string]string{"alice": "pw"}), nil)
		err := a.CheckPassword(context.Background(), "h:1", user, "pw")
		if !errors.Is(err, api.ErrAuthenticationFailed) || len(err.Error()) > 200 {
			t.Fatalf("CheckPassword(%.20q) = %.300v", user, err)
		}
		a.limiter.mu.Lock()
		for k := range a.limiter.m {
			if len(k) > 100 {
				t.Errorf("the Limiter keeps a key of %d bytes", len(k))
			}
		}
		a.limiter.mu.Unlock()
	}
	a := NewAuthenticator(newStore(t, map[string]string{"alice": "pw"}), nil)
	if err := a.CheckPassword(context.Background(), "h:1", "alice", "pw"); err != nil {
		t.Fatalf("alice: %v", err)
	}
}
