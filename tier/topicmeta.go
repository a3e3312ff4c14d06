package tier

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/engine"
)

// TopicObject is what the bucket records of a topic beside its
// partitions' objects: "<topic>/<topic-id>/topic.json", one line of JSON
// {"format":1,"crc32c":C,"topic":T} as the manifests are (C the CRC-32C of
// T's bytes). T holds the topic's name, id, partition count and config, so
// that a restore recreates the topic whole, partitions that never
// uploaded a segment included. The archiver rewrites it when the
// partition count or the config changes (the latest wins).
type TopicObject struct {
	Topic      string             `json:"topic"`
	TopicID    api.TopicID        `json:"topic_id"`
	Partitions int                `json:"partitions"`
	Config     engine.TopicConfig `json:"config"`
}

// TopicObjectKey returns the key of topic's TopicObject.
func TopicObjectKey(topic string, id api.TopicID) string {
	return topic + "/" + id.String() + "/topic.json"
}

type topicEnvelope struct {
	Format int             `json:"format"`
	CRC32C *uint32         `json:"crc32c"`
	Body   json.RawMessage `json:"topic"`
}

// PutTopicObject stores t under its key, replacing an older one.
func PutTopicObject(ctx context.Context, s ObjectStore, t TopicObject) error {
	body, err := json.Marshal(t)
	if err != nil {
		return err
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, `{"format":%d,"crc32c":%d,"topic":`, ManifestFormat, Checksum(body))
	b.Write(body)
	b.WriteString("}\n")
	key := TopicObjectKey(t.Topic, t.TopicID)
	if _, err := s.Put(ctx, key, bytes.NewReader(b.Bytes()), int64(b.Len()), PutOptions{}); err != nil {
		return fmt.Errorf("tier: put %s: %w", key, err)
	}
	return nil
}

// ReadTopicObject reads topic's TopicObject. Errors: ErrNotFound,
// ErrCorrupt (not JSON, a checksum or a name that does not match), or the
// store's.
func ReadTopicObject(ctx context.Context, s ObjectStore, topic string, id api.TopicID) (TopicObject, error) {
	key := TopicObjectKey(topic, id)
	rc, err := s.Get(ctx, key, 0, -1)
	if err != nil {
		return TopicObject{}, fmt.Errorf("tier: read %s: %w", key, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, 1<<20))
	if err != nil {
		return TopicObject{}, fmt.Errorf("tier: read %s: %w", key, err)
	}
	var env topicEnvelope
	var t TopicObject
	switch {
	case json.Unmarshal(b, &env) != nil || env.CRC32C == nil:
		return t, fmt.Errorf("tier: %s: %w: not a topic object", key, ErrCorrupt)
	case Checksum(env.Body) != *env.CRC32C:
		return t, fmt.Errorf("tier: %s: %w: CRC-32C mismatch", key, ErrCorrupt)
	case json.Unmarshal(env.Body, &t) != nil || t.Topic != topic || t.TopicID != id:
		return t, fmt.Errorf("tier: %s: %w: it describes another topic", key, ErrCorrupt)
	}
	return t, nil
}

// syncTopicObjects writes the TopicObject of every topic whose partition
// count or config differs from what this archiver last wrote or read.
func (a *Archiver) syncTopicObjects(ctx context.Context, parts []engine.TieredPartition) {
	seen := map[api.TopicID]TopicObject{}
	for _, tp := range parts {
		t := seen[tp.TopicID]
		t.Topic, t.TopicID, t.Config = tp.Topic, tp.TopicID, tp.Config
		t.Partitions = max(t.Partitions, tp.Partition+1)
		seen[tp.TopicID] = t
	}
	for id, t := range seen {
		a.mu.Lock()
		last, known := a.topics[id]
		a.mu.Unlock()
		if known && last == t {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, a.o.Timeout)
		if !known {
			if cur, err := ReadTopicObject(cctx, a.o.Store, t.Topic, id); err == nil && cur == t {
				cancel()
				a.mu.Lock()
				a.topics[id] = t
				a.mu.Unlock()
				continue
			} else if err != nil && !errors.Is(err, ErrNotFound) && !errors.Is(err, ErrCorrupt) {
				cancel()
				continue // the store is down: the next pass tries again
			}
		}
		err := PutTopicObject(cctx, a.o.Store, t)
		cancel()
		if err != nil {
			a.o.Logger.Warn("tiered storage: writing the topic object failed; retried at the next pass", "topic", t.Topic, "err", err)
			continue
		}
		a.mu.Lock()
		a.topics[id] = t
		a.mu.Unlock()
	}
}
