package tier_test

import (
	"context"
	"testing"

	"github.com/seedqueue/sq/api/batch"
	"github.com/seedqueue/sq/engine"
	"github.com/seedqueue/sq/tier"
)

// Sizes of BenchmarkTieredCatchUp.
const (
	catchUpLogBytes     = 64 << 20 // records appended
	catchUpSegmentBytes = 4 << 20
	catchUpRecordBytes  = 1 << 10 // value size; no key
	catchUpBatchRecords = 256     // records per batch: about 265 KiB
	catchUpFetchBytes   = 1 << 20 // maxBytes of each fetch, as a consumer's
)

// BenchmarkTieredCatchUp reads a whole partition from offset 0 through
// engine.Fetch (1 MiB fetches, as a consumer catching up), the same log
// from the local disk and from the bucket, in the same run
// (docs/performance.md, "Tiered storage: catch-up reads"). Setup: 64 MiB
// of 1 KiB records in batches of 256, 4 MiB segments, every sealed
// segment uploaded by an Archiver to gofakes3 (in memory) served over
// HTTP on 127.0.0.1 and reached by the real AWS SDK client (tier/s3).
//
//   - local: the local log intact (its pages in the page cache);
//   - remote: local retention has removed the uploaded segments, so all
//     but the active segment come from the bucket, through a RemoteReader
//     (4 MiB ranged GETs, the next chunk prefetched) and a chunk cache
//     that is new, empty, each iteration, as is the archiver (it reads
//     the manifest before the timer starts). gets/op counts the GETs
//     sent to the bucket, cache-hits/op the chunks read back from the
//     cache's files.
//
// One op is the whole partition, its bytes copied once (catchUp); MB/s
// is of the batches read.
func BenchmarkTieredCatchUp(b *testing.B) {
	e, p := openFaultEngine(b, catchUpSegmentBytes, 1<<20, engine.TopicConfig{})
	f := newFaultS3(b)
	store := f.store(b, nil)
	var recs records
	recs.append(b, e, catchUpLogBytes/(catchUpBatchRecords*catchUpRecordBytes), catchUpBatchRecords, catchUpRecordBytes)
	recs.want = nil // the values are not compared here; free them
	a, err := tier.NewArchiver(tier.ArchiverOptions{Store: store, Storage: e, Logger: discardLogger()})
	if err != nil {
		b.Fatal(err)
	}
	a.Pass(context.Background())
	tp := e.TieredPartitions()[0]
	if m := a.Manifest(p.Topic, p.TopicID, p.Partition); m == nil || len(m.Segments) != len(tp.Sealed) {
		b.Fatalf("%d sealed segments, the manifest %+v", len(tp.Sealed), m)
	}
	e.SetRemoteLog(a)
	logBytes := tp.LocalBytes

	b.Run("local", func(b *testing.B) {
		b.SetBytes(logBytes)
		for b.Loop() {
			catchUp(b, e, tp.HighWatermark)
		}
	})
	b.Run("remote", func(b *testing.B) {
		one := int64(1)
		if _, err := e.AlterTopicConfig("t", engine.TopicConfigChange{LocalRetentionBytes: &one}); err != nil {
			b.Fatal(err)
		}
		if err := e.EnforceRetention(); err != nil {
			b.Fatal(err)
		}
		if ti, _ := e.DescribeTopic("t"); ti.Partitions[0].LogStartOffset != tp.Sealed[len(tp.Sealed)-1].NextOffset {
			b.Fatalf("local log start %d: local retention did not remove the uploaded segments", ti.Partitions[0].LogStartOffset)
		}
		b.SetBytes(logBytes)
		var gets, hits uint64
		b.ResetTimer()
		for range b.N {
			b.StopTimer()
			cache, err := tier.OpenChunkCache(tier.ChunkCacheOptions{Dir: b.TempDir(), MaxBytes: 256 << 20})
			if err != nil {
				b.Fatal(err)
			}
			reader, err := tier.NewRemoteReader(store, cache, tier.RemoteReaderOptions{})
			if err != nil {
				b.Fatal(err)
			}
			cold, err := tier.NewArchiver(tier.ArchiverOptions{Store: store, Storage: e, Reader: reader, Logger: discardLogger()})
			if err != nil {
				b.Fatal(err)
			}
			cold.Pass(context.Background()) // reads the manifest; nothing to upload
			e.SetRemoteLog(cold)
			b.StartTimer()
			catchUp(b, e, tp.HighWatermark)
			b.StopTimer()
			if st := reader.Stats(); st.Reads == 0 {
				b.Fatalf("no read from the bucket: %+v", st)
			}
			gets += reader.Stats().RemoteGets
			hits += cache.Stats().Hits
			reader.Close()
			cache.Close()
			b.StartTimer()
		}
		// GETs sent to the bucket, and chunks read back from the cache's
		// files (a prefetched chunk, or one already used by a fetch).
		b.ReportMetric(float64(gets)/float64(b.N), "gets/op")
		b.ReportMetric(float64(hits)/float64(b.N), "cache-hits/op")
	})
}

// catchUp fetches t/0 from offset 0 to hw through the engine, copies
// each fetch's bytes once (standing in for the write to the consumer's
// socket: a local fetch hands out slices of the mapped segment, which
// nothing would read otherwise) and walks the batches' headers to the
// next offset.
func catchUp(b *testing.B, e *engine.Engine, hw uint64) {
	ctx := context.Background()
	scratch := make([]byte, 0, 2*catchUpFetchBytes)
	for next := uint64(0); next < hw; {
		res, err := e.Fetch(ctx, "t", 0, next, catchUpFetchBytes, 0)
		if err != nil {
			b.Fatalf("fetch at %d: %v", next, err)
		}
		if len(res.Bufs) == 0 {
			b.Fatalf("empty fetch at %d below %d", next, hw)
		}
		scratch = scratch[:0]
		for _, buf := range res.Bufs {
			scratch = append(scratch, buf...)
			for len(buf) > 0 {
				_, rest, h, err := batch.Split(buf, 0)
				if err != nil {
					b.Fatal(err)
				}
				next = max(next, h.NextOffset())
				buf = rest
			}
		}
		res.Release()
	}
}
