package engine

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/internal/faultfs"
)

// TestRestartOnFullDiskWithDamagedIndexes: after a crash, a restart on a
// full disk (no temp file can be written, nothing preallocated) with
// index files missing or torn opens every partition: the server is
// healthy, every acknowledged record reads back, and a publish either
// succeeds or gets DISK_FULL. Once space is back, a clean stop writes the
// index files, so the next start finds nothing to rebuild.
func TestRestartOnFullDiskWithDamagedIndexes(t *testing.T) {
	for _, cause := range []error{syscall.ENOSPC, syscall.EDQUOT} {
		t.Run(cause.(syscall.Errno).Error(), func(t *testing.T) { testRestartOnFullDisk(t, cause) })
	}
}

func testRestartOnFullDisk(t *testing.T, cause error) {
	dir := t.TempDir()
	opts, fs := faultOptions(dir)
	opts.MaxBatchBytes = 4 << 10
	e, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	const parts = 3
	if _, err := e.CreateTopic("t", parts, TopicConfig{SegmentBytes: 8 << 10, SyncPolicy: "every-batch"}); err != nil {
		t.Fatal(err)
	}
	want := make([][]string, parts)
	for p := range parts {
		for i := range 150 {
			v := fmt.Sprintf("p%d-%03d-%s", p, i, strings.Repeat("x", 100))
			appendValues(t, e, "t", p, v)
			want[p] = append(want[p], v)
		}
	}
	fs.Crash() // kill -9: only what was synced survives
	e.Close()
	if err := fs.Restore(nil); err != nil {
		t.Fatal(err)
	}
	damage := []struct {
		part  int
		seg   int // -1: the active segment
		file  string
		trunc bool
	}{
		{0, 0, ".index", false},
		{0, -1, ".index", false},
		{1, 1, ".timeindex", false},
		{1, 0, ".index", true},
		{2, -1, ".timeindex", true},
	}
	for _, d := range damage {
		pdir := filepath.Join(e.topicDir("t"), fmt.Sprint(d.part))
		names, err := filepath.Glob(filepath.Join(pdir, "*"+d.file))
		if err != nil || len(names) < 3 {
			t.Fatalf("%s: %d %s files, want at least 3 (%v)", pdir, len(names), d.file, err)
		}
		path := names[len(names)-1]
		if d.seg >= 0 {
			path = names[d.seg]
		}
		if d.trunc {
			err = os.Truncate(path, 3)
		} else {
			err = os.Remove(path)
		}
		if err != nil {
			t.Fatal(err)
		}
	}

	removes := []func(){
		fs.Inject(faultfs.Rule{Ops: faultfs.OpCreate | faultfs.OpWrite, Path: "*.sqtmp", Err: cause}),
		fs.Inject(faultfs.Rule{Ops: faultfs.OpAllocate, Err: cause}),
	}
	var logs syncBuffer
	opts.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	e, err = Open(opts)
	if err != nil {
		t.Fatalf("Open on a full disk: %v\n%s", err, logs.String())
	}
	if err := e.FailedPartitions(); err != nil {
		t.Fatalf("partitions failed on a full disk: %v\n%s", err, logs.String())
	}
	if err := e.Health(); err != nil {
		t.Fatalf("Health on a full disk: %v", err)
	}
	for p := range parts {
		if got := readAll(t, e, "t", p); !equal(got, want[p]) {
			t.Fatalf("partition %d on a full disk: %d records, want %d", p, len(got), len(want[p]))
		}
	}
	if !strings.Contains(logs.String(), "could not write an index file") {
		t.Errorf("no WARN about the index files not written:\n%s", logs.String())
	}
	if _, err := e.Append(t.Context(), "t", 0, mkBatch(t, strings.Repeat("z", 2000))); err != nil && codeOf(err) != api.CodeDiskFull {
		t.Fatalf("publish on a full disk: %v, want success or DISK_FULL", err)
	} else if err == nil {
		want[0] = append(want[0], strings.Repeat("z", 2000))
	}

	for _, r := range removes {
		r()
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	logs = syncBuffer{}
	e = openTest(t, opts)
	for p := range parts {
		if got := readAll(t, e, "t", p); !equal(got, want[p]) {
			t.Fatalf("partition %d after space came back: %d records, want %d", p, len(got), len(want[p]))
		}
	}
	for _, msg := range []string{"rebuilding index", "index disagrees", "could not write"} {
		if strings.Contains(logs.String(), msg) {
			t.Errorf("index files still damaged after a clean stop with space (%q):\n%s", msg, logs.String())
		}
	}
}
