// Package dataplane serves SQ's Cap'n Proto data plane over TCP (docs/architecture.md §4,
// default port 6064): a Server reads frames (api/sq.capnp), runs each request
// against a Broker (the engine) and writes the responses, each frame with its
// records tail in one writev.
//
// # Wire
//
// A frame is one Cap'n Proto message in standard stream framing whose root
// is an api.Frame, followed by recordsLength raw batch bytes for a publish
// request, a fetch or replica fetch response, or a push (see package api). Three limits bound what a
// connection may send, and all three are stated in the handshake response:
// the Cap'n Proto part (Options.MaxFrameBytes, checked from the stream
// header before anything is allocated), the records tail (the broker's
// MaxBatchBytes) and one record (the broker's MaxRecordBytes, checked by the
// broker's batch validation).
//
// # Memory
//
// Nothing a peer declares is allocated on its word (readframe.go). A
// server-wide budget, Options.MaxInFlightRequestBytes, is charged for each
// frame (8 times its size, for its decoded fields, plus a fixed 8 KiB per
// request) and each publish tail before their buffers exist, and given back
// when the request is answered; a reader that finds it spent stops reading
// its socket. Buffers start small and grow as bytes arrive. A frame must be
// read whole within Options.FrameReadTimeout of its first byte, waits for
// budget excluded; at most Options.MaxConnections connections are open. See
// docs/operations.md, "Memory bounds".
//
// # Quotas
//
// With Options.Quotas, each publish, fetch and push is measured against
// the byte-rate quotas of the connection's principal (quota.go): a
// response over them carries throttleTimeMs, and the connection's next
// publishes, fetches and subscriptions wait that long in their handler
// goroutines (KIP-219), within the slots and budget above. Other requests
// and replica fetches are never held.
//
// # Connection lifecycle
//
//  1. Accept. Serve starts one reader goroutine per connection; the reader
//     starts the connection's single writer goroutine. A connection beyond
//     Options.MaxConnections is closed at once instead (counted in Stats,
//     logged at most once a second).
//  2. Handshake. The first frame must be a handshakeRequest and must arrive
//     within Options.HandshakeTimeout. The reply states protocolVersion,
//     nodeId, serverVersion and the limits (maxRecordBytes, maxBatchBytes,
//     maxFrameBytes, maxInFlight). protocolVersion is the highest version
//     both sides speak (the client states the lowest it speaks in
//     protocolVersion and the highest in maxProtocolVersion); a
//     protocolVersion outside [api.MinProtocolVersion, api.ProtocolVersion]
//     is answered with UNSUPPORTED_VERSION, any other first frame with an
//     errorResponse INVALID_REQUEST; either way the connection closes after
//     the reply.
//  3. Requests. The reader takes one of Options.MaxInFlightPerConn slots,
//     reads a frame and its tail, and starts a goroutine for the request. A
//     publish tail (or a publishBatches tail, whose entries are then queued
//     as publishes of their own, all before any is waited for) is read into a fresh buffer whose ownership passes to
//     Broker.Append, once Options.MaxInFlightBytesPerConn and the server's
//     budget leave room for it. When the slots or a budget run out the
//     reader stops reading, so a fast client is slowed by TCP flow control,
//     never dropped. Each
//     response carries its request's correlationId; responses go out in
//     completion order, not request order. Publishes to one partition from
//     one connection are appended in the order they were read (each waits
//     for the previous one's append to return); everything else runs
//     concurrently. A union member that is not a request this server serves
//     is answered with errorResponse INVALID_REQUEST and the connection stays
//     open (a tail it declares is read and dropped).
//  4. Writing. The writer takes responses from a queue as they complete and
//     writes each frame together with its records tail — for a fetch, the
//     broker's mapped segment slices — in one writev, then releases the
//     fetch result, then returns the request's slot. A response whose Cap'n
//     Proto part would exceed MaxFrameBytes is replaced by MESSAGE_TOO_LARGE.
//     A write that fails or exceeds Options.WriteTimeout closes the
//     connection at once.
//  5. Close. The connection ends when the client closes it, when a frame
//     cannot be read or parsed (a garbage length prefix, a frame over
//     MaxFrameBytes, a broken pointer, a stream that ends inside a frame or
//     a tail, a frame not read whole within FrameReadTimeout), when a tail
//     exceeds MaxBatchBytes (answered with MESSAGE_TOO_LARGE first, since
//     the stream cannot be resynchronised), after Options.IdleTimeout with
//     nothing in flight, after a panic in a
//     handler (answered with UNKNOWN), or at shutdown. Teardown stops
//     reading, cancels the long-poll fetches in flight (they return at once),
//     lets the appends in flight finish so that their outcome never hangs on
//     a cancelled wait, flushes every queued response, closes the socket and
//     logs one line with the remote address and the reason (DEBUG for a
//     clean close, WARN for a protocol error, ERROR for a panic). One
//     connection's failure never affects another.
//
// # Subscriptions
//
// A subscribe request starts a push subscription on its own goroutine,
// outside the request slots: it long-polls the broker (Options.MaxFetchWait)
// within the credit the client grants and queues each result as a push
// frame. It ends with its unsubscribe, its connection's end or Shutdown,
// whatever the broker answers a cancelled long poll with, and sends a final
// push without records. An empty fetch that returned before its long poll
// ran out is followed by a pause (a quarter of MaxFetchWait, at most
// 100 ms), so a broker that cannot wait never makes it spin.
//
// # Replication
//
// A Broker that also implements ReplicaBroker (a cluster node) serves the
// followers' replicaFetch, answered like a fetch with the mapped segment
// slices as its tail but up to the log end offset and with the leader's
// epoch, and offsetForLeaderEpoch; one that implements ProducerIDBroker
// serves initProducerId. Without them those frames are answered with
// INVALID_REQUEST saying why. A publish's acks reach the Broker through
// engine.WithAcks on the append's context. ReplicaClient is the follower's
// side: one connection to a leader, its calls concurrent.
//
// # Shutdown
//
// Server.Shutdown stops accepting, answers every new request with
// SHUTTING_DOWN, ends long-poll fetches early (they answer with what is
// readable or with SHUTTING_DOWN), waits for each connection's in-flight
// requests to be answered and then closes it. Server.Close, or the end of
// Shutdown's context, closes every connection at once and cancels
// everything in flight, appends included (an append whose wait is cancelled
// may still be written). Neither closes the Broker: the caller closes the engine after the server.
package dataplane
