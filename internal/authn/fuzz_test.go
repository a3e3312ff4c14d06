package authn

import (
	"context"
	"errors"
	"testing"

	"github.com/xdg-go/scram"

	"github.com/seedqueue/sq/api"
)

// FuzzServerExchange feeds arbitrary client messages to the server side
// of the exchange: it must never panic, and never authenticate anyone
// without the right proof (the fuzzer does not know the password).
func FuzzServerExchange(f *testing.F) {
	store := newStore(f, map[string]string{"alice": "correct horse"})
	// Seeds: a real client-first message, and a client-final message
	// with a wrong password answering a real server-first one.
	cl, _ := scram.SHA256.NewClient("alice", "wrong", "")
	conv := cl.NewConversation()
	c1, _ := conv.Step("")
	f.Add([]byte(c1), []byte("c=biws,r=abc,p=AAAA"))
	f.Add([]byte("n,,n=alice,r=x"), []byte("c=biws,r=x,p="))
	f.Add([]byte("p=tls-unique,,n=alice,r=x"), []byte(""))
	f.Add([]byte("n,a=alice,n=al=2Cice,r=\x00"), []byte("c=,r=,p=,x=,"))
	f.Fuzz(func(t *testing.T, first, final []byte) {
		a := NewAuthenticator(store, nil)
		a.limiter.base = 0 // no waiting between fuzzed attempts
		e, err := a.Start(MechanismSCRAMSHA256, "127.0.0.1:1")
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		if _, done, err := e.Step(ctx, first); done || (err != nil && !errors.Is(err, api.ErrAuthenticationFailed)) {
			t.Fatalf("first step: done %v, %v", done, err)
		}
		_, done, err := e.Step(ctx, final)
		if done || err == nil || e.User() != "" {
			t.Fatalf("authenticated without the password: done %v, err %v, user %q", done, err, e.User())
		}
		if !errors.Is(err, api.ErrAuthenticationFailed) {
			t.Fatalf("final step: %v", err)
		}
	})
}
