package engine

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/internal/faultfs"
	"github.com/seedqueue/sq/ring"
)

// Injected failures of the engine's own files (metadata, offsets log,
// topic delete, lock, free space, format version), through faultfs.

func commitOne(e *Engine, group, topic string, off uint64) error {
	out, err := e.CommitOffsets(group, "", -1, []OffsetCommit{{Topic: topic, Offset: off}})
	if err == nil && out[0].Err != nil {
		err = out[0].Err
	}
	return err
}

func committedOf(t *testing.T, e *Engine, group, topic string) uint64 {
	t.Helper()
	offs, err := e.FetchOffsets(group, topic)
	if err != nil || len(offs) != 1 {
		t.Fatalf("FetchOffsets(%s, %s) = %v, %v", group, topic, offs, err)
	}
	return offs[0].Offset
}

// TestOffsetsFailedFsync: a failed fsync of the offsets log fails the
// commit and every later one (the store is failed, logged at error and
// reported by GroupOffsetsErr) even once the disk works again; commits
// made before stay; after a crash and a reopen commits work again and
// every acknowledged commit is there.
func TestOffsetsFailedFsync(t *testing.T) {
	for _, failing := range []struct {
		name string
		rule faultfs.Rule
		// sticky: later commits fail too.
		sticky bool
	}{
		{"fsync", faultfs.Rule{Ops: faultfs.OpSync, Path: offsetsFile, Times: 1, Err: syscall.EIO}, true},
		{"fsync-enospc", faultfs.Rule{Ops: faultfs.OpSync, Path: offsetsFile, Times: 1, Err: syscall.ENOSPC}, true},
		{"compaction-reopen", faultfs.Rule{Ops: faultfs.OpOpen, Path: offsetsFile, Times: 1, Err: syscall.EIO}, true},
		{"compaction-syncdir", faultfs.Rule{Ops: faultfs.OpSyncDir, Path: "groups", Times: 1, Err: syscall.EIO}, true},
		{"compaction-rename", faultfs.Rule{Ops: faultfs.OpRename, Path: offsetsFile, Times: 1, Err: syscall.EIO}, false},
		{"compaction-temp", faultfs.Rule{Ops: faultfs.OpSync, Path: "*" + tmpSuffix, Times: 1, Err: syscall.EIO}, false},
		{"write-partial", faultfs.Rule{Ops: faultfs.OpWrite, Path: offsetsFile, Times: 1, Err: syscall.ENOSPC, Partial: true}, false},
	} {
		t.Run(failing.name, func(t *testing.T) {
			dir := t.TempDir()
			opts, fs := faultOptions(dir)
			var logs syncBuffer
			opts.Logger = slog.New(slog.NewTextHandler(&logs, nil))
			e, err := Open(opts)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := e.CreateTopic("t", 1, TopicConfig{}); err != nil {
				t.Fatal(err)
			}
			appendValues(t, e, "t", 0, "a", "b", "c", "d")
			if err := commitOne(e, "g", "t", 1); err != nil {
				t.Fatal(err)
			}
			compacting := strings.HasPrefix(failing.name, "compaction")
			if compacting {
				e.offsets.compactAt = 1 // the next commit compacts
			}
			fs.Inject(failing.rule)
			err = commitOne(e, "g", "t", 2)
			switch {
			case compacting && err != nil:
				// The record was synced before the compaction: acknowledged.
				t.Fatalf("commit whose compaction failed: %v, want acknowledged", err)
			case !compacting && codeOf(err) != api.CodeStorageError && codeOf(err) != api.CodeDiskFull:
				t.Fatalf("commit with a failed %s: %v, want STORAGE_ERROR or DISK_FULL", failing.name, err)
			}
			acked := uint64(1)
			if compacting {
				acked = 2
			}
			err = commitOne(e, "g", "t", 3)
			if failing.sticky {
				if codeOf(err) != api.CodeStorageError || e.GroupOffsetsErr() == nil {
					t.Fatalf("commit after the failure: %v (GroupOffsetsErr %v), want STORAGE_ERROR", err, e.GroupOffsetsErr())
				}
				if !strings.Contains(logs.String(), "group offsets log failed") {
					t.Fatalf("the failure is not logged: %s", logs.String())
				}
				if err := e.DeleteGroup("g"); codeOf(err) != api.CodeStorageError {
					t.Fatalf("group delete after the failure: %v, want STORAGE_ERROR", err)
				}
			} else {
				if err != nil || e.GroupOffsetsErr() != nil {
					t.Fatalf("commit after a failure that does not fail the log: %v (GroupOffsetsErr %v)", err, e.GroupOffsetsErr())
				}
				acked = 3
			}
			if got := committedOf(t, e, "g", "t"); got != acked {
				t.Fatalf("committed offset in memory %d, want %d", got, acked)
			}
			fs.Crash()
			e.Close()
			if err := fs.Restore(nil); err != nil {
				t.Fatal(err)
			}
			e = openTest(t, opts)
			if got := committedOf(t, e, "g", "t"); got != acked {
				t.Fatalf("committed offset after reopen %d, want %d", got, acked)
			}
			if err := commitOne(e, "g", "t", 4); err != nil || e.GroupOffsetsErr() != nil {
				t.Fatalf("commit after reopen: %v", err)
			}
		})
	}
}

