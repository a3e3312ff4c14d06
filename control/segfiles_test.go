package control_test

import (
	"context"
	"io"
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

// TestReadyzReportsOpenFailures: while the process cannot open a file and
// a publish has failed for it (EMFILE), /readyz answers 503 with the
// reason, sq_ready is 0 and sq_segment_open_error 1; as soon as files can
// be opened again /readyz is 200, and publishes roll again. (The probe
// reuses a kept-alive connection: no descriptor is left for a new one.)
func TestReadyzReportsOpenFailures(t *testing.T) {
	n := startNode(t, control.Options{NodeID: "n1", ClusterID: "c1", Version: "test"})
	base := "http://" + n.httpAddr
	tr := &http.Transport{MaxIdleConnsPerHost: 1}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := client.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, string(b)
	}
	if code, _ := get("/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz = %d before, want 200", code)
	}
	if _, err := n.eng.CreateTopic("t", 1, engine.TopicConfig{SegmentBytes: 256<<10 + 4096}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := n.eng.Append(ctx, "t", 0, bigBatch(t)); err != nil {
		t.Fatal(err)
	}
	b := bigBatch(t)
	restore := testutil.ExhaustOpenFiles(t)
	_, err := n.eng.Append(ctx, "t", 0, b)
	code, body := get("/readyz")
	gauges := gather(n.srv)
	restore()
	if err == nil {
		t.Fatal("a publish that rolls succeeded with no descriptor left")
	}
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "cannot open segment files") || !strings.Contains(body, "too many open files") {
		t.Fatalf("/readyz = %d %q after EMFILE, want 503 with the reason", code, body)
	}
	for name, want := range map[string]float64{"sq_ready": 0, "sq_segment_open_error": 1, "sq_segment_open_files_max": 4096} {
		if got, ok := gauges[name]; !ok || got != want {
			t.Fatalf("%s = %v (present %v) while files cannot be opened, want %v", name, got, ok, want)
		}
	}
	if code, body := get("/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz = %d %q once files can be opened again, want 200", code, body)
	}
	if _, err := n.eng.Append(ctx, "t", 0, bigBatch(t)); err != nil {
		t.Fatalf("publish once files open again: %v", err)
	}
	_, metrics := get("/metrics")
	for _, want := range []string{"sq_ready 1", "sq_segment_open_error 0", "sq_segment_open_files 3", "sq_segment_mappings "} {
		if !strings.Contains(metrics, want) {
			t.Fatalf("/metrics lacks %q", want)
		}
	}
}

// gather returns the value of every unlabelled gauge of srv's registry
// (collectors that fail, such as the process collector without a free
// descriptor, are skipped).
func gather(srv *control.Server) map[string]float64 {
	fams, _ := srv.Registry().Gather()
	out := map[string]float64{}
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			if g := m.GetGauge(); g != nil && len(m.GetLabel()) == 0 {
				out[f.GetName()] = g.GetValue()
			}
		}
	}
	return out
}
