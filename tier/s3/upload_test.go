package s3

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/seedqueue/sq/tier"
	"github.com/seedqueue/sq/tier/tiertest"
)

// countRequests returns how many logged requests contain every one of
// parts.
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

func TestMultipartUpload(t *testing.T) {
	f := newFake(t)
	s := f.store(t, func(o *Options) { o.MultipartBytes = MinPartBytes })
	data := tiertest.Data(11 << 20) // parts of 5, 5 and 1 MiB
	f.Requests()
	tiertest.MustPut(t, s, "seg/big.log", data)
	log := f.Requests()
	if n := countRequests(log, "POST /sq-test/seg/big.log?uploads"); n != 1 {
		t.Errorf("%d CreateMultipartUpload requests, want 1: %v", n, log)
	}
	if n := countRequests(log, "PUT /sq-test/seg/big.log?", "partNumber="); n != 3 {
		t.Errorf("%d UploadPart requests, want 3: %v", n, log)
	}
	got, err := tiertest.ReadRange(t, s, "seg/big.log", 0, -1)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read back %d bytes, %v; want the 11 MiB put", len(got), err)
	}
	// A range across the boundary of parts 1 and 2.
	got, err = tiertest.ReadRange(t, s, "seg/big.log", 5<<20-10, 20)
	if err != nil || !bytes.Equal(got, data[5<<20-10:5<<20+10]) {
		t.Fatalf("range across parts: %d bytes, %v", len(got), err)
	}
	// At the threshold exactly, one PutObject.
	tiertest.MustPut(t, s, "seg/small.log", data[:MinPartBytes])
	if log := f.Requests(); countRequests(log, "?uploads") != 0 {
		t.Errorf("an object of MultipartBytes went multipart: %v", log)
	}
}

func TestPartBytes(t *testing.T) {
	s := &Store{opts: Options{MultipartBytes: MinPartBytes}}
	for _, tc := range []struct{ size, part int64 }{
		{11 << 20, MinPartBytes},
		{MinPartBytes * MaxParts, MinPartBytes},
		{MinPartBytes*MaxParts + 1, MinPartBytes + 1},
		{5 << 40, (5<<40 + MaxParts - 1) / MaxParts},
	} {
		if got := s.partBytes(tc.size); got != tc.part || (tc.size+got-1)/got > MaxParts {
			t.Errorf("partBytes(%d) = %d, want %d", tc.size, got, tc.part)
		}
	}
}

func TestMultipartAbortedOnFailure(t *testing.T) {
	f := newFake(t)
	s := f.store(t, func(o *Options) { o.MultipartBytes = MinPartBytes; o.MaxAttempts = 2 })
	f.SetHook(func(w http.ResponseWriter, r *http.Request) bool {
		if r.Method == http.MethodPut && r.URL.Query().Get("partNumber") == "2" {
			_, _ = io.Copy(io.Discard, r.Body)
			http.Error(w, "<Error><Code>InternalError</Code></Error>", http.StatusInternalServerError)
			return true
		}
		return false
	})
	f.Requests()
	data := tiertest.Data(11 << 20)
	_, err := s.Put(testCtx(t), "seg/failed.log", bytes.NewReader(data), int64(len(data)), tier.PutOptions{})
	if err == nil {
		t.Fatal("Put with part 2 failing: nil error")
	}
	log := f.Requests()
	if n := countRequests(log, "partNumber=2"); n != 2 {
		t.Errorf("part 2 tried %d times, want MaxAttempts = 2: %v", n, log)
	}
	if n := countRequests(log, "DELETE /sq-test/seg/failed.log?uploadId="); n != 1 {
		t.Errorf("%d AbortMultipartUpload requests, want 1: %v", n, log)
	}
	if n := countRequests(log, "partNumber=3"); n != 0 {
		t.Errorf("part 3 sent after part 2 failed: %v", log)
	}
	if _, err := s.Head(testCtx(t), "seg/failed.log"); !errors.Is(err, tier.ErrNotFound) {
		t.Errorf("Head after a failed upload: %v, want ErrNotFound", err)
	}
	out, err := s.client.ListMultipartUploads(testCtx(t), &awss3.ListMultipartUploadsInput{Bucket: &s.opts.Bucket})
	if err != nil || len(out.Uploads) != 0 {
		t.Errorf("uploads left after abort: %v, %v", out, err)
	}
}

func TestRetriesTransientFailures(t *testing.T) {
	f := newFake(t)
	s := f.store(t, func(o *Options) { o.MaxAttempts = 4 })
	var failures atomic.Int32 // requests still to fail
	failures.Store(2)
	f.SetHook(func(w http.ResponseWriter, r *http.Request) bool {
		if r.Method == http.MethodPut && failures.Add(-1) >= 0 {
			_, _ = io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "application/xml")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, "<Error><Code>ServiceUnavailable</Code><Message>busy</Message></Error>")
			return true
		}
		return false
	})
	f.Requests()
	tiertest.MustPut(t, s, "seg/retried.log", tiertest.Data(1000))
	if n := countRequests(f.Requests(), "PUT /sq-test/seg/retried.log"); n != 3 {
		t.Fatalf("%d PUT attempts, want 3 (two 503s, then success)", n)
	}

	// Past MaxAttempts the error comes back.
	failures.Store(1000)
	_, err := s.Put(testCtx(t), "seg/retried2.log", bytes.NewReader([]byte("x")), 1, tier.PutOptions{})
	if err == nil || !strings.Contains(err.Error(), "503") {
		t.Fatalf("Put with every attempt failing: %v, want the 503", err)
	}
	if n := countRequests(f.Requests(), "PUT /sq-test/seg/retried2.log"); n != 4 {
		t.Fatalf("%d PUT attempts, want MaxAttempts = 4", n)
	}
}

