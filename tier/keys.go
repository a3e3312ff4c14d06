package tier

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/seedqueue/sq/api"
)

// Object key suffixes of a segment's three files, as in the local data
// directory (docs/architecture.md §3.1).
const (
	LogSuffix       = ".log"
	IndexSuffix     = ".index"
	TimeIndexSuffix = ".timeindex"
)

// manifestPrefix and manifestSuffix frame a manifest's version in its key.
const (
	manifestPrefix = "manifest-"
	manifestSuffix = ".json"
)

// offsetDigits is the width of zero-padded offsets and manifest versions
// in keys: 20 digits hold any u64, so keys sort by number.
const offsetDigits = 20

// Partition names one partition of one topic in the store. Its objects
// live under Prefix: "<topic>/<topic-id>/<partition>/". The topic id
// (KIP-516) keeps a topic deleted and created again under the same name
// apart from the old one's objects.
type Partition struct {
	// Topic is the topic's name ([a-zA-Z0-9._-], as engine allows).
	Topic string
	// TopicID is the topic's id; it must not be zero.
	TopicID api.TopicID
	// Partition is the partition number, >= 0.
	Partition int
}

// Validate checks that p can name objects: a non-empty topic without "/"
// that is not "." or "..", a non-zero topic id and a partition >= 0.
func (p Partition) Validate() error {
	switch {
	case p.Topic == "" || p.Topic == "." || p.Topic == "..":
		return fmt.Errorf("tier: topic name %q cannot name objects", p.Topic)
	case strings.ContainsAny(p.Topic, "/\x00"):
		return fmt.Errorf("tier: topic name %q holds '/' or NUL", p.Topic)
	case p.TopicID.IsZero():
		return fmt.Errorf("tier: topic %s has no topic id", p.Topic)
	case p.Partition < 0:
		return fmt.Errorf("tier: topic %s: partition %d is negative", p.Topic, p.Partition)
	}
	return nil
}

// String returns "<topic>/<partition>".
func (p Partition) String() string { return p.Topic + "/" + strconv.Itoa(p.Partition) }

// Prefix returns the key prefix of every object of the partition:
// "<topic>/<topic-id>/<partition>/", the topic id as a lowercase
// 8-4-4-4-12 UUID, the partition in decimal without padding.
func (p Partition) Prefix() string {
	return p.Topic + "/" + p.TopicID.String() + "/" + strconv.Itoa(p.Partition) + "/"
}

// SegmentKeys are the object keys of one uploaded segment's three files.
type SegmentKeys struct {
	// Log is "<prefix><base offset, 20 digits>-<epoch>.log".
	Log string
	// Index is the same name ending in ".index" (the offset index).
	Index string
	// TimeIndex is the same name ending in ".timeindex".
	TimeIndex string
}

// SegmentKeys returns the keys of the segment with the given base offset
// uploaded by the leader of epoch: "<prefix><base offset zero-padded to 20
// digits>-<epoch in decimal>" followed by ".log", ".index" and
// ".timeindex". The epoch keeps two leaders' uploads of a segment with the
// same base offset (possibly different bytes after a truncation) apart.
func (p Partition) SegmentKeys(baseOffset uint64, epoch uint32) SegmentKeys {
	stem := fmt.Sprintf("%s%0*d-%d", p.Prefix(), offsetDigits, baseOffset, epoch)
	return SegmentKeys{Log: stem + LogSuffix, Index: stem + IndexSuffix, TimeIndex: stem + TimeIndexSuffix}
}

// ManifestKey returns the key of version of the partition's manifest:
// "<prefix>manifest-<version zero-padded to 20 digits>.json". Versions
// start at 1; each is written once and never overwritten.
func (p Partition) ManifestKey(version uint64) string {
	return fmt.Sprintf("%s%s%0*d%s", p.Prefix(), manifestPrefix, offsetDigits, version, manifestSuffix)
}

// ManifestListPrefix returns the prefix that lists every manifest of the
// partition and nothing else: "<prefix>manifest-".
func (p Partition) ManifestListPrefix() string { return p.Prefix() + manifestPrefix }

// ParseManifestKey returns the version of the manifest named key, or
// false if key is not "<p.Prefix()>manifest-<20 digits>.json".
func (p Partition) ParseManifestKey(key string) (uint64, bool) {
	rest, ok := strings.CutPrefix(key, p.ManifestListPrefix())
	if !ok {
		return 0, false
	}
	digits, ok := strings.CutSuffix(rest, manifestSuffix)
	if !ok || len(digits) != offsetDigits {
		return 0, false
	}
	for i := 0; i < len(digits); i++ {
		if digits[i] < '0' || digits[i] > '9' {
			return 0, false
		}
	}
	v, err := strconv.ParseUint(digits, 10, 64)
	if err != nil {
		return 0, false
	}
	return v, true
}
