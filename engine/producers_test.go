package engine

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/api/batch"
	"github.com/seedqueue/sq/internal/testutil"
	"github.com/seedqueue/sq/ring"
	"github.com/seedqueue/sq/segment"
)

// idemBatch builds a batch of n records of producer pid at epoch and base
// sequence seq (CRC fixed), values "<tag>-<i>".
func idemBatch(t testing.TB, pid int64, epoch int16, seq int32, n int, tag string) []byte {
	t.Helper()
	var b batch.Builder
	for i := range n {
		b.Add(nil, []byte(fmt.Sprintf("%s-%d", tag, i)), nil, 1000)
	}
	out, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	le := binary.LittleEndian
	le.PutUint64(out[hdrProducerID:], uint64(pid))
	le.PutUint16(out[hdrProducerEpoch:], uint16(epoch))
	le.PutUint32(out[hdrBaseSequence:], uint32(seq))
	le.PutUint32(out[17:], batch.Checksum(out))
	if _, err := batch.Validate(out, batch.Limits{}); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestCheckSequence: the KIP-98 rules against a producer's state, with
// and without state, across epochs and at the sequence wrap.
func TestCheckSequence(t *testing.T) {
	// State: epoch 3, batches [0..4] [5..9] at offsets 100 and 105.
	state := func() *producerView {
		return &producerView{known: true, epoch: 3, batches: []viewBatch{
			{producerBatch: producerBatch{firstSeq: 0, lastSeq: 4, epoch: 3, baseOffset: 100, count: 5}},
			{producerBatch: producerBatch{firstSeq: 5, lastSeq: 9, epoch: 3, baseOffset: 105, count: 5}},
		}}
	}
	wrapped := &producerView{known: true, epoch: 0, batches: []viewBatch{
		{producerBatch: producerBatch{firstSeq: math.MaxInt32 - 1, lastSeq: math.MaxInt32, epoch: 0, count: 2}},
	}}
	cases := []struct {
		name  string
		v     *producerView
		h     producerHeader
		dup   int
		code  api.Code
		valid bool
	}{
		{"unknown producer at seq 0", &producerView{}, producerHeader{id: 7, epoch: 0, seq: 0, count: 3}, -1, 0, true},
		{"unknown producer at seq 5", &producerView{}, producerHeader{id: 7, epoch: 0, seq: 5, count: 3}, -1, api.CodeUnknownProducerID, false},
		{"next in order", state(), producerHeader{id: 7, epoch: 3, seq: 10, count: 2}, -1, 0, true},
		{"gap", state(), producerHeader{id: 7, epoch: 3, seq: 11, count: 2}, -1, api.CodeOutOfOrderSequence, false},
		{"behind, not a known batch", state(), producerHeader{id: 7, epoch: 3, seq: 3, count: 2}, -1, api.CodeOutOfOrderSequence, false},
		{"duplicate of the last", state(), producerHeader{id: 7, epoch: 3, seq: 5, count: 5}, 1, 0, true},
		{"duplicate of an older one", state(), producerHeader{id: 7, epoch: 3, seq: 0, count: 5}, 0, 0, true},
		{"same first seq, other length", state(), producerHeader{id: 7, epoch: 3, seq: 5, count: 4}, -1, api.CodeOutOfOrderSequence, false},
		{"older epoch", state(), producerHeader{id: 7, epoch: 2, seq: 10, count: 1}, -1, api.CodeInvalidProducerEpoch, false},
		{"older epoch duplicate", state(), producerHeader{id: 7, epoch: 2, seq: 5, count: 5}, -1, api.CodeInvalidProducerEpoch, false},
		{"newer epoch at 0", state(), producerHeader{id: 7, epoch: 4, seq: 0, count: 1}, -1, 0, true},
		{"newer epoch not at 0", state(), producerHeader{id: 7, epoch: 4, seq: 10, count: 1}, -1, api.CodeOutOfOrderSequence, false},
		{"negative sequence", state(), producerHeader{id: 7, epoch: 3, seq: -1, count: 1}, -1, api.CodeInvalidRequest, false},
		{"negative epoch", state(), producerHeader{id: 7, epoch: -1, seq: 10, count: 1}, -1, api.CodeInvalidRequest, false},
		{"wraps to 0", wrapped, producerHeader{id: 7, epoch: 0, seq: 0, count: 1}, -1, 0, true},
		{"no wrap is a gap", wrapped, producerHeader{id: 7, epoch: 0, seq: 1, count: 1}, -1, api.CodeOutOfOrderSequence, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dup, err := checkSequence(tc.v, tc.h)
			if dup != tc.dup {
				t.Errorf("dup = %d, want %d", dup, tc.dup)
			}
			switch {
			case tc.valid && err != nil:
				t.Errorf("refused: %v", err)
			case !tc.valid && (err == nil || err.Code != tc.code):
				t.Errorf("err = %v, want %s", err, tc.code)
			}
		})
	}
	if got := lastSeqOf(math.MaxInt32, 3); got != 1 {
		t.Errorf("lastSeqOf(MaxInt32, 3) = %d, want 1", got)
	}
}