// TestMetadataWriteFailureKeepsOld: a metadata write that fails at any
// step (create, write, partial write, fsync, rename, or the directory
// fsync after the rename) fails the config change with STORAGE_ERROR,
// leaves the old metadata file and the topic's config in memory as they
// were, and leaves no temporary file; a create whose metadata write fails leaves no topic, and the name
// can be created once the disk works.
func TestMetadataWriteFailureKeepsOld(t *testing.T) {
	rules := map[string]faultfs.Rule{
		"create":        {Ops: faultfs.OpCreate, Path: "*" + tmpSuffix, Err: syscall.ENOSPC},
		"write":         {Ops: faultfs.OpWrite, Path: "*" + tmpSuffix, Err: syscall.EIO},
		"write-partial": {Ops: faultfs.OpWrite, Path: "*" + tmpSuffix, Err: syscall.ENOSPC, Partial: true},
		"fsync":         {Ops: faultfs.OpSync, Path: "*" + tmpSuffix, Err: syscall.EIO},
		"rename":        {Ops: faultfs.OpRename, Path: "*.json", Err: syscall.EIO},
		"dir-fsync":     {Ops: faultfs.OpSyncDir, Path: "topics", Err: syscall.EIO},
	}
	for name, rule := range rules {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			opts, fs := faultOptions(dir)
			e := openTest(t, opts)
			if _, err := e.CreateTopic("t", 1, TopicConfig{RetentionMs: 1000}); err != nil {
				t.Fatal(err)
			}
			appendValues(t, e, "t", 0, "a")
			metaPath := filepath.Join(dir, "meta", "topics", "t.json")
			old, err := os.ReadFile(metaPath)
			if err != nil {
				t.Fatal(err)
			}
			remove := fs.Inject(rule)
			if _, err := e.AlterTopicConfig("t", TopicConfigChange{RetentionMs: ptr(int64(2000))}); codeOf(err) != api.CodeStorageError && codeOf(err) != api.CodeDiskFull {
				t.Fatalf("alter with a failed metadata %s: %v, want STORAGE_ERROR or DISK_FULL", name, err)
			}
			if ti, _ := e.DescribeTopic("t"); ti.Config.RetentionMs != 1000 {
				t.Fatalf("config in memory changed to %d", ti.Config.RetentionMs)
			}
			if _, err := e.CreateTopic("u", 1, TopicConfig{}); err == nil {
				t.Fatal("create with a failing metadata write succeeded")
			}
			if _, err := e.DescribeTopic("u"); codeOf(err) != api.CodeUnknownTopic {
				t.Fatalf("topic of a failed create: %v", err)
			}
			if now, _ := os.ReadFile(metaPath); string(now) != string(old) {
				t.Fatalf("metadata file changed:\n%s\nwant\n%s", now, old)
			}
			if tmps, _ := filepath.Glob(filepath.Join(dir, "meta", "topics", "*"+tmpSuffix)); len(tmps) != 0 {
				t.Fatalf("temporary files left: %v", tmps)
			}
			remove()
			fs.Crash()
			e.Close()
			if err := fs.Restore(nil); err != nil {
				t.Fatal(err)
			}
			e = openTest(t, opts)
			if ti, err := e.DescribeTopic("t"); err != nil || ti.Config.RetentionMs != 1000 {
				t.Fatalf("after reopen: retention.ms %d, %v; want 1000", ti.Config.RetentionMs, err)
			}
			if got := readAll(t, e, "t", 0); !equal(got, []string{"a"}) {
				t.Fatalf("records after reopen: %v", got)
			}
			if _, err := e.CreateTopic("u", 1, TopicConfig{}); err != nil {
				t.Fatalf("create of the name of a failed create: %v", err)
			}
		})
	}
}

