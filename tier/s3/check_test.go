package s3

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/seedqueue/sq/tier"

	"github.com/seedqueue/sq/internal/s3fake"
)

func TestCheckBucket(t *testing.T) {
	f := newFake(t)
	if err := f.store(t, nil).Check(testCtx(t)); err != nil {
		t.Fatalf("Check of an existing bucket: %v", err)
	}

	missing := f.store(t, func(o *Options) { o.Bucket = "no-such-bucket" })
	err := missing.Check(testCtx(t))
	if !errors.Is(err, tier.ErrBucket) || !errors.Is(err, tier.ErrNotFound) ||
		!strings.Contains(err.Error(), `"no-such-bucket"`) || !strings.Contains(err.Error(), "does not exist") || !strings.Contains(err.Error(), f.url) {
		t.Fatalf("Check of a missing bucket: %v; want ErrBucket and ErrNotFound, naming the bucket and endpoint", err)
	}
	t.Logf("missing bucket: %v", err)
	if _, err := missing.Get(testCtx(t), "k", 0, -1); !errors.Is(err, tier.ErrBucket) || errors.Is(err, tier.ErrNotFound) {
		t.Fatalf("Get from a missing bucket: %v; want ErrBucket, not ErrNotFound (the object is not known to be gone)", err)
	}

	f.SetHook(func(w http.ResponseWriter, r *http.Request) bool {
		w.WriteHeader(http.StatusForbidden)
		return true
	})
	err = f.store(t, nil).Check(testCtx(t))
	if !errors.Is(err, tier.ErrBucket) || errors.Is(err, tier.ErrNotFound) || !strings.Contains(err.Error(), "access denied") {
		t.Fatalf("Check when denied: %v; want ErrBucket saying access denied", err)
	}
}

func TestCheckUnreachableEndpoint(t *testing.T) {
	s3fake.SetAWSEnv(t)
	// A port that was just free: connections are refused.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	s, err := New(testCtx(t), Options{Bucket: testBucket, Endpoint: "http://" + addr, MaxAttempts: 3, BaseDelay: time.Millisecond, MaxBackoff: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = s.Check(testCtx(t))
	if !errors.Is(err, tier.ErrBucket) || !strings.Contains(err.Error(), "cannot reach the endpoint") || !strings.Contains(err.Error(), addr) {
		t.Fatalf("Check of an unreachable endpoint: %v; want ErrBucket saying it cannot be reached", err)
	}
	t.Logf("unreachable endpoint: %v", err)
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("Check took %v", d)
	}

	// A server that never answers: the caller's deadline bounds the check.
	hang, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer hang.Close()
	s, err = New(testCtx(t), Options{Bucket: testBucket, Endpoint: "http://" + hang.Addr().String(), MaxAttempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	err = s.Check(ctx)
	if !errors.Is(err, tier.ErrBucket) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Check of a silent endpoint: %v; want ErrBucket and the deadline", err)
	}
}

func TestOptions(t *testing.T) {
	var o Options
	o.Bucket = "b"
	o.Defaults()
	if err := o.Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	if o.MultipartBytes != 64<<20 || o.MaxAttempts != DefaultMaxAttempts || o.Verify != VerifyReadBack {
		t.Fatalf("defaults: %+v", o)
	}
	bad := Options{Endpoint: "127.0.0.1:9000", MultipartBytes: 4 << 20, MaxAttempts: -1, BaseDelay: -1, Verify: 7}
	err := bad.Validate()
	for _, want := range []string{"no bucket", "endpoint", "multipart bytes 4194304", "max attempts", "negative backoff", "verify mode"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate: %v; want a problem mentioning %q", err, want)
		}
	}
	if (&Options{Bucket: "b", MultipartBytes: 6 << 30, MaxAttempts: 1}).Validate() == nil {
		t.Error("Validate accepted 6 GiB parts")
	}
}

func TestNewNeedsRegionWithoutEndpoint(t *testing.T) {
	s3fake.SetAWSEnv(t)
	t.Setenv("AWS_REGION", "")
	t.Setenv("AWS_DEFAULT_REGION", "")
	if _, err := New(testCtx(t), Options{Bucket: "b"}); err == nil || !strings.Contains(err.Error(), "region") {
		t.Fatalf("New without a region or endpoint: %v, want an error about the region", err)
	}
	s, err := New(testCtx(t), Options{Bucket: "b", Endpoint: "http://127.0.0.1:9"})
	if err != nil || s.Region() != DefaultRegion {
		t.Fatalf("New with an endpoint and no region: %v, region %q; want %q", err, s.Region(), DefaultRegion)
	}
}
