package tier_test

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/seedqueue/sq/engine"
	"github.com/seedqueue/sq/tier"
)

// TestArchiverStats: Stats reports nothing before the first pass; after a
// pass whose uploads fail, every sealed segment as lag and no remote
// segment; after a pass that works, the manifest's segments and bytes,
// the bounds of Bounds and no lag; after remote retention, the moved
// remote log start. The engine's DescribeTopic shows the same.
func TestArchiverStats(t *testing.T) {
	e, p := tieredEngine(t, engine.TopicConfig{})
	fill(t, e, 60) // ~60 KiB: 3 sealed 16 KiB segments and an active one
	store := &putFailStore{ObjectStore: &tier.MemStore{}, fail: true, suffix: ".log"}
	a, err := tier.NewArchiver(tier.ArchiverOptions{Store: store, Storage: e, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	e.SetRemoteLog(a)
	if s, ok := a.Stats("t", p.TopicID, 0); ok || s != (engine.RemoteStats{}) {
		t.Fatalf("stats before any pass: %+v, %v", s, ok)
	}
	if ti, err := e.DescribeTopic("t"); err != nil || ti.Partitions[0].Remote == nil || *ti.Partitions[0].Remote != (engine.RemoteStats{}) {
		t.Fatalf("describe before any pass: %+v, %v; want zero remote stats", ti.Partitions, err)
	}

	a.Pass(context.Background())
	sealed := e.TieredPartitions()[0].Sealed
	var sealedBytes int64
	for _, s := range sealed {
		sealedBytes += s.Bytes
	}
	if len(sealed) < 2 {
		t.Fatalf("%d sealed segments, want at least 2", len(sealed))
	}
	want := engine.RemoteStats{LagSegments: len(sealed), LagBytes: sealedBytes}
	if s, ok := a.Stats("t", p.TopicID, 0); !ok || s != want {
		t.Fatalf("stats after a failed upload: %+v, %v; want %+v", s, ok, want)
	}

	// A new archiver: no backoff to wait for.
	store.fail = false
	a, _ = tier.NewArchiver(tier.ArchiverOptions{Store: store, Storage: e, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	e.SetRemoteLog(a)
	a.Pass(context.Background())
	start, end, ok := a.Bounds("t", p.TopicID, 0)
	if !ok {
		t.Fatal("nothing uploaded")
	}
	want = engine.RemoteStats{LogStartOffset: start, EndOffset: end, Segments: len(sealed), Bytes: sealedBytes}
	if s, ok := a.Stats("t", p.TopicID, 0); !ok || s != want {
		t.Fatalf("stats after the upload: %+v, %v; want %+v", s, ok, want)
	}
	ti, err := e.DescribeTopic("t")
	if err != nil || ti.Partitions[0].Remote == nil || *ti.Partitions[0].Remote != want {
		t.Fatalf("describe after the upload: %+v, %v; want remote %+v", ti.Partitions, err, want)
	}

	// More data under retention.bytes 40 KiB (the whole log): remote
	// retention deletes the oldest remote segments and moves the remote
	// log start.
	limit := int64(40 << 10)
	if _, err := e.AlterTopicConfig("t", engine.TopicConfigChange{RetentionBytes: &limit}); err != nil {
		t.Fatal(err)
	}
	for range 4 {
		fill(t, e, 20)
		a.Pass(context.Background())
	}
	m := a.Manifest("t", p.TopicID, 0)
	s, _ := a.Stats("t", p.TopicID, 0)
	var bytes int64
	for _, seg := range m.Segments {
		bytes += seg.Log.Size
	}
	if m.LogStartOffset == 0 || s.LogStartOffset != m.LogStartOffset || s.Segments != len(m.Segments) || s.Bytes != bytes || s.EndOffset != m.Segments[len(m.Segments)-1].LastOffset+1 {
		t.Fatalf("stats after remote retention: %+v; manifest start %d, %d segments, %d bytes", s, m.LogStartOffset, len(m.Segments), bytes)
	}
}
