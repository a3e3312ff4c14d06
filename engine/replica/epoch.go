package replica

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// ErrCorrupt is the class of every error UnmarshalText returns for a
// leader-epoch checkpoint that cannot be parsed: test it with errors.Is.
var ErrCorrupt = errors.New("replica: corrupt leader-epoch checkpoint")

// checkpointVersion is the first line of a leader-epoch checkpoint, as in
// Kafka's leader-epoch-checkpoint file (version 0).
const checkpointVersion = 0

// EpochEntry says that the leader of epoch Epoch appended its first batch
// at offset StartOffset: the batches from StartOffset up to the next
// entry's StartOffset (or the log end offset) carry that epoch.
type EpochEntry struct {
	Epoch       uint32
	StartOffset uint64
}

// EpochCache is a partition's leader-epoch cache (Kafka's
// LeaderEpochFileCache, KIP-101): the entries ascend strictly by epoch and
// by start offset. The zero value is an empty cache, ready to use. It is
// not safe for concurrent use.
type EpochCache struct {
	entries []EpochEntry
}

// Assign records that epoch starts at offset start. It returns false, and
// changes nothing, when epoch is not above the latest entry's epoch (a
// batch of the current epoch, or a stale one). Otherwise, when start is at
// or below the latest entry's start, the entries starting at or after start
// are dropped first (their batches were truncated away, or an epoch that
// appended nothing is superseded), so the start offsets stay strictly
// ascending.
func (c *EpochCache) Assign(epoch uint32, start uint64) bool {
	if n := len(c.entries); n > 0 && epoch <= c.entries[n-1].Epoch {
		return false
	}
	c.TruncateFromEnd(start)
	c.entries = append(c.entries, EpochEntry{Epoch: epoch, StartOffset: start})
	return true
}

// Latest returns the entry of the highest epoch; false when the cache is
// empty.
func (c *EpochCache) Latest() (EpochEntry, bool) {
	if len(c.entries) == 0 {
		return EpochEntry{}, false
	}
	return c.entries[len(c.entries)-1], true
}

// Entries returns a copy of the entries, ascending.
func (c *EpochCache) Entries() []EpochEntry {
	return append([]EpochEntry(nil), c.entries...)
}

// Len returns the number of entries.
func (c *EpochCache) Len() int { return len(c.entries) }

// Clone returns an independent copy of c.
func (c *EpochCache) Clone() *EpochCache {
	return &EpochCache{entries: slices.Clone(c.entries)}
}

// floor returns the index of the entry with the largest epoch <= epoch, or
// -1 when there is none.
func (c *EpochCache) floor(epoch uint32) int {
	i := len(c.entries) - 1
	for i >= 0 && c.entries[i].Epoch > epoch {
		i--
	}
	return i
}

// EndOffsetFor answers an OffsetForLeaderEpoch request for epoch (KIP-101,
// as amended by KIP-279): it finds the largest epoch E' <= epoch in the
// cache and returns E' and the end offset of E', that is the start offset
// of the next entry, or leo (the log end offset) when E' is the latest.
// The end offset is exclusive: the first offset not written in epoch E'.
//
// ok is false when no entry has an epoch <= epoch (the cache is empty, or
// every epoch it knows is newer): then the returned epoch is the requested
// one and the offset is the start offset of the first entry (0 for an
// empty cache), the first offset this log vouches for, so that a follower
// truncating to it (TruncationOffset with leaderKnows false) keeps nothing
// this log contradicts.
func (c *EpochCache) EndOffsetFor(epoch uint32, leo uint64) (uint32, uint64, bool) {
	i := c.floor(epoch)
	if i < 0 {
		if len(c.entries) == 0 {
			return epoch, 0, false
		}
		return epoch, c.entries[0].StartOffset, false
	}
	if i == len(c.entries)-1 {
		return c.entries[i].Epoch, leo, true
	}
	return c.entries[i].Epoch, c.entries[i+1].StartOffset, true
}

// TruncateFromEnd drops the entries whose StartOffset is >= off, after the
// log was truncated to end at off.
func (c *EpochCache) TruncateFromEnd(off uint64) {
	n := len(c.entries)
	for n > 0 && c.entries[n-1].StartOffset >= off {
		n--
	}
	c.entries = c.entries[:n]
}

// TruncateFromStart records that the log now starts at off (retention
// deleted what was below): the entries that start below off are dropped,
// except the latest of them, which now starts at off unless an entry
// starts exactly there (Kafka's truncateFromStart).
func (c *EpochCache) TruncateFromStart(off uint64) {
	i := 0
	for i < len(c.entries) && c.entries[i].StartOffset < off {
		i++
	}
	if i == 0 {
		return
	}
	keep := c.entries[i-1]
	rest := c.entries[i:]
	if len(rest) == 0 || rest[0].StartOffset != off {
		keep.StartOffset = off
		rest = append([]EpochEntry{keep}, rest...)
	}
	c.entries = append(c.entries[:0], rest...)
}

