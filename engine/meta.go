package engine

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/ring"
	"github.com/seedqueue/sq/segment"
)

// tmpSuffix marks the engine's temporary files; they are removed at start.
const tmpSuffix = ".sqtmp"

// topicMeta is the persisted form of a topic: meta/topics/<name>.json.
type topicMeta struct {
	Name       string      `json:"name"`
	Partitions int         `json:"partitions"`
	Config     TopicConfig `json:"config"`
	CreatedMs  int64       `json:"created_ms"`
	// ID is the topic's unique id (KIP-516), made at creation; a file
	// written before ids existed gets one at the next start (topicid.go).
	ID api.TopicID `json:"id,omitzero"`
}

// UnmarshalJSON implements json.Unmarshaler: as json.Unmarshal, unknown
// keys are ignored, in the config too (a file written by a later version
// still loads; TopicConfig.UnmarshalJSON alone is strict).
func (m *topicMeta) UnmarshalJSON(b []byte) error {
	type fields topicMeta
	var f struct {
		fields
		Config json.RawMessage `json:"config"`
	}
	if err := json.Unmarshal(b, &f); err != nil {
		return err
	}
	*m = topicMeta(f.fields)
	if len(f.Config) == 0 {
		f.Config = []byte("{}")
	}
	return m.Config.decode(f.Config, false)
}

// resolveConfig fills the zero fields of c from the engine defaults and
// checks every field, returning an INVALID_CONFIG *api.Error naming the
// first bad one. At an alter, prev is the topic's stored config: a field
// that keeps its stored value is not checked again against the server's
// batch and record limits, which may have changed since it was accepted
// (the server restarted with other flags), so that an unrelated change
// such as retention.ms still goes through. prev is nil at create.
func (e *Engine) resolveConfig(c TopicConfig, prev *TopicConfig) (TopicConfig, error) {
	o := &e.opts
	d := e.TopicDefaults()
	if c.SyncPolicy == "" {
		c.SyncPolicy = o.SyncPolicy
	}
	p, err := ParseSyncPolicy(c.SyncPolicy)
	if err != nil {
		return c, api.WrapError(api.CodeInvalidConfig, err, "")
	}
	c.SyncPolicy = p.String()
	if c.SegmentBytes == 0 {
		c.SegmentBytes = o.SegmentBytes
	}
	if c.SegmentBytes < minSegmentBytes || c.SegmentBytes > maxSegmentBytes {
		return c, api.NewError(api.CodeInvalidConfig, "segment.bytes %d out of range [%d, %d]", c.SegmentBytes, minSegmentBytes, int64(maxSegmentBytes))
	}
	if c.SegmentBytes < int64(o.MaxBatchBytes)+minSegmentBytes && (prev == nil || prev.SegmentBytes != c.SegmentBytes) {
		// A batch should fit in an empty segment. (One that does not, after
		// a restart with a larger batch limit, takes a segment of its own:
		// a segment rolls only when it already holds data.)
		return c, api.NewError(api.CodeInvalidConfig, "segment.bytes %d smaller than the server's batch limit %d (sq-server --max-batch-bytes) plus %d", c.SegmentBytes, o.MaxBatchBytes, minSegmentBytes)
	}
	switch {
	case c.RetentionBytes == 0:
		c.RetentionBytes = d.RetentionBytes
	case c.RetentionBytes < -1:
		return c, api.NewError(api.CodeInvalidConfig, "retention.bytes %d: want -1 (unlimited) or a positive size", c.RetentionBytes)
	}
	switch {
	case c.RetentionMs == 0:
		c.RetentionMs = d.RetentionMs
	case c.RetentionMs < -1:
		return c, api.NewError(api.CodeInvalidConfig, "retention.ms %d: want -1 (unlimited) or a positive duration", c.RetentionMs)
	}
	switch {
	case c.SegmentMs == 0:
		c.SegmentMs = o.SegmentMs
	case c.SegmentMs < 1:
		return c, api.NewError(api.CodeInvalidConfig, "segment.ms %d: want a positive duration", c.SegmentMs)
	}
	switch {
	case c.MaxRecordBytes == 0:
		c.MaxRecordBytes = int32(o.MaxRecordBytes)
	case c.MaxRecordBytes < 0 || int(c.MaxRecordBytes) > o.MaxRecordBytes && (prev == nil || prev.MaxRecordBytes != c.MaxRecordBytes):
		return c, api.NewError(api.CodeInvalidConfig, "max.record.bytes %d out of range [1, %d]", c.MaxRecordBytes, o.MaxRecordBytes)
	}
	if err := resolveLocalRetention(&c, d); err != nil {
		return c, err
	}
	if c.ReplicationFactor < 0 {
		return c, api.NewError(api.CodeInvalidConfig, "replication.factor %d: want at least 1", c.ReplicationFactor)
	}
	if c.MinInsyncReplicas < 0 {
		return c, api.NewError(api.CodeInvalidConfig, "min.insync.replicas %d: want at least 1", c.MinInsyncReplicas)
	}
	if c.ReplicationFactor > 0 && c.MinInsyncReplicas > c.ReplicationFactor {
		return c, api.NewError(api.CodeInvalidConfig, "min.insync.replicas %d exceeds replication.factor %d", c.MinInsyncReplicas, c.ReplicationFactor)
	}
	return c, nil
}

func (e *Engine) metaDir() string { return filepath.Join(e.opts.DataDir, "meta", "topics") }

func (e *Engine) topicDir(name string) string {
	return filepath.Join(e.opts.DataDir, "topics", name)
}

