// Package s3fake is an S3 server for tests: gofakes3 on its in-memory
// backend, with one bucket, behind a hook that can see, change or fail
// each request, and the AWS SDK environment that points a test's client
// (and the servers it starts) at it with static credentials. The tests of
// tier, tier/s3, cmd/sq-server and internal/clusternet share it.
package s3fake

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
)

// Hook sees a request before the fake does; it returns true when it
// answered the request itself (the fake then does not see it).
type Hook func(w http.ResponseWriter, r *http.Request) bool

// Server is the fake as an http.Handler. Serve it with httptest (Start)
// or on any listener.
type Server struct {
	// Backend holds the objects.
	Backend *s3mem.Backend
	// Inner is gofakes3 itself, behind the hook: a hook may pass a
	// request to it and keep the answer back.
	Inner http.Handler

	mu   sync.Mutex
	hook Hook
	log  []string // "METHOD path?query" of every request
}

// New returns a fake holding the empty bucket.
func New(t testing.TB, bucket string) *Server {
	t.Helper()
	b := s3mem.New()
	if err := b.CreateBucket(bucket); err != nil {
		t.Fatal(err)
	}
	return &Server{Backend: b, Inner: gofakes3.New(b).Server()}
}

// ServeHTTP records r, then passes it to the hook and, unless the hook
// answered it, to the fake.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.log = append(s.log, r.Method+" "+r.URL.RequestURI())
	hook := s.hook
	s.mu.Unlock()
	if hook != nil && hook(w, r) {
		return
	}
	s.Inner.ServeHTTP(w, r)
}

// SetHook installs h (nil: none).
func (s *Server) SetHook(h Hook) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hook = h
}

// Requests returns the requests seen since the last call, as "METHOD
// path?query".
func (s *Server) Requests() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.log
	s.log = nil
	return out
}

// Start sets the AWS environment (SetAWSEnv), starts a fake with bucket
// over HTTP on 127.0.0.1 and stops it when t ends. It returns the fake
// and its endpoint URL.
func Start(t testing.TB, bucket string) (*Server, string) {
	t.Helper()
	SetAWSEnv(t)
	s := New(t, bucket)
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	return s, srv.URL
}

// SetAWSEnv gives the AWS SDK static credentials and a region for the
// rest of test t, and keeps it away from the machine's shared files and
// from IMDS; processes the test starts inherit it.
func SetAWSEnv(t testing.TB) {
	dir := t.TempDir()
	for k, v := range map[string]string{"AWS_ACCESS_KEY_ID": "sqtestkey", "AWS_SECRET_ACCESS_KEY": "sqtestsecret", "AWS_SESSION_TOKEN": "",
		"AWS_REGION": "us-east-1", "AWS_PROFILE": "", "AWS_CONFIG_FILE": dir + "/config", "AWS_SHARED_CREDENTIALS_FILE": dir + "/credentials",
		"AWS_EC2_METADATA_DISABLED": "true"} {
		t.Setenv(k, v)
	}
}
