package control_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/seedqueue/sq/api/batch"
	"github.com/seedqueue/sq/control"
	"github.com/seedqueue/sq/engine"
	"github.com/seedqueue/sq/internal/testutil"
)

// bigBatch is a batch of four records of 60 KiB: two of them pass a
// segment of the smallest size the test node allows, so each publish after
// the first rolls.
func bigBatch(t *testing.T) []byte {
	t.Helper()
	var b batch.Builder
	for range 4 {
		b.Add(nil, []byte(strings.Repeat("v", 60<<10)), nil, 1)
	}
	out, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestReadyzReportsOpenFailures: while a publish has failed because the
// process could not open a segment file (EMFILE), /readyz answers 503 with
// the reason, sq_ready is 0 and sq_segment_open_error 1; once a roll opens
// files again, /readyz is 200 and the metrics show the open segment files.
func TestReadyzReportsOpenFailures(t *testing.T) {
	n := startNode(t, control.Options{NodeID: "n1", ClusterID: "c1", Version: "test"})
	base := "http://" + n.httpAddr
	if _, err := n.eng.CreateTopic("t", 1, engine.TopicConfig{SegmentBytes: 256<<10 + 4096}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := n.eng.Append(ctx, "t", 0, bigBatch(t)); err != nil {
		t.Fatal(err)
	}
	b := bigBatch(t)
	restore := testutil.LimitOpenFiles(t, testutil.OpenFDs(t))
	_, err := n.eng.Append(ctx, "t", 0, b)
	restore()
	if err == nil {
		t.Fatal("a publish that rolls succeeded with no descriptor left")
	}
	code, body := httpGet(t, base+"/readyz")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "cannot open segment files") || !strings.Contains(body, "too many open files") {
		t.Fatalf("/readyz = %d %q after EMFILE, want 503 with the reason", code, body)
	}
	_, metrics := httpGet(t, base+"/metrics")
	for _, want := range []string{"sq_ready 0", "sq_segment_open_error 1", "sq_segment_open_files_max 4096"} {
		if !strings.Contains(metrics, want) {
			t.Fatalf("/metrics lacks %q", want)
		}
	}
	if _, err := n.eng.Append(ctx, "t", 0, bigBatch(t)); err != nil {
		t.Fatalf("publish once files open again: %v", err)
	}
	if code, body := httpGet(t, base+"/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz = %d %q once files open again, want 200", code, body)
	}
	_, metrics = httpGet(t, base+"/metrics")
	for _, want := range []string{"sq_ready 1", "sq_segment_open_error 0", "sq_segment_open_files 3", "sq_segment_mappings "} {
		if !strings.Contains(metrics, want) {
			t.Fatalf("/metrics lacks %q", want)
		}
	}
}
