// Package segment stores one partition's log: a directory of segment files
// holding record batches back to back, their sparse offset indexes, and a
// recovery point (docs/architecture.md §3.1, §3.3, §3.5, §3.6).
//
// # Files
//
//	<partition dir>/
//	    00000000000000000000.log     batches (api/batch format), back to back
//	    00000000000000000000.index   sparse index: u32 relative offset, u32 position
//	    00000000000000000000.timeindex  time index: i64 broker append time, u32 relative offset
//	    00000000000000001234.log     next segment, base offset 1234
//	    00000000000000001234.index
//	    recovery-point               last durable position (below)
//	    *.sqtmp                      temporary; deleted at Open
//
// A segment is named by its base offset, the offset of its first record, in
// 20 decimal digits. The last segment is active; the others are sealed.
// Each .index entry is 8 bytes, little-endian:
//
//	0  u32  relative offset  batch baseOffset - segment base offset
//	4  u32  position         byte position of the batch in the .log
//
// There is an entry for the first batch of the segment and then for the
// first batch at least IndexIntervalBytes after the previous entry, so
// entries strictly increase from (0, 0). A read looks up the last entry at
// or below the wanted offset and scans batch headers forward from there.
//
// Each .timeindex entry is 12 bytes, little-endian:
//
//	0  i64  append time      broker clock, Unix ms
//	8  u32  relative offset  baseOffset of the first batch appended at that time - segment base offset
//
// An append (AppendAt) adds an entry when its broker append time is later
// than the segment's last entry, so there is at most one entry per
// millisecond and per append, and every batch's append time is that of the
// last entry at or before it: lookups by time (OffsetForTime) are exact.
// Times never go back: an append dated before the latest one (a clock
// step) counts as appended at the latest time. Entries strictly increase
// in both fields from relative offset 0.
//
// The time index records the broker's time, never the producer's batch
// timestamps, so one client with a wrong clock cannot pin or expire data;
// the batch format (docs/architecture.md §3.2) has no room for it, so the time index is
// the only record of append times and cannot be rebuilt from the log. It
// is written with each append (not synced per append), fsynced with a
// sealed segment's data and before every recovery point is written, so
// the entries of the records below the recovery point are durable. At
// Open, a .timeindex must be plausible: whole entries, strictly
// increasing, offsets inside the segment, times positive, not before the
// previous segment's and not more than MaxClockAhead after Options.Now. A
// sealed segment's file that is not is dropped whole (it was synced at the
// roll, so this is damage); in the last segment the plausible prefix is
// kept (entries above the recovery point may be torn). The records no
// entry covers (a missing, empty, implausible or torn file, or records
// above the recovery point whose entries may be lost in a crash) are dated
// by the .log file's modification time, bounded by the clock, or by the
// first entry of the next segment whose file is plausible when that is
// earlier (recovery dates a segment only once it has read that file). That
// time is never earlier than the records' real append time, and never
// later than a real time after them: a date derived at recovery is never
// evidence against a real one, so the next start finds the rewritten file
// plausible next to its successor and dates nothing again. The trade-off errs
// on the safe side: such records are kept longer by retention, and a
// lookup by time may answer earlier than the exact offset (a consumer
// reads a few records twice), never later. Times are bounded by the clock
// at run time too: ClampAppendTimes (called by AppendAt when the clock is
// far behind the latest append time) replaces entries after the clock by
// one at the clock's time. Index files are only ever replaced by temp file
// and rename, never rewritten in place; the active segment's are appended
// to.
//
// The recovery-point file is 36 bytes, little-endian: "SQRP", u32 version 1,
// u64 next offset, u64 segment base offset, u64 byte position in that
// segment, u32 CRC-32C of the preceding 32 bytes. It is written as
// recovery-point.sqtmp, fsynced, renamed over the old one and the directory
// fsynced. Because it is replaced atomically, a recovery-point file that
// cannot be read or does not decode (empty, short, checksum mismatch)
// means disk trouble: Open logs an ERROR naming it and recovers as if it
// were missing, scanning the whole log. That is safe: a sealed segment
// must be whole whatever the recovery point says (see Recovery below), so
// only the last segment's torn tail can be cut. Deleting the file by hand
// has the same effect.
//
// # Writing
//
// One goroutine appends. Append assigns offsets, writes all batches of one
// call with one gather write at the end of the active segment and publishes
// the new end under a lock; Sync fdatasyncs. The active segment grows by
// fallocate on demand, in steps that start at 1 MiB (or the append's size)
// and double the file up to PreallocBytes per step (at most an eighth of
// Options.AllocRoom, the room above the server's free-space floor, but
// never less than what the append needs), so an empty segment
// takes no disk space and a large one few remaps; its file is longer than
// its data and the tail reads as zeros until Close trims it. A segment rolls before it
// would pass SegmentBytes or overflow its u32 relative offsets or positions;
// the new files are created and the directory fsynced before the Append
// returns. At a roll the sealed segment's preallocated tail is trimmed if no
// reader has it mapped; otherwise its zero tail stays (recovery reads zero
// magic as the end of the data). Its three files are then closed (the roll
// synced them), whatever the sync policy: a sealed segment holds no file
// descriptor.
//
// # Reading
//
// Read returns slices of read-only MAP_SHARED mappings (zero copy). The
// active segment is mapped at its preallocated size and remapped when it
// grows, and its sparse index is kept in memory; sealed segments are mapped
// on first read, .log and .index together, so their indexes cost page
// cache, not heap. Mappings are reference
// counted: a View keeps the mappings it uses alive until Release. A
// FileCache, shared by the Logs of a server, counts the file descriptors
// and mappings held (each active segment's 3 files and 1 mapping, and
// each mapped sealed segment's 2 mappings) and, past its bound, unmaps the
// least recently read sealed segments that no View uses; they are mapped
// again when read. Past the bound, a Log whose appends are all synced
// gives back its active segment's files and mapping too (ParkIfOver,
// called by its owner) and reopens the .log at its next Append. Running out of descriptors
// or mappings (EMFILE, ENFILE, ENOMEM) fails the Append or Read with an
// error wrapping ErrResources and is recorded in FileStats.Err. A reader
// never touches bytes at or after the published end of the data, nor after
// its limit (the high watermark). Faults on a mapping (an I/O error) become
// a *CorruptError through debug.SetPanicOnFault.
//
// # Retention
//
// DeleteSegmentsBefore unlinks whole sealed segments (.log, .index,
// .timeindex) below an offset, fsyncs the directory and moves the log
// start offset; a segment is unmapped when the last View using it is
// released, so readers holding a View keep reading it after the unlink.
// Roll seals a non-empty active segment so a partition that receives no
// appends can still age out; Segments reports each segment's size and
// broker append times for the retention decisions, which the engine makes. It never deletes the segment holding the recovery
// point: it syncs and checkpoints first if needed.
//
// # Recovery and crash safety
//
// Invariant: a torn write can only be in the last segment. A roll
// fdatasyncs the old segment (and its time index), whatever the sync
// policy, and checkpoints the recovery point at its end, before it creates
// the next segment's files; so once a segment has a successor on disk, all
// of its bytes are durable. (Cost: one fdatasync and one recovery-point
// write per segment.) A segment that has a successor must therefore be
// whole: its batches valid and in sequence from its base offset exactly up
// to the next segment's base offset. Anything else there, a bad batch, a
// short file, an offset gap or overlap, an empty or stray .log file named
// between or after real segments, is corruption (a disk fault or a file
// changed by hand), never a torn write, whatever the recovery point says or
// whether there is one. An empty segment never legitimately has a
// successor: a roll happens only from a non-empty segment.
//
// The recovery point is a position the last Sync (or roll) made durable. At
// Open, everything below it is trusted but spot-checked: each sealed
// segment below it is scanned from its last index entry to its end, which
// must reach the next segment's base offset exactly, and the segment
// holding the recovery point is scanned from the index entry before it up
// to it, which must land on a batch boundary with the recorded offset.
// Sealed segments above it (possible only when the recovery point is
// missing or older than the last roll) are scanned in full. Any failure
// there, a missing segment, or a file shorter than the recovery point is
// corruption: Open returns a *CorruptError naming the file and byte
// position and truncates and removes nothing. (Batches below the recovery
// point that the spot checks do not cover are not re-verified at Open;
// VerifySealed scrubs sealed segments in the background, and consumers
// check CRCs.)
//
// Only in the last segment, above the recovery point, may the log end in a
// torn write: there every batch is read and checked with batch.CheckHeader
// (CRC-32C) and for an unbroken baseOffset sequence, and the first batch
// that is short, longer than the file, has zero magic,
// fails its check or breaks the sequence ends the log. (A batch longer
// than MaxBatchBytes, written before the limit was lowered, is checked in
// pieces of MaxBatchBytes.) Recovery then
// looks in the rest of the file for a valid batch that continues the
// offsets (findContinuation). None: a torn write, and the segment is
// truncated there and fsynced before anything is mapped. One: damage
// before data written later, which under Options.Durability
// DurableEveryBatch is a *CorruptError (those bytes were synced before any
// later batch was acknowledged) and nothing is cut; under DurableInterval
// and DurableNone a power loss can leave such a hole, so it is cut and
// logged at ERROR with the offsets dropped. Under the
// every-batch sync policy nothing past a torn write was acknowledged, because
// each acknowledgement waited for a Sync covering all earlier writes. Since
// earlier segments were synced before the last one was created, the cut can
// never reach acknowledged records in them, and no segment is ever removed
// by recovery. Indexes that disagree with their log or are implausible
// are rebuilt (docs/storage.md, Index plausibility). Each scanned segment
// is then fdatasynced, since its bytes may have survived only in the page
// cache of a crashed process, and each sealed segment is closed before the
// next one is opened, so Open holds a few files however many segments
// there are; a new recovery point is written at the end.
//
// Open logs the log start, log end and segment count at INFO. The
// recovery point does not record the log start, so a first segment
// deleted by hand while stopped moves the log start silently, except that
// index files left without their .log (retention removes a segment's
// .index and .timeindex before its .log, so a crash never leaves them)
// make Open log a WARN naming the missing offset range.
//
// Logs written before this invariant existed (a roll did not sync) may hold
// a torn tail in the segment before the last after a crash; Open now
// reports it as corruption instead of cutting it and removing the later
// segments.
//
// A failed write leaves the end where it was; the next Append overwrites
// the same bytes and zeroes any that the failed write left beyond its own
// end, so they cannot pass for batches after a crash. A failed Sync makes
// the Log refuse appends until it is reopened.
//
// Disk assumptions: a completed fdatasync makes the written range and the
// file size durable; rename and directory fsync are atomic and durable; a
// torn write leaves any mix of old, new and zero bytes, which the CRC and
// the offset sequence detect.
package segment
