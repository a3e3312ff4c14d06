package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/api/batch"
	"github.com/seedqueue/sq/ring"
)

func testOptions(dir string) Options {
	return Options{
		DataDir:       dir,
		SegmentBytes:  64 << 10,
		MaxBatchBytes: 32 << 10,
		PreallocBytes: 16 << 10,
		Logger:        slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
}

func openTest(t *testing.T, opts Options) *Engine {
	t.Helper()
	e, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

func mkBatch(t testing.TB, values ...string) []byte {
	t.Helper()
	var b batch.Builder
	for _, v := range values {
		b.Add(nil, []byte(v), nil, 1)
	}
	out, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// walkRecords fetches partition p of topic from offset from up to the high
// watermark and calls fn with each record at or after from, in offset
// order (records of a first batch that starts before from are skipped).
func walkRecords(t *testing.T, e *Engine, topic string, p int, from uint64, fn func(rec *batch.Record)) {
	t.Helper()
	off := from
	for {
		r, err := e.Fetch(context.Background(), topic, p, off, 1<<20, 0)
		if err != nil {
			t.Fatalf("Fetch(%s/%d, %d): %v", topic, p, off, err)
		}
		if len(r.Bufs) == 0 {
			r.Release()
			return
		}
		for _, buf := range r.Bufs {
			for len(buf) > 0 {
				b, rest, _, err := batch.Split(buf, 0)
				if err != nil {
					t.Fatal(err)
				}
				buf = rest
				it, err := batch.NewIter(b)
				if err != nil {
					t.Fatal(err)
				}
				for it.Next() {
					if rec := it.Record(); rec.Offset >= off {
						fn(rec)
						off = rec.Offset + 1
					}
				}
				if err := it.Err(); err != nil {
					t.Fatal(err)
				}
			}
		}
		r.Release()
	}
}

// readAll fetches every record of a partition from offset 0 and checks
// that offsets are dense from 0.
func readAll(t *testing.T, e *Engine, topic string, p int) []string {
	t.Helper()
	var out []string
	walkRecords(t, e, topic, p, 0, func(rec *batch.Record) {
		if rec.Offset != uint64(len(out)) {
			t.Fatalf("offset %d, want %d", rec.Offset, len(out))
		}
		out = append(out, string(rec.Value))
	})
	return out
}

func codeOf(err error) api.Code {
	var e *api.Error
	if errors.As(err, &e) {
		return e.Code
	}
	return api.CodeNone
}

func TestTopicNames(t *testing.T) {
	cases := []struct {
		name string
		ok   bool
	}{
		{"orders", true}, {"a.b_c-D9", true}, {strings.Repeat("x", 249), true},
		{"", false}, {strings.Repeat("x", 250), false}, {".", false}, {"..", false},
		{"a/b", false}, {"__internal", false}, {"héllo", false}, {"a b", false},
	}
	e := openTest(t, testOptions(t.TempDir()))
	for _, tc := range cases {
		_, err := e.CreateTopic(tc.name, 1, TopicConfig{})
		if tc.ok != (err == nil) {
			t.Errorf("CreateTopic(%q) = %v, want ok=%v", tc.name, err, tc.ok)
		}
		if !tc.ok && codeOf(err) != api.CodeInvalidTopicName {
			t.Errorf("CreateTopic(%q) code %v, want INVALID_TOPIC_NAME", tc.name, codeOf(err))
		}
	}
}

func TestCreateTopicErrors(t *testing.T) {
	e := openTest(t, testOptions(t.TempDir()))
	if _, err := e.CreateTopic("t", 2, TopicConfig{}); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name  string
		parts int
		cfg   TopicConfig
		code  api.Code
	}{
		{"t", 2, TopicConfig{}, api.CodeTopicExists},
		{"u", 0, TopicConfig{}, api.CodeInvalidConfig},
		{"u", -1, TopicConfig{}, api.CodeInvalidConfig},
		{"u", 1, TopicConfig{SyncPolicy: "sometimes"}, api.CodeInvalidConfig},
		{"u", 1, TopicConfig{RetentionMs: -2}, api.CodeInvalidConfig},
		{"u", 1, TopicConfig{RetentionBytes: -5}, api.CodeInvalidConfig},
		{"u", 1, TopicConfig{MaxRecordBytes: 1 << 30}, api.CodeInvalidConfig},
	}
	for _, tc := range cases {
		if _, err := e.CreateTopic(tc.name, tc.parts, tc.cfg); codeOf(err) != tc.code {
			t.Errorf("CreateTopic(%q, %d, %+v) = %v, want %v", tc.name, tc.parts, tc.cfg, err, tc.code)
		}
	}
	if got := e.ListTopics(); len(got) != 1 || got[0].Name != "t" {
		t.Fatalf("topics after failed creates: %+v", got)
	}
}

func TestSyncPolicyParse(t *testing.T) {
	for in, want := range map[string]string{"every-batch": "every-batch", "none": "none", "100": "100ms", "5ms": "5ms"} {
		p, err := ParseSyncPolicy(in)
		if err != nil || p.String() != want {
			t.Errorf("ParseSyncPolicy(%q) = %v, %v; want %s", in, p, err, want)
		}
	}
	for _, bad := range []string{"", "0", "-1", "ms", "1s", "always", "100000000"} {
		if _, err := ParseSyncPolicy(bad); err == nil {
			t.Errorf("ParseSyncPolicy(%q) accepted", bad)
		}
	}
}

func TestAppendFetchRestart(t *testing.T) { forEachBackend(t, testAppendFetchRestart) }

func testAppendFetchRestart(t *testing.T, be ring.Backend) {
	for _, policy := range []string{"every-batch", "none", "5ms"} {
		t.Run(policy, func(t *testing.T) {
			dir := t.TempDir()
			opts := testOptions(dir)
			opts.Backend = be
			e := openTest(t, opts)
			if _, err := e.CreateTopic("t", 3, TopicConfig{SyncPolicy: policy}); err != nil {
				t.Fatal(err)
			}
			want := map[int][]string{}
			for i := 0; i < 300; i++ {
				p := i % 3
				v := fmt.Sprintf("v%d-%s", i, strings.Repeat("x", i%97))
				res, err := e.Append(context.Background(), "t", p, mkBatch(t, v))
				if err != nil {
					t.Fatal(err)
				}
				if res.BaseOffset != uint64(len(want[p])) {
					t.Fatalf("base offset %d, want %d", res.BaseOffset, len(want[p]))
				}
				wantDur := DurabilityWritten
				if policy == "every-batch" {
					wantDur = DurabilitySynced
				}
				if res.Durability != wantDur {
					t.Fatalf("durability %v, want %v", res.Durability, wantDur)
				}
				want[p] = append(want[p], v)
			}
			check := func(e *Engine) {
				for p := 0; p < 3; p++ {
					if got := readAll(t, e, "t", p); !equal(got, want[p]) {
						t.Fatalf("partition %d: %d records, want %d", p, len(got), len(want[p]))
					}
				}
				info, err := e.DescribeTopic("t")
				if err != nil {
					t.Fatal(err)
				}
				if info.Config.SyncPolicy != (mustPolicy(t, policy)).String() || info.Partitions[0].HighWatermark != 100 || info.Partitions[0].LogEndOffset != 100 {
					t.Fatalf("describe: %+v", info)
				}
			}
			check(e)
			if err := e.Close(); err != nil {
				t.Fatal(err)
			}
			e2 := openTest(t, opts)
			check(e2)
			res, err := e2.Append(context.Background(), "t", 0, mkBatch(t, "after", "restart"))
			if err != nil || res.BaseOffset != 100 {
				t.Fatalf("append after restart: %+v %v", res, err)
			}
		})
	}
}

func mustPolicy(t *testing.T, s string) SyncPolicy {
	p, err := ParseSyncPolicy(s)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestGroupCommit appends from many goroutines at once: every batch gets a
// distinct, contiguous offset range and the log holds them all.
func TestGroupCommit(t *testing.T) { forEachBackend(t, testGroupCommit) }

func testGroupCommit(t *testing.T, be ring.Backend) {
	opts := testOptions(t.TempDir())
	opts.Backend = be
	e := openTest(t, opts)
	if _, err := e.CreateTopic("t", 1, TopicConfig{}); err != nil {
		t.Fatal(err)
	}
	const writers, each = 8, 50
	var mu sync.Mutex
	seen := map[uint64]string{}
	var wg sync.WaitGroup
	for w := 0; w < writers; w++ {
		wg.Go(func() {
			for i := 0; i < each; i++ {
				v := fmt.Sprintf("w%d-%d", w, i)
				res, err := e.Append(context.Background(), "t", 0, mkBatch(t, v, v+"b"))
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				seen[res.BaseOffset] = v
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	got := readAll(t, e, "t", 0)
	if len(got) != writers*each*2 {
		t.Fatalf("read %d records, want %d", len(got), writers*each*2)
	}
	for off, v := range seen {
		if got[off] != v || got[off+1] != v+"b" {
			t.Fatalf("offset %d holds %q, acknowledged %q", off, got[off], v)
		}
	}
}

func TestAppendRejects(t *testing.T) {
	opts := testOptions(t.TempDir())
	opts.MaxRecordBytes = 100
	e := openTest(t, opts)
	if _, err := e.CreateTopic("t", 1, TopicConfig{}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	corrupt := mkBatch(t, "x")
	corrupt[len(corrupt)-1] ^= 1
	cases := []struct {
		name  string
		topic string
		part  int
		b     []byte
		code  api.Code
	}{
		{"unknown topic", "nope", 0, mkBatch(t, "x"), api.CodeUnknownTopic},
		{"bad name", "a/b", 0, mkBatch(t, "x"), api.CodeInvalidTopicName},
		{"unknown partition", "t", 1, mkBatch(t, "x"), api.CodeUnknownPartition},
		{"negative partition", "t", -1, mkBatch(t, "x"), api.CodeUnknownPartition},
		{"record too large", "t", 0, mkBatch(t, strings.Repeat("x", 101)), api.CodeMessageTooLarge},
		{"corrupt", "t", 0, corrupt, api.CodeCorruptBatch},
		{"garbage", "t", 0, []byte("hello"), api.CodeCorruptBatch},
	}
	for _, tc := range cases {
		if _, err := e.Append(ctx, tc.topic, tc.part, tc.b); codeOf(err) != tc.code {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.code)
		}
	}
	// An empty value is a valid record.
	if _, err := e.Append(ctx, "t", 0, mkBatch(t, "")); err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, e, "t", 0); len(got) != 1 || got[0] != "" {
		t.Fatalf("empty value round trip: %q", got)
	}
}

func TestFetchLongPoll(t *testing.T) {
	e := openTest(t, testOptions(t.TempDir()))
	if _, err := e.CreateTopic("t", 1, TopicConfig{}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// Nothing to read, no wait: empty at once.
	r, err := e.Fetch(ctx, "t", 0, 0, 1024, 0)
	if err != nil || len(r.Bufs) != 0 || r.HighWatermark != 0 {
		t.Fatalf("empty fetch: %+v %v", r, err)
	}
	// A waiting fetch is woken by an append.
	got := make(chan *FetchResult, 1)
	go func() {
		r, err := e.Fetch(ctx, "t", 0, 0, 1024, 20*time.Second)
		if err != nil {
			t.Error(err)
		}
		got <- r
	}()
	if _, err := e.Append(ctx, "t", 0, mkBatch(t, "wake")); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-got:
		if r == nil || len(r.Bufs) == 0 {
			t.Fatalf("woken fetch returned %+v", r)
		}
		r.Release()
	case <-time.After(10 * time.Second):
		t.Fatal("long poll not woken by append")
	}
	// Cancelling the context ends the wait.
	cctx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() {
		_, err := e.Fetch(cctx, "t", 0, 1, 1024, 20*time.Second)
		errc <- err
	}()
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled fetch: %v", err)
	}
	// Out of range above the high watermark.
	if _, err := e.Fetch(ctx, "t", 0, 5, 1024, 0); codeOf(err) != api.CodeOffsetOutOfRange {
		t.Fatalf("fetch past HW: %v", err)
	}
}

func TestFetchMaxBytesAtLeastOneBatch(t *testing.T) {
	e := openTest(t, testOptions(t.TempDir()))
	if _, err := e.CreateTopic("t", 1, TopicConfig{}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	big := mkBatch(t, strings.Repeat("a", 2000), strings.Repeat("b", 2000))
	size := len(big)
	if _, err := e.Append(ctx, "t", 0, big); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Append(ctx, "t", 0, mkBatch(t, "c")); err != nil {
		t.Fatal(err)
	}
	// Starting inside the first batch, with max bytes under its size.
	r, err := e.Fetch(ctx, "t", 0, 1, 10, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Release()
	if r.Bytes() != size {
		t.Fatalf("fetch returned %d bytes, want exactly the first batch (%d)", r.Bytes(), size)
	}
}

func TestDataDirLocked(t *testing.T) {
	opts := testOptions(t.TempDir())
	openTest(t, opts)
	if _, err := Open(opts); !errors.Is(err, ErrDataDirLocked) {
		t.Fatalf("second Open: %v, want ErrDataDirLocked", err)
	}
}

func TestNewerFormatRefused(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "format-version"), []byte("99\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(testOptions(dir)); err == nil || !strings.Contains(err.Error(), "newer") {
		t.Fatalf("Open of a newer format: %v", err)
	}
}

func TestCloseFinishesQueuedAppends(t *testing.T) {
	opts := testOptions(t.TempDir())
	e, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.CreateTopic("t", 1, TopicConfig{}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	acked := map[uint64]string{}
	for i := 0; i < 100; i++ {
		wg.Go(func() {
			v := fmt.Sprintf("v%d", i)
			res, err := e.Append(context.Background(), "t", 0, mkBatch(t, v))
			if err != nil {
				if codeOf(err) != api.CodeShuttingDown {
					t.Error(err)
				}
				return
			}
			mu.Lock()
			acked[res.BaseOffset] = v
			mu.Unlock()
		})
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	e2 := openTest(t, opts)
	got := readAll(t, e2, "t", 0)
	for off, v := range acked {
		if int(off) >= len(got) || got[off] != v {
			t.Fatalf("acknowledged %q at %d lost after Close", v, off)
		}
	}
}

func TestCommitOffsets(t *testing.T) {
	opts := testOptions(t.TempDir())
	e := openTest(t, opts)
	if _, err := e.CreateTopic("t", 2, TopicConfig{}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := 0; i < 5; i++ {
		if _, err := e.Append(ctx, "t", 0, mkBatch(t, "x")); err != nil {
			t.Fatal(err)
		}
	}
	res, err := e.CommitOffsets("g", "", -1, []OffsetCommit{
		{Topic: "t", Partition: 0, Offset: 3},
		{Topic: "t", Partition: 1, Offset: 1},  // beyond HW 0
		{Topic: "t", Partition: 0, Offset: 6},  // beyond HW 5
		{Topic: "t", Partition: 7, Offset: 0},  // no such partition
		{Topic: "zz", Partition: 0, Offset: 0}, // no such topic
	})
	if err != nil {
		t.Fatal(err)
	}
	wantCodes := []api.Code{api.CodeNone, api.CodeOffsetOutOfRange, api.CodeOffsetOutOfRange, api.CodeUnknownPartition, api.CodeUnknownTopic}
	for i, c := range wantCodes {
		if codeOf(res[i].Err) != c {
			t.Errorf("entry %d: %v, want %v", i, res[i].Err, c)
		}
	}
	var re *api.Error
	if errors.As(res[2].Err, &re) && (re.RangeStart != 0 || re.RangeEnd != 5) {
		t.Errorf("range of the rejected commit: [%d, %d], want [0, 5]", re.RangeStart, re.RangeEnd)
	}
	if _, err := e.CommitOffsets("g", "m1", 3, []OffsetCommit{{Topic: "t", Partition: 0, Offset: 1}}); codeOf(err) != api.CodeFencedGeneration {
		t.Fatalf("commit with a generation: %v", err)
	}
	if _, err := e.CommitOffsets("", "", -1, nil); codeOf(err) != api.CodeInvalidRequest {
		t.Fatalf("empty group: %v", err)
	}
	// Many commits: the log is compacted and the latest value survives a restart.
	for i := 0; i < 3000; i++ {
		if _, err := e.CommitOffsets("g2", "", -1, []OffsetCommit{{Topic: "t", Partition: 0, Offset: uint64(i % 6), Metadata: strings.Repeat("m", 1000)}}); err != nil {
			t.Fatal(err)
		}
	}
	e.Close()
	st, err := os.Stat(filepath.Join(opts.DataDir, "groups", offsetsFile))
	if err != nil || st.Size() > compactBytes+4096 {
		t.Fatalf("offsets log size %v, %v", st.Size(), err)
	}
	e2 := openTest(t, opts)
	got, err := e2.FetchOffsets("g", "t")
	if err != nil || len(got) != 1 || got[0].Offset != 3 || got[0].Partition != 0 {
		t.Fatalf("offsets after restart: %+v %v", got, err)
	}
	got, _ = e2.FetchOffsets("g2", "")
	if len(got) != 1 || got[0].Offset != 2999%6 {
		t.Fatalf("g2 after restart: %+v", got)
	}
}

func TestOffsetsTornTail(t *testing.T) {
	opts := testOptions(t.TempDir())
	e := openTest(t, opts)
	if _, err := e.CreateTopic("t", 1, TopicConfig{}); err != nil {
		t.Fatal(err)
	}
	_, _ = e.Append(context.Background(), "t", 0, mkBatch(t, "a", "b"))
	if _, err := e.CommitOffsets("g", "", -1, []OffsetCommit{{Topic: "t", Offset: 2}}); err != nil {
		t.Fatal(err)
	}
	e.Close()
	path := filepath.Join(opts.DataDir, "groups", offsetsFile)
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = f.Write([]byte{50, 0, 0, 0, 1, 2, 3, 4, '{'}) // a torn record
	f.Close()
	e2 := openTest(t, opts)
	got, _ := e2.FetchOffsets("g", "t")
	if len(got) != 1 || got[0].Offset != 2 {
		t.Fatalf("offsets after torn tail: %+v", got)
	}
	if _, err := e2.CommitOffsets("g", "", -1, []OffsetCommit{{Topic: "t", Offset: 1}}); err != nil {
		t.Fatal(err)
	}
	e2.Close()
	e3 := openTest(t, opts)
	if got, _ := e3.FetchOffsets("g", "t"); len(got) != 1 || got[0].Offset != 1 {
		t.Fatalf("offsets after commit past a cut tail: %+v", got)
	}
}

func TestTopicMetadataPersists(t *testing.T) {
	opts := testOptions(t.TempDir())
	e := openTest(t, opts)
	cfg := TopicConfig{SyncPolicy: "none", RetentionMs: 1000, RetentionBytes: 1 << 20, SegmentBytes: 1 << 20}
	if _, err := e.CreateTopic("cfg", 4, cfg); err != nil {
		t.Fatal(err)
	}
	e.Close()
	// Leftover temporary and orphan files are handled at start.
	_ = os.WriteFile(filepath.Join(opts.DataDir, "meta", "topics", "x.json.sqtmp"), []byte("{"), 0o644)
	_ = os.MkdirAll(filepath.Join(opts.DataDir, "topics", "orphan", "0"), 0o755)
	e2 := openTest(t, opts)
	info, err := e2.DescribeTopic("cfg")
	if err != nil {
		t.Fatal(err)
	}
	if info.PartitionCount != 4 || len(info.Partitions) != 4 || info.Config.SyncPolicy != "none" || info.Config.RetentionMs != 1000 || info.Config.SegmentBytes != 1<<20 {
		t.Fatalf("config after restart: %+v", info)
	}
	if _, err := os.Stat(filepath.Join(opts.DataDir, "meta", "topics", "x.json.sqtmp")); !os.IsNotExist(err) {
		t.Fatalf("temporary file not removed: %v", err)
	}
	if _, err := e2.CreateTopic("orphan", 1, TopicConfig{}); err != nil {
		t.Fatalf("create over an orphan directory: %v", err)
	}
}

var _ = bytes.Equal
