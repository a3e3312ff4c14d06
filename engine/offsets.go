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
// At open, a torn or corrupt tail record ends the file: it is cut off, and
// every record before it is kept.
type offsetStore struct {
	mu     sync.Mutex
	dir    string
	fs     ring.FS
	log    *slog.Logger
	f      *os.File
	size   int64
	groups map[string]map[tp]committed
	// coord is the group coordinator, made on first use (group.go).
	coordOnce sync.Once
	coord     *coordinator
	// snapshotSize is the size of the file after the last compaction.
	snapshotSize int64
	// noSync skips fdatasync (tests and benchmarks of compaction only).
	noSync bool
}

type tp struct {
	Topic     string
	Partition int
}

type committed struct {
	Offset   uint64
	Metadata string
}

// offsetRecord is one commit (or, with Deleted, the deletion of a
// group's offsets). Member and Generation record who committed.
type offsetRecord struct {
	Group      string        `json:"g"`
	Member     string        `json:"m,omitempty"`
	Generation int32         `json:"gen,omitempty"`
	Deleted    bool          `json:"d,omitempty"`
	Offsets    []offsetEntry `json:"o,omitempty"`
}

type offsetEntry struct {
	Topic     string `json:"t"`
	Partition int    `json:"p"`
	Offset    uint64 `json:"o"`
	Metadata  string `json:"m,omitempty"`
}

const (
	offsetsFile      = "offsets.log"
	compactBytes     = 4 << 20 // rewrite as a snapshot past 4 MiB
	maxOffsetsRecord = 64 << 20
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

func openOffsetStore(dir string, fs ring.FS, log *slog.Logger) (*offsetStore, error) {
	s := &offsetStore{dir: dir, fs: fs, log: log, groups: map[string]map[tp]committed{}}
	path := filepath.Join(dir, offsetsFile)
	removeTemps(dir, log)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("engine: open %s: %w", path, err)
	}
	s.f = f
	good, err := s.load()
	if err != nil {
		f.Close()
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if st.Size() != good {
		log.Warn("cutting torn tail of the group offsets log", "path", path, "valid_bytes", good, "file_bytes", st.Size())
		if err := f.Truncate(good); err != nil {
			f.Close()
			return nil, err
		}
		if err := f.Sync(); err != nil {
			f.Close()
			return nil, err
		}
	}
	s.size = good
	return s, nil
}

// load replays the file and returns the length of its valid prefix.
func (s *offsetStore) load() (int64, error) {
	var pos int64
	var hdr [8]byte
	for {
		if _, err := s.f.ReadAt(hdr[:], pos); err != nil {
			if errors.Is(err, io.EOF) {
				return pos, nil
			}
			return 0, err
		}
		n := binary.LittleEndian.Uint32(hdr[:])
		if n == 0 || n > maxOffsetsRecord {
			return pos, nil
		}
		payload := make([]byte, n)
		if _, err := s.f.ReadAt(payload, pos+8); err != nil {
			return pos, nil
		}
		if crc32.Checksum(payload, crcTable) != binary.LittleEndian.Uint32(hdr[4:]) {
			return pos, nil
		}
		var rec offsetRecord
		if err := json.Unmarshal(payload, &rec); err != nil {
			return pos, nil
		}
		s.apply(rec)
		pos += 8 + int64(n)
	}
}

func (s *offsetStore) apply(rec offsetRecord) {
	if rec.Deleted {
		delete(s.groups, rec.Group)
		return
	}
	g := s.groups[rec.Group]
	if g == nil {
		g = map[tp]committed{}
		s.groups[rec.Group] = g
	}
	for _, o := range rec.Offsets {
		g[tp{o.Topic, o.Partition}] = committed{Offset: o.Offset, Metadata: o.Metadata}
	}
}

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
	data, err := encodeRecord(rec)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.f == nil {
		return api.NewError(api.CodeShuttingDown, "server is shutting down")
	}
	if _, err := s.f.WriteAt(data, s.size); err != nil {
		return storageError("commit offsets", err)
	}
	if !s.noSync {
		if err := s.f.Sync(); err != nil {
			return storageError("commit offsets", err)
		}
	}
	s.size += int64(len(data))
	s.apply(rec)
	// Compact past compactBytes, or past twice the last snapshot when the
	// state itself is larger, so the file stays within max(4 MiB, 2x the
	// state) and compaction costs O(1) amortised per commit.
	if s.size > max(compactBytes, 2*s.snapshotSize) {
		if err := s.compactLocked(); err != nil {
			s.log.Warn("group offsets compaction failed; will retry on the next commit", "err", err)
		}
	}
	return nil
}

// compactLocked replaces the file by one record per group.
func (s *offsetStore) compactLocked() error {
	var buf []byte
	for _, g := range s.sortedGroups() {
		if len(s.groups[g]) == 0 {
			continue
		}
		rec := offsetRecord{Group: g}
		for k, c := range s.groups[g] {
			rec.Offsets = append(rec.Offsets, offsetEntry{Topic: k.Topic, Partition: k.Partition, Offset: c.Offset, Metadata: c.Metadata})
		}
		data, err := encodeRecord(rec)
		if err != nil {
			return err
		}
		buf = append(buf, data...)
	}
	path := filepath.Join(s.dir, offsetsFile)
	if err := writeFileAtomic(s.fs, path, buf); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0o644)
	if err != nil {
		return err
	}
	s.f.Close()
	s.f = f
	s.size = int64(len(buf))
	s.snapshotSize = s.size
	return nil
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
			out = append(out, OffsetCommit{Topic: k.Topic, Partition: k.Partition, Offset: c.Offset, Metadata: c.Metadata})
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
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.f == nil {
		return nil
	}
	err := s.f.Close()
	s.f = nil
	return err
}

