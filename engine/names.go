package engine

import (
	"unicode/utf8"

	"github.com/seedqueue/sq/api"
)

// MaxTopicNameLength is the longest topic name, in bytes (as Kafka: 249).
const MaxTopicNameLength = 249

// ValidateTopicName checks the topic-name rules: 1 to 249 characters of
// [a-zA-Z0-9._-], not "." or "..", and not starting with "__" (reserved
// for internal topics). The error is an *api.Error with
// INVALID_TOPIC_NAME saying which rule failed.
func ValidateTopicName(name string) error {
	switch {
	case name == "":
		return api.NewError(api.CodeInvalidTopicName, "topic name is empty")
	case len(name) > MaxTopicNameLength:
		return api.NewError(api.CodeInvalidTopicName, "topic name is %d characters, at most %d allowed", len(name), MaxTopicNameLength)
	case name == "." || name == "..":
		return api.NewError(api.CodeInvalidTopicName, "topic name %q is not allowed", name)
	case len(name) >= 2 && name[:2] == "__":
		return api.NewError(api.CodeInvalidTopicName, "topic name %q: the \"__\" prefix is reserved for internal topics", name)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			r, _ := utf8.DecodeRuneInString(name[i:])
			return api.NewError(api.CodeInvalidTopicName, "topic name %q has %q at byte %d: only [a-zA-Z0-9._-] allowed", name, r, i)
		}
	}
	return nil
}

// OffsetsTopic is the internal topic that holds the consumer groups'
// committed offsets in a cluster (docs/cluster.md "Consumer groups"): the
// leader of its partition OffsetsPartition(group) is the group's
// coordinator, and every commit is a record replicated like any other.
// Its name has the reserved "__" prefix, so no client can create,
// publish to, fetch from or delete it, and topic lists leave it out.
const OffsetsTopic = "__sq_offsets"

// IsInternalTopic reports whether name is a topic of SQ's own
// (OffsetsTopic), which only the broker creates and writes.
func IsInternalTopic(name string) bool { return name == OffsetsTopic }

// ValidateStoredTopicName is ValidateTopicName for a topic that the
// metadata or a data directory already holds: the internal topics pass
// too, since the broker made them.
func ValidateStoredTopicName(name string) error {
	if IsInternalTopic(name) {
		return nil
	}
	return ValidateTopicName(name)
}
