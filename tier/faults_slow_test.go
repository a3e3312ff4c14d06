package tier_test

import (
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seedqueue/sq/engine"
	"github.com/seedqueue/sq/tier"
)

// TestTierFaultsSlowResponses: S3 holds the k-th request of a pass past
// the archiver's Timeout (200 ms), for k swept over the requests of a
// pass, the write either not done or done with its answer late. The pass
// fails cleanly (the call times out, nothing is recorded that was not
// confirmed), the next pass retries, and after every pass the invariants
// hold. Then a consumer reads everything from offset 0 while every seventh
// GET is held past the reader's remote timeout.
func TestTierFaultsSlowResponses(t *testing.T) {
	e, p := openFaultEngine(t, 16<<10, 8<<10, engine.TopicConfig{LocalRetentionBytes: 32 << 10})
	f := newFaultS3(t)
	r := newRig(t, e, p, f, f.store(t, nil), 0, func(o *tier.ArchiverOptions) { o.Timeout = 200 * time.Millisecond })
	r.recs.append(t, e, 4, 10, 500) // a sealed segment
	r.pass()
	r.check("first pass")
	for k := range 14 {
		for _, kind := range []fault{stall, stallAfter} {
			r.recs.append(t, e, 3, 10, 500) // about a segment
			f.SetHook(f.nth(kind, k, 1, nil))
			r.pass()
			f.SetHook(nil)
			r.check(fmt.Sprintf("%s at request %d", kind, k))
		}
	}
	if r.failedUploads() == 0 {
		t.Fatal("no upload timed out: the faults missed the uploads")
	}
	r.drain(5)
	for base, n := range r.uploadsOK() {
		if n != 1 {
			t.Errorf("segment %d recorded in %d manifest writes, want 1", base, n)
		}
	}
	if got, want := len(r.manifest().Segments), len(r.sealed); got != want {
		t.Fatalf("manifest lists %d segments, %d were sealed", got, want)
	}
	r.checkStored()

	var gets atomic.Int64
	f.SetHook(func(w http.ResponseWriter, req *http.Request) bool {
		if req.Method != http.MethodGet || gets.Add(1)%7 != 0 {
			return false
		}
		f.apply(stall, w, req)
		return true
	})
	r.readBack(64<<10, 20)
	f.SetHook(nil)
	st := r.reader.Stats()
	if st.Reads == 0 || st.RemoteTimeouts == 0 {
		t.Fatalf("the remote reads met no timeout: %+v", st)
	}
	t.Logf("%d segments, %d failed uploads, remote reads: %+v", len(r.sealed), r.failedUploads(), st)
}
