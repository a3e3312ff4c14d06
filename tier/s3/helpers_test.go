package s3

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/seedqueue/sq/internal/s3fake"
)

// testBucket is the bucket every fake starts with.
const testBucket = "sq-test"

// fake is an in-process S3 server (internal/s3fake: gofakes3 on its
// in-memory backend with testBucket) served over real HTTP on 127.0.0.1,
// with a hook in front of it that can see, change or fail each request.
type fake struct {
	*s3fake.Server
	url string // its endpoint
}

// newFake starts a fake S3 with testBucket, and the AWS environment for
// it, until the test's end.
func newFake(t *testing.T) *fake {
	t.Helper()
	s, url := s3fake.Start(t, testBucket)
	return &fake{Server: s, url: url}
}

// store returns a Store on the fake with fast retries; edit changes the
// options first.
func (f *fake) store(t *testing.T, edit func(*Options)) *Store {
	t.Helper()
	o := Options{Bucket: testBucket, Endpoint: f.url, MaxAttempts: 3, BaseDelay: time.Millisecond, MaxBackoff: 5 * time.Millisecond}
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
		f.Inner.ServeHTTP(httptest.NewRecorder(), r)
		panic(http.ErrAbortHandler) // net/http closes the connection without answering
	}
}
