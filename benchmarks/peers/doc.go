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
//     durable at ack), each in two modes: "JetStream async", nats.go
//     PublishAsync with up to 4096 acks outstanding, and "JetStream fast
//     batch 500", fast batch publish (jetstreamext.FastPublisher from
//     github.com/synadia-io/orbit.go, on a stream with AllowBatchPublish;
//     nats-server 2.14 or later): one batch for the whole run, a flow ack
//     every 500 messages, up to 2 flow acks outstanding, committed at the
//     end (`nats bench js pub fast --batch 500` publishes the same way, with
//     one flow ack outstanding by default).
//   - Redis Streams from Debian's redis-server (installed with apt-get when
//     missing): XADD in pipelines of 500, with appendonly yes and
//     appendfsync always, and with appendfsync everysec.
//
// Each server is started on a free loopback port with its data in a
// temporary directory, measured, stopped, and its files removed. The table
// names each system, mode and configuration and gives records/s, MB/s of
// values, ack latency percentiles, the 1-minute load average of
// /proc/loadavg just before and just after the measurement, and the ratio
// of SQ every-batch to each row. Under it, SQ every-batch's ratio to the
// fastest JetStream row at its default durability and to Redis
// appendfsync always, against the P2 targets of docs/performance.md. This
// module has its own go.mod so the peers' client and server modules stay
// out of SQ's dependency list; `make check` vets it and `make test` runs
// its tests.
package main
