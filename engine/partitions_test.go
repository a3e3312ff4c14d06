package engine

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/internal/faultfs"
)

// TestCreatePartitions grows a topic from 2 to 4 and then 7 partitions:
// the old partitions keep their records and the group's committed
// offsets, the new ones start empty and take records, the topic keeps its
// id and config, and a restart keeps the count.
func TestCreatePartitions(t *testing.T) {
	opts := testOptions(t.TempDir())
	e := openTest(t, opts)
	before, err := e.CreateTopic("t", 2, TopicConfig{SyncPolicy: "every-batch", RetentionMs: 3600000})
	if err != nil {
		t.Fatal(err)
	}
	appendValues(t, e, "t", 0, "a0", "b0")
	appendValues(t, e, "t", 1, "a1")
	if err := commitOne(e, "g", "t", 2); err != nil {
		t.Fatal(err)
	}
	info, err := e.CreatePartitions("t", 4)
	if err != nil {
		t.Fatal(err)
	}
	if info.PartitionCount != 4 || len(info.Partitions) != 4 || info.ID != before.ID || info.Config != before.Config {
		t.Fatalf("after growing to 4: %+v (before %+v)", info, before)
	}
	for p := 2; p < 4; p++ {
		if pi := info.Partitions[p]; pi.Partition != p || pi.HighWatermark != 0 || pi.LogEndOffset != 0 || pi.Err != nil {
			t.Fatalf("new partition %d: %+v", p, pi)
		}
		appendValues(t, e, "t", p, fmt.Sprintf("new%d", p))
	}
	if _, err := e.CreatePartitions("t", 7); err != nil {
		t.Fatal(err)
	}
	appendValues(t, e, "t", 6, "new6")
	want := [][]string{{"a0", "b0"}, {"a1"}, {"new2"}, {"new3"}, nil, nil, {"new6"}}
	check := func(e *Engine, when string) {
		t.Helper()
		ti, err := e.DescribeTopic("t")
		if err != nil || ti.PartitionCount != 7 || len(ti.Partitions) != 7 || ti.ID != before.ID || ti.Config != before.Config {
			t.Fatalf("%s: %+v %v", when, ti, err)
		}
		if l := e.ListTopics(); len(l) != 1 || l[0].PartitionCount != 7 {
			t.Fatalf("%s: ListTopics %+v", when, l)
		}
		for p, w := range want {
			if got := readAll(t, e, "t", p); !equal(got, w) {
				t.Fatalf("%s: partition %d holds %v, want %v", when, p, got, w)
			}
		}
		if got := committedOf(t, e, "g", "t"); got != 2 {
			t.Fatalf("%s: committed offset %d, want 2", when, got)
		}
		if _, err := e.Append(t.Context(), "t", 7, mkBatch(t, "x")); codeOf(err) != api.CodeUnknownPartition {
			t.Fatalf("%s: append to partition 7: %v", when, err)
		}
	}
	check(e, "before restart")
	e.Close()
	check(openTest(t, opts), "after restart")
}

// TestCreatePartitionsErrors: counts that do not grow the topic or exceed
// the limit, unknown topics and bad names are refused with their codes,
// naming the counts, and change nothing.
func TestCreatePartitionsErrors(t *testing.T) {
	e := openTest(t, testOptions(t.TempDir()))
	if _, err := e.CreateTopic("t", 3, TopicConfig{}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		total int
		code  api.Code
		text  string
	}{
		{"t", 3, api.CodeInvalidConfig, "has 3 partitions; the new total 3 must be larger"},
		{"t", 2, api.CodeInvalidConfig, "the new total 2 must be larger"},
		{"t", 0, api.CodeInvalidConfig, "the new total 0"},
		{"t", -1, api.CodeInvalidConfig, "the new total -1"},
		{"t", MaxPartitions + 1, api.CodeInvalidConfig, fmt.Sprintf("the new total %d is above the maximum %d", MaxPartitions+1, MaxPartitions)},
		{"nope", 5, api.CodeUnknownTopic, `topic "nope" does not exist`},
		{"bad/name", 5, api.CodeInvalidTopicName, ""},
		{"", 5, api.CodeInvalidTopicName, ""},
	} {
		_, err := e.CreatePartitions(tc.name, tc.total)
		if codeOf(err) != tc.code || !strings.Contains(fmt.Sprint(err), tc.text) {
			t.Errorf("CreatePartitions(%q, %d) = %v, want %v with %q", tc.name, tc.total, err, tc.code, tc.text)
		}
	}
	if ti, err := e.DescribeTopic("t"); err != nil || ti.PartitionCount != 3 || len(ti.Partitions) != 3 {
		t.Fatalf("after refused grows: %+v %v", ti, err)
	}
	if names, err := os.ReadDir(e.topicDir("t")); err != nil || len(names) != 3 {
		t.Fatalf("partition directories after refused grows: %v %v", names, err)
	}
	e.Close()
	if _, err := e.CreatePartitions("t", 4); codeOf(err) != api.CodeShuttingDown {
		t.Fatalf("after Close: %v", err)
	}
}

