// Package outcome classifies how a request that did not succeed ended,
// for metrics, spans and logs: a fault or refusal of the server (counted
// as an error, by catalog NAME) or the client going away (not an error).
//
// The client is gone when the request's context was cancelled
// (context.Canceled: the client cancelled the call or closed its
// connection, or the server's shutdown ended a long poll) or its
// deadline passed (context.DeadlineExceeded: a gRPC client's deadline),
// or when its connection was closed or reset under the server (io.EOF,
// ECONNRESET, EPIPE, ECONNABORTED). The labels are the names of the gRPC
// status codes for the same cases, written as the catalog writes its
// names (docs/architecture.md §10).
package outcome
