// Package api holds what the SQ server and the Go SDK share on the wire: the
// Cap'n Proto schema of the data plane (sq.capnp and its generated Go code),
// the frame codec that reads and writes a frame with its raw records tail,
// and the error catalog.
//
// # Frame layout (docs/architecture.md §4)
//
// Each frame is one Cap'n Proto message in standard stream framing
// (https://capnproto.org/encoding.html#serialization-over-a-stream) whose
// root is a Frame, immediately followed by recordsLength raw bytes when the
// frame is a publish request or a fetch response:
//
//	+-----------------------------+---------------------------------+
//	| Cap'n Proto message (Frame) | records tail: whole batches     |
//	| <= MaxFrameBytes            | <= MaxBatchBytes (recordsLength)|
//	+-----------------------------+---------------------------------+
//
// The tail is never copied into the Cap'n Proto message: the server writes
// a fetch response as [frame][mmap slice][mmap slice]... in one writev, and
// reads a publish tail straight into the buffer it appends to the log.
//
// Generated code: sq.capnp.go is produced by `make generate` from sq.capnp
// with capnp(1) and capnpc-go at the version pinned in go.mod.
package api

//go:generate sh -c "capnp compile -I$(go list -m -f '{{.Dir}}' capnproto.org/go/capnp/v3)/std -ogo sq.capnp"
