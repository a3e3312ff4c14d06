package engine

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/ring"
)

// offsetStore keeps committed group offsets in memory, backed by
// groups/offsets.log: a sequence of records
//
//	u32 payloadLength | u32 CRC-32C(payload) | payload (JSON offsetRecord)
//
// each appended and fdatasync'd before the commit is acknowledged. When the
// file passes compactBytes it is replaced by a snapshot of the current state
// (tmp, fsync, rename, fsync dir), so it stays small under frequent commits.
//
// At open, since each commit is synced before the next is written, only the
// last record can be torn: a bad last record (short, bad CRC or JSON, with
// no valid record after it) is cut off with a warning, and every record
// before it is kept. A bad record with a valid record after it is
// corruption: the file is first copied aside to
// offsets.log.damaged-<unix ms>, an error names the file and the byte
// position, the record is skipped when its length field is intact (every
// record before and after it is kept), and replay stops at it when not
// (the records after it cannot be found reliably; the copy keeps them);
// then the file is rewritten as a snapshot of what was loaded.
type offsetStore struct {
	mu     sync.Mutex
	dir    string
	fs     ring.FS
	log    *slog.Logger
	f      ring.File
	size   int64
	groups map[string]map[tp]committed
	// coord is the group coordinator, made on first use (group.go).
	coordOnce sync.Once
	coord     *coordinator
	// snapshotSize is the size of the file after the last compaction.
	snapshotSize int64
	// noSync skips fdatasync (tests and benchmarks of compaction only).
	noSync bool
	// current returns the id of the topic now under a name (false: no
	// such topic); commit drops entries of any other id (topicid.go).
	// Nil until the engine's topics are loaded.
	current func(topic string) (api.TopicID, bool)
	// maxRecord is the largest record payload in bytes that replay
	// accepts (maxOffsetsRecord); no record larger is ever written: a
	// commit over it is refused and a snapshot is split.
	maxRecord int
	// compactAt is the size in bytes past which the file is compacted;
	// 0 means compactBytes (tests lower it to compact often).
	compactAt int64
	// topic, set on an engine opened with Options.Replication, is where
	// commits go instead of the file (offsets_topic.go): groups then holds
	// the groups of the partitions of OffsetsTopic this node leads, and
	// legacy what the file held at open, for the one import.
	topic  *offsetsLog
	legacy map[string]map[tp]committed
	// failed is set when an fsync of the file failed, or when the file
	// could not be replaced durably by a compaction: what the file holds
	// is then unknown, so every later commit is refused with it until the
	// engine is reopened (as a failed segment sync fails its partition).
	failed error
}

type tp struct {
	Topic     string
	Partition int
}

type committed struct {
	Offset   uint64
	Metadata string
	TopicID  api.TopicID // the topic committed to; zero in files written before ids
}

// offsetRecord is one commit (or, with Deleted, the deletion of a
// group's offsets). Member and Generation record who committed.
type offsetRecord struct {
	Group      string `json:"g"`
	Member     string `json:"m,omitempty"`
	Generation int32  `json:"gen,omitempty"`
	Deleted    bool   `json:"d,omitempty"`
	// Kind is, in OffsetsTopic, the record's part in a snapshot
	// (kindSnapBegin, kindSnap, kindSnapEnd) or "" for a commit;
	// always "" in groups/offsets.log.
	Kind    string        `json:"k,omitempty"`
	Offsets []offsetEntry `json:"o,omitempty"`
}

type offsetEntry struct {
	Topic     string `json:"t"`
	Partition int    `json:"p"`
	Offset    uint64 `json:"o"`
	Metadata  string `json:"m,omitempty"`
	// ID is the id of the topic committed to (KIP-516); absent in files
	// written before topic ids.
	ID api.TopicID `json:"id,omitzero"`
}

