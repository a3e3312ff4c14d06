package engine

import (
	"fmt"
	"testing"

	"github.com/seedqueue/sq/internal/faultfs"
)

// TestCrashAtEveryPoint crashes one operation on the engine's own files
// at each of its counted faultfs calls in turn, restores the synced and
// then a torn state, and checks what TestTopicCrashSeeds checks: the
// engine starts, a topic is there with its acknowledged records or gone,
// acknowledged commits are kept, and every name can be created again.
func TestCrashAtEveryPoint(t *testing.T) {
	withData := func(r *crashRig, name string) {
		r.create(name)
		for i := range 6 {
			r.publish(name, i)
		}
		r.commit(name)
		r.commit(name)
	}
	cases := []struct {
		name  string
		setup func(r *crashRig)
		op    func(r *crashRig)
	}{
		{"create", func(r *crashRig) { withData(r, "keep") }, func(r *crashRig) { r.create("new") }},
		{"delete", func(r *crashRig) { withData(r, "keep"); withData(r, "t") }, func(r *crashRig) { r.delete("t") }},
		{"recreate", func(r *crashRig) { withData(r, "t"); r.delete("t") }, func(r *crashRig) { r.create("t") }},
		{"alter", func(r *crashRig) { withData(r, "t") }, func(r *crashRig) {
			if _, err := r.e.AlterTopicConfig("t", TopicConfigChange{RetentionMs: ptr(int64(60_000))}); err != nil && !r.fs.Crashed() {
				r.t.Fatal(err)
			}
		}},
		{"commit-compacting", func(r *crashRig) { withData(r, "t"); r.e.offsets.compactAt = 1 }, func(r *crashRig) { r.commit("t") }},
		{"delete-group", func(r *crashRig) { withData(r, "t"); withData(r, "u") }, func(r *crashRig) {
			group := ""
			for k := range r.m.offsets {
				if group == "" || k.group < group {
					group = k.group
				}
			}
			for k := range r.m.offsets {
				if k.group == group {
					r.m.ackedOffset[k] = false // until acknowledged: the values or none
				}
			}
			if err := r.e.DeleteGroup(group); err != nil && !r.fs.Crashed() {
				r.t.Fatal(err)
			} else if err == nil {
				for k := range r.m.offsets {
					if k.group == group {
						delete(r.m.offsets, k)
					}
				}
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// A dry run counts the operation's counted calls.
			r := newCrashRig(t, nil, 1)
			tc.setup(r)
			before := r.fs.Counted()
			tc.op(r)
			calls := r.fs.Counted() - before
			r.e.Close()
			if calls == 0 {
				t.Fatal("the operation made no counted call")
			}
			for n := int64(1); n <= calls; n++ {
				for _, seed := range []uint64{2*uint64(n) - 1, 2 * uint64(n)} { // odd: synced, even: torn
					if !t.Run(fmt.Sprintf("call%d/seed%d", n, seed), func(t *testing.T) { crashAt(t, seed, n, tc.setup, tc.op) }) {
						t.Logf("crash at call %d of %s failed (seed %d)", n, tc.name, seed)
					}
				}
			}
		})
	}
}

func crashAt(t *testing.T, seed uint64, n int64, setup, op func(*crashRig)) {
	r := newCrashRig(t, nil, seed)
	setup(r)
	r.fs.CrashAfter(n)
	op(r)
	r.crashAndReopen()
	names := make([]string, 0, len(r.m.fate))
	exists := map[string]bool{}
	for name := range r.m.fate {
		names = append(names, name)
		exists[name] = r.checkTopic(name)
	}
	r.checkOffsets(exists)
	r.checkNamesReusable(names, exists)
}

// TestCrashWhileInitializingDataDir crashes the first Open of an empty
// data directory at each of its counted calls: the next Open must start,
// and a topic created and a commit made then must survive a clean
// restart.
func TestCrashWhileInitializingDataDir(t *testing.T) {
	probe := faultfs.New(t.TempDir(), nil)
	opts := testOptions(probe.Root())
	opts.FS, opts.Backend, opts.ScrubBytesPerSec, opts.RetentionCheckInterval = probe, probe.Backend(), -1, -1
	e, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	calls := probe.Counted()
	e.Close()
	for n := int64(1); n <= calls; n++ {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			fs := faultfs.New(t.TempDir(), nil)
			opts := testOptions(fs.Root())
			opts.FS, opts.Backend, opts.ScrubBytesPerSec, opts.RetentionCheckInterval = fs, fs.Backend(), -1, -1
			fs.CrashAfter(n)
			if e, err := Open(opts); err == nil {
				e.Close()
			}
			if err := fs.Restore(nil); err != nil {
				t.Fatal(err)
			}
			e := openTest(t, opts)
			if _, err := e.CreateTopic("t", 1, TopicConfig{}); err != nil {
				t.Fatalf("crash at call %d of the first open: create: %v", n, err)
			}
			appendValues(t, e, "t", 0, "a")
			if _, err := e.CommitOffsets("g", "", -1, []OffsetCommit{{Topic: "t", Offset: 1}}); err != nil {
				t.Fatal(err)
			}
			e.Close()
			e = openTest(t, opts)
			if got := readAll(t, e, "t", 0); !equal(got, []string{"a"}) {
				t.Fatalf("crash at call %d of the first open: records %v", n, got)
			}
			if offs, _ := e.FetchOffsets("g", "t"); len(offs) != 1 || offs[0].Offset != 1 {
				t.Fatalf("crash at call %d of the first open: offsets %v", n, offs)
			}
		})
	}
}
