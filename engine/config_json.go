package engine

import (
	"bytes"
	"encoding/json"
)

// LocalRetentionDefault is the value of TopicConfig.LocalRetentionMs and
// LocalRetentionBytes that means "the same as retention.ms /
// retention.bytes": Kafka's -2 (KIP-405), the default of both.
const LocalRetentionDefault = -2

// topicConfigFields is TopicConfig without its JSON methods.
type topicConfigFields TopicConfig

// topicConfigJSON is the JSON form of a TopicConfig, in the topic
// metadata files and in the cluster's metadata log and snapshots. The
// local retention settings, added after both formats were in use, are
// left out at their default (-2) and a missing key reads as -2: a topic
// that never sets them encodes exactly as before they existed, so old
// metadata files and the cluster metadata's Hash do not change, and a
// node of an older version (which refuses unknown keys in the metadata
// log) is only sent them when a topic sets them. Any other value,
// 0 included, is written.
type topicConfigJSON struct {
	topicConfigFields
	LocalRetentionMs    *int64 `json:"local_retention_ms,omitempty"`
	LocalRetentionBytes *int64 `json:"local_retention_bytes,omitempty"`
}

// MarshalJSON implements json.Marshaler (topicConfigJSON).
func (c TopicConfig) MarshalJSON() ([]byte, error) {
	w := topicConfigJSON{topicConfigFields: topicConfigFields(c)}
	if c.LocalRetentionMs != LocalRetentionDefault {
		w.LocalRetentionMs = &c.LocalRetentionMs
	}
	if c.LocalRetentionBytes != LocalRetentionDefault {
		w.LocalRetentionBytes = &c.LocalRetentionBytes
	}
	return json.Marshal(w)
}

// UnmarshalJSON implements json.Unmarshaler (topicConfigJSON). It refuses
// unknown keys, as the cluster's metadata log does everywhere else (a
// setting a node does not know is never dropped silently; a Decoder's
// DisallowUnknownFields does not reach a type's own UnmarshalJSON).
// The topic metadata files are read leniently (readTopicMeta).
func (c *TopicConfig) UnmarshalJSON(b []byte) error {
	return c.decode(b, true)
}

// decode reads c from b, the missing local retention settings as -2;
// strict refuses unknown keys.
func (c *TopicConfig) decode(b []byte, strict bool) error {
	var w topicConfigJSON
	d := json.NewDecoder(bytes.NewReader(b))
	if strict {
		d.DisallowUnknownFields()
	}
	if err := d.Decode(&w); err != nil {
		return err
	}
	*c = TopicConfig(w.topicConfigFields)
	c.LocalRetentionMs, c.LocalRetentionBytes = LocalRetentionDefault, LocalRetentionDefault
	if w.LocalRetentionMs != nil {
		c.LocalRetentionMs = *w.LocalRetentionMs
	}
	if w.LocalRetentionBytes != nil {
		c.LocalRetentionBytes = *w.LocalRetentionBytes
	}
	return nil
}
