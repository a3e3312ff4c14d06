package tier

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/seedqueue/sq/api"
)

// ManifestFormat is the format version written in every manifest; a
// manifest of another format is reported as corrupt (a newer server's
// manifests are not read by an older one).
const ManifestFormat = 1

// MaxManifestBytes bounds the size of a manifest object that is read (64
// MiB, about 150,000 segments), so a garbage object cannot exhaust memory.
const MaxManifestBytes = 64 << 20

// Manifest is the state of one partition's remote log: the segments whose
// upload was verified, in offset order. Each version is stored whole as
// its own object (Partition.ManifestKey) and never rewritten; a writer
// makes version N+1 from version N. See the package documentation for
// the JSON form.
type Manifest struct {
	// Topic, TopicID and Partition say whose manifest this is; they must
	// match the key it is stored under.
	Topic     string      `json:"topic"`
	TopicID   api.TopicID `json:"topic_id"`
	Partition int         `json:"partition"`
	// Version is the manifest's version, >= 1, the number in its key.
	Version uint64 `json:"version"`
	// LeaderEpoch is the leader epoch of the writer (0 on a single node).
	// Epochs never decrease from one version to the next.
	LeaderEpoch uint32 `json:"leader_epoch"`
	// LogStartOffset is the first offset of the remote log that readers
	// may be served; remote retention moves it forward before it deletes
	// segments.
	LogStartOffset uint64 `json:"log_start_offset"`
	// Segments are the uploaded segments in ascending, non-overlapping
	// offset ranges (gaps are allowed).
	Segments []SegmentEntry `json:"segments"`
}

// SegmentEntry describes one uploaded, verified segment.
type SegmentEntry struct {
	// BaseOffset is the offset of the segment's first record.
	BaseOffset uint64 `json:"base_offset"`
	// LastOffset is the offset of its last record (>= BaseOffset).
	LastOffset uint64 `json:"last_offset"`
	// FileBaseOffset, when set, is the base offset of the segment file
	// uploaded, below BaseOffset: a leader whose sealed segment holds
	// records before the remote log's end (replicas' segment boundaries
	// differ) uploads the whole file and the manifest serves it from
	// BaseOffset on. The .index's relative offsets and the first batch of
	// the .log are the file's. Absent: the file starts at BaseOffset.
	FileBaseOffset *uint64 `json:"file_base_offset,omitempty"`
	// MaxTimestampMs is the segment's latest time, Unix ms, that
	// time-based remote retention compares with retention.ms (the
	// uploader's choice: its last broker append time).
	MaxTimestampMs int64 `json:"max_timestamp_ms"`
	// LeaderEpoch is the epoch of the leader that uploaded it, the epoch
	// in its keys.
	LeaderEpoch uint32 `json:"leader_epoch"`
	// Epochs are the leader epochs of the segment's batches, each with the
	// first offset stamped with it, ascending; empty when not recorded.
	Epochs []EpochStart `json:"epochs,omitempty"`
	// Log, Index and TimeIndex are the segment's objects: the batches
	// (Log.Size is the segment's size in bytes), the offset index and the
	// time index.
	Log       ObjectRef `json:"log"`
	Index     ObjectRef `json:"index"`
	TimeIndex ObjectRef `json:"time_index"`
}

// FileBase returns the base offset of the uploaded file: FileBaseOffset
// when set, else BaseOffset.
func (s *SegmentEntry) FileBase() uint64 {
	if s.FileBaseOffset != nil {
		return *s.FileBaseOffset
	}
	return s.BaseOffset
}

// EpochStart is one leader epoch of a segment and its first offset there.
type EpochStart struct {
	Epoch       uint32 `json:"epoch"`        // leader epoch
	StartOffset uint64 `json:"start_offset"` // its first offset in the segment
}

// ObjectRef names an object and the size (bytes) and CRC-32C it had when
// its upload was verified; a read checks them (Verify).
type ObjectRef struct {
	Key    string `json:"key"`    // full object key
	Size   int64  `json:"size"`   // bytes
	CRC32C uint32 `json:"crc32c"` // CRC-32C (Castagnoli) of the object's bytes
}

// PartitionOf returns the partition m belongs to.
func (m *Manifest) PartitionOf() Partition {
	return Partition{Topic: m.Topic, TopicID: m.TopicID, Partition: m.Partition}
}

// manifestEnvelope is the outer JSON object of a manifest object. Body
// keeps the exact bytes its checksum covers.
type manifestEnvelope struct {
	Format int             `json:"format"`
	CRC32C *uint32         `json:"crc32c"`
	Body   json.RawMessage `json:"manifest"`
}

