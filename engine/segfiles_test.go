package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/seedqueue/sq/internal/faultfs"
	"github.com/seedqueue/sq/internal/testutil"
	"github.com/seedqueue/sq/ring"
)

// segFilesOptions: sync policy none, a server-wide bound of 16 segment
// files and mappings, no background goroutines.
func segFilesOptions(dir string, be ring.Backend) Options {
	opts := testOptions(dir)
	opts.SyncPolicy = "none"
	opts.MaxOpenSegmentFiles = 16
	opts.Backend = be
	opts.ScrubBytesPerSec = -1
	opts.RetentionCheckInterval = -1
	opts.MaxBatchBytes, opts.MaxRecordBytes = 6000, 6000
	return opts
}

// Segments of tinySegment bytes (the smallest the batch limit of
// segFilesOptions allows) roll at every publish of a tinyValue.
const tinySegment = 6000 + 4096

var tinyValue = strings.Repeat("x", 5200)

// TestSyncPolicyNoneRollsStayBounded: under sync-policy none every publish
// of a topic with segments of 10 KB rolls a segment; the rolls of every
// partition leave only the active segments' files open (3 each), so
// publishes keep succeeding with RLIMIT_NOFILE 48 descriptors above those
// open at the start, which two descriptors kept per sealed segment would
// pass several times over. Reading every segment back stays within the
// bound, and the engine stays healthy.
func TestSyncPolicyNoneRollsStayBounded(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be ring.Backend) {
		const parts, rolls = 4, 70
		e := openTest(t, segFilesOptions(t.TempDir(), be))
		if _, err := e.CreateTopic("t", parts, TopicConfig{SegmentBytes: tinySegment}); err != nil {
			t.Fatal(err)
		}
		value := tinyValue
		restore := testutil.LimitOpenFiles(t, testutil.OpenFDs(t)+48)
		for i := range rolls {
			for p := range parts {
				if _, err := e.Append(context.Background(), "t", p, mkBatch(t, value)); err != nil {
					t.Fatalf("publish %d to partition %d: %v", i, p, err)
				}
			}
		}
		restore()
		ti, err := e.DescribeTopic("t")
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range ti.Partitions {
			if p.SegmentCount < rolls {
				t.Fatalf("partition %d has %d segments after %d publishes, want a roll at each", p.Partition, p.SegmentCount, rolls)
			}
		}
		if st := e.SegmentFiles(); st.Files != 3*parts || st.Err != nil {
			t.Fatalf("segment files after %d rolls: %+v, want %d files (the active segments') and no error", parts*rolls, st, 3*parts)
		}
		for p := range parts {
			if got := readAll(t, e, "t", p); len(got) != rolls {
				t.Fatalf("partition %d: %d records read, want %d", p, len(got), rolls)
			}
		}
		// The active segments alone (3 files + 1 mapping each) fill the
		// bound of 16: every sealed segment read was unmapped after its
		// fetch was released.
		if st := e.SegmentFiles(); st.Files+st.Mappings > st.Max || st.Evictions == 0 {
			t.Fatalf("after reading every segment: %+v, want within the bound, with evictions", st)
		}
		if err := e.Health(); err != nil {
			t.Fatalf("Health: %v", err)
		}
	})
}

// TestHealthReportsOpenFailures: a publish that must roll while the
// process cannot open a file fails with a storage error, and Health
// reports "cannot open segment files" with the EMFILE for as long as no
// file can be opened; once files can be opened again Health is nil at
// once, and the next roll succeeds.
func TestHealthReportsOpenFailures(t *testing.T) {
	e := openTest(t, segFilesOptions(t.TempDir(), ring.NewPortable()))
	if _, err := e.CreateTopic("t", 1, TopicConfig{SegmentBytes: tinySegment}); err != nil {
		t.Fatal(err)
	}
	value := tinyValue
	appendValues(t, e, "t", 0, value)
	if err := e.Health(); err != nil {
		t.Fatalf("Health before: %v", err)
	}
	b := mkBatch(t, value)
	restore := testutil.ExhaustOpenFiles(t)
	_, err := e.Append(context.Background(), "t", 0, b)
	herr, st := e.Health(), e.SegmentFiles()
	restore()
	if err == nil {
		t.Fatal("a publish that rolls succeeded with no descriptor left")
	}
	if herr == nil || !errors.Is(herr, syscall.EMFILE) || !strings.Contains(herr.Error(), "cannot open segment files") {
		t.Fatalf("Health after EMFILE: %v (append: %v, stats %+v)", herr, err, st)
	}
	if !errors.Is(st.Err, syscall.EMFILE) {
		t.Fatalf("SegmentFiles().Err = %v, want EMFILE", st.Err)
	}
	if err := e.Health(); err != nil {
		t.Fatalf("Health once files can be opened again: %v", err)
	}
	if res := appendValues(t, e, "t", 0, value); res.BaseOffset != 1 {
		t.Fatalf("publish after the limit was lifted at offset %d, want 1", res.BaseOffset)
	}
}