// TestDeleteFailureBeforeCommitPoint: a delete that fails before its
// commit point (the marker cannot be written, or the metadata file cannot
// be removed or its directory fsynced) returns STORAGE_ERROR, and after a
// restart the topic is back with every record and its committed offsets.
func TestDeleteFailureBeforeCommitPoint(t *testing.T) {
	for name, rule := range map[string]faultfs.Rule{
		"marker":       {Ops: faultfs.OpCreate, Path: deletingMarker, Err: syscall.ENOSPC},
		"marker-fsync": {Ops: faultfs.OpSyncDir, Path: "t", Err: syscall.EIO},
		"remove-meta":  {Ops: faultfs.OpRemove, Path: "t.json", Err: syscall.EIO},
		"fsync-meta":   {Ops: faultfs.OpSyncDir, Path: "topics", Times: 1, Err: syscall.EIO},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			opts, fs := faultOptions(dir)
			e, err := Open(opts)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := e.CreateTopic("t", 2, TopicConfig{}); err != nil {
				t.Fatal(err)
			}
			appendValues(t, e, "t", 0, "a", "b")
			appendValues(t, e, "t", 1, "c")
			if err := commitOne(e, "g", "t", 2); err != nil {
				t.Fatal(err)
			}
			fs.Inject(rule)
			if err := e.DeleteTopic("t"); codeOf(err) != api.CodeStorageError && codeOf(err) != api.CodeDiskFull {
				t.Fatalf("delete with a failed %s: %v, want STORAGE_ERROR or DISK_FULL", name, err)
			}
			fs.Crash()
			e.Close()
			if err := fs.Restore(nil); err != nil {
				t.Fatal(err)
			}
			e = openTest(t, opts)
			if got := readAll(t, e, "t", 0); !equal(got, []string{"a", "b"}) {
				t.Fatalf("partition 0 after restart: %v", got)
			}
			if got := readAll(t, e, "t", 1); !equal(got, []string{"c"}) {
				t.Fatalf("partition 1 after restart: %v", got)
			}
			if got := committedOf(t, e, "g", "t"); got != 2 {
				t.Fatalf("committed offset after restart %d, want 2", got)
			}
			if _, err := os.Stat(filepath.Join(dir, "topics", "t", deletingMarker)); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("deletion marker of a kept topic: %v", err)
			}
			if err := e.DeleteTopic("t"); err != nil {
				t.Fatalf("delete after restart: %v", err)
			}
		})
	}
}

// TestDeletedDirectoryLeftInPlace: when the rename of a deleted topic's
// directory into the trash fails, the delete is still acknowledged (its
// commit point passed); the name can be created again at once, and a
// restart removes the directory.
func TestDeletedDirectoryLeftInPlace(t *testing.T) {
	dir := t.TempDir()
	opts, fs := faultOptions(dir)
	e := openTest(t, opts)
	for range 2 {
		if _, err := e.CreateTopic("t", 1, TopicConfig{}); err != nil {
			t.Fatal(err)
		}
		appendValues(t, e, "t", 0, "old")
		remove := fs.Inject(faultfs.Rule{Ops: faultfs.OpRename, Path: "0*", Err: syscall.EIO})
		if err := e.DeleteTopic("t"); err != nil {
			t.Fatal(err)
		}
		remove()
		if _, err := os.Stat(filepath.Join(dir, "topics", "t", deletingMarker)); err != nil {
			t.Fatalf("the deleted directory is not in place with its marker: %v", err)
		}
	}
	e.Close()
	e = openTest(t, opts)
	if _, err := os.Stat(filepath.Join(dir, "topics", "t")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a deleted topic's directory survived the restart: %v", err)
	}
	if _, err := e.CreateTopic("t", 1, TopicConfig{}); err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, e, "t", 0); len(got) != 0 {
		t.Fatalf("recreated topic holds %v", got)
	}
}

