package ratelog

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// lines is a concurrency-safe buffer of text log lines.
type lines struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *lines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// take returns the lines written since the last call.
func (l *lines) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := strings.TrimSpace(l.buf.String())
	l.buf.Reset()
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

func newLogger(opts Options) (*slog.Logger, *Handler, *lines) {
	out := &lines{}
	h := New(slog.NewTextHandler(out, &slog.HandlerOptions{Level: slog.LevelDebug,
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		}}), opts)
	return slog.New(h), h, out
}

func want(t *testing.T, what string, got []string, wants ...string) {
	t.Helper()
	if len(got) != len(wants) {
		t.Fatalf("%s: %d lines %q, want %d %q", what, len(got), got, len(wants), wants)
	}
	for i := range wants {
		if got[i] != wants[i] {
			t.Errorf("%s: line %d = %q, want %q", what, i, got[i], wants[i])
		}
	}
}

// TestRepeatsSuppressedThenCounted: 657 identical WARN lines within 12 s
// (the disk-full flood) come out as the first line, then one line per
// window carrying the count it stands for; nothing is lost from the count.
func TestRepeatsSuppressedThenCounted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		log, h, out := newLogger(Options{})
		defer h.Flush()
		start := time.Now()
		for i := range 657 {
			// Spread over 12 s: one every ~18 ms.
			at := start.Add(time.Duration(i) * 12 * time.Second / 657)
			time.Sleep(time.Until(at))
			log.Warn("append failed", "topic", "t", "partition", 0, "n", i)
		}
		got := out.take()
		if len(got) != 2 {
			t.Fatalf("lines during the flood = %q, want the first and the summary at 10 s", got)
		}
		if got[0] != `level=WARN msg="append failed" topic=t partition=0 n=0` {
			t.Errorf("first line = %q", got[0])
		}
		var last, n1 int
		if _, err := fmt.Sscanf(got[1], `level=WARN msg="append failed" topic=t partition=0 n=%d suppressed=%d`, &last, &n1); err != nil {
			t.Fatalf("summary %q: %v", got[1], err)
		}
		if last != n1 {
			t.Errorf("summary carries record %d, want the last one dropped (%d)", last, n1)
		}
		time.Sleep(10 * time.Second)
		synctest.Wait()
		got = out.take()
		var n2 int
		if len(got) != 1 {
			t.Fatalf("lines after the flood = %q, want one summary", got)
		}
		if _, err := fmt.Sscanf(got[0], `level=WARN msg="append failed" topic=t partition=0 n=656 suppressed=%d`, &n2); err != nil {
			t.Fatalf("second summary %q: %v", got[0], err)
		}
		if 1+n1+n2 != 657 {
			t.Errorf("1 logged + %d + %d suppressed = %d, want 657", n1, n2, 1+n1+n2)
		}
		// A window without repeats forgets the kind: the next is logged
		// at once.
		time.Sleep(10 * time.Second)
		synctest.Wait()
		want(t, "quiet window", out.take())
		log.Warn("append failed", "topic", "t", "partition", 0, "n", 1000)
		want(t, "after quiet", out.take(), `level=WARN msg="append failed" topic=t partition=0 n=1000`)
	})
}

// TestKindsAreSeparate: another message, another partition or topic (as
// record attributes or bound with With), another level, or the same
// message at INFO, is logged at once; attributes not among the keys (a
// remote address, an error text) do not make a new kind.
func TestKindsAreSeparate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		log, h, out := newLogger(Options{})
		defer h.Flush()
		log.Warn("disk full", "topic", "a", "partition", 0, "remote", "1.2.3.4:5")
		log.Warn("disk full", "topic", "a", "partition", 0, "remote", "6.7.8.9:1", "err", "other text")
		log.Warn("disk full", "topic", "a", "partition", 1)
		log.Warn("disk full", "topic", "b", "partition", 0)
		log.With("topic", "c").Warn("disk full", "partition", 0)
		log.With("topic", "c").Warn("disk full", "partition", 0)
		log.WithGroup("g").Warn("disk full", "topic", "d", "partition", 0)
		log.Warn("sync failed", "topic", "a", "partition", 0)
		log.Error("disk full", "topic", "a", "partition", 0)
		log.Info("disk full", "topic", "a", "partition", 0)
		log.Info("disk full", "topic", "a", "partition", 0)
		log.Debug("disk full", "topic", "a", "partition", 0)
		want(t, "kinds", out.take(),
			`level=WARN msg="disk full" topic=a partition=0 remote=1.2.3.4:5`,
			`level=WARN msg="disk full" topic=a partition=1`,
			`level=WARN msg="disk full" topic=b partition=0`,
			`level=WARN msg="disk full" topic=c partition=0`,
			`level=WARN msg="disk full" g.topic=d g.partition=0`,
			`level=WARN msg="sync failed" topic=a partition=0`,
			`level=ERROR msg="disk full" topic=a partition=0`,
			`level=INFO msg="disk full" topic=a partition=0`,
			`level=INFO msg="disk full" topic=a partition=0`,
			`level=DEBUG msg="disk full" topic=a partition=0`,
		)
		// The repeats dropped are counted through the handler that got
		// them (its bound attributes kept).
		h.Flush()
		want(t, "flush", sortLines(out.take()),
			`level=WARN msg="disk full" topic=a partition=0 remote=6.7.8.9:1 err="other text" suppressed=1`,
			`level=WARN msg="disk full" topic=c partition=0 suppressed=1`,
		)
	})
}

