// Package tier is SQ's seam to object storage for tiered storage
// (docs/architecture.md §8): the ObjectStore interface, the
// object keys of a partition's uploaded segments, the manifest that
// records which uploads were verified, and the read-back of uploaded
// segments (RemoteReader, ChunkCache). The S3 implementation is in
// tier/s3 (the only package besides cmd that imports the AWS SDK);
// MemStore is an in-memory one for tests, and tiertest the conformance
// test both pass.
//
// # Object keys
//
// All objects of a partition share the prefix
//
//	<topic>/<topic-id>/<partition>/
//
// where topic-id is the topic's KIP-516 id as a lowercase 8-4-4-4-12 UUID
// (api.TopicID) and partition is decimal without padding. A topic deleted
// and created again under its name gets a new id, so its objects never
// mix with the old topic's. Under the prefix:
//
//	<base offset, 20 digits>-<epoch>.log        the segment's batches, byte for byte as on disk
//	<base offset, 20 digits>-<epoch>.index      its offset index, as on disk
//	<base offset, 20 digits>-<epoch>.timeindex  its time index, as on disk
//	manifest-<version, 20 digits>.json          version of the partition's manifest
//
// for example
//
//	orders/6f1c2e0a-93b4-4d5e-8a7f-0b1c2d3e4f50/3/00000000000000004096-7.log
//	orders/6f1c2e0a-93b4-4d5e-8a7f-0b1c2d3e4f50/3/manifest-00000000000000000012.json
//
// Base offsets and versions are zero-padded to 20 digits (any u64), so keys
// list in numeric order. epoch is the leader epoch (decimal) of the
// leader that uploaded the segment: two leaders' uploads of segments with
// the same base offset never share a key. The file formats are those of
// package segment (go doc ./segment).
//
// Every object SQ writes carries its CRC-32C (Castagnoli) in its metadata
// (tier/s3: x-amz-meta-sq-crc32c, 8 hex digits); Put verifies an upload
// before it returns, and Verify checks an object against the size and
// CRC-32C a manifest records.
//
// # Manifest
//
// A manifest lists a partition's uploaded, verified segments. Versions
// start at 1; version N+1 is made from version N and written with
// PutOptions.IfAbsent (S3 If-None-Match: *), only after every object it
// lists was uploaded and verified, so an object is in a manifest only
// once it is whole in the store, no version is ever overwritten, and of
// two writers racing for a version one gets ErrExists. A writer that gets
// ErrExists reads the latest manifest again; one whose leader epoch is
// below the latest manifest's has been replaced and stops. Readers take
// the newest version that is valid (LatestManifest).
//
// A manifest object is one line of JSON:
//
//	{"format":1,"crc32c":C,"manifest":M}
//
// C is the CRC-32C of the exact bytes of M, as a decimal number; M is:
//
//	{
//	  "topic": "orders",                 topic name
//	  "topic_id": "6f1c2e0a-...",        topic id (UUID)
//	  "partition": 3,
//	  "version": 12,                     the number in the object's key
//	  "leader_epoch": 7,                 epoch of the writer; never decreases across versions
//	  "log_start_offset": 0,             first offset readers may be served from the remote log
//	  "segments": [                      ascending, non-overlapping; gaps allowed
//	    {
//	      "base_offset": 4096,           first offset of the segment
//	      "last_offset": 8191,           last offset (>= base_offset)
//	      "file_base_offset": 4000,      optional: the uploaded file's base, below base_offset
//	                                     (a leader's segment that straddled the remote end)
//	      "max_timestamp_ms": 1700000000000,   Unix ms, compared with retention.ms
//	      "leader_epoch": 7,             epoch of the uploading leader (as in the keys)
//	      "epochs": [{"epoch": 7, "start_offset": 4096}],  optional: epochs of its batches
//	      "log":        {"key": ".../00000000000000004096-7.log", "size": 4194304, "crc32c": 123},
//	      "index":      {"key": "...index", "size": 8192, "crc32c": 456},
//	      "time_index": {"key": "...timeindex", "size": 12288, "crc32c": 789}
//	    }
//	  ]
//	}
//
// (the "..." stand for full keys; the object holds M compact, without the
// comments). Sizes are bytes, CRCs CRC-32C as decimal numbers. Reading a
// manifest (DecodeManifest) checks the format, the checksum, that the
// manifest is for the partition and version its key names, and its
// structure (Manifest.Check); any failure is ErrCorrupt. LatestManifest
// reports a corrupt version and falls back to the previous valid one, but
// returns any other error (an outage never makes an older version look
// like the latest), and its NextVersion is above every version stored,
// valid or not, so a corrupt version is never overwritten.
//
// # Read-back
//
// A fetch below the local log start is served from the remote log by a
// RemoteReader (one per server, shared by every partition) through a
// ChunkCache on local disk (sq-server --tier-cache-bytes bounds it).
// RemoteReader.Read(ctx, manifest, offset, maxBytes):
//
//  1. The offset is raised to the manifest's LogStartOffset, and the
//     segment is the first whose LastOffset is at or after it (binary
//     search). An offset in a gap between segments, or before the first,
//     is served from that segment's base offset, and RemoteRead.Offset
//     says so: a consumer never reads an empty answer forever
//     (KAFKA-15388). An offset after the last segment is
//     ErrOffsetBeyondRemote: the caller reads its local log.
//  2. The segment's .index object is read whole once, checked against
//     the manifest's size and CRC-32C and parsed (ParseOffsetIndex, the
//     format of package segment), and kept in memory (least recently used
//     first out past RemoteReaderOptions.IndexCacheBytes). Its last entry
//     at or below the offset gives a byte position in the .log object. An
//     index that is missing, corrupt or disagrees with the log (its entry
//     does not point at a batch of its offset) is replaced by an empty
//     one, with a warning: reads of that segment scan from its start.
//  3. From there batch headers are read forward (each must continue the
//     previous batch's offsets, lie inside the object and be at most
//     MaxBatchBytes) to the batch holding the offset.
//  4. Whole batches are taken from it while they total at most maxBytes,
//     but at least one (KIP-74), never beyond the segment's last offset:
//     a Read serves one segment, the next Read continues at NextOffset.
//     Each batch passes batch.CheckHeader (length, magic, CRC-32C, record
//     count); one that fails is read again with its chunks dropped from
//     the cache and loaded anew, and failing again the Read fails with
//     ErrCorrupt naming the object and byte position. Bad bytes are
//     never served.
//  5. The bytes come from chunks of the .log object: ChunkBytes-aligned
//     ranges (4 MiB by default; the last may be shorter), each loaded by
//     one ranged GET bounded by RemoteTimeout (10 s by default; separate
//     from the caller's context, which bounds only its own wait:
//     ErrRemoteTimeout) and kept in the cache. Concurrent reads of one
//     chunk share one GET.
//  6. After the Read, the chunk after the last one it used is loaded in
//     the background if it is not cached (at most one prefetch per
//     segment and MaxPrefetches per reader), so a consumer reading on
//     finds it there.
//
// The cache keeps one file per chunk in its directory,
// chunk-<SHA-256 of the object key, size, CRC-32C, chunk size and chunk
// number, in hex>.sqchunk, holding the chunk's bytes and their CRC-32C
// (4 bytes, little-endian). Files are written as .sqtmp and renamed, not
// synced: a file torn by a crash, cut or damaged fails its length or
// checksum when read and is dropped and loaded again. Temporary files
// are deleted at OpenChunkCache; the chunk files found there are kept.
// Past MaxBytes, least recently used files are removed. Both types count
// their work (CacheStats, ReaderStats) for the caller's metrics.
//
// # Errors
//
// Stores wrap the sentinel errors ErrNotFound, ErrExists, ErrCorrupt,
// ErrInvalidRange and ErrBucket with %w; the read-back adds
// ErrOffsetBeyondRemote, ErrRemoteTimeout, ErrReaderClosed and
// ErrCacheClosed. Test them with errors.Is.
package tier
