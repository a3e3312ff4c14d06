package engine

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"sync"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/api/batch"
	"github.com/seedqueue/sq/ring"
	"github.com/seedqueue/sq/segment"
)

// Idempotent producers (KIP-98; docs/architecture.md, Idempotent
// producers). A batch whose header carries a producer id >= 0 is checked,
// on the partition's append goroutine before it is written, against the
// last batches of that producer id the partition holds:
//
//   - a duplicate of one of them (same epoch, same first and last
//     sequence) is not written and is answered with the original's
//     offsets, as a success;
//   - an epoch older than the producer's: INVALID_PRODUCER_EPOCH;
//   - a newer epoch must start at sequence 0, else OUT_OF_ORDER_SEQUENCE;
//   - the same epoch must continue at the last sequence + 1 (wrapping
//     from MaxInt32 to 0), else OUT_OF_ORDER_SEQUENCE;
//   - an unknown producer id must start at sequence 0, else
//     UNKNOWN_PRODUCER_ID.
//
// Batches with producer id -1 (any negative id) are not idempotent: they
// are written as before, at the cost of one header read per batch.
const (
	// producerBatchesKept is how many of a producer's last batches a
	// partition keeps to recognise a retry (Kafka's 5: a producer with at
	// most 5 batches in flight per partition never sees a duplicate
	// written).
	producerBatchesKept = 5
	// maxProducersPerPartition bounds the producer ids a partition
	// remembers. When a new one would pass it, the least recently used
	// (the one whose last batch is oldest) is forgotten: its next batch
	// with a sequence other than 0 is UNKNOWN_PRODUCER_ID. 10,000 ids of
	// at most 5 batches each is about 1.6 MB of memory and snapshot at
	// most per partition.
	maxProducersPerPartition = 10000
	// producerStateName is the snapshot file in a partition's directory.
	producerStateName = "producer-state"
	// producerSnapshotEvery bounds the offsets appended since the last
	// snapshot that a checkpoint lets pass without writing a new one when
	// no idempotent batch changed the state: it bounds the batch headers
	// a restart after a crash scans.
	producerSnapshotEvery = 1 << 20
)

// Byte offsets of the producer fields in a batch header (api/batch).
const (
	hdrProducerID    = 43
	hdrProducerEpoch = 51
	hdrBaseSequence  = 53
	hdrRecordCount   = 57
)

// producerBatch is one batch of a producer as the partition remembers it.
type producerBatch struct {
	firstSeq, lastSeq int32
	epoch             int16
	baseOffset        uint64
	count             uint32
	// appendMs is the batch's log append time (Unix ms); 0 when unknown
	// (a batch found by the recovery scan).
	appendMs int64
}

// producerEntry is one producer id's state in a partition: its epoch and
// its last batches, oldest first. prev and next link it in the LRU list.
type producerEntry struct {
	id         int64
	epoch      int16
	n          int
	batches    [producerBatchesKept]producerBatch
	prev, next *producerEntry
}

// last returns the entry's newest batch; n > 0.
func (e *producerEntry) last() producerBatch { return e.batches[e.n-1] }

// push adds b as the newest batch, dropping the oldest when full.
func (e *producerEntry) push(b producerBatch) {
	if e.n == producerBatchesKept {
		copy(e.batches[:], e.batches[1:])
		e.n--
	}
	e.batches[e.n] = b
	e.n++
}

// producerState is a partition's idempotent producers. mu guards it: the
// append goroutine checks and records batches, and observeProducers may
// record replicated ones.
type producerState struct {
	mu   sync.Mutex
	byID map[int64]*producerEntry
	// head is the least recently used entry, tail the most.
	head, tail *producerEntry
	max        int
	// changed: an entry changed since the last snapshot.
	changed bool
	// snapOffset is the log end offset of the last snapshot written or
	// loaded; -1 when there is none.
	snapOffset int64

	fs     ring.FS
	dir    string
	logger *slog.Logger
}

func newProducerState(fs ring.FS, dir string, logger *slog.Logger) *producerState {
	return &producerState{byID: map[int64]*producerEntry{}, max: maxProducersPerPartition, snapOffset: -1, fs: fs, dir: dir, logger: logger}
}

// unlink removes e from the LRU list.
func (s *producerState) unlink(e *producerEntry) {
	if e.prev != nil {
		e.prev.next = e.next
	} else {
		s.head = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	} else {
		s.tail = e.prev
	}
	e.prev, e.next = nil, nil
}

