package s3

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
)

// testBucket is the bucket every fake starts with.
const testBucket = "sq-test"

// fake is an in-process S3 server (gofakes3 on its in-memory backend)
// served over real HTTP on 127.0.0.1, with a hook in front of it that can
// see, change or fail each request.
type fake struct {
	backend *s3mem.Backend
	srv     *httptest.Server
	inner   http.Handler // gofakes3 itself, behind the hook

	mu   sync.Mutex
	hook func(w http.ResponseWriter, r *http.Request) bool // true: answered, do not pass on
	log  []string                                          // "METHOD path?query" of every request
}

// setAWSEnv gives the SDK static credentials and a region, and keeps it
// away from the machine's AWS files and from IMDS.
func setAWSEnv(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("AWS_ACCESS_KEY_ID", "sqtestkey")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "sqtestsecret")
	t.Setenv("AWS_SESSION_TOKEN", "")
	t.Setenv("AWS_REGION", "us-east-1")
	t.Setenv("AWS_PROFILE", "")
	t.Setenv("AWS_CONFIG_FILE", dir+"/config")
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", dir+"/credentials")
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
}

// newFake starts a fake S3 with testBucket and stops it at the test's end.
func newFake(t *testing.T) *fake {
	t.Helper()
	setAWSEnv(t)
	f := &fake{backend: s3mem.New()}
	if err := f.backend.CreateBucket(testBucket); err != nil {
		t.Fatal(err)
	}
	faker := gofakes3.New(f.backend)
	f.inner = faker.Server()
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.log = append(f.log, r.Method+" "+r.URL.RequestURI())
		hook := f.hook
		f.mu.Unlock()
		if hook != nil && hook(w, r) {
			return
		}
		f.inner.ServeHTTP(w, r)
	}))
	t.Cleanup(f.srv.Close)
	return f
}

// setHook installs h in front of the fake (nil removes it).
func (f *fake) setHook(h func(w http.ResponseWriter, r *http.Request) bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.hook = h
}

// requests returns the requests seen so far and forgets them.
func (f *fake) requests() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := f.log
	f.log = nil
	return out
}

// store returns a Store on the fake with fast retries; edit changes the
// options first.
func (f *fake) store(t *testing.T, edit func(*Options)) *Store {
	t.Helper()
	o := Options{Bucket: testBucket, Endpoint: f.srv.URL, MaxAttempts: 3, BaseDelay: time.Millisecond, MaxBackoff: 5 * time.Millisecond}
	if edit != nil {
		edit(&o)
	}
	s, err := New(testCtx(t), o)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return s
}

// testCtx returns a context that ends after 60 s or with the test.
func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// loseAnswer returns a hook that lets the first request matching match
// reach the fake, then drops the connection before the answer: the write
// happened, the client cannot know.
func (f *fake) loseAnswer(match func(*http.Request) bool) func(w http.ResponseWriter, r *http.Request) bool {
	var once sync.Once
	return func(w http.ResponseWriter, r *http.Request) bool {
		if !match(r) {
			return false
		}
		lose := false
		once.Do(func() { lose = true })
		if !lose {
			return false
		}
		f.inner.ServeHTTP(httptest.NewRecorder(), r)
		panic(http.ErrAbortHandler) // net/http closes the connection without answering
	}
}
