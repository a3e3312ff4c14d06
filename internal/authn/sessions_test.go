package authn

import (
	"testing"
	"time"
)

func TestSessions(t *testing.T) {
	now := time.Unix(1000, 0)
	s := NewSessions(time.Minute, 3, func() time.Time { return now })
	tok, exp := s.Issue("alice", []byte("k1"))
	if !exp.Equal(now.Add(time.Minute)) || len(tok) < 40 {
		t.Fatalf("token %q expires %v", tok, exp)
	}
	if u, k, ok := s.Lookup(tok); !ok || u != "alice" || string(k) != "k1" {
		t.Fatalf("lookup: %q %q %v", u, k, ok)
	}
	if _, _, ok := s.Lookup(tok + "x"); ok {
		t.Fatal("a forged token was accepted")
	}
	now = now.Add(time.Second)
	tok2, _ := s.Issue("alice", []byte("k1"))
	if tok2 == tok {
		t.Fatal("the same token twice")
	}
	// The bound: the token nearest its expiry goes first.
	now = now.Add(time.Second)
	s.Issue("b", nil)
	s.Issue("c", nil)
	if s.Len() != 3 {
		t.Fatalf("%d tokens held, bound 3", s.Len())
	}
	if _, _, ok := s.Lookup(tok); ok {
		t.Fatal("the oldest token survived eviction")
	}
	if _, _, ok := s.Lookup(tok2); !ok {
		t.Fatal("a newer token was evicted")
	}
	now = now.Add(time.Minute)
	if _, _, ok := s.Lookup(tok2); ok {
		t.Fatal("an expired token was accepted")
	}
}
