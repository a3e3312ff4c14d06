// Package quota enforces the client byte-rate quotas of a server, Kafka's
// client quotas (KIP-13, KIP-219; the default entity of KIP-257/546): each
// principal may produce and fetch at most so many bytes per second on
// this node. The quotas are cluster metadata (gossip/meta); every node
// measures and throttles its own traffic, as a Kafka broker does.
//
// A Manager measures the bytes of each principal that has a quota over a
// sliding window of samples (Kafka's quota.window.num windows of
// quota.window.size.seconds: 11 of 1 s by default) and, after each
// request, returns how long the client must wait for its rate to come
// back under the quota. Data is never dropped: the request is served,
// and the planes report the throttle time to the client and hold back
// its next publishes and fetches (the data plane answers at once and
// holds the connection's next ones, gRPC holds the response or the
// stream's next read) for that long, at most the length of the window
// (docs/security.md, "Quotas").
package quota
