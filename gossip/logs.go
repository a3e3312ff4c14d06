package gossip

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/seedqueue/sq/internal/ratelog"
)

// peerFailureWindow is how long the repeats of "cannot reach a Raft
// peer" about one peer are counted rather than logged (internal/ratelog):
// a leader retries a dead peer's heartbeats many times a second.
const peerFailureWindow = 30 * time.Second

// peerFailureMsg is the one WARN line that stands for hashicorp/raft's
// failures to reach a peer (heartbeats, appends, votes, contact).
const peerFailureMsg = "cannot reach a Raft peer; retrying"

// raftLogger returns the hclog.Logger that hashicorp/raft and its
// transport and snapshot store write to: records go to l at the matching
// slog level (TRACE below DEBUG), with raft's key/value pairs as
// attributes and the logger's name as "raft". The failures to reach a
// peer become one WARN, peerFailureMsg, with the peer, raft's message and
// the error, limited per peer to one line per peerFailureWindow with the
// count of the repeats (internal/ratelog). Those lines limit themselves,
// so l's own limiter lets them pass (ratelog.Unlimited). Its flush logs
// the counts still pending (at the node's shutdown).
func raftLogger(l *slog.Logger) *hclogAdapter {
	lim := ratelog.New(unlimitedHandler{l.Handler()}, ratelog.Options{Window: peerFailureWindow, Keys: []string{"peer"}})
	return &hclogAdapter{l: l, peers: slog.New(lim), limiter: lim, name: "raft", level: hclog.Trace}
}

// unlimitedHandler passes records to next with a context marked
// ratelog.Unlimited: for records limited already.
type unlimitedHandler struct{ next slog.Handler }

func (h unlimitedHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.next.Enabled(ctx, l)
}

func (h unlimitedHandler) Handle(ctx context.Context, r slog.Record) error {
	return h.next.Handle(ratelog.Unlimited(ctx), r)
}

func (h unlimitedHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return unlimitedHandler{h.next.WithAttrs(as)}
}

func (h unlimitedHandler) WithGroup(name string) slog.Handler {
	return unlimitedHandler{h.next.WithGroup(name)}
}

// hclogAdapter implements hclog.Logger on slog (raftLogger).
type hclogAdapter struct {
	l       *slog.Logger     // every record but the peer failures
	peers   *slog.Logger     // the peer failures, limited
	limiter *ratelog.Handler // peers' handler, shared by every derived adapter
	name    string
	args    []any // implied by With

	mu    sync.Mutex
	level hclog.Level
}

// slogLevel maps an hclog level to slog's.
func slogLevel(l hclog.Level) slog.Level {
	switch l {
	case hclog.Trace:
		return slog.LevelDebug - 4
	case hclog.Debug:
		return slog.LevelDebug
	case hclog.Warn:
		return slog.LevelWarn
	case hclog.Error:
		return slog.LevelError
	}
	return slog.LevelInfo
}

// Log implements hclog.Logger.
func (a *hclogAdapter) Log(level hclog.Level, msg string, args ...any) {
	if level == hclog.Off || level < a.GetLevel() {
		return
	}
	all := append(append([]any(nil), a.args...), args...)
	if l, ok := expectedRaftLines[msg]; ok && level > l {
		level = l
	}
	if e, ok := argValue(args, "error").(error); ok && level >= hclog.Warn && errors.Is(e, net.ErrClosed) {
		level = hclog.Debug // a connection closed by this node's own shutdown
	}
	if peer, ok := peerFailure(msg, all); ok && level >= hclog.Warn {
		a.peers.Log(context.Background(), slog.LevelWarn, peerFailureMsg,
			"peer", peer, "raft_msg", msg, "err", argValue(all, "error"),
			"hint", "the peer's process may be down or paused, or the network between the nodes cut; sq cluster members shows its gossip state")
		return
	}
	ctx := context.Background()
	sl := slogLevel(level)
	if !a.l.Enabled(ctx, sl) {
		return
	}
	attrs := []slog.Attr{slog.String("logger", a.name)}
	for i := 0; i < len(all); i += 2 {
		if i+1 == len(all) {
			attrs = append(attrs, slog.Any("extra", all[i]))
			break
		}
		attrs = append(attrs, slog.Any(fmt.Sprint(all[i]), printable(all[i+1])))
	}
	a.l.LogAttrs(ctx, sl, a.name+": "+msg, attrs...)
}

// expectedRaftLines are the lines hashicorp/raft logs as warnings that
// are the expected course of a cluster's life, with the level they are
// logged at instead.
var expectedRaftLines = map[string]hclog.Level{
	// A node that joins has no configuration until the controller adds it.
	"no known peers, aborting election": hclog.Debug,
	// gossipRaftAddrs answers an error for a node gossip has not met
	// yet, so that the configuration's address is used: by design.
	"unable to get address for server, using fallback address": hclog.Debug,
	// A new or restarted follower is brought up to date.
	"appendEntries rejected, sending older logs": hclog.Info,
	"failed to get previous log":                 hclog.Info,
}

