package gossip

import (
	"bytes"
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// lockedBuf collects log output from several goroutines.
type lockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuf) lines(substr string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, line := range strings.Split(l.b.String(), "\n") {
		if strings.Contains(line, substr) {
			out = append(out, line)
		}
	}
	return out
}

// Raft's failures to reach a peer come out as one WARN per peer per
// window, then one line with the count of the repeats; raft's other
// lines pass at their level with their attributes.
func TestRaftPeerFailuresLimited(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var buf lockedBuf
		hl := raftLogger(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
		tr := hl.Named("transport")
		refused := errors.New("dial tcp 10.0.0.2:6067: connect: connection refused")
		for range 50 {
			hl.Error("failed to heartbeat to", "peer", raft.ServerAddress("10.0.0.2:6067"), "backoff time", 10*time.Millisecond, "error", refused)
			hl.Error("failed to appendEntries to", "peer", raft.Server{ID: "n2", Address: "10.0.0.2:6067"}, "error", refused)
			tr.Warn("failed to contact", "server-id", raft.ServerID("n3"), "time", time.Second)
		}
		hl.Info("entering leader state", "leader", raft.Server{ID: "n1", Address: "10.0.0.1:6067"})
		tr.Warn("unable to get address for server, using fallback address", "id", "n4", "fallback", "10.0.0.4:6067", "error", errors.New("gossip: no raft address gossiped"))
		tr.Error("failed to decode incoming command", "error", &net.OpError{Op: "read", Net: "tcp", Err: net.ErrClosed})
		if got := buf.lines(peerFailureMsg); len(got) != 2 {
			t.Fatalf("%d peer failure lines, want one per peer:\n%s", len(got), strings.Join(got, "\n"))
		}
		for _, peer := range []string{"peer=10.0.0.2:6067", "peer=n3"} {
			if got := buf.lines(peer); len(got) != 1 || !strings.Contains(got[0], "level=WARN") || !strings.Contains(got[0], "hint=") {
				t.Errorf("lines about %s: %q", peer, got)
			}
		}
		if got := buf.lines("connection refused"); len(got) != 1 {
			t.Errorf("the error is not in the peer's line: %q", got)
		}
		if got := buf.lines("entering leader state"); len(got) != 1 || !strings.Contains(got[0], "level=INFO") || !strings.Contains(got[0], "leader=10.0.0.1:6067") {
			t.Errorf("raft's INFO line: %q", got)
		}
		for _, msg := range []string{"using fallback address", "failed to decode incoming command"} {
			if got := buf.lines(msg); len(got) != 1 || !strings.Contains(got[0], "level=DEBUG") {
				t.Errorf("expected raft line %q not at DEBUG: %q", msg, got)
			}
		}
		time.Sleep(peerFailureWindow + time.Second)
		synctest.Wait()
		got := buf.lines("suppressed=")
		if len(got) != 2 {
			t.Fatalf("%d lines with a count after the window, want 2:\n%s", len(got), strings.Join(got, "\n"))
		}
		for _, l := range got {
			if !strings.Contains(l, "suppressed=99") && !strings.Contains(l, "suppressed=49") {
				t.Errorf("count line %q: want 99 repeats of 10.0.0.2 and 49 of n3", l)
			}
		}
		time.Sleep(2 * peerFailureWindow) // the windows end without repeats
		synctest.Wait()
	})
}

// Bytes that are not memberlist's sent to the gossip port are logged as
// one WARN with a hint per sending host, not one ERROR per message.
func TestMemberlistInvalidMsgType(t *testing.T) {
	var buf lockedBuf
	o := testOptions(t, "a", t.TempDir())
	o.Logger = slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	a := mustStart(t, o)
	waitReady(t, a)
	for range 3 {
		c, err := net.Dial("tcp", a.gossipAddr)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
		c.Close()
	}
	eventually(t, 10*time.Second, "the three messages logged", func() bool {
		return len(buf.lines("invalid msgType")) == 3
	})
	warns := buf.lines(foreignMsg)
	if len(warns) != 1 || !strings.Contains(warns[0], "level=WARN") || !strings.Contains(warns[0], "from=127.0.0.1") || !strings.Contains(warns[0], "--cluster-id") {
		t.Fatalf("WARN lines: %q", warns)
	}
	if errs := buf.lines("level=ERROR"); len(errs) != 0 {
		t.Fatalf("ERROR lines: %q", errs)
	}
}

// An hclog.Fmt argument (raft logs its configuration so) is formatted,
// not printed as its format and arguments.
func TestRaftLogFormatsHclogFmt(t *testing.T) {
	var buf lockedBuf
	l := raftLogger(slog.New(slog.NewTextHandler(&buf, nil)))
	l.Info("initial configuration", "servers", hclog.Fmt("%+v", []int{1, 2}), "empty", hclog.Format{})
	got := buf.lines("initial configuration")
	if len(got) != 1 || !strings.Contains(got[0], `servers="[1 2]"`) || strings.Contains(got[0], "%+v") {
		t.Fatalf("logged %q, want servers=\"[1 2]\"", got)
	}
}