// flipUploadedByte returns a hook that flips one byte of the body of every
// request that uploads data to key, before the fake stores it.
func flipUploadedByte(key string) func(w http.ResponseWriter, r *http.Request) bool {
	return func(w http.ResponseWriter, r *http.Request) bool {
		if r.Method != http.MethodPut || !strings.HasSuffix(r.URL.Path, "/"+key) || r.URL.Query().Has("uploadId") && r.URL.Query().Get("partNumber") != "2" {
			return false
		}
		b, _ := io.ReadAll(r.Body)
		if len(b) > 0 {
			b[len(b)/2] ^= 0x80
		}
		r.Body = io.NopCloser(bytes.NewReader(b))
		return false
	}
}

func TestPutDetectsCorruptUpload(t *testing.T) {
	f := newFake(t)
	for _, tc := range []struct {
		name string
		size int
	}{{"single", 4096}, {"multipart", 11 << 20}} {
		t.Run(tc.name, func(t *testing.T) {
			s := f.store(t, func(o *Options) { o.MultipartBytes = MinPartBytes })
			key := "seg/corrupt-" + tc.name + ".log"
			f.SetHook(flipUploadedByte(key))
			data := tiertest.Data(tc.size)
			_, err := s.Put(testCtx(t), key, bytes.NewReader(data), int64(len(data)), tier.PutOptions{})
			if !errors.Is(err, tier.ErrCorrupt) {
				t.Fatalf("Put whose bytes were changed in transit: %v, want ErrCorrupt", err)
			}
			// A retried Put, with the transport healthy again, replaces the object.
			f.SetHook(nil)
			tiertest.MustPut(t, s, key, data)
		})
	}
}

func TestVerifyHeadTrustsTheStore(t *testing.T) {
	f := newFake(t)
	s := f.store(t, func(o *Options) { o.Verify = VerifyHead })
	f.SetHook(flipUploadedByte("seg/head.log"))
	f.Requests()
	data := tiertest.Data(4096)
	if _, err := s.Put(testCtx(t), "seg/head.log", bytes.NewReader(data), int64(len(data)), tier.PutOptions{}); err != nil {
		t.Fatalf("Put with VerifyHead: %v", err)
	}
	if n := countRequests(f.Requests(), "GET /sq-test/seg/head.log"); n != 0 {
		t.Fatalf("VerifyHead read the object back %d times", n)
	}
	// The damage shows when the object is verified against the manifest's CRC.
	if err := tier.Verify(testCtx(t), s, "seg/head.log", int64(len(data)), tier.Checksum(data)); !errors.Is(err, tier.ErrCorrupt) {
		t.Fatalf("Verify: %v, want ErrCorrupt", err)
	}
}

func TestVerifyDetectsDamageAtRest(t *testing.T) {
	f := newFake(t)
	s := f.store(t, nil)
	data := tiertest.Data(100_000)
	info := tiertest.MustPut(t, s, "seg/rest.log", data)
	// Damage the stored bytes behind the server's back, keeping the metadata.
	obj, err := f.Backend.HeadObject(testBucket, "seg/rest.log")
	if err != nil {
		t.Fatal(err)
	}
	obj.Contents.Close()
	bad := bytes.Clone(data)
	bad[12345] ^= 0x04
	if _, err := f.Backend.PutObject(testBucket, "seg/rest.log", obj.Metadata, bytes.NewReader(bad), int64(len(bad)), nil); err != nil {
		t.Fatal(err)
	}
	head, err := s.Head(testCtx(t), "seg/rest.log")
	if err != nil || head.CRC32C != info.CRC32C {
		t.Fatalf("Head after damage: %+v, %v; want the recorded CRC-32C still", head, err)
	}
	err = tier.Verify(testCtx(t), s, "seg/rest.log", info.Size, info.CRC32C)
	if !errors.Is(err, tier.ErrCorrupt) || !strings.Contains(err.Error(), "seg/rest.log") {
		t.Fatalf("Verify of a damaged object: %v, want ErrCorrupt naming the key", err)
	}
}

func TestMultipartCompleteAnswerLost(t *testing.T) {
	f := newFake(t)
	s := f.store(t, func(o *Options) { o.MultipartBytes = MinPartBytes })
	f.SetHook(f.loseAnswer(func(r *http.Request) bool {
		return r.Method == http.MethodPost && r.URL.Query().Has("uploadId")
	}))
	f.Requests()
	tiertest.MustPut(t, s, "seg/lost.log", tiertest.Data(11<<20))
	if n := countRequests(f.Requests(), "POST /sq-test/seg/lost.log?uploadId="); n != 2 {
		t.Fatalf("%d CompleteMultipartUpload requests, want 2 (the lost one retried)", n)
	}
}

func TestGetConnectionBrokenMidBody(t *testing.T) {
	f := newFake(t)
	s := f.store(t, nil)
	tiertest.MustPut(t, s, "seg/cut.log", tiertest.Data(100_000))
	f.SetHook(func(w http.ResponseWriter, r *http.Request) bool {
		if r.Method != http.MethodGet || !strings.HasSuffix(r.URL.Path, "/seg/cut.log") {
			return false
		}
		w.Header().Set("Content-Length", "1000")
		w.Header().Set("Content-Range", "bytes 500-1499/100000")
		w.WriteHeader(http.StatusPartialContent)
		_, _ = w.Write(tiertest.Data(1500)[500:600])
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler) // the connection drops after 100 of 1000 bytes
	})
	rc, err := s.Get(testCtx(t), "seg/cut.log", 500, 1000)
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	defer rc.Close()
	got, err := io.ReadAll(rc)
	if err == nil {
		t.Fatalf("read %d bytes of 1000 and no error: a short read passed as whole", len(got))
	}
}