// Check returns every structural problem of m, joined, each wrapping
// ErrCorrupt: the partition must be valid, Version >= 1, segments
// ascending and non-overlapping, each with BaseOffset <= LastOffset,
// epochs ascending within it from its BaseOffset, and object keys under
// the partition's prefix with sizes >= 0 (a log > 0).
func (m *Manifest) Check() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrCorrupt}, args...)...))
	}
	p := m.PartitionOf()
	if err := p.Validate(); err != nil {
		bad("%v", err)
	}
	if m.Version == 0 {
		bad("version 0 (versions start at 1)")
	}
	prefix := p.Prefix()
	for i, s := range m.Segments {
		if s.LastOffset < s.BaseOffset {
			bad("segment %d: last offset %d below base offset %d", i, s.LastOffset, s.BaseOffset)
		}
		if s.FileBaseOffset != nil && *s.FileBaseOffset > s.BaseOffset {
			bad("segment %d: file base offset %d above base offset %d", i, *s.FileBaseOffset, s.BaseOffset)
		}
		if i > 0 && s.BaseOffset <= m.Segments[i-1].LastOffset {
			bad("segment %d: base offset %d not after the previous segment's last offset %d", i, s.BaseOffset, m.Segments[i-1].LastOffset)
		}
		for j, e := range s.Epochs {
			if j == 0 && e.StartOffset != s.BaseOffset || e.StartOffset > s.LastOffset ||
				j > 0 && (e.Epoch <= s.Epochs[j-1].Epoch || e.StartOffset <= s.Epochs[j-1].StartOffset) {
				bad("segment %d: epoch entry %d (epoch %d at %d) out of order or outside [%d, %d]", i, j, e.Epoch, e.StartOffset, s.BaseOffset, s.LastOffset)
			}
		}
		for _, o := range []struct {
			what string
			ref  ObjectRef
		}{{"log", s.Log}, {"index", s.Index}, {"time index", s.TimeIndex}} {
			if !strings.HasPrefix(o.ref.Key, prefix) || o.ref.Size < 0 {
				bad("segment %d: %s object %q (%d bytes) is not under %s", i, o.what, o.ref.Key, o.ref.Size, prefix)
			}
		}
		if s.Log.Size == 0 {
			bad("segment %d: log object is empty", i)
		}
	}
	return errors.Join(errs...)
}

// EncodeManifest returns the manifest object for m: one line of JSON,
// {"format":1,"crc32c":C,"manifest":M}, where M is m in compact JSON and C
// the CRC-32C of M's bytes as a decimal number. It fails if m.Check does.
func EncodeManifest(m *Manifest) ([]byte, error) {
	if err := m.Check(); err != nil {
		return nil, fmt.Errorf("tier: manifest %s version %d: %w", m.PartitionOf(), m.Version, err)
	}
	c := *m
	if c.Segments == nil {
		c.Segments = []SegmentEntry{} // "segments":[] rather than null
	}
	body, err := json.Marshal(&c)
	if err != nil {
		return nil, fmt.Errorf("tier: manifest %s version %d: %w", m.PartitionOf(), m.Version, err)
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, `{"format":%d,"crc32c":%d,"manifest":`, ManifestFormat, Checksum(body))
	b.Write(body)
	b.WriteString("}\n")
	return b.Bytes(), nil
}

// DecodeManifest parses the manifest object b read from p's manifest of
// the given version. Every failure wraps ErrCorrupt and names the key: not
// JSON, another format, a CRC-32C that does not match the manifest's
// bytes, a manifest of another partition or version, or a failed Check.
func DecodeManifest(p Partition, version uint64, b []byte) (*Manifest, error) {
	key := p.ManifestKey(version)
	corrupt := func(format string, args ...any) error {
		return fmt.Errorf("tier: manifest %s: %w: "+format, append([]any{key, ErrCorrupt}, args...)...)
	}
	var env manifestEnvelope
	if err := json.Unmarshal(b, &env); err != nil {
		return nil, corrupt("%v", err)
	}
	if env.Format != ManifestFormat {
		return nil, corrupt("format %d, this server reads format %d", env.Format, ManifestFormat)
	}
	if env.CRC32C == nil || len(env.Body) == 0 {
		return nil, corrupt("no crc32c or no manifest field")
	}
	if got := Checksum(env.Body); got != *env.CRC32C {
		return nil, corrupt("CRC-32C of the manifest is %d, recorded %d", got, *env.CRC32C)
	}
	var m Manifest
	if err := json.Unmarshal(env.Body, &m); err != nil {
		return nil, corrupt("%v", err)
	}
	if m.PartitionOf() != p || m.Version != version {
		return nil, corrupt("it describes %s (topic id %s) version %d", m.PartitionOf(), m.TopicID, m.Version)
	}
	if err := m.Check(); err != nil {
		return nil, fmt.Errorf("tier: manifest %s: %w", key, err)
	}
	return &m, nil
}

