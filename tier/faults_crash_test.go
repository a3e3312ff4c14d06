package tier_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/seedqueue/sq/engine"
)

// TestTierFaultsCrashBeforeManifest: the archiver uploads a segment's
// objects, then its manifest write fails (refused: the bucket lacks it;
// lost: the bucket has it, the archiver does not know) and the server
// "crashes": a new Archiver on the same engine and bucket takes over.
// Local retention deletes nothing the bucket's manifest does not list,
// before and after the restart; the new archiver uploads the segment
// again (overwriting its objects) or finds it listed, and the manifest
// lists it once. retention.bytes is set just above the whole log: remote
// retention, counting only listed segments and the local bytes not
// uploaded (never the orphaned objects), deletes nothing, until the log
// grows past it.
func TestTierFaultsCrashBeforeManifest(t *testing.T) {
	for _, tc := range []struct {
		kind        fault
		uploadAgain bool
	}{{refuse, true}, {lose, false}} {
		t.Run(tc.kind.String(), func(t *testing.T) {
			e, p := openFaultEngine(t, 16<<10, 8<<10, engine.TopicConfig{LocalRetentionBytes: 32 << 10})
			f := newFaultS3(t)
			r := newRig(t, e, p, f, f.store(t, nil), 0, nil)
			r.recs.append(t, e, 8, 10, 500)
			r.pass()
			r.check("first pass")
			listed := len(r.manifest().Segments)
			if listed < 2 {
				t.Fatalf("%d segments uploaded by the first pass", listed)
			}

			r.recs.append(t, e, 4, 10, 500)
			tp := e.TieredPartitions()[0]
			var seg engine.SealedSegment // the next to upload
			for _, s := range tp.Sealed {
				if s.BaseOffset == remoteEnd(r.manifest()) {
					seg = s
				}
			}
			if seg.NextOffset == 0 {
				t.Fatal("no new sealed segment")
			}
			// The whole log: every listed segment not on disk any more,
			// plus the local log.
			whole := tp.LocalBytes
			for _, s := range r.manifest().Segments {
				if s.BaseOffset < tp.LogStartOffset {
					whole += s.Log.Size
				}
			}
			limit := whole + 1<<10
			if _, err := e.AlterTopicConfig("t", engine.TopicConfigChange{RetentionBytes: &limit}); err != nil {
				t.Fatal(err)
			}

			isManifestPut := func(req *http.Request) bool { return req.Method == http.MethodPut && isManifest(req) }
			f.SetHook(f.nth(tc.kind, 0, 1<<30, isManifestPut))
			f.Requests()
			r.pass()
			f.SetHook(nil)
			key := p.SegmentKeys(seg.BaseOffset, 0).Log
			if n := countRequests(f.Requests(), "PUT /"+faultBucket+"/"+key); n != 1 {
				t.Fatalf("%d PUTs of %s, want 1", n, key)
			}
			if got := len(r.manifest().Segments); got != listed {
				t.Fatalf("the archiver lists %d segments after a failed manifest write, want %d", got, listed)
			}
			ctx, cancel := context.WithTimeout(context.Background(), faultTestTimeout)
			defer cancel()
			if _, err := r.store.Head(ctx, key); err != nil {
				t.Fatalf("the uploaded object %s: %v", key, err)
			}
			r.check("failed manifest write")
			before, _ := e.DescribeTopic("t")

			// The crash: a new archiver that has read nothing yet. Local
			// retention must wait for it.
			r.restart()
			if err := e.EnforceRetention(); err != nil {
				t.Fatal(err)
			}
			if after, _ := e.DescribeTopic("t"); after.Partitions[0].LogStartOffset != before.Partitions[0].LogStartOffset {
				t.Fatalf("local log start moved from %d to %d before the new archiver read a manifest",
					before.Partitions[0].LogStartOffset, after.Partitions[0].LogStartOffset)
			}
			r.pass()
			log := f.Requests()
			if n := countRequests(log, "PUT /"+faultBucket+"/"+key); (n == 1) != tc.uploadAgain || n > 1 {
				t.Fatalf("the new archiver PUT %s %d times; uploaded again: want %v", key, n, tc.uploadAgain)
			}
			r.check("after the restart")
			m := r.manifest()
			if m.LogStartOffset != 0 || m.Segments[0].BaseOffset != 0 {
				t.Fatalf("remote retention deleted confirmed data (retention.bytes %d, whole log %d): remote log start %d", limit, whole, m.LogStartOffset)
			}
			n := 0
			for _, s := range m.Segments {
				if s.BaseOffset == seg.BaseOffset {
					n++
				}
			}
			if n != 1 {
				t.Fatalf("segment %d listed %d times", seg.BaseOffset, n)
			}
			if ok := r.uploadsOK()[seg.BaseOffset]; ok > 1 {
				t.Fatalf("segment %d recorded by %d manifest writes", seg.BaseOffset, ok)
			}
			r.checkStored()
			r.readBack(64<<10, 0)

			// Past retention.bytes, remote retention deletes the oldest
			// listed segments, and only while the rest stays at or above it.
			r.recs.append(t, e, 8, 10, 500)
			r.pass()
			r.check("past retention.bytes")
			m = r.manifest()
			tp = e.TieredPartitions()[0]
			whole = tp.LocalBytes
			for _, s := range m.Segments {
				if s.BaseOffset < tp.LogStartOffset {
					whole += s.Log.Size
				}
			}
			if m.LogStartOffset == 0 || whole < limit {
				t.Fatalf("remote retention: log start %d, whole log %d bytes, retention.bytes %d", m.LogStartOffset, whole, limit)
			}
		})
	}
}
