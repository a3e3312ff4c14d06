// Package faultfs is a fault-injecting file system for tests of segment
// and engine: an implementation of ring.FS, ring.File and ring.Backend
// that can "crash" (keep only what was synced, file contents and directory
// entries alike) and fail chosen operations with EIO, ENOSPC or any other
// error (docs/architecture.md §9). It follows the habits of pebble's vfs.MemFS (strict
// mode, ResetToSyncedState) and vfs/errorfs (injection by operation kind
// and path), adapted to SQ's seam: segment maps files with mmap(2) through
// File.Fd, so faultfs wraps REAL files in a directory of the test's and
// simulates durability beside them.
//
// # Durability model
//
// Every file is a node (an inode). A node has a synced image: the whole
// file content (and so its size) at its last File.Sync or Backend.Sync.
// Every directory has a set of durable entries, name -> node, taken from
// its current entries at its last FS.SyncDir. Nothing is fsynced on the
// real disk: durability is simulated, which keeps seeded tests fast.
//
//	write/allocate/truncate   change the real file only
//	Sync (fsync/fdatasync)    node.synced = current content of the file
//	Create/Rename/Remove      change the directory's current entries only
//	RemoveAll, Lock (create)  likewise, for every name they remove or create
//	SyncDir(dir)              durable entries of dir = current entries
//	Statfs, ReadDir, Stat     pass through (Statfs can be failed by a rule)
//
// Crash freezes the file system: from then on every call fails with
// ErrCrashed and changes nothing, as if the process had died. Restore then
// rewrites the real directory tree to the durable state: every name the
// FS has seen that is not durably entered in its directory is removed;
// every durable name gets its node's synced image (an empty file if the
// node was never synced). With a random source, Restore instead keeps a
// random prefix of each file's unsynced bytes over its synced image (a
// torn write, as left by in-order page writeback). After Restore the FS
// forgets its state and works again; files and directories it has not
// seen are adopted, on first use, as durable with their content on disk.
//
// Directories and files the FS never touched (written with package os by
// the code under test) are left alone by Restore. SyncDir reconciles the
// directory's entries with the disk first, so names that package os
// created, renamed or removed in it become durable as they are.
//
// RemoveAll and the rename of a directory first record the durable image
// of every file below the path (adopting what the FS had not seen), so a
// crash before SyncDir of the parent brings the whole tree back under its
// old name with its durable content, as a journaling file system that had
// not committed the unlink or rename would. Once a renamed directory's new
// entry is durable, its content is what is on disk under the new name.
//
// # Injection
//
// Inject adds a Rule: the Nth and later calls of an operation kind (Op)
// whose path matches fail with the rule's error, optionally only a limited
// number of times, and a write may be made partial (half its bytes land
// before the error, like a short write on a full disk). CrashAfter crashes
// the FS at the Nth counted call; counting covers every mutating call
// (writes, syncs, allocations, truncations, creates, renames, removes,
// directory syncs, locks), so a seed chooses a crash point deterministically.
//
// # Counters
//
// Stats returns per-operation call counts and the bytes read per file,
// which lets a test prove that a clean restart does not rescan sealed
// segments.
package faultfs