// touch makes e the most recently used entry.
func (s *producerState) touch(e *producerEntry) {
	if s.tail == e {
		return
	}
	if e.prev != nil || e.next != nil || s.head == e {
		s.unlink(e)
	}
	e.prev = s.tail
	if s.tail != nil {
		s.tail.next = e
	}
	s.tail = e
	if s.head == nil {
		s.head = e
	}
}

// record applies a batch of producer id that was written to the log
// (checked before, or replicated, or found by the recovery scan): a newer
// epoch starts the producer afresh, and the batch becomes its newest.
// It evicts the least recently used producer when the bound is passed.
// s.mu is held.
func (s *producerState) record(id int64, b producerBatch) {
	e := s.byID[id]
	if e == nil {
		if len(s.byID) >= s.max && s.head != nil {
			old := s.head
			s.unlink(old)
			delete(s.byID, old.id)
		}
		e = &producerEntry{id: id, epoch: b.epoch}
		s.byID[id] = e
	}
	if b.epoch != e.epoch {
		// A replicated or recovered log is taken as it is: a batch of
		// another epoch (newer, as the leader checked) starts afresh.
		e.epoch, e.n = b.epoch, 0
	}
	e.push(b)
	s.touch(e)
	s.changed = true
}

// nextSeq returns the sequence after a batch ending at seq: MaxInt32 wraps
// to 0 (Kafka's rule).
func nextSeq(seq int32) int32 {
	if seq == math.MaxInt32 {
		return 0
	}
	return seq + 1
}

// lastSeqOf returns the last sequence of a batch of count records from
// first, wrapping past MaxInt32.
func lastSeqOf(first int32, count uint32) int32 {
	return int32((int64(first) + int64(count) - 1) % (math.MaxInt32 + 1))
}

// producerHeader is what the check reads of an idempotent batch header.
type producerHeader struct {
	id    int64
	epoch int16
	seq   int32
	count uint32
}

func readProducerHeader(b []byte) producerHeader {
	le := binary.LittleEndian
	return producerHeader{
		id:    int64(le.Uint64(b[hdrProducerID:])),
		epoch: int16(le.Uint16(b[hdrProducerEpoch:])),
		seq:   int32(le.Uint32(b[hdrBaseSequence:])),
		count: le.Uint32(b[hdrRecordCount:]),
	}
}

// idempotent reports whether the batch b carries a producer id.
func idempotent(b []byte) bool {
	return len(b) >= batch.HeaderSize && int64(binary.LittleEndian.Uint64(b[hdrProducerID:])) >= 0
}

// viewBatch is a batch of a producerView: one the partition holds (req
// nil) or one accepted earlier in the same commit (req set; its offsets
// are known once the commit is written).
type viewBatch struct {
	producerBatch
	req *appendReq
}

// producerView is one producer's state as a commit sees it: the stored
// entry plus the batches accepted earlier in the commit.
type producerView struct {
	known   bool
	epoch   int16
	batches []viewBatch // oldest first, at most producerBatchesKept
}

func viewOf(e *producerEntry) *producerView {
	v := &producerView{}
	if e == nil || e.n == 0 {
		return v
	}
	v.known, v.epoch = true, e.epoch
	v.batches = make([]viewBatch, e.n, producerBatchesKept+1)
	for i := 0; i < e.n; i++ {
		v.batches[i] = viewBatch{producerBatch: e.batches[i]}
	}
	return v
}

// add appends an accepted batch to the view.
func (v *producerView) add(b viewBatch) {
	if b.epoch != v.epoch {
		v.batches = v.batches[:0]
	}
	v.known, v.epoch = true, b.epoch
	v.batches = append(v.batches, b)
	if len(v.batches) > producerBatchesKept {
		v.batches = append(v.batches[:0], v.batches[1:]...)
	}
}

