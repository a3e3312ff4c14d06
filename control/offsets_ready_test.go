package control_test

import (
	"context"
	"net/http"
	"strings"
	"syscall"
	"testing"

	"github.com/seedqueue/sq/control"
	"github.com/seedqueue/sq/engine"
	"github.com/seedqueue/sq/internal/faultfs"
)

// TestReadinessFollowsGroupOffsetsFailure: a failed fsync of the group
// offsets log makes /readyz answer 503 with the cause, and sq_ready 0.
func TestReadinessFollowsGroupOffsetsFailure(t *testing.T) {
	srv, err := control.New(control.Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	hl := listen(t)
	done := make(chan struct{})
	go func() { _ = srv.ServeHTTP(hl); close(done) }()
	defer func() {
		if err := srv.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
		<-done
	}()
	dir := t.TempDir()
	fs := faultfs.New(dir, nil)
	eng, err := engine.Open(engine.Options{DataDir: dir, FS: fs, Backend: fs.Backend(), Logger: quietLogger(), ScrubBytesPerSec: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	srv.SetEngine(eng)
	srv.SetReady(true)
	base := "http://" + hl.Addr().String()
	if code, body := httpGet(t, base+"/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz = %d %q, want 200", code, body)
	}
	if _, err := eng.CreateTopic("t", 1, engine.TopicConfig{}); err != nil {
		t.Fatal(err)
	}
	fs.Inject(faultfs.Rule{Ops: faultfs.OpSync, Path: "offsets.log", Times: 1, Err: syscall.EIO})
	if _, err := eng.CommitOffsets("g", "", -1, []engine.OffsetCommit{{Topic: "t", Offset: 0}}); err == nil {
		t.Fatal("commit with a failed fsync succeeded")
	}
	code, body := httpGet(t, base+"/readyz")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "group offsets log failed") {
		t.Fatalf("/readyz = %d %q, want 503 naming the group offsets log", code, body)
	}
	if srv.Ready() {
		t.Fatal("Ready() with a failed group offsets log")
	}
}
