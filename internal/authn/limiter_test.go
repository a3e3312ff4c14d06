package authn

import (
	"testing"
	"time"
)

func TestLimiterDelays(t *testing.T) {
	now := time.Unix(1000, 0)
	l := NewLimiter(func() time.Time { return now })
	steps := []struct {
		op        string // "fail", "ok", "advance"
		source    string
		user      string
		advance   time.Duration
		wantDelay time.Duration // of source/user after the op
	}{
		{"fail", "1.1.1.1:1", "a", 0, DefaultBaseDelay},
		{"fail", "1.1.1.1:2", "a", 0, 2 * DefaultBaseDelay},
		{"advance", "1.1.1.1:3", "a", DefaultBaseDelay, DefaultBaseDelay},
		{"advance", "1.1.1.1:3", "b", 0, DefaultBaseDelay}, // the address
		{"advance", "9.9.9.9:3", "a", 0, DefaultBaseDelay}, // the user
		{"advance", "9.9.9.9:3", "b", 0, 0},
		{"ok", "1.1.1.1:1", "a", 0, 0},
	}
	for i, s := range steps {
		switch s.op {
		case "fail":
			l.Failed(s.source, s.user)
		case "ok":
			l.Succeeded(s.source, s.user)
		case "advance":
			now = now.Add(s.advance)
		}
		if got := l.Delay(s.source, s.user); got != s.wantDelay {
			t.Errorf("step %d (%s %s %s): delay %v, want %v", i, s.op, s.source, s.user, got, s.wantDelay)
		}
	}
	// The delay is capped, and forgotten after DefaultForget.
	for range 40 {
		l.Failed("2.2.2.2", "c")
	}
	if got := l.Delay("2.2.2.2", "c"); got != DefaultMaxDelay {
		t.Errorf("after 40 failures: %v, want %v", got, DefaultMaxDelay)
	}
	now = now.Add(DefaultForget + time.Second)
	if got := l.Delay("2.2.2.2", "c"); got != 0 {
		t.Errorf("after the forget period: %v", got)
	}
}

func TestLimiterBounded(t *testing.T) {
	now := time.Unix(1000, 0)
	l := NewLimiter(func() time.Time { return now })
	l.maxEntries = 4
	for i := range 10 {
		now = now.Add(time.Millisecond)
		l.Failed("10.0.0.1", string(rune('a'+i)))
	}
	if len(l.m) > 4 {
		t.Fatalf("%d records, bound 4", len(l.m))
	}
	if l.Delay("", "j") == 0 {
		t.Fatal("the newest record was dropped")
	}
}