// TestPathsAreSeparate: lines about different files or directories (the
// path, dir and file attributes the server logs, such as one ERROR per
// topic directory without metadata at start) are all logged; a repeat
// about the same one is limited.
func TestPathsAreSeparate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		log, h, out := newLogger(Options{})
		defer h.Flush()
		for _, k := range []string{"path", "dir", "file"} {
			log.Error("orphan", k, "/d/a")
			log.Error("orphan", k, "/d/b")
			log.Error("orphan", k, "/d/a")
		}
		want(t, "paths", out.take(),
			`level=ERROR msg=orphan path=/d/a`, `level=ERROR msg=orphan path=/d/b`,
			`level=ERROR msg=orphan dir=/d/a`, `level=ERROR msg=orphan dir=/d/b`,
			`level=ERROR msg=orphan file=/d/a`, `level=ERROR msg=orphan file=/d/b`,
		)
		h.Flush()
		want(t, "flush", sortLines(out.take()),
			`level=ERROR msg=orphan dir=/d/a suppressed=1`,
			`level=ERROR msg=orphan file=/d/a suppressed=1`,
			`level=ERROR msg=orphan path=/d/a suppressed=1`,
		)
	})
}

// TestOptions: a shorter window and MinLevel INFO; MaxKeys bounds the kinds
// tracked (beyond it records are logged unlimited).
func TestOptions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		log, h, out := newLogger(Options{Window: time.Second, MinLevel: slog.LevelInfo, MaxKeys: 1})
		defer h.Flush()
		log.Info("a")
		log.Info("a")
		log.Info("b")
		log.Info("b")
		want(t, "limited", out.take(), `level=INFO msg=a`, `level=INFO msg=b`, `level=INFO msg=b`)
		time.Sleep(time.Second)
		synctest.Wait()
		want(t, "window", out.take(), `level=INFO msg=a suppressed=1`)
	})
}

// TestUnlimited: records logged with an Unlimited context pass every time
// and do not count as repeats of the same kind.
func TestUnlimited(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		log, h, out := newLogger(Options{})
		ctx := Unlimited(t.Context())
		for i := range 3 {
			log.WarnContext(ctx, "refused", "since_last", i)
		}
		log.Warn("refused", "since_last", 9)
		log.Warn("refused", "since_last", 10)
		h.Flush()
		want(t, "unlimited", out.take(),
			`level=WARN msg=refused since_last=0`,
			`level=WARN msg=refused since_last=1`,
			`level=WARN msg=refused since_last=2`,
			`level=WARN msg=refused since_last=9`,
			`level=WARN msg=refused since_last=10 suppressed=1`,
		)
	})
}

// TestConcurrent: many goroutines logging the same kind at once lose no
// count (run with -race).
func TestConcurrent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		log, h, out := newLogger(Options{})
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				for range 100 {
					log.Warn("x", "topic", "t")
				}
			})
		}
		wg.Wait()
		h.Flush()
		got := out.take()
		var n int
		if len(got) != 2 {
			t.Fatalf("lines %q, want 2", got)
		}
		if _, err := fmt.Sscanf(got[1], `level=WARN msg=x topic=t suppressed=%d`, &n); err != nil || n != 799 {
			t.Fatalf("summary %q (%v), want suppressed=799", got[1], err)
		}
	})
}

func sortLines(l []string) []string {
	for i := 1; i < len(l); i++ {
		for j := i; j > 0 && l[j] < l[j-1]; j-- {
			l[j], l[j-1] = l[j-1], l[j]
		}
	}
	return l
}