// checkSequence applies the KIP-98 rules to a batch h against the view v:
// dup >= 0 is the index in v.batches of the batch h duplicates (not to be
// written); otherwise err is nil when h may be written, or the refusal.
func checkSequence(v *producerView, h producerHeader) (dup int, err *api.Error) {
	if h.epoch < 0 || h.seq < 0 {
		return -1, api.NewError(api.CodeInvalidRequest, "producer %d: epoch %d and base sequence %d must not be negative", h.id, h.epoch, h.seq)
	}
	if !v.known {
		if h.seq != 0 {
			return -1, api.NewError(api.CodeUnknownProducerID,
				"producer %d: no state in this partition, and its batch starts at sequence %d, not 0 (the state expired or the producer id was never used here)", h.id, h.seq)
		}
		return -1, nil
	}
	switch {
	case h.epoch < v.epoch:
		return -1, api.NewError(api.CodeInvalidProducerEpoch, "producer %d: epoch %d is older than the partition's epoch %d for it", h.id, h.epoch, v.epoch)
	case h.epoch > v.epoch:
		if h.seq != 0 {
			return -1, api.NewError(api.CodeOutOfOrderSequence, "producer %d: new epoch %d must start at sequence 0, not %d", h.id, h.epoch, h.seq)
		}
		return -1, nil
	}
	last := lastSeqOf(h.seq, h.count)
	for i, b := range v.batches {
		if b.epoch == h.epoch && b.firstSeq == h.seq && b.lastSeq == last {
			return i, nil
		}
	}
	want := nextSeq(v.batches[len(v.batches)-1].lastSeq)
	if h.seq != want {
		return -1, api.NewError(api.CodeOutOfOrderSequence, "producer %d epoch %d: batch starts at sequence %d, expected %d", h.id, h.epoch, h.seq, want)
	}
	return -1, nil
}

// producerCommit is what a commit's producer check leaves for after the
// write: the accepted idempotent requests, and the duplicates of
// requests in the same commit, answered once the original is.
type producerCommit struct {
	p        *partition
	s        *producerState
	accepted []acceptedReq
	dups     []dupReq
}

type acceptedReq struct {
	req *appendReq
	h   producerHeader
}

type dupReq struct {
	req, orig *appendReq
}

// checkProducers runs the idempotent-producer check (see the rules above)
// on the requests of one commit, in order, before the write, on a single
// node or a replicated partition's leader. Duplicates
// of stored batches and refused batches are answered here and removed;
// duplicates of batches earlier in the same commit are removed and
// answered by finish, like the original. A request chained behind one
// that failed (before or here) is left for dropChained, unchecked. It
// returns the requests to write and, when any is idempotent, the
// producerCommit whose finish the commit must call once every written
// request has its outcome (a deferred call). Without an idempotent batch
// it allocates nothing and takes no lock.
func (p *partition) checkProducers(pending []*appendReq) ([]*appendReq, *producerCommit) {
	s := p.prod.Load()
	if s == nil || p.failed.Load() != nil {
		return pending, nil // a failed partition refuses every request
	}
	found := false
	for _, r := range pending {
		if idempotent(r.batch) {
			found = true
			break
		}
	}
	if !found {
		return pending, nil
	}
	// Only a leader checks (and answers duplicates): elsewhere commit
	// refuses the whole commit with NOT_LEADER. The epoch stamps the
	// answers, as commit stamps those of the batches it writes, for an
	// acks-all wait (awaitReplicated) to hold them to.
	epoch, err := p.commitEpoch()
	if err != nil {
		return pending, nil
	}
	pc := &producerCommit{p: p, s: s}
	views := map[int64]*producerView{}
	var skipped map[*appendReq]bool // chained behind a failed request
	kept := pending[:0]
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range pending {
		if a := r.after; a != nil && (a.err != nil || skipped[a]) {
			if skipped == nil {
				skipped = map[*appendReq]bool{}
			}
			skipped[r] = true
			kept = append(kept, r) // dropChained fails it
			continue
		}
		if !idempotent(r.batch) {
			kept = append(kept, r)
			continue
		}
		h := readProducerHeader(r.batch)
		v := views[h.id]
		if v == nil {
			v = viewOf(s.byID[h.id])
			views[h.id] = v
		}
		dup, err := checkSequence(v, h)
		switch {
		case err != nil:
			r.err = err
			r.batch = nil
			close(r.done)
		case dup >= 0 && v.batches[dup].req != nil:
			pc.dups = append(pc.dups, dupReq{req: r, orig: v.batches[dup].req})
		case dup >= 0:
			b := v.batches[dup]
			r.res = AppendResult{BaseOffset: b.baseOffset, RecordCount: b.count, LogAppendTime: b.appendMs, Durability: p.dupDurability(), Replicas: 1}
			r.epoch = epoch
			if r.res.LogAppendTime == 0 {
				r.res.LogAppendTime = p.now().UnixMilli()
			}
			r.batch = nil
			close(r.done)
		default:
			v.add(viewBatch{producerBatch: producerBatch{firstSeq: h.seq, lastSeq: lastSeqOf(h.seq, h.count), epoch: h.epoch, count: h.count}, req: r})
			pc.accepted = append(pc.accepted, acceptedReq{req: r, h: h})
			kept = append(kept, r)
		}
	}
	clear(pending[len(kept):])
	return kept, pc
}

