package api

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
)

// TopicID is a topic's unique id: 16 bytes, a random (version 4) UUID made
// when the topic is created, as Kafka's KIP-516. A topic deleted and
// created again under the same name gets a new id, so fetches, commits and
// group offsets that carry the id are never applied to the wrong topic.
// The zero value means "no id" (a request that names the topic only).
type TopicID [16]byte

// NewTopicID returns a random version 4 UUID (RFC 9562 §5.4).
func NewTopicID() TopicID {
	var id TopicID
	rand.Read(id[:])
	id[6] = id[6]&0x0f | 0x40 // version 4
	id[8] = id[8]&0x3f | 0x80 // variant 10
	return id
}

// IsZero reports whether id is unset.
func (id TopicID) IsZero() bool { return id == TopicID{} }

// String formats id as a UUID, 8-4-4-4-12 lowercase hex digits; the zero
// id formats as "".
func (id TopicID) String() string {
	if id.IsZero() {
		return ""
	}
	var b [36]byte
	hex.Encode(b[0:8], id[0:4])
	b[8] = '-'
	hex.Encode(b[9:13], id[4:6])
	b[13] = '-'
	hex.Encode(b[14:18], id[6:8])
	b[18] = '-'
	hex.Encode(b[19:23], id[8:10])
	b[23] = '-'
	hex.Encode(b[24:], id[10:])
	return string(b[:])
}

// ParseTopicID parses the 36-character UUID form written by String. The
// empty string parses as the zero id. Errors name the input.
func ParseTopicID(s string) (TopicID, error) {
	var id TopicID
	if s == "" {
		return id, nil
	}
	if len(s) != 36 || s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' {
		return id, fmt.Errorf("api: topic id %q is not a UUID (8-4-4-4-12 hex digits)", s)
	}
	h := s[0:8] + s[9:13] + s[14:18] + s[19:23] + s[24:]
	if _, err := hex.Decode(id[:], []byte(h)); err != nil {
		return TopicID{}, fmt.Errorf("api: topic id %q is not a UUID: %w", s, err)
	}
	return id, nil
}

// TopicIDFromBytes converts the wire form (a Data or bytes field) into a
// TopicID: empty is the zero id; anything but 16 bytes is INVALID_REQUEST.
func TopicIDFromBytes(b []byte) (TopicID, error) {
	var id TopicID
	switch len(b) {
	case 0:
		return id, nil
	case len(id):
		copy(id[:], b)
		return id, nil
	}
	return id, NewError(CodeInvalidRequest, "topic id must be %d bytes, got %d", len(id), len(b))
}

// Bytes returns the wire form of id: nil for the zero id (the field stays
// unset, as an old client would send it), else the 16 bytes.
func (id TopicID) Bytes() []byte {
	if id.IsZero() {
		return nil
	}
	return append([]byte(nil), id[:]...)
}

// MarshalText writes the UUID form (empty for the zero id), so a TopicID
// is a string in JSON.
func (id TopicID) MarshalText() ([]byte, error) { return []byte(id.String()), nil }

// UnmarshalText parses the UUID form; empty text is the zero id.
func (id *TopicID) UnmarshalText(b []byte) error {
	v, err := ParseTopicID(string(b))
	if err != nil {
		return err
	}
	*id = v
	return nil
}
