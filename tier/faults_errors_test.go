package tier_test

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"testing"

	"github.com/seedqueue/sq/engine"
)

// TestTierFaultsServerErrors: S3 answers 500 to the k-th request of a
// pass and the one after (the SDK's retry), for k swept over every request
// of a pass (listing, segment and index PUTs, their verification HEADs and
// GETs, the manifest PUT, the deletion of old manifests), the write either
// refused or done with its answer lost. After every pass: the manifest
// lists each sealed segment at most once and as it is on disk, and local
// retention deleted only what it lists; the failed uploads are retried and
// each segment is recorded once. Then a consumer reads everything from
// offset 0, byte for byte, through GETs of which a third fail.
func TestTierFaultsServerErrors(t *testing.T) {
	e, p := openFaultEngine(t, 16<<10, 8<<10, engine.TopicConfig{LocalRetentionBytes: 32 << 10})
	f := newFaultS3(t)
	r := newRig(t, e, p, f, f.store(t, nil), 0, nil)
	for k := range 32 {
		for _, kind := range []fault{refuse, lose} {
			r.recs.append(t, e, 2, 10, 500) // ~10 KiB: a segment every other round
			f.SetHook(f.nth(kind, k, 2, nil))
			r.pass()
			f.SetHook(nil)
			r.check(fmt.Sprintf("%s at request %d", kind, k))
		}
	}
	if r.failedUploads() == 0 {
		t.Fatal("no upload failed: the faults missed the uploads")
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
	ti, _ := e.DescribeTopic("t")
	if ti.Partitions[0].LogStartOffset == 0 {
		t.Fatal("local retention deleted nothing: the read below does not test the remote log")
	}

	// One GET in three fails (twice in a row, past the SDK's retry, now
	// and then); the consumer retries a failed fetch.
	var mu sync.Mutex
	rng := rand.New(rand.NewPCG(14, 5))
	f.SetHook(func(w http.ResponseWriter, req *http.Request) bool {
		mu.Lock()
		fail := req.Method == http.MethodGet && rng.IntN(3) == 0
		mu.Unlock()
		if fail {
			f.apply(refuse, w, req)
		}
		return fail
	})
	r.readBack(64<<10, 50)
	f.SetHook(nil)
	st := r.reader.Stats()
	if st.Reads == 0 || st.ReadErrors == 0 {
		t.Fatalf("the remote reads met no failure: %+v", st)
	}
	t.Logf("%d segments, %d failed uploads, remote reads: %+v", len(r.sealed), r.failedUploads(), st)
}