// maxGroupNameLength bounds a group id, in bytes.
const maxGroupNameLength = 255

func validateGroup(group string) error {
	if group == "" || len(group) > maxGroupNameLength {
		return api.NewError(api.CodeInvalidRequest, "group id must be 1 to %d bytes, got %d", maxGroupNameLength, len(group))
	}
	return nil
}

// CommitOffsets stores committed offsets for group (DESIGN §6). A member
// commits with its memberID and the generation of its latest join or
// heartbeat answer; a stale generation or an unknown member gets
// FENCED_GENERATION and nothing is stored. A standalone consumer commits
// with generation -1 and an empty memberID, accepted only while the group
// has no members (FENCED_GENERATION otherwise). Each entry is checked on
// its own: an unknown topic or partition, an offset beyond the high
// watermark (OFFSET_OUT_OF_RANGE with the valid range), or a partition the
// member does not hold (FENCED_GENERATION) sets that entry's Err and stores
// nothing for it; the valid entries are stored together, durably, before
// CommitOffsets returns. The returned slice has one entry per input entry.
func (e *Engine) CommitOffsets(group, memberID string, generation int32, offsets []OffsetCommit) ([]OffsetCommit, error) {
	if err := validateGroup(group); err != nil {
		return nil, err
	}
	// The group's lock spans the check and the write, so a commit is
	// never stored for a generation that has already ended.
	g := e.coord().lock(group, false)
	if g != nil {
		defer g.mu.Unlock()
	}
	m, err := fenceCommit(g, group, memberID, generation)
	if err != nil {
		return nil, err
	}
	out := make([]OffsetCommit, len(offsets))
	rec := offsetRecord{Group: group, Member: memberID, Generation: generation}
	for i, o := range offsets {
		out[i] = o
		if out[i].Err = e.checkCommit(o); out[i].Err != nil {
			continue
		}
		if m != nil && !m.held[tp{o.Topic, o.Partition}] {
			out[i].Err = api.NewError(api.CodeFencedGeneration, "%s/%d is not assigned to member %q of group %q", o.Topic, o.Partition, memberID, group)
			continue
		}
		rec.Offsets = append(rec.Offsets, offsetEntry{Topic: o.Topic, Partition: o.Partition, Offset: o.Offset, Metadata: o.Metadata})
	}
	if len(rec.Offsets) == 0 {
		return out, nil
	}
	if err := e.offsets.commit(rec); err != nil {
		return nil, err
	}
	return out, nil
}

// fenceCommit checks a commit's member and generation against the group
// (nil when it has never had a member) and returns the member, or nil for
// a standalone commit.
func fenceCommit(g *group, name, memberID string, generation int32) (*member, error) {
	if generation < 0 && memberID == "" {
		if g != nil && len(g.members) > 0 {
			return nil, api.NewError(api.CodeFencedGeneration,
				"group %q has %d members: a commit without a generation is accepted only while it has none", name, len(g.members))
		}
		return nil, nil
	}
	var m *member
	if g != nil {
		m = g.members[memberID]
	}
	if m == nil {
		return nil, api.NewError(api.CodeFencedGeneration, "group %q has no member %q", name, memberID)
	}
	if generation != m.generation {
		return nil, api.NewError(api.CodeFencedGeneration, "stale generation %d of member %q in group %q (current %d)", generation, memberID, name, m.generation)
	}
	return m, nil
}

// checkCommit checks that o names an existing partition and an offset at
// most its high watermark.
func (e *Engine) checkCommit(o OffsetCommit) error {
	_, p, err := e.partition(o.Topic, o.Partition)
	if err != nil {
		return err
	}
	hw := p.hw.Load()
	start := uint64(0)
	if p.log != nil {
		start = p.log.LogStartOffset()
	}
	if o.Offset > hw {
		return api.NewRangeError(api.CodeOffsetOutOfRange, start, hw,
			"commit of offset %d beyond the high watermark %d of %s/%d", o.Offset, hw, o.Topic, o.Partition)
	}
	return nil
}

// FetchOffsets returns the committed offsets of group in topic (every
// topic when topic is ""), sorted by topic and partition. Partitions
// without a committed offset are absent.
func (e *Engine) FetchOffsets(group, topic string) ([]OffsetCommit, error) {
	if err := validateGroup(group); err != nil {
		return nil, err
	}
	return e.offsets.get(group, topic), nil
}

// clampOffsets lowers committed offsets above the recovered high
// watermark to it, with a warning (DESIGN §3.6): after a crash under a
// lax sync policy the log may end before a commit that referred to it.
func (e *Engine) clampOffsets() {
	s := e.offsets
	s.mu.Lock()
	defer s.mu.Unlock()
	for g, m := range s.groups {
		for k, c := range m {
			t, ok := e.topics[k.Topic]
			if !ok || k.Partition >= len(t.parts) || t.parts[k.Partition].log == nil {
				continue
			}
			if hw := t.parts[k.Partition].hw.Load(); c.Offset > hw {
				e.log.Warn("committed offset beyond the recovered high watermark; clamped",
					"group", g, "topic", k.Topic, "partition", k.Partition, "committed", c.Offset, "high_watermark", hw)
				m[k] = committed{Offset: hw, Metadata: c.Metadata}
			}
		}
	}
}

// syncDir fsyncs a directory so that entries created, renamed or removed
// in it are durable.
func syncDir(fs ring.FS, dir string) error {
	return fs.SyncDir(dir)
}