// TestIdempotentAppend: through Append, a retry of any of the last
// batches is answered with its original offsets and not written, gaps
// and replays of older batches are OUT_OF_ORDER_SEQUENCE, an old epoch is
// fenced, an unknown producer must start at 0, and batches without a
// producer id are untouched.
func TestIdempotentAppend(t *testing.T) {
	e := openTest(t, testOptions(t.TempDir()))
	if _, err := e.CreateTopic("t", 1, TopicConfig{}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	app := func(b []byte) (AppendResult, error) { return e.Append(ctx, "t", 0, b) }
	mustApp := func(b []byte, wantBase uint64) {
		t.Helper()
		r, err := app(b)
		if err != nil || r.BaseOffset != wantBase {
			t.Fatalf("append: %+v, %v; want base %d", r, err, wantBase)
		}
	}
	mustApp(mkBatch(t, "plain"), 0)
	mustApp(idemBatch(t, 1, 0, 0, 3, "a"), 1) // 1..3
	mustApp(idemBatch(t, 1, 0, 3, 2, "b"), 4) // 4..5
	mustApp(mkBatch(t, "plain"), 6)
	mustApp(idemBatch(t, 2, 0, 0, 1, "c"), 7)
	leo := partInfo(t, e, "t").LogEndOffset
	// Retries: original offsets, nothing written.
	for _, c := range []struct {
		seq  int32
		n    int
		base uint64
	}{{0, 3, 1}, {3, 2, 4}} {
		r, err := app(idemBatch(t, 1, 0, c.seq, c.n, "retry"))
		if err != nil || r.BaseOffset != c.base || r.RecordCount != uint32(c.n) {
			t.Fatalf("retry of seq %d: %+v, %v; want base %d", c.seq, r, err, c.base)
		}
	}
	if got := partInfo(t, e, "t").LogEndOffset; got != leo {
		t.Fatalf("log end %d after duplicates, want %d", got, leo)
	}
	for name, c := range map[string]struct {
		b    []byte
		code api.Code
	}{
		"gap":             {idemBatch(t, 1, 0, 6, 1, "x"), api.CodeOutOfOrderSequence},
		"overlap":         {idemBatch(t, 1, 0, 4, 1, "x"), api.CodeOutOfOrderSequence},
		"unknown nonzero": {idemBatch(t, 9, 0, 4, 1, "x"), api.CodeUnknownProducerID},
		"new epoch not 0": {idemBatch(t, 1, 1, 5, 1, "x"), api.CodeOutOfOrderSequence},
	} {
		if _, err := app(c.b); codeOf(err) != c.code {
			t.Errorf("%s: %v, want %s", name, err, c.code)
		}
	}
	// A new epoch fences the old one.
	mustApp(idemBatch(t, 1, 1, 0, 1, "epoch1"), leo)
	if _, err := app(idemBatch(t, 1, 0, 5, 1, "zombie")); codeOf(err) != api.CodeInvalidProducerEpoch {
		t.Fatalf("old epoch after a new one: %v, want INVALID_PRODUCER_EPOCH", err)
	}
	mustApp(idemBatch(t, 1, 1, 1, 1, "epoch1"), leo+1)
	got := readAll(t, e, "t", 0)
	want := "plain a-0 a-1 a-2 b-0 b-1 plain c-0 epoch1-0 epoch1-0"
	if strings.Join(got, " ") != want {
		t.Fatalf("log holds %q, want %q", got, want)
	}
}

// TestIdempotentChainAndAsync: a refused batch fails the batches chained
// behind it (AppendAsync's after), which are not written either; and a
// duplicate queued right behind its original gets the original's offsets.
func TestIdempotentChainAndAsync(t *testing.T) {
	e := openTest(t, testOptions(t.TempDir()))
	if _, err := e.CreateTopic("t", 1, TopicConfig{}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	a, err := e.AppendAsync(ctx, "t", 0, idemBatch(t, 5, 0, 0, 2, "a"), nil)
	if err != nil {
		t.Fatal(err)
	}
	dup, err := e.AppendAsync(ctx, "t", 0, idemBatch(t, 5, 0, 0, 2, "a"), nil)
	if err != nil {
		t.Fatal(err)
	}
	bad, err := e.AppendAsync(ctx, "t", 0, idemBatch(t, 5, 0, 7, 1, "gap"), nil)
	if err != nil {
		t.Fatal(err)
	}
	behind, err := e.AppendAsync(ctx, "t", 0, mkBatch(t, "behind"), bad)
	if err != nil {
		t.Fatal(err)
	}
	ra, err := a.Wait(ctx)
	if err != nil || ra.BaseOffset != 0 {
		t.Fatalf("original: %+v, %v", ra, err)
	}
	if rd, err := dup.Wait(ctx); err != nil || rd.BaseOffset != 0 || rd.RecordCount != 2 {
		t.Fatalf("duplicate: %+v, %v; want base 0, 2 records", rd, err)
	}
	if _, err := bad.Wait(ctx); codeOf(err) != api.CodeOutOfOrderSequence {
		t.Fatalf("gap: %v", err)
	}
	if _, err := behind.Wait(ctx); codeOf(err) != api.CodeOutOfOrderSequence {
		t.Fatalf("chained behind the gap: %v, want its error", err)
	}
	if got := readAll(t, e, "t", 0); strings.Join(got, " ") != "a-0 a-1" {
		t.Fatalf("log holds %q", got)
	}
}

// testPartition opens a partition in dir without an append goroutine, so
// that a test can call commit with the requests of one group commit.
func testPartition(t *testing.T, dir string) *partition {
	t.Helper()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	lg, err := segment.Open(dir, ring.OS, ring.NewPortable(), segment.Options{SegmentBytes: 64 << 10, MaxBatchBytes: 32 << 10, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	p := newPartition("t", 0, dir, nil, SyncPolicy{Mode: SyncNone}, time.Now, logger, ring.OS, nil, nil)
	p.log = lg
	p.prod.Store(openProducers(ring.OS, dir, lg, logger))
	t.Cleanup(func() {
		p.snapshotProducers(snapClose)
		lg.Close()
	})
	return p
}

func newReq(b []byte) *appendReq {
	h, _ := batch.ParseHeader(b)
	return &appendReq{batch: b, count: h.RecordCount, done: make(chan struct{})}
}

// TestDuplicatesInOneCommit: in one group commit, a retry of a batch
// queued earlier in the same commit is not written and gets the
// original's offsets; the next batch in order is accepted; a gap fails
// alone; a batch chained behind the gap fails with it, unchecked.
func TestDuplicatesInOneCommit(t *testing.T) {
	p := testPartition(t, t.TempDir())
	first := newReq(idemBatch(t, 3, 0, 0, 2, "a"))
	dup := newReq(idemBatch(t, 3, 0, 0, 2, "a"))
	plain := newReq(mkBatch(t, "plain"))
	next := newReq(idemBatch(t, 3, 0, 2, 1, "b"))
	dupNext := newReq(idemBatch(t, 3, 0, 2, 1, "b"))
	gap := newReq(idemBatch(t, 3, 0, 9, 1, "gap"))
	chained := newReq(idemBatch(t, 3, 0, 3, 1, "c"))
	chained.after = gap
	other := newReq(idemBatch(t, 4, 2, 0, 1, "other"))
	p.commit([]*appendReq{first, dup, plain, next, dupNext, gap, chained, other})
	for _, c := range []struct {
		name string
		r    *appendReq
		base uint64
		code api.Code
	}{
		{"first", first, 0, 0}, {"dup", dup, 0, 0}, {"plain", plain, 2, 0}, {"next", next, 3, 0},
		{"dupNext", dupNext, 3, 0}, {"gap", gap, 0, api.CodeOutOfOrderSequence},
		{"chained", chained, 0, api.CodeOutOfOrderSequence}, {"other", other, 4, 0},
	} {
		select {
		case <-c.r.done:
		default:
			t.Fatalf("%s: not answered", c.name)
		}
		if codeOf(c.r.err) != c.code || c.code == 0 && c.r.res.BaseOffset != c.base {
			t.Errorf("%s: %+v, %v; want base %d, code %s", c.name, c.r.res, c.r.err, c.base, c.code)
		}
	}
	if leo := p.log.NextOffset(); leo != 5 {
		t.Fatalf("log end %d, want 5 (a-0 a-1 plain b-0 other-0)", leo)
	}
	// The state kept the batches: a later retry of the first is a duplicate.
	late := newReq(idemBatch(t, 3, 0, 0, 2, "a"))
	p.commit([]*appendReq{late})
	if late.err != nil || late.res.BaseOffset != 0 || p.log.NextOffset() != 5 {
		t.Fatalf("late retry: %+v, %v, log end %d", late.res, late.err, p.log.NextOffset())
	}
}

// TestProducerStateBound: past the bound, the least recently used
// producer is forgotten; using a producer keeps it.
func TestProducerStateBound(t *testing.T) {
	s := newProducerState(ring.OS, t.TempDir(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	s.max = 3
	rec := func(id int64, seq int32) {
		s.record(id, producerBatch{firstSeq: seq, lastSeq: seq, count: 1, baseOffset: uint64(id*100) + uint64(seq)})
	}
	rec(1, 0)
	rec(2, 0)
	rec(3, 0)
	rec(1, 1) // 1 is now the most recently used; 2 the least
	rec(4, 0)
	if _, ok := s.byID[2]; ok || len(s.byID) != 3 {
		t.Fatalf("after a 4th producer: %d ids, 2 kept %v; want 2 evicted", len(s.byID), ok)
	}
	for _, id := range []int64{1, 3, 4} {
		if s.byID[id] == nil {
			t.Fatalf("producer %d evicted", id)
		}
	}
	var order []int64
	for e := s.head; e != nil; e = e.next {
		order = append(order, e.id)
	}
	if fmt.Sprint(order) != "[3 1 4]" {
		t.Fatalf("LRU order %v, want [3 1 4]", order)
	}
	// Only the last producerBatchesKept batches are kept.
	for seq := int32(2); seq < 10; seq++ {
		rec(1, seq)
	}
	if e := s.byID[1]; e.n != producerBatchesKept || e.batches[0].firstSeq != 5 || e.last().firstSeq != 9 {
		t.Fatalf("producer 1 keeps %d batches %v", e.n, e.batches)
	}
	// The snapshot keeps the order and the batches.
	back := newProducerState(ring.OS, t.TempDir(), s.logger)
	off, err := back.decode(s.encode(77))
	if err != nil || off != 77 {
		t.Fatalf("decode: %d, %v", off, err)
	}
	if string(back.encode(77)) != string(s.encode(77)) {
		t.Fatal("snapshot does not round-trip")
	}
}

// TestProducerStateRestart: the state survives a restart through the
// snapshot plus the batches after it, without a snapshot (the whole log
// is scanned), with a corrupt one, and with one ahead of the log.
func TestProducerStateRestart(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name string
		// tamper changes the partition directory while the engine is
		// closed; old is the snapshot written before the last appends.
		tamper func(t *testing.T, path string, old []byte)
		log    string // expected log line, "" none
	}{
		{"clean close", func(*testing.T, string, []byte) {}, ""},
		{"snapshot plus tail", func(t *testing.T, path string, old []byte) { writeFile(t, path, old) }, ""},
		{"snapshot missing", func(t *testing.T, path string, _ []byte) {
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
		}, ""},
		{"snapshot corrupt", func(t *testing.T, path string, old []byte) {
			b := bytes.Clone(old)
			b[len(b)/2] ^= 0x40
			writeFile(t, path, b)
		}, "producer-state snapshot corrupt"},
		{"snapshot ahead of the log", func(t *testing.T, path string, _ []byte) {
			s := newProducerState(ring.OS, filepath.Dir(path), nil)
			s.record(99, producerBatch{count: 1})
			writeFile(t, path, s.encode(1_000_000))
		}, "ahead of the log end"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			var logs syncBuffer
			opts := testOptions(dir)
			opts.Logger = slog.New(slog.NewTextHandler(&logs, nil))
			e, err := Open(opts)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := e.CreateTopic("t", 1, TopicConfig{}); err != nil {
				t.Fatal(err)
			}
			for i := range 3 {
				if _, err := e.Append(ctx, "t", 0, idemBatch(t, 1, 0, int32(2*i), 2, "a")); err != nil {
					t.Fatal(err)
				}
			}
			if err := e.Close(); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, "topics", "t", "0", producerStateName)
			old, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("no snapshot after close: %v", err)
			}
			e, err = Open(opts)
			if err != nil {
				t.Fatal(err)
			}
			// After the snapshot: producer 1 goes on, producer 2 starts.
			if _, err := e.Append(ctx, "t", 0, idemBatch(t, 1, 0, 6, 2, "b")); err != nil {
				t.Fatal(err)
			}
			if _, err := e.Append(ctx, "t", 0, idemBatch(t, 2, 4, 0, 1, "c")); err != nil {
				t.Fatal(err)
			}
			if err := e.Close(); err != nil {
				t.Fatal(err)
			}
			tc.tamper(t, path, old)
			e = openTest(t, opts)
			for _, c := range []struct {
				pid   int64
				epoch int16
				seq   int32
				n     int
				base  uint64
			}{{1, 0, 2, 2, 2}, {1, 0, 6, 2, 6}, {2, 4, 0, 1, 8}} {
				r, err := e.Append(ctx, "t", 0, idemBatch(t, c.pid, c.epoch, c.seq, c.n, "retry"))
				if err != nil || r.BaseOffset != c.base {
					t.Fatalf("retry of producer %d seq %d after restart: %+v, %v; want base %d", c.pid, c.seq, r, err, c.base)
				}
			}
			if _, err := e.Append(ctx, "t", 0, idemBatch(t, 1, 0, 9, 1, "gap")); codeOf(err) != api.CodeOutOfOrderSequence {
				t.Fatalf("gap after restart: %v", err)
			}
			if r, err := e.Append(ctx, "t", 0, idemBatch(t, 1, 0, 8, 1, "d")); err != nil || r.BaseOffset != 9 {
				t.Fatalf("next after restart: %+v, %v", r, err)
			}
			if _, err := e.Append(ctx, "t", 0, idemBatch(t, 99, 0, 1, 1, "ghost")); codeOf(err) != api.CodeUnknownProducerID {
				t.Fatalf("producer only in a discarded snapshot: %v, want UNKNOWN_PRODUCER_ID", err)
			}
			if tc.log != "" && !strings.Contains(logs.String(), tc.log) {
				t.Fatalf("no log line %q in:\n%s", tc.log, logs.String())
			}
		})
	}
}

// TestObserveProducers: batches appended as a follower (observeProducers,
// several batches in one buffer) give the state the leader has: a retry
// is a duplicate, the next sequence is accepted.
func TestObserveProducers(t *testing.T) {
	p := testPartition(t, t.TempDir())
	a := idemBatch(t, 8, 1, 0, 2, "a")
	b := idemBatch(t, 8, 1, 2, 3, "b")
	plain := mkBatch(t, "plain")
	if _, err := p.log.Append([][]byte{a, plain, b}); err != nil { // stamps offsets 0, 2, 3
		t.Fatal(err)
	}
	p.observeProducers([][]byte{a, append(bytes.Clone(plain), b...)})
	retry := newReq(idemBatch(t, 8, 1, 2, 3, "b"))
	next := newReq(idemBatch(t, 8, 1, 5, 1, "c"))
	p.commit([]*appendReq{retry, next})
	if retry.err != nil || retry.res.BaseOffset != 3 || next.err != nil || next.res.BaseOffset != 6 {
		t.Fatalf("retry %+v %v; next %+v %v", retry.res, retry.err, next.res, next.err)
	}
}

func writeFile(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestInitProducerID: ids are unique and epoch 0; the end of the block is
// persisted before its first id is handed out, so a restart continues
// after the block (never reusing an id); a corrupt file refuses ids.
func TestInitProducerID(t *testing.T) {
	dir := t.TempDir()
	opts := testOptions(dir)
	e, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	seen := map[int64]bool{}
	ids := make(chan int64, 2*ProducerIDBlock)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range ProducerIDBlock / 2 {
				id, epoch, err := e.InitProducerID(ctx)
				if err != nil || epoch != 0 {
					t.Errorf("InitProducerID: %d, %d, %v", id, epoch, err)
					return
				}
				ids <- id
			}
		})
	}
	wg.Wait()
	close(ids)
	for id := range ids {
		if seen[id] || id < SingleNodeProducerIDBase || id >= SingleNodeProducerIDBase+2*ProducerIDBlock {
			t.Fatalf("id %d repeated or outside the first two blocks", id)
		}
		seen[id] = true
	}
	path := filepath.Join(dir, "meta", producerIDsName)
	if b, err := os.ReadFile(path); err != nil || string(b) != fmt.Sprintf("%d\n", SingleNodeProducerIDBase+2*ProducerIDBlock) {
		t.Fatalf("%s holds %q, %v; want the end of the second block", path, b, err)
	}
	// One more id starts a third block; a restart (crash or not) skips
	// what is left of it.
	if id, _, _ := e.InitProducerID(ctx); id != SingleNodeProducerIDBase+2*ProducerIDBlock {
		t.Fatalf("first id of the third block: %d", id)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.InitProducerID(ctx); codeOf(err) != api.CodeShuttingDown {
		t.Fatalf("after close: %v", err)
	}
	e = openTest(t, opts)
	if id, _, err := e.InitProducerID(ctx); err != nil || id != SingleNodeProducerIDBase+3*ProducerIDBlock {
		t.Fatalf("first id after restart: %d, %v; want %d", id, err, SingleNodeProducerIDBase+3*ProducerIDBlock)
	}
	e.Close()
	writeFile(t, path, []byte("garbage\n"))
	e = openTest(t, opts)
	if _, _, err := e.InitProducerID(ctx); codeOf(err) != api.CodeStorageError || !strings.Contains(err.Error(), "corrupt") {
		t.Fatalf("corrupt file: %v, want STORAGE_ERROR", err)
	}
}

// TestReloadProducers: after a truncation the state is rebuilt without
// a snapshot that covers more than the log, and a snapshot at the new
// log end replaces it; an empty partition writes no snapshot.
func TestReloadProducers(t *testing.T) {
	dir := t.TempDir()
	p := testPartition(t, dir)
	path := filepath.Join(dir, producerStateName)
	p.snapshotProducers(snapClose)
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("empty partition wrote a snapshot: %v", err)
	}
	p.commit([]*appendReq{newReq(idemBatch(t, 1, 0, 0, 2, "a")), newReq(idemBatch(t, 1, 0, 2, 2, "b"))})
	// A snapshot from a longer, divergent log (as left by a truncation).
	s := newProducerState(ring.OS, dir, nil)
	s.record(99, producerBatch{count: 1})
	writeFile(t, path, s.encode(10))
	p.reloadProducers()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	back := newProducerState(ring.OS, dir, nil)
	off, err := back.decode(b)
	if err != nil || off != 4 || back.byID[99] != nil || back.byID[1] == nil || back.byID[1].last().baseOffset != 2 {
		t.Fatalf("snapshot after reload: offset %d, %v, producers %v", off, err, back.byID)
	}
	ghost := newReq(idemBatch(t, 99, 0, 1, 1, "ghost"))
	retry := newReq(idemBatch(t, 1, 0, 2, 2, "b"))
	p.commit([]*appendReq{ghost, retry})
	if codeOf(ghost.err) != api.CodeUnknownProducerID || retry.err != nil || retry.res.BaseOffset != 2 {
		t.Fatalf("ghost %v; retry %+v %v", ghost.err, retry.res, retry.err)
	}
}

