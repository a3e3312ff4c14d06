// Package benchmarks holds SQ's storage benchmarks (go test -bench), kept
// apart from the packages they measure so that `make bench` can run them
// briefly. Their figures, with the machine they ran on, are recorded in
// docs/performance.md.
//
// The append benchmarks compare the I/O backends of package ring (io_uring
// and portable pwritev + fdatasync) under the every-batch sync policy: each
// commit is one segment.Log.Append of one batch followed by Sync, as the
// engine's partition goroutine does (docs/architecture.md §3.3).
//
// The hot-path benchmarks (hotpath_test.go, loopback_test.go) measure, with
// -benchmem: the SDK's batch build, batch validation, frame encode and
// decode, engine appends with group commit, fetch from mmap, and the whole
// path over loopback TCP with an in-process server: BatchProducer publish
// throughput, consume catch-up through sdk.Client.Fetch, and the ack
// latency at a fixed offered load (HdrHistogram, from intended send times).
// BenchmarkManyPartitions (manyparts_test.go, make bench-partitions)
// measures one node with up to 10,000 partitions: create time, publish
// rate from one BatchProducer, RSS, open files, mappings, disk and
// restart time.
//
// The side-by-side comparison with NATS JetStream and Redis Streams is the
// separate module in peers/ (make bench-peers).
package benchmarks