// dupDurability is the durability of a batch already in the log that a
// duplicate is answered with: the sync policy's (a batch written under
// every-batch was synced before it was acknowledged, or the partition
// failed).
func (p *partition) dupDurability() Durability {
	if p.policy.Load().Mode == SyncEveryBatch {
		return DurabilitySynced
	}
	return DurabilityWritten
}

// finish records the accepted requests that were written (no error: their
// results carry their offsets) and answers the duplicates of requests of
// the same commit with their original's outcome. It runs on the append
// goroutine at the end of the commit.
func (pc *producerCommit) finish() {
	s := pc.s
	s.mu.Lock()
	for _, a := range pc.accepted {
		r := a.req
		if r.err != nil || r.res.RecordCount == 0 {
			continue
		}
		s.record(a.h.id, producerBatch{firstSeq: a.h.seq, lastSeq: lastSeqOf(a.h.seq, a.h.count), epoch: a.h.epoch,
			baseOffset: r.res.BaseOffset, count: a.h.count, appendMs: r.res.LogAppendTime})
	}
	s.mu.Unlock()
	for _, d := range pc.dups {
		d.req.res, d.req.err, d.req.epoch = d.orig.res, d.orig.err, d.orig.epoch
		d.req.batch = nil
		close(d.req.done)
	}
}

// observeProducers records the idempotent batches among batches, each
// element one or more whole batches as written to the log with their
// offsets (a follower's replicated append), so that a follower holds the
// state its leader holds and can take over. It checks nothing: the leader
// did. Call it after the batches are written, on the goroutine that
// appends to the partition (so that a snapshot never covers offsets whose
// batches it has not seen). Batches that do not parse are skipped.
func (p *partition) observeProducers(batches [][]byte) {
	s := p.prod.Load()
	if s == nil {
		return
	}
	locked := false
	for _, buf := range batches {
		for len(buf) > 0 {
			b, rest, h, err := batch.Split(buf, 0)
			if err != nil {
				break
			}
			buf = rest
			if !idempotent(b) {
				continue
			}
			if !locked {
				s.mu.Lock()
				locked = true
			}
			s.recordHeader(h, 0)
		}
	}
	if locked {
		s.mu.Unlock()
	}
}

// recordHeader records the written batch of header h; s.mu is held.
func (s *producerState) recordHeader(h batch.Header, appendMs int64) {
	s.record(h.ProducerID, producerBatch{firstSeq: h.BaseSequence, lastSeq: lastSeqOf(h.BaseSequence, h.RecordCount),
		epoch: h.ProducerEpoch, baseOffset: h.BaseOffset, count: h.RecordCount, appendMs: appendMs})
}

// Snapshot file (<partition dir>/producer-state), little-endian:
//
//	magic "SQPS" | u16 version (1) | u64 offset | u32 entries |
//	entries, least recently used first:
//	  i64 producerId | i16 epoch | u8 batches |
//	  batches, oldest first: i32 firstSeq | i32 lastSeq | i16 epoch |
//	    u64 baseOffset | u32 count | i64 appendMs
//	u32 CRC-32C of everything before it
//
// offset is the log end offset the state covers: the batches below it.
const (
	producerSnapMagic   = "SQPS"
	producerSnapVersion = 1
	producerSnapHeader  = 4 + 2 + 8 + 4
	producerSnapEntry   = 8 + 2 + 1
	producerSnapBatch   = 4 + 4 + 2 + 8 + 4 + 8
)

var errProducerSnapCorrupt = errors.New("producer-state snapshot corrupt")

// encode returns the snapshot of s covering the log below offset; s.mu is
// held.
func (s *producerState) encode(offset uint64) []byte {
	size := producerSnapHeader + 4
	for e := s.head; e != nil; e = e.next {
		size += producerSnapEntry + e.n*producerSnapBatch
	}
	le := binary.LittleEndian
	b := make([]byte, 0, size)
	b = append(b, producerSnapMagic...)
	b = le.AppendUint16(b, producerSnapVersion)
	b = le.AppendUint64(b, offset)
	b = le.AppendUint32(b, uint32(len(s.byID)))
	for e := s.head; e != nil; e = e.next {
		b = le.AppendUint64(b, uint64(e.id))
		b = le.AppendUint16(b, uint16(e.epoch))
		b = append(b, byte(e.n))
		for _, pb := range e.batches[:e.n] {
			b = le.AppendUint32(b, uint32(pb.firstSeq))
			b = le.AppendUint32(b, uint32(pb.lastSeq))
			b = le.AppendUint16(b, uint16(pb.epoch))
			b = le.AppendUint64(b, pb.baseOffset)
			b = le.AppendUint32(b, pb.count)
			b = le.AppendUint64(b, uint64(pb.appendMs))
		}
	}
	return le.AppendUint32(b, crc32.Checksum(b, crcTable))
}