// idemAsync starts an append of an idempotent batch on n with acks and
// returns a channel that delivers its outcome.
func idemAsync(t *testing.T, n *replNode, acks Acks, b []byte) <-chan appendOutcome {
	t.Helper()
	ctx := WithAcks(context.Background(), acks)
	out := make(chan appendOutcome, 1)
	pd, err := n.e.AppendAsync(ctx, replTopic, 0, b, nil)
	if err != nil {
		out <- appendOutcome{err: err}
		return out
	}
	go func() {
		res, err := pd.Wait(ctx)
		out <- appendOutcome{res, err}
	}()
	return out
}

// TestIdempotentReplicated: on a replicated partition a follower refuses
// idempotent batches with NOT_LEADER (unchecked); on the leader an
// acks-all duplicate is acknowledged with the original's offsets once
// the high watermark passes the original; the follower builds the same
// state from what it replicates, so after a failover the new leader
// answers a retry with the original offsets; a truncation drops the state
// of the removed batches.
func TestIdempotentReplicated(t *testing.T) {
	a, b, _ := leaderAndFollower(t, "every-batch", "every-batch")
	if o := await(t, idemAsync(t, b, AcksAll, idemBatch(t, 1, 0, 0, 2, "x"))); codeOf(o.err) != api.CodeNotLeader {
		t.Fatalf("idempotent append on the follower: %v, want NOT_LEADER", o.err)
	}
	orig := idemAsync(t, a, AcksAll, idemBatch(t, 1, 0, 0, 2, "a"))
	testutil.Eventually(t, 10*time.Second, "the leader's log end at 2", func() bool { return a.state(t).LogEndOffset == 2 })
	dup := idemAsync(t, a, AcksAll, idemBatch(t, 1, 0, 0, 2, "a"))
	pump(t, a, b, 1) // copies the batch
	if !pendingOutcome(orig) || !pendingOutcome(dup) {
		t.Fatal("acknowledged before the high watermark passed the batch")
	}
	pump(t, a, b, 1) // reports the follower's durable end
	for name, ch := range map[string]<-chan appendOutcome{"original": orig, "duplicate": dup} {
		o := await(t, ch)
		if o.err != nil || o.res.BaseOffset != 0 || o.res.RecordCount != 2 || o.res.Durability != DurabilityReplicated || o.res.Replicas != 2 {
			t.Fatalf("%s: %+v, %v; want offset 0, 2 records, replicated by 2", name, o.res, o.err)
		}
	}
	if st := a.state(t); st.LogEndOffset != 2 {
		t.Fatalf("leader log end %d after a duplicate, want 2", st.LogEndOffset)
	}
	// A batch only the old leader gets: it is the divergent suffix.
	if o := await(t, idemAsync(t, a, AcksLeader, idemBatch(t, 2, 0, 0, 1, "lost"))); o.err != nil || o.res.BaseOffset != 2 {
		t.Fatalf("acks-leader append on the old leader: %+v, %v", o.res, o.err)
	}
	// Failover to b at epoch 2.
	if err := b.e.BecomeLeader(replTopic, replTopicID, 0, 2, []string{"a", "b"}, []string{"b"}, 1); err != nil {
		t.Fatal(err)
	}
	if err := a.e.BecomeFollower(replTopic, replTopicID, 0, 2, "b"); err != nil {
		t.Fatal(err)
	}
	if o := await(t, idemAsync(t, b, AcksLeader, idemBatch(t, 1, 0, 0, 2, "a"))); o.err != nil || o.res.BaseOffset != 0 {
		t.Fatalf("retry on the new leader: %+v, %v; want the original offset 0", o.res, o.err)
	}
	if o := await(t, idemAsync(t, b, AcksLeader, idemBatch(t, 1, 0, 2, 1, "b"))); o.err != nil || o.res.BaseOffset != 2 {
		t.Fatalf("next batch on the new leader: %+v, %v; want offset 2", o.res, o.err)
	}
	// The old leader cuts its divergent batch: producer 2's state goes
	// with it, producer 1's stays.
	if err := a.e.TruncateTo(replTopic, replTopicID, 0, 2); err != nil {
		t.Fatal(err)
	}
	_, p, err := a.e.partition(replTopic, 0)
	if err != nil {
		t.Fatal(err)
	}
	s := p.prod.Load()
	s.mu.Lock()
	p2, p1 := s.byID[2], s.byID[1]
	s.mu.Unlock()
	if p2 != nil || p1 == nil || p1.last().baseOffset != 0 {
		t.Fatalf("after the truncation: producer 2 %v, producer 1 %v; want 2 gone, 1 at offset 0", p2, p1)
	}
}

// TestPlainBatchesCostNothing: a commit without idempotent batches goes
// through the producer check without an allocation, a lock or a change.
func TestPlainBatchesCostNothing(t *testing.T) {
	p := testPartition(t, t.TempDir())
	pending := []*appendReq{newReq(mkBatch(t, "a")), newReq(mkBatch(t, "b", "c")), newReq(mkBatch(t, "d"))}
	allocs := testing.AllocsPerRun(100, func() {
		out, pc := p.checkProducers(pending)
		if pc != nil || len(out) != len(pending) || out[0] != pending[0] {
			t.Fatal("plain batches changed by the producer check")
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per commit of plain batches, want 0", allocs)
	}
	s := p.prod.Load()
	if !s.mu.TryLock() {
		t.Fatal("producer state left locked")
	}
	s.mu.Unlock()
	if len(s.byID) != 0 {
		t.Fatalf("producer state holds %d ids", len(s.byID))
	}
}
