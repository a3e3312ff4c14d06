package clusternet_test

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seedqueue/sq/internal/clusternet"
	"github.com/seedqueue/sq/internal/s3fake"
	"github.com/seedqueue/sq/tier"
	"github.com/seedqueue/sq/tier/s3"
)

// Where the fake S3 of a cluster test serves the nodes.
const (
	fakeS3Port   = 9000
	fakeS3Bucket = "sq-cluster"
)

// fakeS3 is gofakes3 (in memory, with the bucket fakeS3Bucket) served by
// the test process on two listeners: one in the cluster's client
// namespace (URL, ClientIP:fakeS3Port), which every node reaches over the
// bridge, and one on 127.0.0.1 for the test's own reads (Store). Once Hold
// is armed, a PUT from a given IP of a key with a given suffix is stored,
// then its answer is held back until Release or until its client goes
// away: an upload in flight whose uploader never sees it complete, the
// object orphaned in the bucket.
type fakeS3 struct {
	// URL is the endpoint the nodes use (--s3-endpoint).
	URL string
	// Store reads the bucket from the test process.
	Store tier.ObjectStore

	mu         sync.Mutex
	holdFrom   string        // remote IP whose PUTs are held; "" none
	holdSuffix string        // key suffix of the PUTs held
	release    chan struct{} // closed by Release
	held       chan string   // keys of held PUTs, as they are held
	puts       []string      // "<ip> <key>" of every PUT, in order
}

// startFakeS3 starts the fake for cluster c and stops it when t ends. It
// sets the AWS SDK's environment for the test process and, through it,
// for the nodes (Node.Start passes the test's environment on, without
// SQ_* variables): static credentials, no shared files, no IMDS.
func startFakeS3(t *testing.T, c *clusternet.Cluster) *fakeS3 {
	t.Helper()
	s3fake.SetAWSEnv(t)
	f := &fakeS3{release: make(chan struct{}), held: make(chan string, 16)}
	inner := s3fake.New(t, fakeS3Bucket)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { f.serve(inner, w, r) })
	addr := net.JoinHostPort(clusternet.ClientIP, strconv.Itoa(fakeS3Port))
	l, err := c.Client().Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()
	local := httptest.NewServer(h)
	t.Cleanup(func() {
		f.Release()
		srv.Close()
		local.Close()
	})
	f.URL = "http://" + addr
	ctx, cancel := context.WithTimeout(context.Background(), cliTimeout)
	defer cancel()
	f.Store, err = s3.New(ctx, s3.Options{Bucket: fakeS3Bucket, Endpoint: local.URL})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// serve records r and passes it to inner, holding back the answer of a
// PUT that Hold names.
func (f *fakeS3) serve(inner http.Handler, w http.ResponseWriter, r *http.Request) {
	ip, _, _ := net.SplitHostPort(r.RemoteAddr)
	key := strings.TrimPrefix(r.URL.Path, "/"+fakeS3Bucket+"/")
	if r.Method != http.MethodPut {
		inner.ServeHTTP(w, r)
		return
	}
	f.mu.Lock()
	f.puts = append(f.puts, ip+" "+key)
	hold := f.holdFrom != "" && ip == f.holdFrom && strings.HasSuffix(key, f.holdSuffix)
	release := f.release
	f.mu.Unlock()
	if !hold {
		inner.ServeHTTP(w, r)
		return
	}
	rec := httptest.NewRecorder()
	inner.ServeHTTP(rec, r) // stored: the object is in the bucket
	select {
	case f.held <- key:
	default:
	}
	select {
	case <-release:
	case <-r.Context().Done(): // the uploader went away (killed)
		return
	}
	for k, v := range rec.Header() {
		w.Header()[k] = v
	}
	w.WriteHeader(rec.Code)
	_, _ = w.Write(rec.Body.Bytes())
}

// Hold arms the fake: from now on it holds the answer of every PUT from ip
// of a key ending in suffix.
func (f *fakeS3) Hold(ip, suffix string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.holdFrom, f.holdSuffix = ip, suffix
}

// Release disarms the fake and answers the PUTs it holds.
func (f *fakeS3) Release() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.holdFrom = ""
	select {
	case <-f.release:
	default:
		close(f.release)
	}
}

// WaitHeld returns the key of a PUT held since Hold, failing t after d.
func (f *fakeS3) WaitHeld(t *testing.T, d time.Duration) string {
	t.Helper()
	select {
	case key := <-f.held:
		return key
	case <-time.After(d):
		t.Fatalf("no PUT held within %v; PUTs:\n%s", d, f.Puts())
		return ""
	}
}

// Puts returns "<ip> <key>" of every PUT so far, one a line.
func (f *fakeS3) Puts() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var b bytes.Buffer
	for _, p := range f.puts {
		b.WriteString(p + "\n")
	}
	return b.String()
}