// writeFileAtomic writes data to path through a temporary file in the same
// directory: write, fsync, rename, fsync of the directory (etcd's pattern),
// so a crash leaves either the old or the new file, never a torn one. The
// temporary name is random, not path+suffix, so a 249-character topic name
// stays within NAME_MAX (255).
func writeFileAtomic(fs ring.FS, path string, data []byte) error {
	tmp, err := writeTemp(fs, path, data)
	if err != nil {
		return err
	}
	if err := fs.Rename(tmp, path); err != nil {
		_ = fs.Remove(tmp)
		return err
	}
	return fs.SyncDir(filepath.Dir(path))
}

// writeTemp writes data to a new temporary file beside path and fsyncs
// it, returning its name. On error the file is removed (best effort; a
// leftover is removed at the next start) and path is untouched.
func writeTemp(fs ring.FS, path string, data []byte) (string, error) {
	var rnd [8]byte
	rand.Read(rnd[:])
	tmp := filepath.Join(filepath.Dir(path), "."+hex.EncodeToString(rnd[:])+tmpSuffix)
	f, err := fs.Create(tmp)
	if err != nil {
		return "", err
	}
	if err := writeSyncClose(f, data); err != nil {
		_ = fs.Remove(tmp)
		return "", err
	}
	return tmp, nil
}

// writeSyncClose writes data at the start of f, fsyncs and closes it; f is
// closed on every path.
func writeSyncClose(f ring.File, data []byte) error {
	if _, err := f.WriteAt(data, 0); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func (e *Engine) writeTopicMeta(m topicMeta) error {
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(e.opts.FS, filepath.Join(e.metaDir(), m.Name+".json"), append(data, '\n'))
}

// loadTopicMetas reads every topic's metadata, removing leftover .sqtmp
// files and logging (not loading) anything else unexpected.
func (e *Engine) loadTopicMetas() ([]topicMeta, error) {
	fs := e.opts.FS
	entries, err := fs.ReadDir(e.metaDir())
	if err != nil {
		return nil, err
	}
	var metas []topicMeta
	for _, name := range entries {
		path := filepath.Join(e.metaDir(), name)
		switch {
		case strings.HasSuffix(name, tmpSuffix):
			if err := fs.Remove(path); err != nil {
				return nil, err
			}
			e.log.Info("removed temporary file", "path", path)
			continue
		case !strings.HasSuffix(name, ".json") || isDir(fs, path):
			e.log.Warn("ignoring unknown file in topic metadata directory", "path", path)
			continue
		}
		m, err := readTopicMeta(fs, path, name)
		if err != nil {
			// One damaged metadata file must not take every other topic
			// down: the topic is not served, its data is left untouched,
			// and CreateTopic refuses the name while its directory holds
			// data.
			e.log.Error("topic metadata unreadable; topic not served (restore the file from a backup, or move the topic directory away to reuse the name)",
				"path", path, "err", err)
			continue
		}
		if now := e.opts.Now().UnixMilli(); m.CreatedMs > now+segment.MaxClockAhead.Milliseconds() {
			// Written while the clock was ahead, so the real creation
			// time is unknown: 0, no bound for append times (the file is
			// rewritten with it at the next config change). Clamped to
			// the clock instead, it would be later than every record
			// appended since the clock came back, and each start would
			// take their real times for damage and date them again at
			// its own time (docs/storage.md, Clock bounds).
			e.log.Warn("topic creation time in the future; dropped (unknown, no bound for append times)", "path", path, "created_ms", m.CreatedMs, "now_ms", now)
			m.CreatedMs = 0
		}
		metas = append(metas, m)
	}
	return metas, nil
}

func readTopicMeta(fs ring.FS, path, name string) (topicMeta, error) {
	var m topicMeta
	data, err := ring.ReadFile(fs, path)
	if err != nil {
		return m, err
	}
	if err := json.Unmarshal(data, &m); err != nil {
		return m, err
	}
	if m.Name+".json" != name || ValidateStoredTopicName(m.Name) != nil || m.Partitions < 1 || m.Partitions > MaxPartitions {
		return m, fmt.Errorf("invalid name %q or partition count %d", m.Name, m.Partitions)
	}
	if _, err := ParseSyncPolicy(m.Config.SyncPolicy); err != nil {
		return m, err
	}
	return m, nil
}

// dirHoldsData reports whether dir (a topic directory) holds a non-empty
// segment file anywhere below it.
func dirHoldsData(fs ring.FS, dir string) bool {
	names, err := fs.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, name := range names {
		path := filepath.Join(dir, name)
		fi, err := fs.Stat(path)
		switch {
		case err != nil:
		case fi.IsDir():
			if dirHoldsData(fs, path) {
				return true
			}
		case strings.HasSuffix(name, ".log") && fi.Size() > 0:
			return true
		}
	}
	return false
}

// isDir reports whether path is a directory.
func isDir(fs ring.FS, path string) bool {
	fi, err := fs.Stat(path)
	return err == nil && fi.IsDir()
}

// removeTemps deletes the engine's leftover temporary files in dir.
func removeTemps(fs ring.FS, dir string, log *slog.Logger) {
	names, err := fs.ReadDir(dir)
	if err != nil {
		return
	}
	for _, name := range names {
		if strings.HasSuffix(name, tmpSuffix) {
			path := filepath.Join(dir, name)
			if fs.Remove(path) == nil {
				log.Info("removed temporary file", "path", path)
			}
		}
	}
}
