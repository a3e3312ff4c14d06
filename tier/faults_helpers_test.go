package tier_test

// Helpers of the fault tests (faults_*_test.go): gofakes3 served over
// real HTTP on 127.0.0.1 behind a hook that can fail, delay or cut any
// request, reached by the real AWS SDK client (tier/s3); a real engine
// whose sealed segments an Archiver uploads, pass by pass, on a clock the
// test steps; and the invariants every test checks after every pass.

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seedqueue/sq/api/batch"
	"github.com/seedqueue/sq/engine"
	"github.com/seedqueue/sq/internal/s3fake"
	"github.com/seedqueue/sq/tier"
	"github.com/seedqueue/sq/tier/s3"
)

// faultBucket is the bucket of every fault test.
const faultBucket = "sq-faults"

// faultTestTimeout bounds each fault test's store calls and reads.
const faultTestTimeout = 2 * time.Minute

// faultS3 is gofakes3 (in memory, internal/s3fake) over HTTP on
// 127.0.0.1 with a hook in front of it.
type faultS3 struct {
	*s3fake.Server
	url string // its endpoint
}

// newFaultS3 starts the fake with faultBucket and gives the AWS SDK static
// credentials, kept away from the machine's AWS files and from IMDS.
func newFaultS3(t testing.TB) *faultS3 {
	t.Helper()
	s, url := s3fake.Start(t, faultBucket)
	return &faultS3{Server: s, url: url}
}

// store returns a tier/s3 Store on the fake: two attempts per request
// (so one failed request is retried by the SDK, two in a row fail the
// call) and millisecond backoffs; edit changes the options first.
func (f *faultS3) store(t testing.TB, edit func(*s3.Options)) *s3.Store {
	t.Helper()
	o := s3.Options{Bucket: faultBucket, Endpoint: f.url, MaxAttempts: 2, BaseDelay: time.Millisecond, MaxBackoff: 2 * time.Millisecond}
	if edit != nil {
		edit(&o)
	}
	ctx, cancel := context.WithTimeout(context.Background(), faultTestTimeout)
	defer cancel()
	s, err := s3.New(ctx, o)
	if err != nil {
		t.Fatalf("s3.New: %v", err)
	}
	return s
}

// fault is what a hook does to a request it picks.
type fault int

const (
	// refuse answers 500 without passing the request on: nothing stored.
	refuse fault = iota
	// lose passes the request on, then answers 500: the write happened,
	// the client cannot know.
	lose
	// stall holds the request (its body read) until the client gives up,
	// without passing it on.
	stall
	// stallAfter passes the request on, then holds the answer until the
	// client gives up.
	stallAfter
	// cut reads 1 MiB of the request's body, then closes the connection:
	// a connection dropped mid-upload.
	cut
)

func (k fault) String() string {
	return [...]string{"refuse", "lose", "stall", "stall-after", "cut"}[k]
}

// serverError answers 500 InternalError, as S3 does.
func serverError(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/xml")
	w.WriteHeader(http.StatusInternalServerError)
	_, _ = io.WriteString(w, "<Error><Code>InternalError</Code><Message>injected</Message></Error>")
}

// apply does k to the request (the hook answers it).
func (f *faultS3) apply(k fault, w http.ResponseWriter, r *http.Request) {
	switch k {
	case cut:
		_, _ = io.CopyN(io.Discard, r.Body, 1<<20)
		if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
			conn.Close()
			return
		}
		panic(http.ErrAbortHandler) // net/http closes the connection
	case lose, stallAfter:
		f.Inner.ServeHTTP(httptest.NewRecorder(), r)
	default:
		_, _ = io.Copy(io.Discard, r.Body)
	}
	switch k {
	case refuse, lose:
		serverError(w)
	case stall, stallAfter:
		// The request context ends when the client closes the connection
		// (its timeout); the cap keeps the server's Close from waiting on
		// a client that never gives up.
		select {
		case <-r.Context().Done():
		case <-time.After(30 * time.Second):
		}
		serverError(w)
	}
}

