package s3

import (
	"bytes"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/tier"
	"github.com/seedqueue/sq/tier/tiertest"
)

// uploadSegment puts a segment's three objects and returns its manifest
// entry.
func uploadSegment(t *testing.T, s tier.ObjectStore, p tier.Partition, base, last uint64, epoch uint32) tier.SegmentEntry {
	t.Helper()
	keys := p.SegmentKeys(base, epoch)
	e := tier.SegmentEntry{BaseOffset: base, LastOffset: last, MaxTimestampMs: 1_700_000_000_000, LeaderEpoch: epoch}
	for _, o := range []struct {
		ref  *tier.ObjectRef
		key  string
		size int
	}{{&e.Log, keys.Log, 20_000}, {&e.Index, keys.Index, 64}, {&e.TimeIndex, keys.TimeIndex, 96}} {
		info := tiertest.MustPut(t, s, o.key, tiertest.Data(o.size))
		*o.ref = tier.ObjectRef{Key: info.Key, Size: info.Size, CRC32C: info.CRC32C}
	}
	return e
}

func TestManifestOnS3(t *testing.T) {
	f := newFake(t)
	s := f.store(t, nil)
	p := tier.Partition{Topic: "orders", TopicID: api.NewTopicID(), Partition: 2}

	scan, err := tier.LatestManifest(testCtx(t), s, p)
	if err != nil || scan.Manifest != nil || scan.NextVersion != 1 {
		t.Fatalf("empty bucket: %+v, %v", scan, err)
	}
	m := &tier.Manifest{Topic: p.Topic, TopicID: p.TopicID, Partition: p.Partition, LeaderEpoch: 1}
	for v := uint64(1); v <= 3; v++ {
		m.Version = v
		m.Segments = append(m.Segments, uploadSegment(t, s, p, (v-1)*1000, v*1000-1, 1))
		if _, err := tier.PutManifest(testCtx(t), s, m); err != nil {
			t.Fatalf("PutManifest %d: %v", v, err)
		}
	}
	other := *m
	other.LeaderEpoch = 2 // another writer's version 3
	if _, err := tier.PutManifest(testCtx(t), s, &other); !errors.Is(err, tier.ErrExists) {
		t.Fatalf("PutManifest of another version 3: %v, want ErrExists", err)
	}
	scan, err = tier.LatestManifest(testCtx(t), s, p)
	if err != nil || scan.Manifest == nil || scan.Manifest.Version != 3 || len(scan.Manifest.Segments) != 3 || scan.NextVersion != 4 {
		t.Fatalf("after three versions: %+v, %v", scan, err)
	}
	for _, seg := range scan.Manifest.Segments {
		if err := tier.Verify(testCtx(t), s, seg.Log.Key, seg.Log.Size, seg.Log.CRC32C); err != nil {
			t.Fatalf("Verify %s: %v", seg.Log.Key, err)
		}
	}

	// Version 4 is damaged in the store: reported, and version 3 is used.
	m.Version = 4
	m.Segments = append(m.Segments, uploadSegment(t, s, p, 3000, 3999, 1))
	if _, err := tier.PutManifest(testCtx(t), s, m); err != nil {
		t.Fatal(err)
	}
	obj, err := f.Backend.GetObject(testBucket, p.ManifestKey(4), nil)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	_, _ = buf.ReadFrom(obj.Contents)
	obj.Contents.Close()
	b := buf.Bytes()
	i := bytes.Index(b, []byte(`"last_offset":3999`))
	b[i+len(`"last_offset":`)] = '4' // 4999: valid JSON, wrong checksum
	if _, err := f.Backend.PutObject(testBucket, p.ManifestKey(4), obj.Metadata, bytes.NewReader(b), int64(len(b)), nil); err != nil {
		t.Fatal(err)
	}
	scan, err = tier.LatestManifest(testCtx(t), s, p)
	if err != nil || scan.Manifest == nil || scan.Manifest.Version != 3 || scan.NextVersion != 5 {
		t.Fatalf("with version 4 corrupt: %+v, %v; want version 3 and next version 5", scan, err)
	}
	if len(scan.Skipped) != 1 || !errors.Is(scan.Skipped[0], tier.ErrCorrupt) || !strings.Contains(scan.Skipped[0].Error(), p.ManifestKey(4)) {
		t.Fatalf("Skipped = %v, want version 4 reported as corrupt", scan.Skipped)
	}
	t.Logf("reported: %v", scan.Skipped[0])
}

func TestPutManifestAnswerLost(t *testing.T) {
	f := newFake(t)
	s := f.store(t, nil)
	p := tier.Partition{Topic: "orders", TopicID: api.NewTopicID(), Partition: 0}
	m := &tier.Manifest{Topic: p.Topic, TopicID: p.TopicID, Partition: p.Partition, Version: 1, LeaderEpoch: 3}
	m.Segments = append(m.Segments, uploadSegment(t, s, p, 0, 99, 3))
	f.SetHook(f.loseAnswer(func(r *http.Request) bool {
		return r.Method == http.MethodPut && strings.HasSuffix(r.URL.Path, p.ManifestKey(1))
	}))
	f.Requests()
	if _, err := tier.PutManifest(testCtx(t), s, m); err != nil {
		t.Fatalf("PutManifest whose first answer was lost: %v, want success", err)
	}
	if n := countRequests(f.Requests(), "PUT /sq-test/"+p.ManifestKey(1)); n != 2 {
		t.Fatalf("%d PUTs of the manifest, want 2 (the SDK retried the lost one)", n)
	}
	scan, err := tier.LatestManifest(testCtx(t), s, p)
	if err != nil || scan.Manifest == nil || scan.Manifest.Version != 1 {
		t.Fatalf("LatestManifest: %+v, %v", scan, err)
	}
}
