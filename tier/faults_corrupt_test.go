package tier_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/seedqueue/sq/engine"
	"github.com/seedqueue/sq/tier"
)

// syncBuffer is a bytes.Buffer safe for concurrent writes (a log sink).
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// corruptObject flips one byte in the middle of the object under key.
func corruptObject(t *testing.T, s tier.ObjectStore, key string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), faultTestTimeout)
	defer cancel()
	rc, err := s.Get(ctx, key, 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(rc)
	rc.Close()
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0x01
	if _, err := s.Put(ctx, key, bytes.NewReader(b), int64(len(b)), tier.PutOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestTierFaultsCorruptManifest: the newest manifest version in the
// bucket has a byte flipped. A restarted archiver reports it (an ERROR
// naming the key), goes on from the previous valid version (uploading
// again what only the damaged one listed) and writes a new version
// listing every segment once; the damaged version is not overwritten.
// Then the version just written is damaged as well: the next restart
// still finds a valid version to go on from, which the previous write
// kept, and nothing is lost or listed twice.
func TestTierFaultsCorruptManifest(t *testing.T) {
	e, p := openFaultEngine(t, 16<<10, 8<<10, engine.TopicConfig{LocalRetentionBytes: 32 << 10})
	f := newFaultS3(t)
	var logs syncBuffer
	r := newRig(t, e, p, f, f.store(t, nil), 0, func(o *tier.ArchiverOptions) {
		o.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
	})
	for range 4 {
		r.recs.append(t, e, 3, 10, 500)
		r.pass()
		r.check("upload")
	}
	good := r.manifest()
	if good.Version < 3 {
		t.Fatalf("manifest version %d after 4 passes", good.Version)
	}

	for round, damaged := range []uint64{good.Version, good.Version + 1} {
		corruptObject(t, r.store, p.ManifestKey(damaged))
		r.restart()
		f.Requests()
		r.pass()
		r.check(fmt.Sprintf("round %d, after the restart", round))
		errs := errorLines(&logs)
		if len(errs) == 0 || !strings.Contains(strings.Join(errs, "\n"), p.ManifestKey(damaged)) {
			t.Fatalf("round %d: the damaged manifest %s was not reported: %q", round, p.ManifestKey(damaged), errs)
		}
		m := r.manifest()
		if m == nil || m.Version != damaged+1 {
			t.Fatalf("round %d: manifest %+v, want version %d (never over the damaged one)", round, m, damaged+1)
		}
		if len(m.Segments) != len(good.Segments) {
			t.Fatalf("round %d: %d segments listed, want %d", round, len(m.Segments), len(good.Segments))
		}
		for i, s := range m.Segments {
			g := good.Segments[i]
			if s.BaseOffset != g.BaseOffset || s.LastOffset != g.LastOffset || s.Log != g.Log {
				t.Fatalf("round %d: segment %d is %+v, was %+v", round, i, s, g)
			}
		}
		if countRequests(f.Requests(), "PUT /"+faultBucket+"/", ".log") == 0 {
			t.Fatalf("round %d: nothing uploaded again from the previous valid version", round)
		}
		r.checkStored()
	}
	r.readBack(64<<10, 0)
}