// decodeProducerSnapshot reads a snapshot into s (empty), returning the
// offset it covers. Any inconsistency is errProducerSnapCorrupt.
func (s *producerState) decode(b []byte) (uint64, error) {
	le := binary.LittleEndian
	bad := func(format string, args ...any) (uint64, error) {
		return 0, fmt.Errorf("%w: %s", errProducerSnapCorrupt, fmt.Sprintf(format, args...))
	}
	if len(b) < producerSnapHeader+4 {
		return bad("%d bytes", len(b))
	}
	body := b[:len(b)-4]
	if got, want := crc32.Checksum(body, crcTable), le.Uint32(b[len(b)-4:]); got != want {
		return bad("CRC mismatch (stored %#08x, computed %#08x)", want, got)
	}
	if string(body[:4]) != producerSnapMagic {
		return bad("magic %q", body[:4])
	}
	if v := le.Uint16(body[4:]); v != producerSnapVersion {
		return bad("version %d, want %d", v, producerSnapVersion)
	}
	offset := le.Uint64(body[6:])
	count := le.Uint32(body[14:])
	body = body[producerSnapHeader:]
	for i := uint32(0); i < count; i++ {
		if len(body) < producerSnapEntry {
			return bad("entry %d of %d truncated", i, count)
		}
		id := int64(le.Uint64(body))
		epoch := int16(le.Uint16(body[8:]))
		n := int(body[10])
		body = body[producerSnapEntry:]
		if id < 0 || n < 1 || n > producerBatchesKept || len(body) < n*producerSnapBatch || s.byID[id] != nil {
			return bad("entry %d: producer %d with %d batches", i, id, n)
		}
		e := &producerEntry{id: id, epoch: epoch, n: n}
		for j := 0; j < n; j++ {
			e.batches[j] = producerBatch{
				firstSeq: int32(le.Uint32(body)), lastSeq: int32(le.Uint32(body[4:])), epoch: int16(le.Uint16(body[8:])),
				baseOffset: le.Uint64(body[10:]), count: le.Uint32(body[18:]), appendMs: int64(le.Uint64(body[22:])),
			}
			body = body[producerSnapBatch:]
		}
		s.byID[id] = e
		s.touch(e)
	}
	if len(body) != 0 {
		return bad("%d bytes after the last entry", len(body))
	}
	return offset, nil
}

// reset forgets every producer; s.mu is held.
func (s *producerState) reset() {
	s.byID = map[int64]*producerEntry{}
	s.head, s.tail = nil, nil
	s.changed = true
}

// load rebuilds s from the snapshot file and the log: the snapshot's
// state, then every batch of lg from the snapshot's offset to the log end.
// A missing snapshot, one that does not decode (logged as a warning), and
// one whose offset is above the log end (records lost in a crash after it
// was written, or a truncation) make it scan the whole log. It runs before
// the partition serves, or on its append goroutine.
func (s *producerState) load(lg *segment.Log) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reset()
	s.snapOffset = -1
	path := filepath.Join(s.dir, producerStateName)
	leo := lg.NextOffset()
	from := lg.LogStartOffset()
	data, err := readFileFS(s.fs, path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		// As a snapshot of no producer at the log start: an empty
		// partition writes none until it holds batches.
		s.snapOffset = int64(from)
	case err != nil:
		s.logger.Warn("producer-state snapshot unreadable; rebuilding it from the whole log", "path", path, "err", err)
	default:
		off, err := s.decode(data)
		switch {
		case err != nil:
			s.reset()
			s.logger.Warn("producer-state snapshot corrupt; rebuilding it from the whole log", "path", path, "err", err)
		case off > leo:
			s.reset()
			s.logger.Info("producer-state snapshot is ahead of the log end (records lost since it was written); rebuilding it from the whole log",
				"path", path, "snapshot_offset", off, "log_end_offset", leo)
		default:
			from = max(from, off)
			s.snapOffset = int64(off)
		}
	}
	scanned, err := s.scan(lg, from, leo)
	if err != nil {
		s.logger.Warn("producer-state recovery scan stopped early; producers whose batches it missed get UNKNOWN_PRODUCER_ID or OUT_OF_ORDER_SEQUENCE",
			"dir", s.dir, "from", from, "to", leo, "err", err)
	}
	// A scan of any length is worth a snapshot at the next checkpoint,
	// so that the next start does not scan it again.
	s.changed = scanned > 0 || leo > from
}

