package tier_test

import (
	"context"
	"errors"
	"net/http"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/seedqueue/sq/engine"
	"github.com/seedqueue/sq/tier"
	"github.com/seedqueue/sq/tier/s3"
)

// TestTierFaultsDroppedConnectionMultipart: 12 MiB segments go up in 5
// MiB parts; the connection is dropped 1 MiB into part 2 of the second
// segment, on the SDK's retry too. That upload fails and is aborted (no
// multipart upload left, no object), the manifest lists the first
// segment only and the second stays on disk; the next pass uploads it
// again, whole, and the manifest lists each segment once. The log reads
// back from offset 0 byte for byte from the bucket.
func TestTierFaultsDroppedConnectionMultipart(t *testing.T) {
	if testing.Short() {
		t.Skip("uploads 24 MiB")
	}
	e, p := openFaultEngine(t, 12<<20, 1<<20, engine.TopicConfig{LocalRetentionBytes: 1})
	f := newFaultS3(t)
	store := f.store(t, func(o *s3.Options) { o.MultipartBytes = s3.MinPartBytes })
	r := newRig(t, e, p, f, store, 1<<20, nil)
	r.recs.append(t, e, 120, 64, 4<<10) // 30 MiB in 256 KiB batches: 2 sealed segments and an active one
	if n := len(e.TieredPartitions()[0].Sealed); n != 2 {
		t.Fatalf("%d sealed segments, want 2", n)
	}
	isPart2 := func(req *http.Request) bool {
		return req.Method == http.MethodPut && req.URL.Query().Get("partNumber") == "2"
	}
	f.SetHook(f.nth(cut, 1, 2, isPart2)) // the second segment's part 2, and its retry
	f.Requests()
	r.pass()
	f.SetHook(nil)
	log := f.Requests()
	tp := e.TieredPartitions()[0]
	first, second := tp.Sealed[0], tp.Sealed[1]
	m := r.manifest()
	if m == nil || len(m.Segments) != 1 || m.Segments[0].BaseOffset != first.BaseOffset {
		t.Fatalf("after the dropped upload the manifest is %+v; want the first segment only", m)
	}
	secondKey := "/" + faultBucket + "/" + p.SegmentKeys(second.BaseOffset, 0).Log
	if n := countRequests(log, "PUT "+secondKey+"?", "partNumber=2"); n != 2 {
		t.Fatalf("part 2 of the second segment sent %d times, want 2 (dropped both): %v", n, log)
	}
	if n := countRequests(log, "DELETE "+secondKey+"?uploadId="); n != 1 {
		t.Fatalf("%d AbortMultipartUpload of the failed upload, want 1: %v", n, log)
	}
	ctx, cancel := context.WithTimeout(context.Background(), faultTestTimeout)
	defer cancel()
	if _, err := store.Head(ctx, p.SegmentKeys(second.BaseOffset, 0).Log); !errors.Is(err, tier.ErrNotFound) {
		t.Fatalf("object of the failed upload: %v, want ErrNotFound", err)
	}
	if n := pendingUploads(t, f); n != 0 {
		t.Fatalf("%d multipart uploads left after the abort", n)
	}
	r.check("after the dropped upload")
	if ti, _ := e.DescribeTopic("t"); ti.Partitions[0].LogStartOffset != second.BaseOffset {
		t.Fatalf("local log start %d, want %d: the uploaded segment goes, the failed one stays", ti.Partitions[0].LogStartOffset, second.BaseOffset)
	}

	r.pass()
	log = f.Requests()
	if n := countRequests(log, "POST "+secondKey+"?uploads"); n != 1 {
		t.Fatalf("the retry made %d multipart uploads, want 1: %v", n, log)
	}
	if n := countRequests(log, "PUT "+secondKey+"?", "partNumber="); n != 3 {
		t.Fatalf("the retry sent %d parts, want 3 (5, 5 and 2 MiB): %v", n, log)
	}
	r.check("after the retry")
	m = r.manifest()
	if len(m.Segments) != 2 || m.Segments[1].BaseOffset != second.BaseOffset || m.Segments[1].Log.Size != second.Bytes {
		t.Fatalf("after the retry the manifest is %+v", m)
	}
	for base, n := range r.uploadsOK() {
		if n != 1 {
			t.Errorf("segment %d recorded in %d manifest writes, want 1", base, n)
		}
	}
	r.checkStored()
	if ti, _ := e.DescribeTopic("t"); ti.Partitions[0].LogStartOffset != remoteEnd(m) {
		t.Fatalf("local log start %d after both uploads, want %d", ti.Partitions[0].LogStartOffset, remoteEnd(m))
	}
	r.readBack(1<<20, 0)
}

// pendingUploads counts the bucket's multipart uploads in progress
// (ListMultipartUploads, through the SDK as tier/s3 configures it).
func pendingUploads(t *testing.T, f *faultS3) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), faultTestTimeout)
	defer cancel()
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		t.Fatal(err)
	}
	client := awss3.NewFromConfig(cfg, func(o *awss3.Options) {
		o.BaseEndpoint = aws.String(f.url)
		o.UsePathStyle = true
	})
	out, err := client.ListMultipartUploads(ctx, &awss3.ListMultipartUploadsInput{Bucket: aws.String(faultBucket)})
	if err != nil {
		t.Fatal(err)
	}
	return len(out.Uploads)
}
