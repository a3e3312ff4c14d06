// Command peers measures SQ side by side with the brokers a user would
// otherwise pick, in one run on one machine, over loopback, with the same
// workload as `sq bench produce`: one client publishing 100 B records as
// fast as the broker acknowledges them, for a fixed duration.
//
//	make bench-peers                       # from the repository root
//	cd benchmarks/peers && go run . -sq-bin ../../bin -duration 10s
//
// Systems and configurations:
//
//   - SQ: sq-server with `sq bench produce` (BatchProducer, one partition),
//     sync policy every-batch (fdatasync before the ack) and none.
//   - NATS JetStream, nats-server built from github.com/nats-io/nats-server/v2
//     at the version in go.mod, file storage, with sync_interval always
//     (fsync per write) and with the default (sync every 2 minutes: not
//     durable at ack); the client publishes asynchronously with up to
//     4096 acks outstanding (nats.go PublishAsync).
//   - Redis Streams from Debian's redis-server (installed with apt-get when
//     missing): XADD in pipelines of 500, with appendonly yes and
//     appendfsync always, and with appendfsync everysec.
//
// Each server is started on a free loopback port with its data in a
// temporary directory, measured, stopped, and its files removed. The table
// gives records/s, MB/s of values, ack latency percentiles, and the ratio
// of SQ every-batch to each row. This module has its own go.mod so the
// peers' client and server modules stay out of SQ's dependency list.
package main
