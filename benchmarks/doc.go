// Package benchmarks holds SQ's storage benchmarks (go test -bench), kept
// apart from the packages they measure so that `make bench` can run them
// briefly. Their figures, with the machine they ran on, are recorded in
// docs/performance.md.
//
// The append benchmarks compare the I/O backends of package ring (io_uring
// and portable pwritev + fdatasync) under the every-batch sync policy: each
// commit is one segment.Log.Append of one batch followed by Sync, as the
// engine's partition goroutine does (DESIGN §3.3).
package benchmarks