// peerFailure reports whether raft's msg with args is a failure to reach
// a peer, and which peer: raft names it with "peer", "target" or
// "server-id".
func peerFailure(msg string, args []any) (string, bool) {
	if !strings.HasPrefix(msg, "failed to ") {
		return "", false
	}
	for _, k := range []string{"peer", "target", "server-id"} {
		if v := argValue(args, k); v != nil {
			return peerName(v), true
		}
	}
	return "", false
}

// argValue returns the value of key k in hclog's key/value pairs, or nil.
func argValue(args []any, k string) any {
	for i := 0; i+1 < len(args); i += 2 {
		if s, ok := args[i].(string); ok && s == k {
			return args[i+1]
		}
	}
	return nil
}

// peerName names a peer as raft gives it: a raft.Server by its address
// (as the heartbeats name it, so that both count as one peer), anything
// else as its text.
func peerName(v any) string {
	switch p := v.(type) {
	case raft.Server:
		return string(p.Address)
	case *raft.Server:
		return string(p.Address)
	}
	return fmt.Sprint(v)
}

// printable turns raft's values into what slog prints well: errors and
// Stringers as text, raft.Server as peerName, hclog.Fmt's format and
// arguments formatted.
func printable(v any) any {
	switch x := v.(type) {
	case hclog.Format:
		if len(x) == 0 {
			return ""
		}
		if f, ok := x[0].(string); ok {
			return fmt.Sprintf(f, x[1:]...)
		}
		return fmt.Sprint(x...)
	case error:
		return x.Error()
	case raft.Server, *raft.Server:
		return peerName(x)
	case fmt.Stringer:
		return x.String()
	}
	return v
}

// Trace implements hclog.Logger.
func (a *hclogAdapter) Trace(msg string, args ...any) { a.Log(hclog.Trace, msg, args...) }

// Debug implements hclog.Logger.
func (a *hclogAdapter) Debug(msg string, args ...any) { a.Log(hclog.Debug, msg, args...) }

// Info implements hclog.Logger.
func (a *hclogAdapter) Info(msg string, args ...any) { a.Log(hclog.Info, msg, args...) }

// Warn implements hclog.Logger.
func (a *hclogAdapter) Warn(msg string, args ...any) { a.Log(hclog.Warn, msg, args...) }

// Error implements hclog.Logger.
func (a *hclogAdapter) Error(msg string, args ...any) { a.Log(hclog.Error, msg, args...) }

func (a *hclogAdapter) enabled(l hclog.Level) bool {
	return l >= a.GetLevel() && a.l.Enabled(context.Background(), slogLevel(l))
}

// IsTrace implements hclog.Logger.
func (a *hclogAdapter) IsTrace() bool { return a.enabled(hclog.Trace) }

// IsDebug implements hclog.Logger.
func (a *hclogAdapter) IsDebug() bool { return a.enabled(hclog.Debug) }

// IsInfo implements hclog.Logger.
func (a *hclogAdapter) IsInfo() bool { return a.enabled(hclog.Info) }

// IsWarn implements hclog.Logger.
func (a *hclogAdapter) IsWarn() bool { return a.enabled(hclog.Warn) }

// IsError implements hclog.Logger.
func (a *hclogAdapter) IsError() bool { return a.enabled(hclog.Error) }

// ImpliedArgs implements hclog.Logger.
func (a *hclogAdapter) ImpliedArgs() []any { return a.args }

// With implements hclog.Logger.
func (a *hclogAdapter) With(args ...any) hclog.Logger {
	c := a.clone(a.name)
	c.args = append(append([]any(nil), a.args...), args...)
	return c
}

// Name implements hclog.Logger.
func (a *hclogAdapter) Name() string { return a.name }

// Named implements hclog.Logger.
func (a *hclogAdapter) Named(name string) hclog.Logger {
	if a.name != "" {
		name = a.name + "." + name
	}
	return a.clone(name)
}

// ResetNamed implements hclog.Logger.
func (a *hclogAdapter) ResetNamed(name string) hclog.Logger { return a.clone(name) }

func (a *hclogAdapter) clone(name string) *hclogAdapter {
	return &hclogAdapter{l: a.l, peers: a.peers, limiter: a.limiter, name: name, args: a.args, level: a.GetLevel()}
}

// flush logs the peer failures counted but not logged yet.
func (a *hclogAdapter) flush() { a.limiter.Flush() }

// SetLevel implements hclog.Logger.
func (a *hclogAdapter) SetLevel(l hclog.Level) {
	a.mu.Lock()
	a.level = l
	a.mu.Unlock()
}

