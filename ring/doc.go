// Package ring is the file-I/O seam of SQ's storage (docs/architecture.md §3.4).
//
// It has two halves:
//
//   - FS and File: every metadata and read call that segment and engine
//     make (create, open, remove, remove a tree, rename, list, mkdir,
//     stat, fsync of a directory, flock(2) of the data directory's LOCK,
//     statfs(2) for the free-space floor), in the style of pebble's vfs;
//     ReadFile reads a whole file through an FS. OS is the real
//     implementation, used with either backend; tests substitute
//     internal/faultfs, which can fail any call and simulate a crash.
//     Nothing in engine or segment reaches the disk around it
//     (internal/archtest checks).
//   - Backend: the calls on the write path (gather write, fdatasync,
//     preallocation, truncation). NewPortable returns the portable backend
//     built on pwritev(2), fdatasync(2), fallocate(2) and ftruncate(2).
//     NewUring returns the io_uring backend (Linux): writes as WRITEV, syncs
//     as FSYNC(DATASYNC), the syncs of several files in one
//     io_uring_enter(2); NewUringWith drives its ring from one thread with
//     IORING_SETUP_SINGLE_ISSUER|DEFER_TASKRUN, or with SQPOLL
//     (UringOptions). Both backends also write with RWF_DSYNC
//     (DsyncWriter). Probe says whether io_uring can run here and why;
//     Select picks a backend for --io-backend auto|uring|portable.
//
// Errors are the operating system's, wrapped with the operation and file
// name (*os.PathError or an error prefixed "ring: "), so errors.Is(err,
// syscall.ENOSPC) and similar tests work.
package ring