// TestOpenThroughTheSeam: the lock, the free-space check and the format
// version go through Options.FS: their failures are the file system's.
func TestOpenThroughTheSeam(t *testing.T) {
	t.Run("lock", func(t *testing.T) {
		opts, fs := faultOptions(t.TempDir())
		fs.Inject(faultfs.Rule{Ops: faultfs.OpLock, Err: syscall.EIO})
		if _, err := Open(opts); !errors.Is(err, syscall.EIO) || errors.Is(err, ErrDataDirLocked) {
			t.Fatalf("Open with a failing lock: %v, want EIO", err)
		}
	})
	t.Run("locked", func(t *testing.T) {
		opts, fs := faultOptions(t.TempDir())
		e := openTest(t, opts)
		if _, err := Open(opts); !errors.Is(err, ErrDataDirLocked) || !strings.Contains(err.Error(), "pid") {
			t.Fatalf("second Open: %v, want ErrDataDirLocked naming the pid", err)
		}
		if n := fs.Stats().Count(faultfs.OpLock); n != 2 {
			t.Fatalf("%d locks through the FS, want 2", n)
		}
		e.Close()
		e = openTest(t, opts) // released by Close
		e.Close()
	})
	t.Run("statfs", func(t *testing.T) {
		opts, fs := faultOptions(t.TempDir())
		opts.MinFreeBytes = 1
		e := openTest(t, opts)
		if _, err := e.CreateTopic("t", 1, TopicConfig{}); err != nil {
			t.Fatal(err)
		}
		appendValues(t, e, "t", 0, "a")
		if n := fs.Stats().Count(faultfs.OpStatfs); n == 0 {
			t.Fatal("the free-space floor did not ask the FS")
		}
		if _, err := statfsFree(fs)(opts.DataDir); err != nil {
			t.Fatal(err)
		}
		if sp, err := e.DiskSpace(); err != nil || sp.Avail <= 0 || sp.Total < sp.Avail {
			t.Fatalf("DiskSpace = %+v, %v", sp, err)
		}
		fs.Inject(faultfs.Rule{Ops: faultfs.OpStatfs, Err: syscall.EIO})
		if _, err := statfsFree(fs)(opts.DataDir); !errors.Is(err, syscall.EIO) {
			t.Fatalf("statfs through a failing FS: %v", err)
		}
		if _, err := e.DiskSpace(); !errors.Is(err, syscall.EIO) {
			t.Fatalf("DiskSpace through a failing FS: %v", err)
		}
	})
	t.Run("format-version", func(t *testing.T) {
		opts, fs := faultOptions(t.TempDir())
		remove := fs.Inject(faultfs.Rule{Ops: faultfs.OpRename, Path: "format-version", Err: syscall.EIO})
		if _, err := Open(opts); !errors.Is(err, syscall.EIO) {
			t.Fatalf("Open with a failing format-version write: %v", err)
		}
		remove()
		if _, err := os.Stat(filepath.Join(opts.DataDir, "format-version")); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("format-version after a failed write: %v", err)
		}
		e := openTest(t, opts)
		e.Close()
		b, err := ring.ReadFile(fs, filepath.Join(opts.DataDir, "format-version"))
		if err != nil || strings.TrimSpace(string(b)) != "1" {
			t.Fatalf("format-version = %q, %v", b, err)
		}
	})
}

// TestDeleteTopicWithoutDirectory: a topic whose directory was removed by
// hand can still be deleted (there is nothing to mark), and stays deleted.
func TestDeleteTopicWithoutDirectory(t *testing.T) {
	opts := testOptions(t.TempDir())
	e := openTest(t, opts)
	if _, err := e.CreateTopic("t", 1, TopicConfig{}); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(opts.DataDir, "topics", "t")); err != nil {
		t.Fatal(err)
	}
	if err := e.DeleteTopic("t"); err != nil {
		t.Fatalf("delete of a topic without its directory: %v", err)
	}
	e.Close()
	e = openTest(t, opts)
	if _, err := e.DescribeTopic("t"); codeOf(err) != api.CodeUnknownTopic {
		t.Fatalf("after restart: %v, want UNKNOWN_TOPIC", err)
	}
}

// TestCreateFailingMetadataFsync: when the directory fsync after the
// metadata rename fails, the create fails and the metadata file is taken
// back, so a restart does not bring up a topic the client was told was
// not created.
func TestCreateFailingMetadataFsync(t *testing.T) {
	dir := t.TempDir()
	opts, fs := faultOptions(dir)
	e := openTest(t, opts)
	remove := fs.Inject(faultfs.Rule{Ops: faultfs.OpSyncDir, Path: "topics", After: 1, Times: 1, Err: syscall.EIO})
	if _, err := e.CreateTopic("t", 1, TopicConfig{}); codeOf(err) != api.CodeStorageError {
		t.Fatalf("create with a failed metadata directory fsync: %v, want STORAGE_ERROR", err)
	}
	remove()
	if _, err := os.Stat(filepath.Join(dir, "meta", "topics", "t.json")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("metadata of a failed create: %v", err)
	}
	e.Close()
	e = openTest(t, opts)
	if _, err := e.DescribeTopic("t"); codeOf(err) != api.CodeUnknownTopic {
		t.Fatalf("a failed create came back after restart: %v", err)
	}
	if _, err := e.CreateTopic("t", 1, TopicConfig{}); err != nil {
		t.Fatal(err)
	}
}