// PutManifest encodes m and stores it under m's ManifestKey, only if no
// object is there (PutOptions.IfAbsent), after the segments it lists are
// uploaded. When the key is taken by an object with exactly the bytes of
// m (an earlier attempt of this write succeeded but its answer was lost,
// and the store's retry met its own object), the write counts as done.
// Errors: ErrExists when the version is taken by another manifest
// (another writer got there first: read the latest again), or as
// EncodeManifest and Put.
func PutManifest(ctx context.Context, s ObjectStore, m *Manifest) (ObjectInfo, error) {
	b, err := EncodeManifest(m)
	if err != nil {
		return ObjectInfo{}, err
	}
	key := m.PartitionOf().ManifestKey(m.Version)
	info, err := s.Put(ctx, key, bytes.NewReader(b), int64(len(b)), PutOptions{IfAbsent: true})
	if errors.Is(err, ErrExists) {
		if same, serr := storedEquals(ctx, s, key, b); serr == nil && same {
			return ObjectInfo{Key: key, Size: int64(len(b)), CRC32C: Checksum(b), HasCRC32C: true}, nil
		}
	}
	if err != nil {
		return ObjectInfo{}, fmt.Errorf("tier: put manifest %s: %w", key, err)
	}
	return info, nil
}

// storedEquals reports whether the object under key holds exactly b.
func storedEquals(ctx context.Context, s ObjectStore, key string, b []byte) (bool, error) {
	rc, err := s.Get(ctx, key, 0, -1)
	if err != nil {
		return false, err
	}
	defer rc.Close()
	got, err := io.ReadAll(io.LimitReader(rc, int64(len(b))+1))
	return bytes.Equal(got, b), err
}

// ReadManifest reads and decodes version of p's manifest. Errors:
// ErrNotFound, ErrCorrupt (see DecodeManifest; also an object larger than
// MaxManifestBytes), or the store's error.
func ReadManifest(ctx context.Context, s ObjectStore, p Partition, version uint64) (*Manifest, error) {
	key := p.ManifestKey(version)
	rc, err := s.Get(ctx, key, 0, -1)
	if err != nil {
		return nil, fmt.Errorf("tier: read manifest %s: %w", key, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, MaxManifestBytes+1))
	if err != nil {
		return nil, fmt.Errorf("tier: read manifest %s: %w", key, err)
	}
	if len(b) > MaxManifestBytes {
		return nil, fmt.Errorf("tier: manifest %s: %w: larger than %d bytes", key, ErrCorrupt, MaxManifestBytes)
	}
	return DecodeManifest(p, version, b)
}

// ManifestScan is the result of LatestManifest.
type ManifestScan struct {
	// Manifest is the newest manifest that reads and checks, or nil when
	// the partition has none.
	Manifest *Manifest
	// NextVersion is one above the highest manifest version stored, valid
	// or not (1 when there is none): the version the next PutManifest
	// uses, so a corrupt version is never overwritten.
	NextVersion uint64
	// Skipped are the errors of the manifests newer than Manifest that were
	// passed over, newest first: each wraps ErrCorrupt (or ErrNotFound for
	// one deleted between the listing and the read) and names its key.
	// The caller reports them.
	Skipped []error
}

// LatestManifest finds p's newest valid manifest: it lists the manifest
// keys under p.ManifestListPrefix() and reads them newest first, passing
// over (into Skipped) each that is corrupt or has vanished, until one reads
// and checks. A manifest failing its checksum is thus reported, not
// trusted, and the previous valid version is used. Any other error (the
// network, the store) stops the search and is returned, so an outage never
// makes an older manifest look like the latest. When manifests exist but
// none is valid, it returns the scan and an error wrapping ErrCorrupt:
// the caller must not take that for an empty remote log. Keys under the
// prefix that are not manifest names are ignored.
func LatestManifest(ctx context.Context, s ObjectStore, p Partition) (ManifestScan, error) {
	scan := ManifestScan{NextVersion: 1}
	if err := p.Validate(); err != nil {
		return scan, err
	}
	objs, err := s.List(ctx, p.ManifestListPrefix())
	if err != nil {
		return scan, fmt.Errorf("tier: list manifests of %s: %w", p, err)
	}
	var versions []uint64
	for _, o := range objs {
		if v, ok := p.ParseManifestKey(o.Key); ok {
			versions = append(versions, v)
		}
	}
	if len(versions) == 0 {
		return scan, nil
	}
	slices.Sort(versions)
	scan.NextVersion = versions[len(versions)-1] + 1
	for i := len(versions) - 1; i >= 0; i-- {
		m, err := ReadManifest(ctx, s, p, versions[i])
		switch {
		case err == nil:
			scan.Manifest = m
			return scan, nil
		case errors.Is(err, ErrCorrupt) || errors.Is(err, ErrNotFound):
			scan.Skipped = append(scan.Skipped, err)
		default:
			return scan, err
		}
	}
	return scan, fmt.Errorf("tier: %s: %w: none of its %d manifests is valid", p, ErrCorrupt, len(versions))
}