// TruncationOffset returns where a follower truncates its log after asking
// the leader for the end of its latest epoch (KIP-101, KIP-279). local and
// localLEO are the follower's cache and log end offset; leaderEpoch and
// leaderEnd are the leader's answer (EndOffsetFor on the leader for the
// follower's latest epoch) and leaderKnows its ok.
//
// When the leader knows an epoch E' <= the follower's, the result is
// min(leaderEnd, the follower's own end offset for E', localLEO); the
// follower's end offset for E' is computed as EndOffsetFor does, and when
// the follower has no epoch <= E' it is the start of its first entry (what
// follows was written in epochs the leader does not have). When the
// leader knows none, the result is min(leaderEnd, localLEO).
//
// One exchange is not always enough: when the follower does not hold
// epoch E' itself (TruncationComplete is false), its data of an older
// epoch may still differ from the leader's. As KIP-279 does, the follower
// then truncates its log and its cache to the result (the cache even when
// the result is its LEO: an entry of an epoch that appended nothing may
// start there) and asks again with its new latest epoch, which is lower;
// it fetches only once TruncationComplete is true.
func TruncationOffset(local *EpochCache, localLEO uint64, leaderEpoch uint32, leaderEnd uint64, leaderKnows bool) uint64 {
	end := min(leaderEnd, localLEO)
	if !leaderKnows || local == nil || len(local.entries) == 0 {
		return end
	}
	_, own, ok := local.EndOffsetFor(leaderEpoch, localLEO)
	if !ok {
		own = local.entries[0].StartOffset
	}
	return min(end, own)
}

// TruncationComplete reports whether the truncation to TruncationOffset
// for the same leader answer ends the follower's truncation, so that it
// may fetch: true when the follower's cache (before it truncates) holds
// the epoch leaderEpoch the leader answered with, for then both logs agree
// up to where that epoch ends on the shorter (KIP-279); true as well when
// the leader knows no epoch <= the follower's, or the follower's cache is
// empty, since no further exchange can tell more. False otherwise: the
// follower truncates and asks again.
func TruncationComplete(local *EpochCache, leaderEpoch uint32, leaderKnows bool) bool {
	if !leaderKnows || local == nil || len(local.entries) == 0 {
		return true
	}
	i := local.floor(leaderEpoch)
	return i >= 0 && local.entries[i].Epoch == leaderEpoch
}

// MarshalText encodes the cache as Kafka's leader-epoch-checkpoint text:
// the version line ("0"), the count line, then one "epoch startOffset"
// line per entry, ascending, each line ending in "\n".
func (c *EpochCache) MarshalText() ([]byte, error) {
	var b bytes.Buffer
	fmt.Fprintf(&b, "%d\n%d\n", checkpointVersion, len(c.entries))
	for _, e := range c.entries {
		fmt.Fprintf(&b, "%d %d\n", e.Epoch, e.StartOffset)
	}
	return b.Bytes(), nil
}

// UnmarshalText replaces the cache with the entries of a checkpoint that
// MarshalText wrote. It fails, wrapping ErrCorrupt and naming the line,
// on an unknown version, a count that does not match the lines, a line
// that is not two decimal numbers, or entries that do not ascend strictly
// by epoch and start offset; the cache is unchanged then.
func (c *EpochCache) UnmarshalText(b []byte) error {
	text := string(b)
	if !strings.HasSuffix(text, "\n") {
		return fmt.Errorf("%w: no newline at the end (torn write?)", ErrCorrupt)
	}
	lines := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
	if len(lines) < 2 {
		return fmt.Errorf("%w: %d lines, want a version and a count line at least", ErrCorrupt, len(lines))
	}
	if v, err := strconv.ParseUint(lines[0], 10, 32); err != nil || v != checkpointVersion {
		return fmt.Errorf("%w: line 1: version %q, want %d", ErrCorrupt, lines[0], checkpointVersion)
	}
	n, err := strconv.ParseUint(lines[1], 10, 32)
	if err != nil {
		return fmt.Errorf("%w: line 2: count %q is not a number", ErrCorrupt, lines[1])
	}
	if uint64(len(lines)-2) != n {
		return fmt.Errorf("%w: line 2: count %d but %d entry lines", ErrCorrupt, n, len(lines)-2)
	}
	entries := make([]EpochEntry, 0, n)
	for i, line := range lines[2:] {
		e, err := parseEntry(line)
		if err != nil {
			return fmt.Errorf("%w: line %d: %v", ErrCorrupt, i+3, err)
		}
		if k := len(entries); k > 0 && (e.Epoch <= entries[k-1].Epoch || e.StartOffset <= entries[k-1].StartOffset) {
			return fmt.Errorf("%w: line %d: entry %d %d does not follow %d %d", ErrCorrupt, i+3,
				e.Epoch, e.StartOffset, entries[k-1].Epoch, entries[k-1].StartOffset)
		}
		entries = append(entries, e)
	}
	c.entries = entries
	return nil
}

func parseEntry(line string) (EpochEntry, error) {
	f := strings.Split(line, " ")
	if len(f) != 2 {
		return EpochEntry{}, fmt.Errorf("%q is not \"epoch startOffset\"", line)
	}
	epoch, err := strconv.ParseUint(f[0], 10, 32)
	if err != nil {
		return EpochEntry{}, fmt.Errorf("epoch %q is not a 32-bit number", f[0])
	}
	start, err := strconv.ParseUint(f[1], 10, 64)
	if err != nil {
		return EpochEntry{}, fmt.Errorf("start offset %q is not a 64-bit number", f[1])
	}
	return EpochEntry{Epoch: uint32(epoch), StartOffset: start}, nil
}
