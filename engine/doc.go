// Package engine is SQ's storage engine above the segment files: topics
// with N partitions and their persisted metadata, appends with group commit
// under each topic's sync policy, fetch by offset with long polling, the
// high watermark, and committed consumer-group offsets.
//
// # Layout of the data directory (docs/architecture.md §3.1)
//
//	<data-dir>/
//	  LOCK                       flock'd while an Engine owns the directory
//	  format-version             on-disk format version ("1")
//	  meta/topics/<topic>.json   topic id and config (tmp -> fsync -> rename -> fsync dir)
//	  topics/<topic>/<p>/        one segment.Log per partition
//	  topics/<topic>/deleting    marker of a delete in progress (see DeleteTopic)
//	  groups/offsets.log         committed offsets (checksummed records, compacted by snapshot)
//	  trash/<nanos>/             directories of deleted topics, removed when unused (or at start)
//
// # Topic ids (KIP-516)
//
// Every topic has a random 16-byte id (api.TopicID) made at creation and
// kept in its metadata file; a file without one gets one at Open. FetchID
// and commits (OffsetCommit.TopicID) that carry an id which is not the
// named topic's current one fail with UNKNOWN_TOPIC_ID, and committed
// offsets are stored with their topic's id, so a topic deleted and
// created again is never taken for the old one (topicid.go).
//
// # The disk seam
//
// Every disk call goes through Options.FS (ring.FS) and Options.Backend,
// so internal/faultfs can fail it or crash the file system at it
// (docs/storage.md, "The disk seam"). A failed fsync of groups/offsets.log
// fails the offsets log (GroupOffsetsErr) until the engine is reopened.
//
// # Write path (docs/architecture.md §3.3)
//
// Each partition has one append goroutine. It takes every batch queued
// since its last commit (group commit), assigns offsets, writes them with
// one gather write, applies the sync policy, then advances the high
// watermark and acknowledges:
//
//   - every-batch: fdatasync before the acknowledgement; concurrent batches
//     share one fdatasync. Acknowledged means on disk.
//   - interval (N or Nms): acknowledged after the write; the append goroutine
//     syncs every N ms. Loss window: the interval plus one sync.
//   - none: acknowledged after the write; the kernel decides. Loss window
//     unbounded (in practice the kernel's dirty-page writeback, ~30 s).
//
// A failed write fails every batch of that commit and leaves the log end
// unchanged. A failed fdatasync fails every batch of that commit and puts
// the partition into a failed, read-only state until the server restarts:
// after EIO the kernel may have dropped the dirty pages, so a later
// successful sync would prove nothing (the "fsyncgate" lesson).
//
// Below the free-space floor (Options.MinFreeBytes, statfs(2) of the data
// directory, refreshed at most every 100 ms; MinFreeAuto: 5% of the file
// system, at most 256 MiB) publishes fail with DISK_FULL before they are
// queued, unless the batch fits in the space its partition's active
// segment has allocated already; fetches, commits and topic
// administration do not consult it. Segment preallocation steps take at most
// an eighth of the room above the floor (segment.Options.AllocRoom). After Open a background scrub verifies every sealed
// segment (segment.Log.VerifySealed, at Options.ScrubBytesPerSec); a
// corrupt one fails its partition with PARTITION_FAILED naming the file
// and byte position, and truncates nothing.
//
// Readers never see offsets at or above the high watermark, which is
// published atomically after the write (and sync, under every-batch).
//
// # Retention, lookup by time and deletion
//
// Every append is stamped with the broker's clock (Options.Now) and
// recorded in the segment's time index (segment.Log.AppendAt). A retention
// goroutine (EnforceRetention, every Options.RetentionCheckInterval) rolls
// an active segment older than the topic's segment.ms and deletes whole
// sealed segments, oldest first, past retention.ms (by the newest append
// time in the segment) or while the partition stays at or above
// retention.bytes without them; the log start offset moves and fetches
// below it get OFFSET_OUT_OF_RANGE with the valid range. ListOffsets
// answers lookups by append time (KIP-79: -1 latest, -2 earliest).
// Stored append times more than segment.MaxClockAhead after the clock
// (written while it was ahead) are clamped to it at start, at the next
// append and at the next retention pass, so they neither date later
// appends nor stop segments from rolling and expiring.
//
// Each partition's segment.Log is opened with the topic's sync policy as
// segment.Options.Durability: under every-batch, a bad batch followed by
// valid data in the last segment fails the partition (PARTITION_FAILED)
// instead of being cut as a torn write (docs/storage.md, Recovery).
// DeleteTopic removes a topic while it is being read, and CreatePartitions
// grows one while it is being written: see their docs for the order of the
// steps and what a crash between them leaves.
package engine