const (
	offsetsFile      = "offsets.log"
	compactBytes     = 4 << 20 // rewrite as a snapshot past 4 MiB
	maxOffsetsRecord = 64 << 20
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

func openOffsetStore(dir string, fs ring.FS, log *slog.Logger) (*offsetStore, error) {
	return openOffsetStoreSize(dir, fs, log, maxOffsetsRecord)
}

// openOffsetStoreSize is openOffsetStore with a record limit of maxRecord
// payload bytes (tests use a small one).
func openOffsetStoreSize(dir string, fs ring.FS, log *slog.Logger, maxRecord int) (*offsetStore, error) {
	s := &offsetStore{dir: dir, fs: fs, log: log, groups: map[string]map[tp]committed{}, maxRecord: maxRecord}
	path := filepath.Join(dir, offsetsFile)
	removeTemps(fs, dir, log)
	f, err := openOrCreate(fs, path)
	if err != nil {
		return nil, fmt.Errorf("engine: open %s: %w", path, err)
	}
	s.f = f
	if err := s.recover(path); err != nil {
		s.f.Close()
		return nil, err
	}
	return s, nil
}

// openOrCreate opens path for reading and writing, creating it when it
// is missing; a new file's name is made durable (fsync of the directory)
// before any commit is written to it.
func openOrCreate(fs ring.FS, path string) (ring.File, error) {
	f, err := fs.OpenReadWrite(path)
	if !errors.Is(err, os.ErrNotExist) {
		return f, err
	}
	if f, err = fs.Create(path); err != nil {
		return nil, err
	}
	if err := fs.SyncDir(filepath.Dir(path)); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// recover loads the file and repairs it: a torn last record is cut off;
// corruption before the end is copied aside and the file rewritten as a
// snapshot of what was loaded.
func (s *offsetStore) recover(path string) error {
	data, err := readWhole(s.f)
	if err != nil {
		return fmt.Errorf("engine: read %s: %w", path, err)
	}
	res := s.load(data)
	if len(res.corrupt) == 0 {
		if res.valid != int64(len(data)) {
			s.log.Warn("cutting torn tail of the group offsets log", "path", path, "valid_bytes", res.valid, "file_bytes", len(data))
			if err := s.f.Truncate(res.valid); err != nil {
				return err
			}
			if err := s.f.Sync(); err != nil {
				return err
			}
		}
		s.size = res.valid
		return nil
	}
	damaged := fmt.Sprintf("%s.damaged-%d", path, time.Now().UnixMilli())
	if err := writeFileAtomic(s.fs, damaged, data); err != nil {
		return fmt.Errorf("engine: copy damaged %s aside: %w", path, err)
	}
	for _, c := range res.corrupt {
		if c.length == 0 {
			continue // logged below
		}
		s.log.Error("corrupt record in the group offsets log: skipped; the commits it held are lost",
			"path", path, "byte_position", c.pos, "record_bytes", c.length, "copy", damaged)
	}
	if last := res.corrupt[len(res.corrupt)-1]; last.length == 0 {
		s.log.Error("corrupt record length in the group offsets log: the records after it cannot be found and are dropped",
			"path", path, "byte_position", last.pos, "dropped_bytes", int64(len(data))-last.pos, "copy", damaged)
	} else if res.valid != int64(len(data)) {
		s.log.Warn("cutting torn tail of the group offsets log", "path", path, "valid_bytes", res.valid, "file_bytes", len(data))
	}
	if err := s.compactLocked(); err != nil {
		return fmt.Errorf("engine: rewrite %s: %w", path, err)
	}
	return nil
}

func readWhole(f ring.File) ([]byte, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	data := make([]byte, st.Size())
	n, err := f.ReadAt(data, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return data[:n], nil
}

// loadResult is the outcome of replaying the offsets log.
type loadResult struct {
	// valid is where replay stopped: the file's length, or the start of
	// a torn tail or of a corrupt record whose length is not intact.
	valid int64
	// corrupt lists the records skipped before the end of the file.
	corrupt []badRecord
}

// badRecord is a corrupt record: its position and, when its length field
// is intact, its size in bytes (header included); 0 otherwise.
type badRecord struct {
	pos, length int64
}

// load replays data. A bad record (length, CRC or JSON) followed by a
// valid record somewhere after it is corruption, not a torn write (each
// commit is synced before the next is written, so only the last record
// can be torn): with its length field intact it is skipped and replay
// goes on after it; otherwise replay stops there (there is no way to
// resync). A bad record with no valid record after it is a torn tail.
func (s *offsetStore) load(data []byte) loadResult {
	var res loadResult
	pos, next := 0, -1 // next: the first valid record after the last bad one
	for pos < len(data) {
		rec, n, ok := parseRecord(data, pos, s.maxRecord)
		if ok {
			s.apply(rec)
			pos += n
			continue
		}
		if next <= pos {
			next = nextValid(data, pos+1, s.maxRecord)
		}
		if next < 0 {
			break // torn tail
		}
		if n <= 0 {
			res.corrupt = append(res.corrupt, badRecord{pos: int64(pos)})
			break // no way to resync
		}
		res.corrupt = append(res.corrupt, badRecord{pos: int64(pos), length: int64(n)})
		pos += n
	}
	res.valid = int64(pos)
	return res
}

// parseRecord decodes the record at pos. n is its size (header included)
// when its header is whole and its length field within the file and
// maxRecord, else 0; ok reports that CRC and JSON are valid too.
func parseRecord(data []byte, pos, maxRecord int) (rec offsetRecord, n int, ok bool) {
	if len(data)-pos < 8 {
		return rec, 0, false
	}
	size := binary.LittleEndian.Uint32(data[pos:])
	if size == 0 || int64(size) > int64(maxRecord) || int64(size) > int64(len(data)-pos-8) {
		return rec, 0, false
	}
	n = 8 + int(size)
	payload := data[pos+8 : pos+n]
	if crc32.Checksum(payload, crcTable) != binary.LittleEndian.Uint32(data[pos+4:]) {
		return rec, n, false
	}
	if err := json.Unmarshal(payload, &rec); err != nil {
		return rec, n, false
	}
	return rec, n, true
}

// nextValid returns the position of the first valid record starting at
// or after from, or -1. Payloads are JSON objects, so only positions whose
// payload would start with '{' are checked.
func nextValid(data []byte, from, maxRecord int) int {
	for i := from; i+9 <= len(data); i++ {
		if data[i+8] != '{' {
			continue
		}
		if _, _, ok := parseRecord(data, i, maxRecord); ok {
			return i
		}
	}
	return -1
}

func (s *offsetStore) apply(rec offsetRecord) { applyRecord(s.groups, rec) }

func encodeRecord(rec offsetRecord) ([]byte, error) {
	payload, err := json.Marshal(rec)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 8+len(payload))
	binary.LittleEndian.PutUint32(out, uint32(len(payload)))
	binary.LittleEndian.PutUint32(out[4:], crc32.Checksum(payload, crcTable))
	copy(out[8:], payload)
	return out, nil
}

// commit durably stores the offsets of one group, then applies them.
func (s *offsetStore) commit(rec offsetRecord) error {
	_, err := s.commitIDs(rec)
	return err
}

// commitIDs is commit that first drops, under the store's lock, the
// entries whose topic id is not the current id of their topic (deleted or
// created again since the caller checked it) and returns their topics and
// ids; nothing is written when no entry is left.
func (s *offsetStore) commitIDs(rec offsetRecord) (stale map[topicRef]bool, err error) {
	if s.topic != nil {
		return s.topic.commit(rec)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.f == nil {
		return nil, api.NewError(api.CodeShuttingDown, "server is shutting down")
	}
	if rec, stale = s.dropStale(rec); len(rec.Offsets) == 0 && !rec.Deleted {
		return stale, nil
	}
	return stale, s.commitLocked(rec)
}

func (s *offsetStore) commitLocked(rec offsetRecord) error {
	data, err := encodeRecord(rec)
	if err != nil {
		return err
	}
	if len(data)-8 > s.maxRecord {
		// Replay would take it for damage and drop it with what follows.
		return api.NewError(api.CodeInvalidRequest, "offset commit of %d bytes (metadata included) over the %d-byte limit of one offsets log record", len(data)-8, s.maxRecord)
	}
	if s.failed != nil {
		return s.failedError()
	}
	if _, err := s.f.WriteAt(data, s.size); err != nil {
		// Nothing was acknowledged; the next commit overwrites the bytes
		// written, and a crash leaves them as a torn tail.
		return storageError("commit offsets", err)
	}
	if !s.noSync {
		if err := s.f.Sync(); err != nil {
			// The kernel may have dropped the dirty pages: a later
			// successful fsync would not prove them durable.
			s.fail(fmt.Errorf("fsync of %s: %w", s.f.Name(), err))
			return s.failedError()
		}
	}
	s.size += int64(len(data))
	s.apply(rec)
	// Compact past compactBytes, or past twice the last snapshot when the
	// state itself is larger, so the file stays within max(4 MiB, 2x the
	// state) and compaction costs O(1) amortised per commit.
	limit := s.compactAt
	if limit == 0 {
		limit = compactBytes
	}
	if s.size > max(limit, 2*s.snapshotSize) {
		if err := s.compactLocked(); err != nil {
			s.log.Warn("group offsets compaction failed; will retry on the next commit", "err", err)
		}
	}
	return nil
}

// appendSnapshot appends the snapshot record rec (one group's offsets) to
// buf, split into as many records as it takes for each to stay within
// s.maxRecord: replay merges a group's records, and would take a longer
// one for damage (and drop the group's offsets).
func (s *offsetStore) appendSnapshot(buf []byte, rec offsetRecord) ([]byte, error) {
	data, err := encodeRecord(rec)
	if err != nil {
		return buf, err
	}
	if len(data)-8 <= s.maxRecord || len(rec.Offsets) < 2 {
		// A single entry fits: commitLocked refuses any longer one.
		return append(buf, data...), nil
	}
	half := len(rec.Offsets) / 2
	first, second := rec, rec
	first.Offsets, second.Offsets = rec.Offsets[:half], rec.Offsets[half:]
	if buf, err = s.appendSnapshot(buf, first); err != nil {
		return buf, err
	}
	return s.appendSnapshot(buf, second)
}

// compactLocked replaces the file by a snapshot: one record per group
// (more for a group too large for one, appendSnapshot).
func (s *offsetStore) compactLocked() error {
	return s.rewriteLocked("")
}

// rewriteLocked replaces the file by a snapshot, leaving out the
// offsets of topic skip ("" leaves out nothing). The memory state is not
// changed.
func (s *offsetStore) rewriteLocked(skip string) error {
	var buf []byte
	for _, g := range s.sortedGroups() {
		rec := s.groupRecord(g, skip)
		if len(rec.Offsets) == 0 {
			continue
		}
		var err error
		if buf, err = s.appendSnapshot(buf, rec); err != nil {
			return err
		}
	}
	path := filepath.Join(s.dir, offsetsFile)
	tmp, err := writeTemp(s.fs, path, buf)
	if err != nil {
		return err
	}
	if err := s.fs.Rename(tmp, path); err != nil {
		_ = s.fs.Remove(tmp)
		return err // the old file is in place and s.f still writes to it
	}
	// From here the old file is unlinked: a commit must not go to s.f,
	// and until the directory is fsynced a crash may bring the old file
	// back. Any failure fails the store.
	f, err := s.fs.OpenReadWrite(path)
	if err == nil {
		if err = s.fs.SyncDir(s.dir); err != nil {
			f.Close()
		}
	}
	if err != nil {
		s.fail(fmt.Errorf("replace %s: %w", path, err))
		return s.failedError()
	}
	s.f.Close()
	s.f = f
	s.size = int64(len(buf))
	s.snapshotSize = s.size
	return nil
}

// forgetTopic removes every group's committed offsets of topic, durably
// first: the file is rewritten without them (tmp, fsync, rename, fsync
// dir) before they leave memory, so on error nothing has changed. A topic
// created under a name must call it before the topic becomes visible, so
// that the new topic does not inherit the offsets committed to an earlier
// topic of that name (one deleted, or whose metadata was lost). Errors:
// SHUTTING_DOWN after close, or the file system's.
func (s *offsetStore) forgetTopic(topic string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.topic != nil {
		// In OffsetsTopic the records stay; entries of another id than
		// the topic's are dropped when a partition is loaded, and these
		// leave memory now.
		for _, g := range s.groups {
			for k := range g {
				if k.Topic == topic {
					delete(g, k)
				}
			}
		}
		return nil
	}
	if s.f == nil {
		return api.NewError(api.CodeShuttingDown, "server is shutting down")
	}
	found := false
	for _, g := range s.groups {
		for k := range g {
			found = found || k.Topic == topic
		}
	}
	if !found {
		return nil
	}
	if s.failed != nil {
		return s.failedError()
	}
	if err := s.rewriteLocked(topic); err != nil {
		return err
	}
	for _, g := range s.groups {
		for k := range g {
			if k.Topic == topic {
				delete(g, k)
			}
		}
	}
	s.log.Info("dropped every group's committed offsets of the topic", "topic", topic)
	return nil
}

// fail puts the store into the failed state with cause err, once, and
// logs it; s.mu is held.
func (s *offsetStore) fail(err error) {
	if s.failed != nil {
		return
	}
	s.failed = err
	s.log.Error("group offsets log failed; offset commits refused until the server restarts", "path", filepath.Join(s.dir, offsetsFile), "err", err)
}

// failedError is the error of every commit refused in the failed state;
// s.mu is held.
func (s *offsetStore) failedError() error {
	return api.WrapError(api.CodeStorageError, s.failed, "group offsets log failed; offset commits are refused until the server restarts")
}

// err returns the failure of the store (nil: healthy).
func (s *offsetStore) err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.failed
}

func (s *offsetStore) sortedGroups() []string {
	gs := make([]string, 0, len(s.groups))
	for g := range s.groups {
		gs = append(gs, g)
	}
	sort.Strings(gs)
	return gs
}

// get returns the group's committed offsets for topic ("" = all topics),
// sorted by topic and partition.
func (s *offsetStore) get(group, topic string) []OffsetCommit {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []OffsetCommit
	for k, c := range s.groups[group] {
		if topic == "" || k.Topic == topic {
			out = append(out, OffsetCommit{Topic: k.Topic, TopicID: c.TopicID, Partition: k.Partition, Offset: c.Offset, Metadata: c.Metadata})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Topic != out[j].Topic {
			return out[i].Topic < out[j].Topic
		}
		return out[i].Partition < out[j].Partition
	})
	return out
}

func (s *offsetStore) close() error {
	if s.topic != nil {
		s.topic.close()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.f == nil {
		return nil
	}
	err := s.f.Close()
	s.f = nil
	return err
}

// syncDir fsyncs a directory so that entries created, renamed or removed
// in it are durable.
func syncDir(fs ring.FS, dir string) error {
	return fs.SyncDir(dir)
}
