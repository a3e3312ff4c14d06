// Package sdk is the Go client of SQ (SeedQueue). It speaks the Cap'n Proto
// data plane (api/sq.capnp, default port 6064) and, for Admin, GrpcProducer
// and GrpcConsumer, the gRPC control plane (api/sq.proto, default port
// 6060). It imports only package api (with api/batch and api/sqv1) from
// this module.
//
// Three layers:
//
//   - Client: one multiplexed, pipelined connection (requests answered in
//     any order, up to the server's maxInFlight), reconnecting with
//     exponential, capped, jittered backoff. Topic admin (CreateTopic,
//     CreatePartitions, DescribeTopic, ListTopics, Metadata), Publish of a prebuilt batch,
//     Fetch, CommitOffsets and FetchOffsets. It never retries by itself.
//   - Producer: Send and SendBatch with partitioning, batching under the
//     server's limits and retries. BatchProducer: Send that returns once
//     the record is buffered, with Linger, Flush and callbacks. Both are
//     one produce pipeline (see Goroutines); a Producer's calls wait on it.
//   - Consumer: Poll over every partition of a topic, or as a member of a
//     consumer group over the partitions the broker assigns it, with
//     Commit and AutoCommit. Records arrive by push subscription (the
//     broker pushes within a byte credit the consumer grants back) or, with
//     UseFetch, by long-poll fetch. Without a group it can read a subset
//     of the partitions (Partitions, as Kafka's assign), each from an
//     offset of its own (StartOffsets, as seek; one past the high
//     watermark is waited for) and up to an end offset of its own
//     (EndOffsets, exclusive, as kcat -e: Poll then returns
//     ErrEndOffsetsReached); `sq consume` reads this way.
//
// Over gRPC, for networks or languages where Cap'n Proto is not an option:
// Admin (topics, consumer groups, node info and members), GrpcProducer
// (Send, SendBatch: the Producer's partitioning, ordering and retries) and
// GrpcConsumer (Poll, Commit, Close over one Subscribe stream per
// partition; with a ConsumerGroup a member of the group through the Groups
// RPCs, sharing it with Consumer members, as Consumer is). Records are the same on
// both planes: header keys cross as bytes (even when not UTF-8), while group
// ids, client ids and commit metadata must be valid UTF-8 on both
// (api.ErrInvalidRequest otherwise). The server splits Subscribe responses
// below NodeInfo.GrpcMaxMessageBytes (4 MiB - 64 KiB), so any gRPC client
// with default limits reads any batch; a single record above it makes
// GrpcConsumer.Poll return api.ErrMessageTooLarge (read it over Cap'n
// Proto).
//
// # Publish
//
//	p, err := sdk.NewProducer(ctx, sdk.ProducerConfig{}) // 127.0.0.1:6064
//	if err != nil { ... }
//	defer p.Close()
//	ack, err := p.Send(ctx, "orders", nil, []byte("hello"))
//	// Or batch; each Ack carries its own Err:
//	acks, err := p.SendBatch(ctx, []sdk.ProducerMessage{
//		sdk.NewProducerMessage("orders", []byte("msg-1")),
//		sdk.NewProducerMessage("orders", []byte("msg-2")).WithKey([]byte("user-7")),
//	})
//
// # Subscribe
//
//	c, err := sdk.NewConsumer(ctx, sdk.ConsumerConfig{
//		Topic:         "orders",
//		ConsumerGroup: "my-group",
//		AutoCommit:    true,
//	})
//	if err != nil { ... }
//	defer c.Close()
//	for {
//		msgs, err := c.Poll(ctx)
//		if err != nil { ... }
//		for _, m := range msgs {
//			fmt.Printf("[%s] partition=%d offset=%d\n", m.Topic, m.Partition, m.Offset)
//		}
//	}
//
// # Delivery guarantees
//
// A record is stored when its Ack has no Err, with the Durability the
// server reached (synced: survives power loss; written: survives a process
// crash, not a power loss; replicated: held by every in-sync replica, at
// least min.insync.replicas of them, with Acks AcksAll in a cluster). A
// batch that fails with a retriable error or a lost connection is sent
// again. Producer, BatchProducer and GrpcProducer are idempotent by
// default (KIP-98): the retry carries the batch's (or the gRPC Publish
// request's) producer id and sequence, so when only the acknowledgement
// was lost the partition's leader stores it once and answers with the
// original offsets; each acknowledged record is then stored exactly once
// per partition for the producer's session (see Producer and GrpcProducer
// for what this does not cover). With DisableIdempotence (ProducerConfig's
// or GrpcProducerConfig's), or against a server that does not grant
// producer ids, producing is at-least-once: such a retry may store the
// records twice.
// Within one Send or
// SendBatch call a partition's records keep their order, retries included;
// separate concurrent calls are not ordered with respect to each other.
//
// Consuming is at-least-once with a consumer group. Commit and AutoCommit
// store, per partition, the offset after the last record returned by Poll,
// never a record not yet returned; records returned but not yet processed
// when a consumer dies are read again by the next one. AutoCommit commits
// the position after the records returned by the previous Poll at the next
// Poll (at most once per AutoCommitInterval), when a partition is revoked
// (at the next Poll, before the partition is released to another member),
// and at Close (skipped when the last Poll returned an error; an application
// that polls again after an error gets its later positions committed).
//
// What a commit covers is the application's choice. The default is
// Kafka's: everything Poll returned counts as processed, so an
// application that polls 500 records, processes 200, fails and calls
// Close commits all 500, and the 300 others are never processed by the
// group. To avoid that:
//
//   - AutoCommitMarked with MarkProcessed(msg): every commit (automatic,
//     at revocation, at Close, and Commit) stores, per partition, the
//     offset after the last marked record, never beyond what Poll
//     returned; unmarked records are read again by the next owner. Marking
//     may happen on other goroutines; a revoked partition can be marked
//     until the next Poll releases it, then marking fails with
//     ErrNotAssigned.
//   - CommitOffsets(ctx, positions): explicit positions (the next offset
//     to read per partition), checked against the assignment (ErrNotAssigned,
//     ErrInvalidPosition) and fenced like Commit; one beyond the high
//     watermark fails with api.ErrOffsetOutOfRange.
//   - CloseWithoutCommit: leaves the group without committing, whatever
//     AutoCommit says.
//
// For example, committing only what was processed:
//
//	c, _ := sdk.NewConsumer(ctx, sdk.ConsumerConfig{Topic: "orders",
//		ConsumerGroup: "my-group", AutoCommitMarked: true})
//	for {
//		msgs, err := c.Poll(ctx)
//		if err != nil { ... }
//		for _, m := range msgs {
//			if err := process(m); err != nil {
//				c.Close() // commits what was marked: m and later records are read again
//				return err
//			}
//			c.MarkProcessed(m)
//		}
//	}
//
// # Consumer groups
//
// Members of one ConsumerGroup share the topic's partitions (docs/architecture.md §6,
// broker-side assignment as in Kafka's KIP-848). A heartbeat goroutine
// applies assignment changes: partitions that do not move keep being read;
// a revoked one stops at once and is committed (AutoCommit) and released at
// the next Poll; a newly assigned one starts at the group's committed
// offset read from the broker. OnPartitionsAssigned and
// OnPartitionsRevoked report the changes. Commits carry the member id and
// generation: a stale one fails with api.ErrFencedGeneration and changes
// nothing. A member removed by its session timeout drops its partitions
// without committing and joins again. A member whose application does not
// call Poll for ConsumerConfig.MaxPollInterval (default 5 min; as Kafka's
// max.poll.interval.ms, KIP-62) leaves the group although it still
// heartbeats, so a stalled application neither holds its partitions nor
// delays a rebalance past that bound; it logs a warning, drops its
// partitions without committing (the next Commit, or Close with
// AutoCommit, reports the positions not stored, wrapping
// ErrMaxPollIntervalExceeded) and joins again at its next Poll, at the
// group's committed offsets. HeartbeatInterval makes a member heartbeat,
// and so see assignment changes, more often than the server's interval (a
// third of the session timeout). A position that
// retention has removed (a committed offset, a StartAt, or a position
// overtaken while reading) moves to the log start, as Kafka's
// auto.offset.reset=earliest, and a warning gives the offset, the log start
// and the count skipped; Consumer and GrpcConsumer alike, on their Logger,
// or on slog.Default() when none is set (or, for a Consumer, to its
// OnRecordsLost callback instead): records lost to retention are never
// skipped silently.
//
// # Topics deleted and created again
//
// Every topic has a unique id (TopicInfo.ID, Kafka's KIP-516), made when it
// is created. Consumer (alone or in a group) and GrpcConsumer fetch,
// subscribe and commit with the id of the topic each position belongs to.
// When the topic is deleted and created again under the same name the
// server answers api.ErrUnknownTopicID, and the consumer starts over on
// the new topic: it reads the metadata again, drops its positions and the
// records it holds of the old topic, starts each partition at the group's
// committed offset of the new topic (offsets of the old one are gone) or
// else at StartFrom, and logs a warning. It never reads the new topic from
// the old positions. While no topic has the name, Poll returns
// api.ErrUnknownTopic and the consumer keeps trying. Client requests
// without an id (FetchRequest.TopicID, OffsetCommit.TopicID and
// Client.Subscribe zero) are served by name.
//
// # Errors
//
// Server errors are *api.Error values from the catalog in package api; test
// them with errors.Is against the api sentinels (api.ErrUnknownTopic, ...).
// IsRetriable tells whether a request may be sent again unchanged.
// ErrConnection wraps every transport failure, ErrClosed every call after
// Close. Connecting is bounded (ClientConfig.DialTimeout,
// GrpcConfig.ConnectTimeout with Admin.Connect): an address that accepts
// and does not answer fails with a *ConnectTimeoutError (ErrConnectTimeout,
// also ErrConnection), and one that answers in another protocol (the gRPC
// port given as the data plane, the metrics port, TLS) with a permanent
// *WrongProtocolError (ErrNotDataPlane, ErrNotControlPlane) naming what it
// speaks. An address that is not host:port is refused before dialing with
// an *AddrError (ErrBadAddr). A server error's message ends with the text
// of its cause on the server (an fdatasync's "input/output error"); the
// cause itself never crosses the wire, so test the code, not the cause.
//
// # Configuration
//
// Every config struct has a Validate method, which Dial and each NewX call
// before connecting: it reports every impossible value at once, each as an
// error wrapping ErrInvalidConfig that names the field ("sdk: invalid
// configuration: ConsumerConfig.SessionTimeout is 50ms: want 0 (the
// server's default) or 100ms to 5m0s (the server's bounds)"). Zero means
// the default. A setting that can be turned off takes its named value,
// never another negative number: LingerNone, RetriesNone,
// CloseTimeoutNone and MaxPollIntervalNone (each -1).
//
// # Cancellation
//
// Every wait of the SDK ends with the context of the call that waits and
// with Close: the reconnect backoff, a producer's retry backoff, Poll's
// MaxWait, a push subscription's Next, a long-poll fetch. A subscription
// the server ends before it pushed anything is reopened after the
// reconnect backoff, and an empty fetch that returns before its MaxWait is
// followed by a pause, so no loop spins. Without a context deadline the
// producers are still bounded: ProducerConfig.DeliveryTimeout (default 30s,
// Kafka's delivery.timeout.ms) bounds every record from Send to its
// acknowledgement or failure, retries and redials included, so against a
// dead or silent server SendBatch, Flush and Close return within it, and
// the records' errors wrap ErrDeliveryTimeout and the last failure
// (ErrConnection for a server that could not be reached).
// BatchProducer.Close waits for the batches still buffered within that
// budget; BatchProducer.CloseContext bounds the wait by its context and
// reports what is left through OnError.
// The consumers' Close is bounded as a whole: ConsumerConfig.CloseTimeout
// (and GrpcConsumerConfig.CloseTimeout; default 10s, as the timeout of
// Kafka's consumer close, KIP-102) is one budget for the final commit and
// leaving the group together, and CloseContext bounds it by its context
// as well. A final commit not stored within it makes Close return a
// *CloseCommitError naming the partitions whose positions were not
// committed and wrapping the cause (context.DeadlineExceeded for a server
// that did not answer in time): Close never reports success for a commit
// that was not stored. Leaving the group is best effort, skipped once the
// budget is spent; the session timeout then removes the member.
//
// # Goroutines
//
// In one sentence: one writer and one reader goroutine per connection, one
// goroutine per partition a producer has records for (ending when the
// partition is idle) or a consumer reads, and one heartbeat goroutine per
// group member.
//
// Each connection has one writer and one reader goroutine, and a producer
// has one goroutine per partition with records buffered or in flight,
// which ends when the partition is idle. That partition goroutine is the
// produce pipeline (docs/architecture.md §4.2), the same for Producer and
// BatchProducer: it takes the partition's batches in order (a
// BatchProducer's after Linger, a Producer call's at once), encodes them,
// keeps up to a window of them in flight on one connection (chained, so
// the server fails a later batch unwritten when an earlier one failed),
// and resolves and retries them in order, blocking only its own partition
// during a retry's backoff. The number of goroutines is therefore bounded
// by the partitions in use, and none is left once a Producer's calls have
// returned or a BatchProducer is flushed; a BatchProducer's Close waits
// for them. OnAck and OnError run on the partition goroutine.
//
// # Partitioning
//
// Keyed records go to FNV-1a 32(key) mod partitions (HashPartitioner,
// replaceable with ProducerConfig.Partitioner); keyless records rotate
// round-robin from a random first partition, one partition per call and
// topic (Producer, GrpcProducer) or per batch (BatchProducer, KIP-480),
// skipping partitions whose leader just failed (see "While a node is
// down").
//
// # Client core: metadata, placement, connections
//
// Every entry type (Producer, BatchProducer, Consumer, GrpcProducer,
// GrpcConsumer) is built on one internal core (docs/architecture.md §4.1)
// that owns, once for all of them: the metadata cache (topic name and topic
// id -> partition count -> each partition's leader), the placement function
// above, and one connection per broker address, made on first use,
// the configured Addr being the bootstrap one. A topic's metadata is cached
// for MetadataMaxAge (ProducerConfig, GrpcProducerConfig, ConsumerConfig,
// GrpcConsumerConfig; default 5m) and read again at the next use after a
// request about the topic fails with UNKNOWN_TOPIC, UNKNOWN_TOPIC_ID,
// UNKNOWN_PARTITION, NOT_LEADER (unless it named the leader),
// LEADER_NOT_AVAILABLE or NO_QUORUM (or a publish with MESSAGE_TOO_LARGE:
// the topic's record limit, cached with it, may have been lowered); one
// metadata request per topic is in flight at a time, and concurrent
// callers share its answer. So a topic that gets more partitions is used
// in full by the producers once their metadata is that old, and a Consumer
// or GrpcConsumer without a group starts reading the new partitions then
// (a group member gets them from the broker's assignment). The Cap'n Proto
// entry types read metadata with the data plane's Metadata request, the
// gRPC ones with DescribeTopic and Members; the cache and its rules are
// the same. Each NewX call has its own core. On a connection, every
// request is registered and queued for the writer by one function,
// whatever sends it (a publish, a fetch, a subscription, a credit grant, a
// commit).
//
// # Cluster routing
//
// Against a cluster, every request about a partition (publish, fetch,
// subscription, ListOffsets) goes to the partition's leader: the metadata
// lists the nodes (Metadata.Brokers) and each partition's leader and
// leader epoch (PartitionInfo.Leader, LeaderEpoch), and the core keeps one
// connection per node it uses, on the data plane or, for GrpcProducer and
// GrpcConsumer, at the node's gRPC address (ClusterMember.GrpcAddr). A
// server that lists no brokers (one that predates clustering) leads every
// partition itself. While the node at Addr cannot be reached, the Cap'n
// Proto entry types read the metadata from the other nodes of the last
// brokers list. A NOT_LEADER that names the leader (api.Error.LeaderID,
// LeaderAddr) moves the partition there at once; one that names none makes
// the retry read the metadata first. Either way the request is retried on
// the new leader within Retries and DeliveryTimeout, a partition's batches
// keep their order, and no error reaches the caller while the cluster
// names a leader. LEADER_NOT_AVAILABLE (the leader is down) and NO_QUORUM
// (the cluster cannot change its metadata) are retried the same way, with
// backoff, reading the metadata before each retry. A leader learned from
// a NOT_LEADER is not replaced by metadata of the same or an older leader
// epoch (a node that lags), only by a later one. Consumer groups and
// commits stay with the node the client is connected to (Addr).
//
// # While a node is down
//
// A partition's leader that cannot be reached (a connection failure,
// ErrConnection) or answers SHUTTING_DOWN is marked unavailable for 5
// seconds, and the topic's metadata is read again at the next use (from
// another node of the brokers list while Addr is down), so a partition the
// cluster moved to another node is followed without waiting for
// MetadataMaxAge; while no node answers, the last metadata is used.
// Keyless records are placed only on partitions whose leader is
// available (on all of them when every leader is marked unavailable), and
// a batch of keyless records only that failed on an unavailable leader,
// with the keyless batches queued behind it, moves to another partition
// at once: Producer, BatchProducer and GrpcProducer keep delivering
// keyless records with a node down. A moved batch may also have been
// stored by the failed leader (its answer lost): delivery is at least
// once, as for any retried batch, and a moved record's Ack names the
// partition that stored it. A keyed record must go to its partition: it
// is retried there within Retries and DeliveryTimeout, and then fails
// with a *LeaderConnectionError naming the topic, the partition and the
// leader's address (retriable: IsRetriable).
//
// Every connection the SDK opens, to Addr, to leaders, and the probes
// that tell what answers at an address, goes through the config's Dialer
// (ClientConfig, ProducerConfig, ConsumerConfig, GrpcConfig for Admin,
// GrpcProducer and GrpcConsumer) when set: for example to reach nodes in
// other network namespaces in tests.
package sdk
