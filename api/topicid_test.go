package api

import (
	"errors"
	"strings"
	"testing"
)

func TestTopicIDRoundTrip(t *testing.T) {
	seen := map[TopicID]bool{}
	for range 100 {
		id := NewTopicID()
		if id.IsZero() || seen[id] {
			t.Fatalf("NewTopicID = %v: zero or repeated", id)
		}
		seen[id] = true
		s := id.String()
		if len(s) != 36 || s[14] != '4' || !strings.ContainsRune("89ab", rune(s[19])) {
			t.Fatalf("%q is not a version 4 UUID", s)
		}
		back, err := ParseTopicID(s)
		if err != nil || back != id {
			t.Fatalf("ParseTopicID(%q) = %v, %v", s, back, err)
		}
		b, err := TopicIDFromBytes(id.Bytes())
		if err != nil || b != id {
			t.Fatalf("TopicIDFromBytes = %v, %v", b, err)
		}
	}
	if (TopicID{}).String() != "" || (TopicID{}).Bytes() != nil {
		t.Fatal("the zero id must format as empty and have no wire bytes")
	}
}

func TestTopicIDRejects(t *testing.T) {
	for _, s := range []string{"x", "0123456789abcdef0123456789abcdef", "01234567-89ab-cdef-0123-456789abcdeg",
		"01234567_89ab-cdef-0123-456789abcdef", "01234567-89ab-cdef-0123-456789abcdef0"} {
		if _, err := ParseTopicID(s); err == nil {
			t.Errorf("ParseTopicID(%q) accepted", s)
		}
	}
	for _, n := range []int{1, 15, 17, 32} {
		if _, err := TopicIDFromBytes(make([]byte, n)); !errors.Is(err, ErrInvalidRequest) {
			t.Errorf("TopicIDFromBytes(%d bytes) = %v, want INVALID_REQUEST", n, err)
		}
	}
	if id, err := TopicIDFromBytes(nil); err != nil || !id.IsZero() {
		t.Errorf("TopicIDFromBytes(nil) = %v, %v, want the zero id", id, err)
	}
}

func TestUnknownTopicIDCode(t *testing.T) {
	e := NewError(CodeUnknownTopicID, "old id")
	if !errors.Is(e, ErrUnknownTopicID) || e.Retriable() || CodeUnknownTopicID.String() != "UNKNOWN_TOPIC_ID" {
		t.Fatalf("UNKNOWN_TOPIC_ID: %v retriable=%v", e, e.Retriable())
	}
}
