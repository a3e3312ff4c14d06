// Package batch builds, validates and iterates SQ record batches, the unit
// of write, CRC, replication and fetch. The same bytes are written by the
// SDK, checked by the server, stored in segment files and returned by fetch
// (docs/architecture.md §3.2).
//
// # Format
//
// Little-endian, a 64-byte header, then the records as one Cap'n Proto
// message in standard stream framing whose root is a RecordSet (api/sq.capnp):
//
//	off size field
//	 0  u64  baseOffset       set by the leader at append
//	 8  u32  batchLength      bytes after this field (total size - 12)
//	12  u32  leaderEpoch      set by the leader at append
//	16  u8   magic            format version, 1
//	17  u32  crc              CRC-32C (Castagnoli) of bytes [21, end)
//	21  u16  attributes       bits 0-2 compression (0 none), bit 4 control batch
//	23  u32  lastOffsetDelta  recordCount - 1
//	27  i64  firstTimestamp   Unix ms
//	35  i64  maxTimestamp     Unix ms
//	43  i64  producerId       -1 when not idempotent
//	51  i16  producerEpoch
//	53  i32  baseSequence
//	57  u32  recordCount      >= 1
//	61  3    reserved         zero
//	64  records               Cap'n Proto message, root RecordSet
//
// The CRC does not cover baseOffset, batchLength, leaderEpoch or magic, so
// the leader patches offset and epoch without recomputing it. The layout
// follows Kafka's RecordBatch v2 (KIP-98) with a Cap'n Proto record list.
// Fields are unaligned and read with encoding/binary, never by casting.
package batch
