package tier_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/api/batch"
	"github.com/seedqueue/sq/engine"
	"github.com/seedqueue/sq/tier"
)

// tieredEngine opens a single-node engine with topic "t" (one partition,
// 16 KiB segments) and returns it with its topic's partition key.
func tieredEngine(t *testing.T, cfg engine.TopicConfig) (*engine.Engine, tier.Partition) {
	t.Helper()
	e, err := engine.Open(engine.Options{DataDir: t.TempDir(), SegmentBytes: 16 << 10, MaxBatchBytes: 8 << 10, PreallocBytes: 4 << 10,
		RetentionCheckInterval: -1, ScrubBytesPerSec: -1, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	if cfg.SegmentBytes == 0 {
		cfg.SegmentBytes = 16 << 10
	}
	ti, err := e.CreateTopic("t", 1, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return e, tier.Partition{Topic: "t", TopicID: ti.ID, Partition: 0}
}

// fill appends n batches of 10 records of 100 bytes to t/0.
func fill(t *testing.T, e *engine.Engine, n int) {
	t.Helper()
	for i := range n {
		var b batch.Builder
		for j := range 10 {
			b.Add(nil, bytes.Repeat([]byte{byte('a' + (i+j)%26)}, 100), nil, time.Now().UnixMilli())
		}
		buf, err := b.Build()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.Append(context.Background(), "t", 0, buf); err != nil {
			t.Fatal(err)
		}
	}
}

// TestArchiverUploadsSealedSegments: every sealed segment goes to the
// store once, with its indexes, in a manifest whose entries match the
// local segments; the active segment stays local; a pass with nothing new
// writes nothing.
func TestArchiverUploadsSealedSegments(t *testing.T) {
	e, p := tieredEngine(t, engine.TopicConfig{})
	fill(t, e, 60) // ~60 KiB: 3 sealed 16 KiB segments and an active one
	store := &tier.MemStore{}
	var events []tier.UploadEvent
	a, err := tier.NewArchiver(tier.ArchiverOptions{Store: store, Storage: e, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Observe: func(ev tier.UploadEvent) { events = append(events, ev) }})
	if err != nil {
		t.Fatal(err)
	}
	a.Pass(context.Background())
	parts := e.TieredPartitions()
	if len(parts) != 1 || len(parts[0].Sealed) < 2 {
		t.Fatalf("sealed segments: %+v", parts)
	}
	m := a.Manifest("t", p.TopicID, 0)
	if m == nil || len(m.Segments) != len(parts[0].Sealed) {
		t.Fatalf("manifest %+v for %d sealed segments", m, len(parts[0].Sealed))
	}
	for i, s := range parts[0].Sealed {
		got := m.Segments[i]
		if got.BaseOffset != s.BaseOffset || got.LastOffset != s.NextOffset-1 || got.Log.Size != s.Bytes {
			t.Fatalf("segment %d: manifest %+v, local %+v", i, got, s)
		}
		if err := tier.Verify(context.Background(), store, got.Log.Key, got.Log.Size, got.Log.CRC32C); err != nil {
			t.Fatal(err)
		}
		for _, ref := range []tier.ObjectRef{got.Index, got.TimeIndex} {
			if _, err := store.Head(context.Background(), ref.Key); err != nil {
				t.Fatalf("index object %s: %v", ref.Key, err)
			}
		}
	}
	for _, ev := range events {
		if ev.Err != nil {
			t.Fatalf("upload event %+v", ev)
		}
	}
	if start, end, ok := a.Bounds("t", p.TopicID, 0); !ok || start != 0 || end != parts[0].Sealed[len(parts[0].Sealed)-1].NextOffset {
		t.Fatalf("bounds %d %d %v", start, end, ok)
	}
	version := m.Version
	a.Pass(context.Background())
	if m2 := a.Manifest("t", p.TopicID, 0); m2.Version != version {
		t.Fatalf("a pass with nothing new wrote manifest version %d (was %d)", m2.Version, version)
	}
	// A new archiver (a restart) reads the manifest and uploads nothing again.
	events = nil
	b, _ := tier.NewArchiver(tier.ArchiverOptions{Store: store, Storage: e, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Observe: func(ev tier.UploadEvent) { events = append(events, ev) }})
	b.Pass(context.Background())
	if len(events) != 0 {
		t.Fatalf("a restarted archiver uploaded %d segments again", len(events))
	}
	for _, l := range a.Lags() {
		if l.Segments != 0 || l.Bytes != 0 {
			t.Fatalf("lag after the pass: %+v", l)
		}
	}
}

// putFailStore fails every Put of a key with the given suffix while fail
// is set.
type putFailStore struct {
	tier.ObjectStore
	fail   bool
	suffix string
}

func (f *putFailStore) Put(ctx context.Context, key string, body io.ReaderAt, size int64, o tier.PutOptions) (tier.ObjectInfo, error) {
	if f.fail && bytes.HasSuffix([]byte(key), []byte(f.suffix)) {
		return tier.ObjectInfo{}, fmt.Errorf("injected failure of %s", key)
	}
	return f.ObjectStore.Put(ctx, key, body, size, o)
}

// TestArchiverFailedUploadRetried: a failed upload leaves the manifest
// as it was (the segment does not count as uploaded), backs off, and is
// retried once the store works again.
func TestArchiverFailedUploadRetried(t *testing.T) {
	e, p := tieredEngine(t, engine.TopicConfig{})
	fill(t, e, 40)
	store := &putFailStore{ObjectStore: &tier.MemStore{}, fail: true, suffix: ".timeindex"}
	now := time.Now()
	a, _ := tier.NewArchiver(tier.ArchiverOptions{Store: store, Storage: e, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Now: func() time.Time { return now }, RetryBase: time.Second, RetryMax: 4 * time.Second})
	a.Pass(context.Background())
	if _, _, ok := a.Bounds("t", p.TopicID, 0); ok {
		t.Fatal("a segment whose time index failed to upload counts as uploaded")
	}
	store.fail = false
	a.Pass(context.Background()) // within the backoff: skipped
	if _, _, ok := a.Bounds("t", p.TopicID, 0); ok {
		t.Fatal("a pass within the backoff ran")
	}
	now = now.Add(5 * time.Second)
	a.Pass(context.Background())
	if _, end, ok := a.Bounds("t", p.TopicID, 0); !ok || end == 0 {
		t.Fatal("the retried upload did not land")
	}
}

// TestArchiverRemoteRetention: retention.bytes over the whole log deletes
// the oldest remote segments, manifest first, then their objects.
func TestArchiverRemoteRetention(t *testing.T) {
	e, p := tieredEngine(t, engine.TopicConfig{RetentionBytes: 40 << 10})
	store := &tier.MemStore{}
	a, _ := tier.NewArchiver(tier.ArchiverOptions{Store: store, Storage: e, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	for range 6 {
		fill(t, e, 20)
		a.Pass(context.Background())
	}
	m := a.Manifest("t", p.TopicID, 0)
	if m == nil || m.LogStartOffset == 0 {
		t.Fatalf("remote log start not moved by retention.bytes: %+v", m)
	}
	var remote int64
	for _, s := range m.Segments {
		remote += s.Log.Size
	}
	if remote > 40<<10 {
		t.Fatalf("remote log holds %d bytes, retention.bytes is %d", remote, 40<<10)
	}
	objs, err := store.List(context.Background(), p.Prefix())
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if bytes.HasSuffix([]byte(o.Key), []byte(".log")) {
			found := false
			for _, s := range m.Segments {
				found = found || s.Log.Key == o.Key
			}
			if !found {
				t.Fatalf("object %s of a deleted segment still stored", o.Key)
			}
		}
	}
}

// readAll reads t/0 from offset 0 to the high watermark through the
// engine's fetch, as a consumer does, and returns the records' values in
// order with their offsets checked contiguous.
func readAll(t *testing.T, e *engine.Engine) [][]byte {
	t.Helper()
	var out [][]byte
	next := uint64(0)
	for {
		res, err := e.Fetch(context.Background(), "t", 0, next, 64<<10, 0)
		if err != nil {
			t.Fatalf("fetch at %d: %v", next, err)
		}
		if len(res.Bufs) == 0 {
			hw := res.HighWatermark
			res.Release()
			if next != hw {
				t.Fatalf("empty fetch at %d below the high watermark %d", next, hw)
			}
			return out
		}
		for _, buf := range res.Bufs {
			for len(buf) > 0 {
				b, rest, _, err := batch.Split(buf, 0)
				if err != nil {
					t.Fatal(err)
				}
				it, err := batch.NewIter(b)
				if err != nil {
					t.Fatal(err)
				}
				for it.Next() {
					r := it.Record()
					if r.Offset < next {
						continue
					}
					if r.Offset != next {
						t.Fatalf("offset %d after %d: a gap", r.Offset, next-1)
					}
					out = append(out, bytes.Clone(r.Value))
					next++
				}
				buf = rest
			}
		}
		res.Release()
	}
}

// TestTieredReadBack: with local retention small, the uploaded segments
// leave the local disk, and a consumer reading from offset 0 gets every
// record, byte for byte and in order, from the bucket and then the disk;
// the earliest offset is the remote log's start. A segment whose upload
// fails stays on disk.
func TestTieredReadBack(t *testing.T) {
	e, p := tieredEngine(t, engine.TopicConfig{LocalRetentionBytes: 20 << 10})
	store := &putFailStore{ObjectStore: &tier.MemStore{}, suffix: ".log"}
	cache, err := tier.OpenChunkCache(tier.ChunkCacheOptions{Dir: t.TempDir(), MaxBytes: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer cache.Close()
	reader, err := tier.NewRemoteReader(store, cache, tier.RemoteReaderOptions{ChunkBytes: 8 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	a, _ := tier.NewArchiver(tier.ArchiverOptions{Store: store, Storage: e, Reader: reader, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	e.SetRemoteLog(a)
	var want [][]byte
	for i := range 150 {
		var b batch.Builder
		for j := range 10 {
			v := fmt.Appendf(nil, "record %d.%d %s", i, j, bytes.Repeat([]byte{byte('a' + (i+j)%26)}, 80))
			want = append(want, v)
			b.Add(nil, v, nil, time.Now().UnixMilli())
		}
		buf, err := b.Build()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.Append(context.Background(), "t", 0, buf); err != nil {
			t.Fatal(err)
		}
		if i == 60 {
			// The bucket refuses segment data: nothing leaves the disk.
			store.fail = true
			a.Pass(context.Background())
			if err := e.EnforceRetention(); err != nil {
				t.Fatal(err)
			}
			if ti, _ := e.DescribeTopic("t"); ti.Partitions[0].LogStartOffset != 0 {
				t.Fatalf("local log start %d while no upload succeeded", ti.Partitions[0].LogStartOffset)
			}
			store.fail = false
			a, _ = tier.NewArchiver(tier.ArchiverOptions{Store: store, Storage: e, Reader: reader, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			e.SetRemoteLog(a)
		}
	}
	a.Pass(context.Background())
	if err := e.EnforceRetention(); err != nil {
		t.Fatal(err)
	}
	ti, err := e.DescribeTopic("t")
	if err != nil {
		t.Fatal(err)
	}
	pi := ti.Partitions[0]
	if pi.LogStartOffset == 0 || pi.SizeBytes > 20<<10+16<<10 {
		t.Fatalf("local log after retention: start %d, %d bytes (local.retention.bytes 20 KiB, 16 KiB segments)", pi.LogStartOffset, pi.SizeBytes)
	}
	_, end, ok := a.Bounds("t", p.TopicID, 0)
	if !ok || end < pi.LogStartOffset {
		t.Fatalf("remote end %d (ok %v) below the local log start %d: deleted before upload", end, ok, pi.LogStartOffset)
	}
	if off, _, err := e.ListOffsets("t", 0, engine.OffsetEarliest); err != nil || off != 0 {
		t.Fatalf("earliest offset %d, %v; want 0 (the remote log start)", off, err)
	}
	got := readAll(t, e)
	if len(got) != len(want) {
		t.Fatalf("read %d records, want %d", len(got), len(want))
	}
	for i := range want {
		if !bytes.Equal(got[i], want[i]) {
			t.Fatalf("record %d: %q, want %q", i, got[i], want[i])
		}
	}
	if st := reader.Stats(); st.Reads == 0 {
		t.Fatalf("no read went to the remote log: %+v", st)
	}
}

// TestArchiverStraddlingSegment: a second leader whose segment holds both
// records the remote log has and records it lacks (segment boundaries
// differ between replicas) uploads it whole, served from the remote log's
// end; reading from offset 0 returns every record once, in order.
func TestArchiverStraddlingSegment(t *testing.T) {
	store := &tier.MemStore{}
	cache, err := tier.OpenChunkCache(tier.ChunkCacheOptions{Dir: t.TempDir(), MaxBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer cache.Close()
	reader, err := tier.NewRemoteReader(store, cache, tier.RemoteReaderOptions{ChunkBytes: 8 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	// The first leader: 16 KiB segments, 45 batches of ~1 KiB.
	first, p := tieredEngine(t, engine.TopicConfig{})
	var want [][]byte
	appendTo := func(e *engine.Engine, from, to int) {
		for i := from; i < to; i++ {
			var b batch.Builder
			for j := range 10 {
				b.Add(nil, fmt.Appendf(nil, "r%d.%d %s", i, j, bytes.Repeat([]byte{'x'}, 90)), nil, time.Now().UnixMilli())
			}
			buf, err := b.Build()
			if err != nil {
				t.Fatal(err)
			}
			if _, err := e.Append(context.Background(), "t", 0, buf); err != nil {
				t.Fatal(err)
			}
		}
	}
	appendTo(first, 0, 45)
	a1, _ := tier.NewArchiver(tier.ArchiverOptions{Store: store, Storage: first, Logger: quiet})
	a1.Pass(context.Background())
	_, end1, ok := a1.Bounds("t", p.TopicID, 0)
	if !ok || end1 == 0 {
		t.Fatal("the first leader uploaded nothing")
	}
	// The second leader: the same records (same topic id) in 40 KiB
	// segments, so its first sealed segment runs past end1.
	second, err := engine.Open(engine.Options{DataDir: t.TempDir(), SegmentBytes: 40 << 10, MaxBatchBytes: 8 << 10, PreallocBytes: 4 << 10,
		RetentionCheckInterval: -1, ScrubBytesPerSec: -1, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	if _, err := second.CreateTopicSpec(engine.TopicSpec{Name: "t", ID: p.TopicID, Partitions: 1, Config: engine.TopicConfig{SegmentBytes: 40 << 10, LocalRetentionBytes: 1}}); err != nil {
		t.Fatal(err)
	}
	appendTo(second, 0, 150)
	for i := range 150 {
		for j := range 10 {
			want = append(want, fmt.Appendf(nil, "r%d.%d %s", i, j, bytes.Repeat([]byte{'x'}, 90)))
		}
	}
	a2, _ := tier.NewArchiver(tier.ArchiverOptions{Store: store, Storage: second, Reader: reader, Logger: quiet})
	second.SetRemoteLog(a2)
	a2.Pass(context.Background())
	m := a2.Manifest("t", p.TopicID, 0)
	straddled := false
	for _, s := range m.Segments {
		straddled = straddled || s.FileBaseOffset != nil
	}
	if !straddled {
		t.Fatalf("no straddling upload in %+v (first leader's end %d)", m.Segments, end1)
	}
	if err := second.EnforceRetention(); err != nil {
		t.Fatal(err)
	}
	if ti, _ := second.DescribeTopic("t"); ti.Partitions[0].LogStartOffset == 0 {
		t.Fatal("local retention deleted nothing")
	}
	got := readAll(t, second)
	if len(got) != len(want) {
		t.Fatalf("read %d records, want %d", len(got), len(want))
	}
	for i := range want {
		if !bytes.Equal(got[i], want[i]) {
			t.Fatalf("record %d: %q, want %q", i, got[i], want[i])
		}
	}
}

// TestDiscover: the bucket's topic object gives the partition count (one
// without uploads included) and config; several topics of a name need an
// id; a name without objects is ErrNoRemoteTopic.
func TestDiscover(t *testing.T) {
	e, p := tieredEngine(t, engine.TopicConfig{RetentionMs: 3_600_000})
	fill(t, e, 40)
	store := &tier.MemStore{}
	a, _ := tier.NewArchiver(tier.ArchiverOptions{Store: store, Storage: e, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	a.Pass(context.Background())
	plan, err := tier.Discover(context.Background(), store, "t", api.TopicID{})
	if err != nil {
		t.Fatal(err)
	}
	_, end, _ := a.Bounds("t", p.TopicID, 0)
	if plan.TopicID != p.TopicID || plan.Partitions != 1 || plan.Ends[0] != end || !plan.HasConfig || plan.Config.RetentionMs != 3_600_000 {
		t.Fatalf("plan %+v (remote end %d)", plan, end)
	}
	// A topic object saying 3 partitions: the two without uploads count.
	to := tier.TopicObject{Topic: "t", TopicID: p.TopicID, Partitions: 3, Config: plan.Config}
	if err := tier.PutTopicObject(context.Background(), store, to); err != nil {
		t.Fatal(err)
	}
	if plan, err = tier.Discover(context.Background(), store, "t", api.TopicID{}); err != nil || plan.Partitions != 3 || plan.Ends[2] != 0 {
		t.Fatalf("plan %+v, %v; want 3 partitions", plan, err)
	}
	other := api.NewTopicID()
	if err := tier.PutTopicObject(context.Background(), store, tier.TopicObject{Topic: "t", TopicID: other, Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := tier.Discover(context.Background(), store, "t", api.TopicID{}); !errors.Is(err, tier.ErrAmbiguousTopic) {
		t.Fatalf("two topics named t: %v", err)
	}
	if plan, err := tier.Discover(context.Background(), store, "t", p.TopicID); err != nil || plan.TopicID != p.TopicID {
		t.Fatalf("with the id: %+v, %v", plan, err)
	}
	if _, err := tier.Discover(context.Background(), store, "nothing", api.TopicID{}); !errors.Is(err, tier.ErrNoRemoteTopic) {
		t.Fatalf("unknown topic: %v", err)
	}
}

// TestWholeLogRetentionWaitsForUpload: with tiered storage, even the whole
// log's retention deletes a local segment only once the remote log has
// it (KIP-405): while uploads fail, nothing goes; once they succeed, the
// expired segments go locally and remotely.
func TestWholeLogRetentionWaitsForUpload(t *testing.T) {
	e, p := tieredEngine(t, engine.TopicConfig{RetentionBytes: 20 << 10})
	fill(t, e, 60)
	store := &putFailStore{ObjectStore: &tier.MemStore{}, fail: true, suffix: ".log"}
	now := time.Now()
	a, _ := tier.NewArchiver(tier.ArchiverOptions{Store: store, Storage: e, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Now: func() time.Time { return now }})
	e.SetRemoteLog(a)
	a.Pass(context.Background())
	if err := e.EnforceRetention(); err != nil {
		t.Fatal(err)
	}
	if ti, _ := e.DescribeTopic("t"); ti.Partitions[0].LogStartOffset != 0 {
		t.Fatalf("retention.bytes deleted local segments that were never uploaded: log start %d", ti.Partitions[0].LogStartOffset)
	}
	store.fail = false
	now = now.Add(10 * time.Minute)
	a.Pass(context.Background())
	if err := e.EnforceRetention(); err != nil {
		t.Fatal(err)
	}
	ti, _ := e.DescribeTopic("t")
	_, end, ok := a.Bounds("t", p.TopicID, 0)
	if start := ti.Partitions[0].LogStartOffset; start == 0 || !ok || start > end {
		t.Fatalf("after the uploads: local log start %d, remote end %d (%v)", start, end, ok)
	}
}