// GetLevel implements hclog.Logger.
func (a *hclogAdapter) GetLevel() hclog.Level {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.level
}

// StandardLogger implements hclog.Logger: a log.Logger whose lines are
// parsed for their "[LEVEL]" tag.
func (a *hclogAdapter) StandardLogger(*hclog.StandardLoggerOptions) *log.Logger {
	return log.New(a.StandardWriter(nil), "", 0)
}

// StandardWriter implements hclog.Logger.
func (a *hclogAdapter) StandardWriter(*hclog.StandardLoggerOptions) io.Writer {
	return logWriter{a.l.With("logger", a.name)}
}

// logWriter turns the lines of a log.Logger ("[WARN] raft: text") into
// slog records at the matching level.
type logWriter struct{ l *slog.Logger }

// Write implements io.Writer; each line is one record.
func (w logWriter) Write(p []byte) (int, error) {
	for _, line := range bytes.Split(bytes.TrimRight(p, "\n"), []byte("\n")) {
		level, s := parseTagged(string(line))
		if s != "" {
			w.l.Log(context.Background(), level, s)
		}
	}
	return len(p), nil
}

// parseTagged splits a log line into its "[LEVEL]" tag's slog level
// (INFO without one) and the rest of the line.
func parseTagged(line string) (slog.Level, string) {
	s := strings.TrimSpace(line)
	for _, lv := range []struct {
		tag   string
		level slog.Level
	}{{"[TRACE]", slog.LevelDebug - 4}, {"[DEBUG]", slog.LevelDebug}, {"[INFO]", slog.LevelInfo}, {"[WARN]", slog.LevelWarn}, {"[ERR]", slog.LevelError}, {"[ERROR]", slog.LevelError}} {
		if i := strings.Index(s, lv.tag); i >= 0 {
			return lv.level, strings.TrimSpace(s[i+len(lv.tag):])
		}
	}
	return slog.LevelInfo, s
}

// maxForeignSenders bounds the sender hosts memberlistWriter remembers
// having warned about.
const maxForeignSenders = 1024

// memberlistWriter is memberlist's log output. Its lines go to l at their
// level, except the messages that are not memberlist's ("invalid
// msgType", "msg type ... not supported": another program, or another
// cluster's memberlist with another protocol or encryption, writes to the
// gossip port), which become one WARN with a hint per sending host, then
// DEBUG.
type memberlistWriter struct {
	l *slog.Logger

	mu   sync.Mutex
	seen map[string]bool // sender hosts warned about
}

func newMemberlistWriter(l *slog.Logger) *memberlistWriter {
	return &memberlistWriter{l: l, seen: map[string]bool{}}
}

// foreignMsg is the WARN that stands for memberlist's refusals of
// messages that are not SQ gossip.
const foreignMsg = "gossip: received a message that is not SQ gossip on the gossip port; ignored"

// Write implements io.Writer; each line is one record.
func (w *memberlistWriter) Write(p []byte) (int, error) {
	for _, line := range bytes.Split(bytes.TrimRight(p, "\n"), []byte("\n")) {
		level, s := parseTagged(string(line))
		if s == "" {
			continue
		}
		if !foreign(s) {
			w.l.Log(context.Background(), level, s)
			continue
		}
		from := senderHost(s)
		w.mu.Lock()
		first := !w.seen[from] && len(w.seen) < maxForeignSenders
		if first {
			w.seen[from] = true
		}
		w.mu.Unlock()
		if !first {
			w.l.Debug(s)
			continue
		}
		// Once per host: past the server's limiter, which would take
		// the lines about several hosts for repeats.
		w.l.Log(ratelog.Unlimited(context.Background()), slog.LevelWarn, foreignMsg, "from", from, "memberlist", s,
			"hint", "another cluster's nodes (other --cluster-id, gossip encryption or version), or a program that is not an SQ node, send to this node's gossip address (--gossip-host, the gRPC port + 6 by default); --seeds takes gRPC addresses, not gossip ones. Later messages from this host are logged at DEBUG")
	}
	return len(p), nil
}

// foreign reports whether memberlist's log line s refuses a message that
// is not memberlist's.
func foreign(s string) bool {
	return strings.Contains(s, "invalid msgType") ||
		(strings.Contains(s, "not supported") && (strings.Contains(s, "msg type") || strings.Contains(s, "Message type")))
}

// senderHost returns the host of memberlist's "from=host:port" in s, or
// "unknown".
func senderHost(s string) string {
	i := strings.Index(s, "from=")
	if i < 0 {
		return "unknown"
	}
	addr := s[i+len("from="):]
	if j := strings.IndexAny(addr, " \t"); j >= 0 {
		addr = addr[:j]
	}
	if h, _, err := net.SplitHostPort(addr); err == nil {
		return h
	}
	return addr
}
