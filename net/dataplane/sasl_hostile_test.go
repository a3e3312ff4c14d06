package dataplane

import (
	"strings"
	"testing"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/internal/authn"
)

// TestSASLHostile: malformed SASL messages on one connection with
// AuthRequired: garbage, an empty message, a megabyte-long user name, a
// second client-first message in place of the client-final one, and a
// request between the two messages. Each is refused with
// AUTHENTICATION_FAILED without closing the connection or saying whether
// a user exists, and a real exchange then succeeds on it.
func TestSASLHostile(t *testing.T) {
	a := newAuthenticator(t, map[string]string{"alice": "pw"})
	h := startServer(t, newMemBroker(), Options{AuthRequired: true, Authenticator: a})
	c, _ := connect(t, h.addr)
	first := func(user string) []byte { return []byte("n,,n=" + user + ",r=abcdefghijkl") }
	tests := []struct {
		name  string
		steps [][]byte // the last one is refused
	}{
		{"garbage", [][]byte{{0x00, 0xff, 0xfe, '\n', ','}}},
		{"empty", [][]byte{{}}},
		{"huge user name", [][]byte{first(strings.Repeat("x", 1<<20-4096))}},
		{"client-first twice", [][]byte{first("alice"), first("alice")}},
		{"unknown user, client-first twice", [][]byte{first("ghost"), first("ghost")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var last error
			for i, b := range tt.steps {
				r := c.call(saslReq(authn.MechanismSCRAMSHA256, b), nil)
				expectWhich(t, r, api.Frame_Which_saslAuthenticateResponse)
				sr, _ := r.f.SaslAuthenticateResponse()
				if i < len(tt.steps)-1 {
					if sr.HasError() {
						t.Fatalf("step %d refused", i)
					}
					// A request in the middle of the exchange is refused.
					if got := c.issue(authRow{build: listTopicsReq}); got != api.CodeAuthenticationFailed {
						t.Fatalf("request during the exchange: %v", got)
					}
					continue
				}
				if !sr.HasError() {
					t.Fatal("accepted")
				}
				w, _ := sr.Error()
				last = api.FromWire(w)
			}
			if api.AsError(last).Code != api.CodeAuthenticationFailed || len(last.Error()) > 300 {
				t.Fatalf("refusal: %.300v", last)
			}
			if strings.Contains(last.Error(), "ghost") && strings.Contains(last.Error(), "unknown user") != strings.Contains(last.Error(), "wrong password") {
				t.Fatalf("refusal tells the user is unknown: %v", last)
			}
		})
	}
	// The refusal of a request says how to authenticate.
	r := c.call(listTopicsReq, nil)
	expectWhich(t, r, api.Frame_Which_errorResponse)
	w, _ := r.f.ErrorResponse()
	if err := api.FromWire(w); !strings.Contains(err.Error(), "sq --user") {
		t.Fatalf("refusal without a hint: %v", err)
	}
	a.Limiter().Succeeded(c.nc.LocalAddr().String(), "alice")
	if err := c.saslLogin("alice", "pw"); err != nil {
		t.Fatalf("login after the hostile exchanges: %v", err)
	}
	if got := c.issue(authRow{build: listTopicsReq}); got != 0 {
		t.Fatalf("after login: %v", got)
	}
}