// TestHealthReportsFailedPartitions: a partition failed by an fdatasync
// error makes FailedPartitions name it with its error, until restart, and
// leaves Health (the node's readiness) alone.
func TestHealthReportsFailedPartitions(t *testing.T) {
	opts, fs := faultOptions(t.TempDir())
	e := openTest(t, opts)
	if _, err := e.CreateTopic("t", 2, TopicConfig{}); err != nil {
		t.Fatal(err)
	}
	appendValues(t, e, "t", 0, "a")
	if err := e.FailedPartitions(); err != nil {
		t.Fatalf("FailedPartitions before: %v", err)
	}
	fs.Inject(faultfs.Rule{Ops: faultfs.OpSync, Path: "*.log", Times: 1, Err: syscall.EIO})
	if _, err := e.Append(context.Background(), "t", 1, mkBatch(t, "b")); err == nil {
		t.Fatal("append with a failing fdatasync succeeded")
	}
	herr := e.FailedPartitions()
	if herr == nil || !strings.Contains(herr.Error(), "partition t/1 failed") || strings.Contains(herr.Error(), "t/0") {
		t.Fatalf("FailedPartitions = %v, want partition t/1 named, t/0 not", herr)
	}
	if err := e.Health(); err != nil {
		t.Fatalf("Health with one failed partition = %v, want nil: the other partitions serve", err)
	}
}

// TestManyPartitionsWithinSegmentFileBound: a topic of 300 partitions
// under sync policy every-batch and a bound of 32 segment files and
// mappings is created, published to (every partition, twice, from 16
// concurrent publishers), read back and restarted with RLIMIT_NOFILE 128
// descriptors above those open at the start; 300 active segments holding
// their .log, .index and .timeindex open would need 900. Each partition
// gives its active segment's files back after a synced commit while the
// bound is passed (segment.Log.ParkIfOver) and reopens the .log at its
// next append, so the files and mappings held stay near the bound.
func TestManyPartitionsWithinSegmentFileBound(t *testing.T) {
	const parts, bound = 300, 32
	opts := testOptions(t.TempDir())
	opts.MaxOpenSegmentFiles = bound
	opts.ScrubBytesPerSec = -1
	opts.RetentionCheckInterval = -1
	slack := bound + 96 // the engine's own files, partitions being opened or closed
	restore := testutil.LimitOpenFiles(t, testutil.OpenFDs(t)+slack)
	defer restore()
	e, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { e.Close() }()
	if _, err := e.CreateTopic("t", parts, TopicConfig{}); err != nil {
		t.Fatal(err)
	}
	publishAll := func(round int) {
		// 16 publishers: a partition with a commit in progress holds its
		// .log open until the commit is synced, whatever the bound.
		const publishers = 16
		errs := make(chan error, publishers)
		for w := range publishers {
			go func() {
				for p := w; p < parts; p += publishers {
					if _, err := e.Append(context.Background(), "t", p, mkBatch(t, fmt.Sprintf("r%d-p%d", round, p))); err != nil {
						errs <- err
						return
					}
				}
				errs <- nil
			}()
		}
		for range publishers {
			if err := <-errs; err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
		}
	}
	publishAll(0)
	publishAll(1)
	if st := e.SegmentFiles(); st.Files+st.Mappings > bound+3 || st.Err != nil {
		t.Fatalf("segment files after publishing to %d partitions: %+v, want within the bound %d", parts, st, bound)
	}
	check := func(when string) {
		for p := range parts {
			got := readAll(t, e, "t", p)
			if want := []string{fmt.Sprintf("r0-p%d", p), fmt.Sprintf("r1-p%d", p)}; !slices.Equal(got, want) {
				t.Fatalf("%s: partition %d holds %q, want %q", when, p, got, want)
			}
		}
		if st := e.SegmentFiles(); st.Files+st.Mappings > bound+3 || st.Err != nil {
			t.Fatalf("%s: segment files after reading %d partitions: %+v, want within the bound %d", when, parts, st, bound)
		}
	}
	check("before the restart")
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if e, err = Open(opts); err != nil {
		t.Fatal(err)
	}
	check("after the restart")
	if err := e.Health(); err != nil {
		t.Fatalf("Health: %v", err)
	}
}
