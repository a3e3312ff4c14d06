package engine

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/ring"
)

// tmpSuffix marks the engine's temporary files; they are removed at start.
const tmpSuffix = ".sqtmp"

// topicMeta is the persisted form of a topic: meta/topics/<name>.json.
type topicMeta struct {
	Name       string      `json:"name"`
	Partitions int         `json:"partitions"`
	Config     TopicConfig `json:"config"`
	CreatedMs  int64       `json:"created_ms"`
}

// resolveConfig fills the zero fields of c from the engine defaults and
// checks every field, returning an INVALID_CONFIG *api.Error naming the
// first bad one.
func (e *Engine) resolveConfig(c TopicConfig) (TopicConfig, error) {
	o := &e.opts
	if c.SyncPolicy == "" {
		c.SyncPolicy = o.SyncPolicy
	}
	p, err := ParseSyncPolicy(c.SyncPolicy)
	if err != nil {
		return c, api.NewError(api.CodeInvalidConfig, "%v", err)
	}
	c.SyncPolicy = p.String()
	if c.SegmentBytes == 0 {
		c.SegmentBytes = o.SegmentBytes
	}
	if c.SegmentBytes < minSegmentBytes || c.SegmentBytes > maxSegmentBytes {
		return c, api.NewError(api.CodeInvalidConfig, "segment.bytes %d out of range [%d, %d]", c.SegmentBytes, minSegmentBytes, int64(maxSegmentBytes))
	}
	if c.SegmentBytes < int64(o.MaxBatchBytes)+minSegmentBytes {
		// A batch must always fit in an empty segment.
		return c, api.NewError(api.CodeInvalidConfig, "segment.bytes %d smaller than the batch limit %d plus %d", c.SegmentBytes, o.MaxBatchBytes, minSegmentBytes)
	}
	switch {
	case c.RetentionBytes == 0:
		c.RetentionBytes = -1
	case c.RetentionBytes < -1:
		return c, api.NewError(api.CodeInvalidConfig, "retention.bytes %d: want -1 (unlimited) or a positive size", c.RetentionBytes)
	}
	switch {
	case c.RetentionMs == 0:
		c.RetentionMs = o.RetentionMs
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
	case c.MaxRecordBytes < 0 || int(c.MaxRecordBytes) > o.MaxRecordBytes:
		return c, api.NewError(api.CodeInvalidConfig, "max.record.bytes %d out of range [1, %d]", c.MaxRecordBytes, o.MaxRecordBytes)
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
	var rnd [8]byte
	rand.Read(rnd[:])
	tmp := filepath.Join(filepath.Dir(path), "."+hex.EncodeToString(rnd[:])+tmpSuffix)
	f, err := fs.Create(tmp)
	if err != nil {
		return err
	}
	if _, err := f.WriteAt(data, 0); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := fs.Rename(tmp, path); err != nil {
		return err
	}
	return fs.SyncDir(filepath.Dir(path))
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
	entries, err := os.ReadDir(e.metaDir())
	if err != nil {
		return nil, err
	}
	var metas []topicMeta
	for _, ent := range entries {
		name := ent.Name()
		path := filepath.Join(e.metaDir(), name)
		switch {
		case strings.HasSuffix(name, tmpSuffix):
			if err := os.Remove(path); err != nil {
				return nil, err
			}
			e.log.Info("removed temporary file", "path", path)
			continue
		case !strings.HasSuffix(name, ".json") || ent.IsDir():
			e.log.Warn("ignoring unknown file in topic metadata directory", "path", path)
			continue
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		var m topicMeta
		if err := json.Unmarshal(data, &m); err != nil {
			return nil, fmt.Errorf("engine: topic metadata %s: %w", path, err)
		}
		if m.Name+".json" != name || ValidateTopicName(m.Name) != nil || m.Partitions < 1 || m.Partitions > MaxPartitions {
			return nil, fmt.Errorf("engine: topic metadata %s: invalid name %q or partition count %d", path, m.Name, m.Partitions)
		}
		metas = append(metas, m)
	}
	return metas, nil
}

// removeTemps deletes the engine's leftover temporary files in dir.
func removeTemps(dir string, log *slog.Logger) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, ent := range ents {
		if strings.HasSuffix(ent.Name(), tmpSuffix) {
			path := filepath.Join(dir, ent.Name())
			if os.Remove(path) == nil {
				log.Info("removed temporary file", "path", path)
			}
		}
	}
}