// TestCreatePartitionsGroupGrows: a group member's assignment takes the
// new partitions at its next heartbeat.
func TestCreatePartitionsGroupGrows(t *testing.T) {
	e := openTest(t, testOptions(t.TempDir()))
	if _, err := e.CreateTopic("t", 2, TopicConfig{}); err != nil {
		t.Fatal(err)
	}
	r, err := e.JoinGroup("g", "", "c", []string{"t"}, time.Minute)
	if err != nil || !equalInts(r.Assignment["t"], []int{0, 1}) {
		t.Fatalf("join: %+v %v", r, err)
	}
	if _, err := e.CreatePartitions("t", 4); err != nil {
		t.Fatal(err)
	}
	h, err := e.Heartbeat("g", r.MemberID, r.Generation, r.Assignment)
	if err != nil || !equalInts(h.Assignment["t"], []int{0, 1, 2, 3}) || h.Generation <= r.Generation {
		t.Fatalf("heartbeat after growing: %+v %v (joined at generation %d)", h, err, r.Generation)
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestCreatePartitionsConcurrentAdmin runs growth against delete, create,
// config changes, appends and fetches of the same topic: every outcome is
// one of the serial orders (a grow after the delete is UNKNOWN_TOPIC or
// grows the topic created again), and the final count and directories
// agree with the metadata after a restart. Run under -race it also checks
// that readers see a partition list that agrees with the metadata.
func TestCreatePartitionsConcurrentAdmin(t *testing.T) {
	opts := testOptions(t.TempDir())
	e := openTest(t, opts)
	for round := range 20 {
		if _, err := e.CreateTopic("t", 1, TopicConfig{}); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		var wg sync.WaitGroup
		errs := make(chan error, 64)
		for n := 2; n <= 5; n++ {
			wg.Go(func() {
				_, err := e.CreatePartitions("t", n)
				switch {
				case err == nil, codeOf(err) == api.CodeUnknownTopic:
				case codeOf(err) == api.CodeInvalidConfig && strings.Contains(err.Error(), "must be larger"):
				default:
					errs <- fmt.Errorf("grow to %d: %w", n, err)
				}
			})
		}
		wg.Go(func() {
			if _, err := e.AlterTopicConfig("t", TopicConfigChange{RetentionMs: ptr(int64(60000 + round))}); err != nil && codeOf(err) != api.CodeUnknownTopic {
				errs <- fmt.Errorf("alter: %w", err)
			}
		})
		wg.Go(func() {
			for p := range 5 {
				_, err := e.Append(t.Context(), "t", p, mkBatch(t, "x"))
				if err != nil && codeOf(err) != api.CodeUnknownPartition && codeOf(err) != api.CodeUnknownTopic {
					errs <- fmt.Errorf("append to %d: %w", p, err)
				}
				if ti, err := e.DescribeTopic("t"); err == nil && len(ti.Partitions) != ti.PartitionCount {
					errs <- fmt.Errorf("described %d partitions of a count of %d", len(ti.Partitions), ti.PartitionCount)
				}
			}
		})
		deleted := round%2 == 0
		if deleted {
			wg.Go(func() {
				if err := e.DeleteTopic("t"); err != nil {
					errs <- fmt.Errorf("delete: %w", err)
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("round %d: %v", round, err)
		}
		ti, err := e.DescribeTopic("t")
		switch {
		case deleted && codeOf(err) != api.CodeUnknownTopic:
			t.Fatalf("round %d: after the delete: %+v %v", round, ti, err)
		case !deleted && (err != nil || ti.PartitionCount != 5):
			t.Fatalf("round %d: after growing to at most 5: %+v %v", round, ti, err)
		case !deleted:
			if err := e.DeleteTopic("t"); err != nil {
				t.Fatal(err)
			}
		}
	}
	// A last round without a delete survives a restart whole.
	if _, err := e.CreateTopic("t", 1, TopicConfig{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.CreatePartitions("t", 3); err != nil {
		t.Fatal(err)
	}
	e.Close()
	e = openTest(t, opts)
	if ti, err := e.DescribeTopic("t"); err != nil || ti.PartitionCount != 3 {
		t.Fatalf("after restart: %+v %v", ti, err)
	}
	if names, err := os.ReadDir(e.topicDir("t")); err != nil || len(names) != 3 {
		t.Fatalf("partition directories after restart: %v %v", names, err)
	}
}

// TestCreatePartitionsLeftoverDirs: a partition directory above the count
// that holds records (a restored metadata file, say) is never taken over:
// the grow fails, naming it, and the topic keeps its count; an empty one
// (what an interrupted grow leaves) is taken over.
func TestCreatePartitionsLeftoverDirs(t *testing.T) {
	dir := t.TempDir()
	opts := testOptions(dir)
	e := openTest(t, opts)
	if _, err := e.CreateTopic("t", 1, TopicConfig{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.CreatePartitions("t", 3); err != nil {
		t.Fatal(err)
	}
	appendValues(t, e, "t", 2, "stray")
	meta := filepath.Join(e.metaDir(), "t.json")
	old, err := os.ReadFile(meta)
	if err != nil {
		t.Fatal(err)
	}
	e.Close()
	// Back to one partition, as a restored backup of the metadata would:
	// partition 1 is empty, partition 2 holds a record.
	restored := strings.Replace(string(old), `"partitions": 3`, `"partitions": 1`, 1)
	if restored == string(old) {
		t.Fatalf("metadata file without the expected partitions field: %s", old)
	}
	if err := os.WriteFile(meta, []byte(restored), 0o644); err != nil {
		t.Fatal(err)
	}
	e = openTest(t, opts)
	_, err = e.CreatePartitions("t", 3)
	if codeOf(err) != api.CodeStorageError || !strings.Contains(err.Error(), filepath.Join(e.topicDir("t"), "2")) {
		t.Fatalf("grow over a partition directory holding records: %v", err)
	}
	if ti, err := e.DescribeTopic("t"); err != nil || ti.PartitionCount != 1 {
		t.Fatalf("after the refused grow: %+v %v", ti, err)
	}
	// Partition 1's directory is empty: taken over.
	ti, err := e.CreatePartitions("t", 2)
	if err != nil || ti.PartitionCount != 2 {
		t.Fatalf("grow over an empty partition directory: %+v %v", ti, err)
	}
	appendValues(t, e, "t", 1, "one")
	if got := readAll(t, e, "t", 1); !equal(got, []string{"one"}) {
		t.Fatalf("partition 1: %v", got)
	}
}

// TestCreatePartitionsCrash crashes CreatePartitions at each of its
// counted file-system calls (dropping what was not synced, and for odd
// points tearing unsynced tails): the engine starts with either the old
// or the new count, the old partitions' records are intact, and a grow
// after the restart succeeds and serves every partition.
func TestCreatePartitionsCrash(t *testing.T) {
	setup := func(t *testing.T) (Options, *faultfs.FS, *Engine) {
		opts, fs := faultOptions(t.TempDir())
		opts.RetentionCheckInterval = -1
		e, err := Open(opts)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.CreateTopic("t", 2, TopicConfig{SyncPolicy: "every-batch"}); err != nil {
			t.Fatal(err)
		}
		appendValues(t, e, "t", 0, "a")
		appendValues(t, e, "t", 1, "b")
		return opts, fs, e
	}
	_, probe, e := setup(t)
	from := probe.Counted()
	if _, err := e.CreatePartitions("t", 4); err != nil {
		t.Fatal(err)
	}
	calls := probe.Counted() - from
	e.Close()
	if calls < 3 {
		t.Fatalf("CreatePartitions made %d counted calls; the probe is broken", calls)
	}
	for n := int64(1); n <= calls+1; n++ {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			opts, fs, e := setup(t)
			fs.CrashAfter(n)
			_, growErr := e.CreatePartitions("t", 4)
			fs.Crash()
			e.Close() // fails: the process is dead
			var torn *rand.Rand
			if n%2 == 1 {
				torn = rand.New(rand.NewPCG(uint64(n), 1))
			}
			if err := fs.Restore(torn); err != nil {
				t.Fatal(err)
			}
			e = openTest(t, opts)
			ti, err := e.DescribeTopic("t")
			if err != nil {
				t.Fatalf("crash at call %d: %v", n, err)
			}
			switch {
			case growErr == nil && ti.PartitionCount != 4:
				t.Fatalf("crash at call %d: the grow was acknowledged but the topic has %d partitions", n, ti.PartitionCount)
			case ti.PartitionCount != 2 && ti.PartitionCount != 4, len(ti.Partitions) != ti.PartitionCount:
				t.Fatalf("crash at call %d: %+v", n, ti)
			}
			for p, pi := range ti.Partitions {
				if pi.Err != nil {
					t.Fatalf("crash at call %d: partition %d failed: %v", n, p, pi.Err)
				}
			}
			if got := readAll(t, e, "t", 0); !equal(got, []string{"a"}) {
				t.Fatalf("crash at call %d: partition 0 holds %v", n, got)
			}
			if got := readAll(t, e, "t", 1); !equal(got, []string{"b"}) {
				t.Fatalf("crash at call %d: partition 1 holds %v", n, got)
			}
			if ti.PartitionCount == 2 {
				if _, err := e.CreatePartitions("t", 4); err != nil {
					t.Fatalf("crash at call %d: grow after restart: %v", n, err)
				}
			}
			for p := 2; p < 4; p++ {
				appendValues(t, e, "t", p, "new")
				if got := readAll(t, e, "t", p); !equal(got, []string{"new"}) {
					t.Fatalf("crash at call %d: new partition %d holds %v", n, p, got)
				}
			}
		})
	}
}

// TestCreatePartitionsDiskFull: a new partition that cannot be created
// because the disk is full fails the grow with DISK_FULL (retriable) and
// leaves the old count; once space returns the grow succeeds.
func TestCreatePartitionsDiskFull(t *testing.T) {
	for _, rule := range []faultfs.Rule{
		{Ops: faultfs.OpCreate, Path: "*.log", Err: syscall.ENOSPC},
		{Ops: faultfs.OpMkdir, Path: "2", Err: syscall.EDQUOT},
	} {
		t.Run(rule.Ops.String(), func(t *testing.T) {
			opts, fs := faultOptions(t.TempDir())
			e := openTest(t, opts)
			if _, err := e.CreateTopic("t", 2, TopicConfig{}); err != nil {
				t.Fatal(err)
			}
			appendValues(t, e, "t", 1, "kept")
			remove := fs.Inject(rule)
			if _, err := e.CreatePartitions("t", 3); codeOf(err) != api.CodeDiskFull {
				t.Fatalf("grow on a full disk: %v, want DISK_FULL", err)
			}
			if ti, err := e.DescribeTopic("t"); err != nil || ti.PartitionCount != 2 || len(ti.Partitions) != 2 {
				t.Fatalf("after the failed grow: %+v %v", ti, err)
			}
			remove()
			if ti, err := e.CreatePartitions("t", 3); err != nil || ti.PartitionCount != 3 {
				t.Fatalf("grow once space returned: %+v %v", ti, err)
			}
			appendValues(t, e, "t", 2, "new")
			if got := readAll(t, e, "t", 1); !equal(got, []string{"kept"}) {
				t.Fatalf("partition 1: %v", got)
			}
		})
	}
}

// TestCreatePartitionsMetaFailure: a failed write of the metadata file
// fails the grow with STORAGE_ERROR and leaves the old count in memory
// and on disk; the next grow succeeds.
func TestCreatePartitionsMetaFailure(t *testing.T) {
	for _, rule := range []faultfs.Rule{
		{Ops: faultfs.OpSync, Path: "*" + tmpSuffix, Times: 1, Err: syscall.EIO},
		{Ops: faultfs.OpRename, Path: "t.json", Times: 1, Err: syscall.EIO},
		{Ops: faultfs.OpSyncDir, Path: "topics", After: 0, Times: 1, Err: syscall.EIO},
	} {
		t.Run(rule.Ops.String(), func(t *testing.T) {
			opts, fs := faultOptions(t.TempDir())
			e := openTest(t, opts)
			if _, err := e.CreateTopic("t", 1, TopicConfig{}); err != nil {
				t.Fatal(err)
			}
			fs.Inject(rule)
			if _, err := e.CreatePartitions("t", 2); codeOf(err) != api.CodeStorageError {
				t.Fatalf("grow with a failing metadata write: %v", err)
			}
			if ti, err := e.DescribeTopic("t"); err != nil || ti.PartitionCount != 1 || len(ti.Partitions) != 1 {
				t.Fatalf("after the failed grow: %+v %v", ti, err)
			}
			e.Close()
			e = openTest(t, opts)
			if ti, err := e.DescribeTopic("t"); err != nil || ti.PartitionCount != 1 {
				t.Fatalf("after restart: %+v %v", ti, err)
			}
			if ti, err := e.CreatePartitions("t", 2); err != nil || ti.PartitionCount != 2 {
				t.Fatalf("grow after restart: %+v %v", ti, err)
			}
		})
	}
}