// scan records the idempotent batches of lg with base offsets in [from,
// to); s.mu is held. It returns how many it recorded.
func (s *producerState) scan(lg *segment.Log, from, to uint64) (int, error) {
	n := 0
	for off := from; off < to; {
		v, err := lg.Read(off, 4<<20, to)
		if err != nil {
			return n, err
		}
		next := v.NextOffset
		for _, buf := range v.Bufs {
			for len(buf) > 0 {
				_, rest, h, err := batch.Split(buf, 0)
				if err != nil {
					v.Release()
					return n, fmt.Errorf("batch at offset %d: %w", off, err)
				}
				buf = rest
				if h.BaseOffset >= from && h.ProducerID >= 0 {
					s.recordHeader(h, 0)
					n++
				}
			}
		}
		v.Release()
		if next <= off {
			return n, fmt.Errorf("read at offset %d made no progress", off)
		}
		off = next
	}
	return n, nil
}

// readFileFS reads the whole file at path.
func readFileFS(fs ring.FS, path string) ([]byte, error) {
	f, err := fs.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	b := make([]byte, fi.Size())
	if _, err := f.ReadAt(b, 0); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return b, nil
}

// snapMode says when snapshot writes the file.
type snapMode uint8

const (
	// snapCheckpoint: when the state changed since the last snapshot, or
	// the log end moved producerSnapshotEvery offsets past it.
	snapCheckpoint snapMode = iota
	// snapClose: when the state changed or the log end moved at all.
	snapClose
	// snapForce: always.
	snapForce
)

// snapshot writes the state covering the log below leo to the snapshot
// file (temporary file, fsync, rename, directory fsync) as mode says. A
// failure is logged: the previous snapshot stays, and recovery scans
// more.
func (s *producerState) snapshot(leo uint64, mode snapMode) {
	s.mu.Lock()
	moved := s.snapOffset < 0 || uint64(s.snapOffset) != leo
	far := s.snapOffset < 0 || leo < uint64(s.snapOffset) || leo-uint64(s.snapOffset) >= producerSnapshotEvery
	if mode == snapCheckpoint && !s.changed && !far || mode == snapClose && !s.changed && !moved {
		s.mu.Unlock()
		return
	}
	data := s.encode(leo)
	s.changed = false
	s.mu.Unlock()
	if err := writeFileAtomic(s.fs, filepath.Join(s.dir, producerStateName), data); err != nil {
		s.mu.Lock()
		s.changed = true
		s.mu.Unlock()
		s.logger.Warn("producer-state snapshot not written; the next start scans the log from the previous one", "dir", s.dir, "err", err)
		return
	}
	s.mu.Lock()
	s.snapOffset = int64(leo)
	s.mu.Unlock()
}

// openProducers loads the producer state of the partition in dir whose
// log is lg (nil: the partition failed to open; no state).
func openProducers(fs ring.FS, dir string, lg *segment.Log, logger *slog.Logger) *producerState {
	if lg == nil {
		return nil
	}
	s := newProducerState(fs, dir, logger)
	s.load(lg)
	return s
}

// snapshotProducers writes the producer-state snapshot at a checkpoint
// or at close, as mode says (snapshot). It runs on the append goroutine
// or after it ended. A failed partition writes none: its log end may not
// be what the disk holds.
func (p *partition) snapshotProducers(mode snapMode) {
	s := p.prod.Load()
	if s == nil || p.log == nil || p.failed.Load() != nil {
		return
	}
	s.snapshot(p.log.NextOffset(), mode)
}

// reloadProducers rebuilds the producer state after the log was truncated
// (its end moved back): from the snapshot when it is not above the new
// log end, else from the whole log; then it writes a snapshot at the new
// end, so that no snapshot covering the removed batches survives. Call it
// on the partition's append goroutine, with no append in progress.
func (p *partition) reloadProducers() {
	s := p.prod.Load()
	if s == nil || p.log == nil {
		return
	}
	s.load(p.log)
	s.snapshot(p.log.NextOffset(), snapForce)
}