// nth returns a hook that does k to the requests numbered [from, from+n)
// from now on (0 is the next request) that match (nil: every request).
func (f *faultS3) nth(k fault, from, n int, match func(*http.Request) bool) func(w http.ResponseWriter, r *http.Request) bool {
	var seen atomic.Int64
	return func(w http.ResponseWriter, r *http.Request) bool {
		if match != nil && !match(r) {
			return false
		}
		i := int(seen.Add(1) - 1)
		if i < from || i >= from+n {
			return false
		}
		f.apply(k, w, r)
		return true
	}
}

// countRequests returns how many of log contain every one of parts.
func countRequests(log []string, parts ...string) int {
	n := 0
	for _, r := range log {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(r, p)
		}
		if all {
			n++
		}
	}
	return n
}

// discardLogger drops every log line.
func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// openFaultEngine opens a single-node engine in a temporary directory
// with topic "t" (one partition) of segBytes segments and cfg.
func openFaultEngine(t testing.TB, segBytes int64, maxBatch int, cfg engine.TopicConfig) (*engine.Engine, tier.Partition) {
	t.Helper()
	e, err := engine.Open(engine.Options{DataDir: t.TempDir(), SegmentBytes: segBytes, MaxBatchBytes: maxBatch, MaxRecordBytes: maxBatch,
		PreallocBytes: min(segBytes, 1<<20), SyncPolicy: "none", RetentionCheckInterval: -1, ScrubBytesPerSec: -1, Logger: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	cfg.SegmentBytes = segBytes
	ti, err := e.CreateTopic("t", 1, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return e, tier.Partition{Topic: "t", TopicID: ti.ID, Partition: 0}
}

// records is what a test appended to t/0: every value, in offset order.
type records struct {
	want [][]byte
}

// append appends n batches of per records of size bytes each (size >= 24)
// to t/0: each value names its offset, the rest a cheap pattern.
func (rs *records) append(t testing.TB, e *engine.Engine, n, per, size int) {
	t.Helper()
	for range n {
		var b batch.Builder
		for range per {
			v := make([]byte, size)
			off := len(rs.want)
			copy(v, fmt.Sprintf("record %12d ", off))
			for i := 20; i < size; i++ {
				v[i] = byte('a' + (off+i)%26)
			}
			rs.want = append(rs.want, v)
			b.Add(nil, v, nil, time.Now().UnixMilli())
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

// rig is an engine, the fake S3, a store on it and an archiver serving
// the engine's remote reads, with the archiver's clock in the test's
// hands.
type rig struct {
	t     *testing.T
	e     *engine.Engine
	p     tier.Partition
	f     *faultS3
	store *s3.Store
	recs  records

	mu  sync.Mutex
	now time.Time

	a      *tier.Archiver
	reader *tier.RemoteReader
	aopts  tier.ArchiverOptions
	events []tier.UploadEvent // of every archiver of the rig
	sealed map[uint64]uint64  // base offset -> next offset of every sealed segment seen
	// chunkBytes is the read chunk of the archivers' readers (default 8
	// KiB, small segments).
	chunkBytes int64
}

// newRig opens the engine and the fake and starts the first archiver
// (edit changes its options; Store, Storage, Reader, Now and Observe are
// the rig's).
func newRig(t *testing.T, e *engine.Engine, p tier.Partition, f *faultS3, store *s3.Store, chunkBytes int64, edit func(*tier.ArchiverOptions)) *rig {
	t.Helper()
	r := &rig{t: t, e: e, p: p, f: f, store: store, now: time.Now(), sealed: map[uint64]uint64{}, chunkBytes: chunkBytes}
	r.aopts = tier.ArchiverOptions{RetryBase: time.Second, RetryMax: 2 * time.Second, Logger: discardLogger()}
	if edit != nil {
		edit(&r.aopts)
	}
	r.restart()
	return r
}

// clock is the archivers' clock.
func (r *rig) clock() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.now
}

// restart replaces the archiver and its reader with new ones, as a
// restarted server makes them: nothing of the old one's state is kept.
func (r *rig) restart() {
	r.t.Helper()
	if r.chunkBytes == 0 {
		r.chunkBytes = 8 << 10
	}
	cache, err := tier.OpenChunkCache(tier.ChunkCacheOptions{Dir: r.t.TempDir(), MaxBytes: 4 * max(r.chunkBytes, 256<<10)})
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(cache.Close)
	ro := tier.RemoteReaderOptions{ChunkBytes: r.chunkBytes, RemoteTimeout: 10 * time.Second}
	if r.aopts.Timeout > 0 {
		ro.RemoteTimeout = r.aopts.Timeout
	}
	reader, err := tier.NewRemoteReader(r.store, cache, ro)
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(reader.Close)
	o := r.aopts
	o.Store, o.Storage, o.Reader, o.Now = r.store, r.e, reader, r.clock
	o.Observe = func(ev tier.UploadEvent) {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.events = append(r.events, ev)
	}
	a, err := tier.NewArchiver(o)
	if err != nil {
		r.t.Fatal(err)
	}
	r.a, r.reader = a, reader
	r.e.SetRemoteLog(a)
}

// pass steps the clock past any backoff, notes the sealed segments and
// runs one archiver pass.
func (r *rig) pass() {
	r.t.Helper()
	r.mu.Lock()
	r.now = r.now.Add(r.aopts.RetryMax + time.Second)
	r.mu.Unlock()
	for _, tp := range r.e.TieredPartitions() {
		for _, s := range tp.Sealed {
			if next, ok := r.sealed[s.BaseOffset]; ok && next != s.NextOffset {
				r.t.Fatalf("segment %d ended at %d, now at %d", s.BaseOffset, next, s.NextOffset)
			}
			r.sealed[s.BaseOffset] = s.NextOffset
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), faultTestTimeout)
	defer cancel()
	r.a.Pass(ctx)
}

// manifest returns the archiver's manifest (nil: none yet).
func (r *rig) manifest() *tier.Manifest { return r.a.Manifest(r.p.Topic, r.p.TopicID, r.p.Partition) }

// remoteEnd returns the offset after the manifest's last segment (0: none).
func remoteEnd(m *tier.Manifest) uint64 {
	if m == nil || len(m.Segments) == 0 {
		return 0
	}
	return m.Segments[len(m.Segments)-1].LastOffset + 1
}

// check asserts the invariants after a pass: the manifest lists sealed
// segments only, each once, as they are on disk, contiguous from the
// remote log start; local retention (run now) deletes no segment the
// manifest does not list.
func (r *rig) check(when string) {
	r.t.Helper()
	m := r.manifest()
	if m != nil {
		if err := m.Check(); err != nil {
			r.t.Fatalf("%s: manifest version %d: %v", when, m.Version, err)
		}
		seen := map[uint64]bool{}
		for i, s := range m.Segments {
			if seen[s.BaseOffset] {
				r.t.Fatalf("%s: segment %d listed twice in manifest version %d", when, s.BaseOffset, m.Version)
			}
			seen[s.BaseOffset] = true
			if next, ok := r.sealed[s.BaseOffset]; !ok || next != s.LastOffset+1 {
				r.t.Fatalf("%s: manifest lists [%d, %d], the local segment was [%d, %d) (known %v)", when, s.BaseOffset, s.LastOffset, s.BaseOffset, next, ok)
			}
			if i == 0 && s.BaseOffset > m.LogStartOffset || i > 0 && s.BaseOffset != m.Segments[i-1].LastOffset+1 {
				r.t.Fatalf("%s: manifest version %d has a hole before segment %d", when, m.Version, s.BaseOffset)
			}
		}
	}
	if err := r.e.EnforceRetention(); err != nil {
		r.t.Fatalf("%s: EnforceRetention: %v", when, err)
	}
	ti, err := r.e.DescribeTopic("t")
	if err != nil {
		r.t.Fatal(err)
	}
	if start := ti.Partitions[0].LogStartOffset; start > remoteEnd(m) {
		r.t.Fatalf("%s: the local log starts at %d, the manifest ends at %d: a segment left the disk before its upload was confirmed", when, start, remoteEnd(m))
	}
}

// uploadsOK counts the successful upload events of each segment.
func (r *rig) uploadsOK() map[uint64]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[uint64]int{}
	for _, ev := range r.events {
		if ev.Err == nil {
			out[ev.BaseOffset]++
		}
	}
	return out
}

// failedUploads counts the failed upload events.
func (r *rig) failedUploads() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, ev := range r.events {
		if ev.Err != nil {
			n++
		}
	}
	return n
}

// drain runs clean passes (no hook) until every sealed segment is in the
// manifest, at most tries passes.
func (r *rig) drain(tries int) {
	r.t.Helper()
	r.f.SetHook(nil)
	for range tries {
		r.pass()
		r.check("drain")
		tp := r.e.TieredPartitions()[0]
		if len(tp.Sealed) == 0 || remoteEnd(r.manifest()) >= tp.Sealed[len(tp.Sealed)-1].NextOffset {
			return
		}
	}
	r.t.Fatalf("sealed segments not uploaded after %d clean passes; manifest ends at %d", tries, remoteEnd(r.manifest()))
}

// checkStored asserts that the newest valid manifest in the bucket is
// the archiver's.
func (r *rig) checkStored() {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), faultTestTimeout)
	defer cancel()
	scan, err := tier.LatestManifest(ctx, r.store, r.p)
	if err != nil {
		r.t.Fatal(err)
	}
	m := r.manifest()
	if scan.Manifest == nil || m == nil || scan.Manifest.Version != m.Version || len(scan.Manifest.Segments) != len(m.Segments) {
		r.t.Fatalf("the bucket's latest manifest %+v is not the archiver's %+v", scan.Manifest, m)
	}
}

// readBack reads t/0 from offset 0 to the high watermark through the
// engine's fetch (the remote log below the local log start), as a
// consumer does, retrying a failed fetch up to retries times in a row,
// and asserts that every record is what was appended, in order.
func (r *rig) readBack(maxBytes, retries int) {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), faultTestTimeout)
	defer cancel()
	next, failed := uint64(0), 0
	for {
		res, err := r.e.Fetch(ctx, "t", 0, next, maxBytes, 0)
		if err != nil {
			if failed++; failed > retries || ctx.Err() != nil {
				r.t.Fatalf("fetch at %d failed %d times in a row: %v", next, failed, err)
			}
			continue
		}
		failed = 0
		if len(res.Bufs) == 0 {
			hw := res.HighWatermark
			res.Release()
			if next != hw || next != uint64(len(r.recs.want)) {
				r.t.Fatalf("empty fetch at %d (high watermark %d, %d records appended)", next, hw, len(r.recs.want))
			}
			return
		}
		for _, buf := range res.Bufs {
			for len(buf) > 0 {
				b, rest, _, err := batch.Split(buf, 0)
				if err != nil {
					r.t.Fatal(err)
				}
				it, err := batch.NewIter(b)
				if err != nil {
					r.t.Fatal(err)
				}
				for it.Next() {
					rec := it.Record()
					if rec.Offset < next {
						continue
					}
					if rec.Offset != next {
						r.t.Fatalf("offset %d after %d: a gap", rec.Offset, next-1)
					}
					if !bytes.Equal(rec.Value, r.recs.want[next]) {
						r.t.Fatalf("record %d: %.40q..., want %.40q...", next, rec.Value, r.recs.want[next])
					}
					next++
				}
				buf = rest
			}
		}
		res.Release()
	}
}

// isManifest matches requests on manifest objects.
func isManifest(r *http.Request) bool { return strings.Contains(r.URL.Path, "/manifest-") }

// errorLines returns the ERROR lines of a JSON log.
func errorLines(log fmt.Stringer) []string {
	var out []string
	for _, l := range strings.Split(log.String(), "\n") {
		if strings.Contains(l, `"level":"ERROR"`) {
			out = append(out, l)
		}
	}
	return out
}
