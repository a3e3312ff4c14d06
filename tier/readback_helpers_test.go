package tier_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/api/batch"
	"github.com/seedqueue/sq/ring"
	"github.com/seedqueue/sq/segment"
	"github.com/seedqueue/sq/tier"
)

// readbackTimeout bounds each read-back test.
const readbackTimeout = 60 * time.Second

// tieredLog is a partition written with package segment, its sealed
// segments uploaded to a store with a manifest, and the local log kept
// open for reference reads.
type tieredLog struct {
	p    tier.Partition
	dir  string
	log  *segment.Log
	m    *tier.Manifest
	segs []segment.SegmentInfo // the uploaded (sealed) segments
}

// segOptions make small segments with a dense index: 48 KiB segments,
// an index entry every 1 KiB.
func segOptions() segment.Options {
	return segment.Options{SegmentBytes: 48 << 10, IndexIntervalBytes: 1 << 10, PreallocBytes: 48 << 10, MaxBatchBytes: 1 << 20}
}

// readbackPartition returns partition n of topic "events" with a fixed id.
func readbackPartition(t testing.TB, n int) tier.Partition {
	t.Helper()
	id, err := api.ParseTopicID("0a1b2c3d-4e5f-4061-8273-8495a6b7c8d9")
	if err != nil {
		t.Fatal(err)
	}
	return tier.Partition{Topic: "events", TopicID: id, Partition: n}
}

// randomBatch builds a batch of 1-6 records of 1-1500 bytes, and now and
// then one of about 9 KiB (larger than the 4 KiB chunks the tests use).
func randomBatch(t testing.TB, rng *rand.Rand, seq int) []byte {
	t.Helper()
	var b batch.Builder
	n, size := 1+rng.IntN(6), 1+rng.IntN(1500)
	if rng.IntN(25) == 0 {
		n, size = 3, 3000
	}
	for i := range n {
		v := fmt.Appendf(nil, "batch-%d-record-%d-", seq, i)
		for len(v) < size {
			v = append(v, byte('a'+rng.IntN(26)))
		}
		b.Add([]byte("k"), v, nil, 1_700_000_000_000+int64(seq))
	}
	out, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// writeLog writes batches random batches (seeded) to a new segment log in
// a temporary directory, rolls it and returns it open.
func writeLog(t testing.TB, batches int, seed uint64) (*segment.Log, string) {
	t.Helper()
	dir := t.TempDir()
	l, err := segment.Open(dir, ring.OS, ring.NewPortable(), segOptions())
	if err != nil {
		t.Fatalf("segment.Open: %v", err)
	}
	rng := rand.New(rand.NewPCG(seed, 1))
	for i := range batches {
		if _, err := l.AppendAt([][]byte{randomBatch(t, rng, i)}, 1_700_000_000_000+int64(i)); err != nil {
			t.Fatalf("Append: %v", err)
		}
	}
	if _, err := l.Roll(); err != nil {
		t.Fatalf("Roll: %v", err)
	}
	return l, dir
}

// segmentFile reads the file of the segment based at base with suffix,
// cut to n bytes when n >= 0.
func segmentFile(t testing.TB, dir string, base uint64, suffix string, n int64) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("%020d%s", base, suffix)))
	if err != nil {
		t.Fatal(err)
	}
	if n >= 0 {
		if int64(len(b)) < n {
			t.Fatalf("segment %d%s has %d bytes, want %d", base, suffix, len(b), n)
		}
		b = b[:n]
	}
	return b
}

// putObject puts b under key and returns its reference.
func putObject(t testing.TB, s tier.ObjectStore, key string, b []byte) tier.ObjectRef {
	t.Helper()
	info, err := s.Put(context.Background(), key, bytes.NewReader(b), int64(len(b)), tier.PutOptions{})
	if err != nil {
		t.Fatalf("Put %s: %v", key, err)
	}
	return tier.ObjectRef{Key: key, Size: info.Size, CRC32C: info.CRC32C}
}

// uploadLog writes a log of batches random batches and uploads its
// sealed segments and a manifest (version 1) of partition n to s. The
// local log stays open (closed at the test's end) for reference reads.
func uploadLog(t testing.TB, s tier.ObjectStore, n, batches int, seed uint64) *tieredLog {
	t.Helper()
	l, dir := writeLog(t, batches, seed)
	t.Cleanup(func() { l.Close() })
	tl := &tieredLog{p: readbackPartition(t, n), dir: dir, log: l}
	m := &tier.Manifest{Topic: tl.p.Topic, TopicID: tl.p.TopicID, Partition: n, Version: 1, LeaderEpoch: 1}
	for _, si := range l.Segments() {
		if si.Active {
			continue
		}
		keys := tl.p.SegmentKeys(si.BaseOffset, 1)
		m.Segments = append(m.Segments, tier.SegmentEntry{
			BaseOffset: si.BaseOffset, LastOffset: si.NextOffset - 1, MaxTimestampMs: si.MaxAppendTime, LeaderEpoch: 1,
			Log:       putObject(t, s, keys.Log, segmentFile(t, dir, si.BaseOffset, tier.LogSuffix, si.Bytes)),
			Index:     putObject(t, s, keys.Index, segmentFile(t, dir, si.BaseOffset, tier.IndexSuffix, -1)),
			TimeIndex: putObject(t, s, keys.TimeIndex, segmentFile(t, dir, si.BaseOffset, tier.TimeIndexSuffix, -1)),
		})
		tl.segs = append(tl.segs, si)
	}
	if len(tl.segs) < 4 {
		t.Fatalf("only %d sealed segments; the tests need several", len(tl.segs))
	}
	if _, err := tier.PutManifest(context.Background(), s, m); err != nil {
		t.Fatalf("PutManifest: %v", err)
	}
	scan, err := tier.LatestManifest(context.Background(), s, tl.p)
	if err != nil || scan.Manifest == nil {
		t.Fatalf("LatestManifest: %v", err)
	}
	tl.m = scan.Manifest
	return tl
}

// localRead returns what the local log serves for a fetch of offset with
// maxBytes, within the one segment holding it (the remote read does not
// cross segments): whole batches, concatenated, and the next offset.
func (tl *tieredLog) localRead(t testing.TB, offset uint64, maxBytes int) ([]byte, uint64) {
	t.Helper()
	limit := tl.log.NextOffset()
	for _, si := range tl.segs {
		if offset >= si.BaseOffset && offset < si.NextOffset {
			limit = si.NextOffset
		}
	}
	v, err := tl.log.Read(offset, maxBytes, limit)
	if err != nil {
		t.Fatalf("local Read(%d): %v", offset, err)
	}
	defer v.Release()
	return bytes.Join(v.Bufs, nil), v.NextOffset
}
