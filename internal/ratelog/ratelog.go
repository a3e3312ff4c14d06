package ratelog

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"time"
)

// Defaults of Options.
const (
	DefaultWindow  = 10 * time.Second
	DefaultMaxKeys = 10000
)

// DefaultKeys are the attribute keys that, with the level and the message,
// tell one kind of record from another when Options.Keys is nil: the
// names of what a line is about (a partition, a group, a file or
// directory), so that the lines about several of them, such as one per
// orphaned topic directory at start, all appear.
var DefaultKeys = []string{"topic", "partition", "group", "file", "path", "dir", "data_dir"}

// Options configure a Handler. The zero value is valid: every field takes
// its default.
type Options struct {
	// Window is how long repeats of a record are dropped after one is
	// logged (default DefaultWindow, 10 s).
	Window time.Duration
	// MinLevel is the lowest level that is limited; nil means
	// slog.LevelWarn: WARN and ERROR are limited, INFO and DEBUG pass.
	MinLevel slog.Leveler
	// Keys are the attribute keys (at any group depth) whose values, with
	// the level and message, make a record's kind (default DefaultKeys).
	Keys []string
	// MaxKeys bounds the kinds tracked at once (default DefaultMaxKeys):
	// past it, records of new kinds are logged unlimited until windows end.
	MaxKeys int
}

func (o Options) withDefaults() Options {
	if o.Window <= 0 {
		o.Window = DefaultWindow
	}
	if o.MinLevel == nil {
		o.MinLevel = slog.LevelWarn
	}
	if o.Keys == nil {
		o.Keys = DefaultKeys
	}
	if o.MaxKeys <= 0 {
		o.MaxKeys = DefaultMaxKeys
	}
	return o
}

// Handler limits repeated records and passes the others to the handler it
// wraps. It is safe for concurrent use; handlers derived by WithAttrs and
// WithGroup share its state.
type Handler struct {
	next  slog.Handler
	st    *state
	bound string // key attributes bound by WithAttrs, encoded
}

// state is what a Handler and the handlers derived from it share.
type state struct {
	opts    Options
	keys    map[string]bool
	mu      sync.Mutex
	entries map[string]*entry
}

// entry is one kind of record within its window.
type entry struct {
	suppressed int
	last       slog.Record  // the latest record dropped
	h          slog.Handler // the handler that received it
	timer      *time.Timer  // ends the window
}

// New returns a Handler that limits the records of next per opts.
func New(next slog.Handler, opts Options) *Handler {
	opts = opts.withDefaults()
	st := &state{opts: opts, keys: map[string]bool{}, entries: map[string]*entry{}}
	for _, k := range opts.Keys {
		st.keys[k] = true
	}
	return &Handler{next: next, st: st}
}

// Enabled implements slog.Handler.
func (h *Handler) Enabled(ctx context.Context, l slog.Level) bool { return h.next.Enabled(ctx, l) }

// WithAttrs implements slog.Handler.
func (h *Handler) WithAttrs(as []slog.Attr) slog.Handler {
	var b strings.Builder
	b.WriteString(h.bound)
	for _, a := range as {
		h.st.appendKey(&b, a)
	}
	return &Handler{next: h.next.WithAttrs(as), st: h.st, bound: b.String()}
}

// WithGroup implements slog.Handler.
func (h *Handler) WithGroup(name string) slog.Handler {
	return &Handler{next: h.next.WithGroup(name), st: h.st, bound: h.bound}
}

// appendKey adds a's key attributes (a itself, or those inside a group) to
// b as "\x00key=value".
func (st *state) appendKey(b *strings.Builder, a slog.Attr) {
	v := a.Value.Resolve()
	if v.Kind() == slog.KindGroup {
		for _, g := range v.Group() {
			st.appendKey(b, g)
		}
		return
	}
	if st.keys[a.Key] {
		b.WriteByte(0)
		b.WriteString(a.Key)
		b.WriteByte('=')
		b.WriteString(v.String())
	}
}

// unlimitedKey marks a context whose records pass unlimited.
type unlimitedKey struct{}

// Unlimited returns ctx marked so that the records logged with it (Logger.Log,
// Logger.WarnContext, ...) pass every Handler unlimited: for lines that
// limit themselves and carry a count since their previous line, which
// dropping lines in between would make wrong.
func Unlimited(ctx context.Context) context.Context {
	return context.WithValue(ctx, unlimitedKey{}, true)
}

// Handle implements slog.Handler: it logs r unless it repeats a record
// logged less than Window ago.
func (h *Handler) Handle(ctx context.Context, r slog.Record) error {
	st := h.st
	if r.Level < st.opts.MinLevel.Level() || ctx.Value(unlimitedKey{}) != nil {
		return h.next.Handle(ctx, r)
	}
	var b strings.Builder
	b.WriteString(r.Level.String())
	b.WriteByte(0)
	b.WriteString(r.Message)
	b.WriteString(h.bound)
	r.Attrs(func(a slog.Attr) bool {
		st.appendKey(&b, a)
		return true
	})
	key := b.String()

	st.mu.Lock()
	if e := st.entries[key]; e != nil {
		e.suppressed++
		e.last, e.h = r.Clone(), h.next
		st.mu.Unlock()
		return nil
	}
	if len(st.entries) < st.opts.MaxKeys {
		e := &entry{}
		e.timer = time.AfterFunc(st.opts.Window, func() { st.endWindow(key, e) })
		st.entries[key] = e
	}
	st.mu.Unlock()
	return h.next.Handle(ctx, r)
}

// endWindow ends e's window: a kind with no repeats is forgotten; else its
// last record is logged with suppressed=N and a new window opens.
func (st *state) endWindow(key string, e *entry) {
	st.mu.Lock()
	if st.entries[key] != e {
		st.mu.Unlock() // flushed meanwhile
		return
	}
	if e.suppressed == 0 {
		delete(st.entries, key)
		st.mu.Unlock()
		return
	}
	r, h, n := e.last, e.h, e.suppressed
	e.suppressed, e.last, e.h = 0, slog.Record{}, nil
	e.timer = time.AfterFunc(st.opts.Window, func() { st.endWindow(key, e) })
	st.mu.Unlock()
	emit(h, r, n)
}

// emit logs r through h with suppressed=n.
func emit(h slog.Handler, r slog.Record, n int) {
	r.AddAttrs(slog.Int("suppressed", n))
	_ = h.Handle(context.Background(), r)
}

// Flush ends every window now: the kinds with dropped repeats are logged
// with their counts, and every kind is forgotten. Call it before the
// process exits so that no count is lost.
func (h *Handler) Flush() {
	st := h.st
	st.mu.Lock()
	var pending []*entry
	for k, e := range st.entries {
		e.timer.Stop()
		delete(st.entries, k)
		if e.suppressed > 0 {
			pending = append(pending, e)
		}
	}
	st.mu.Unlock()
	for _, e := range pending {
		emit(e.h, e.last, e.suppressed)
	}
}
