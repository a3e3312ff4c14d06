package engine

// Committed offsets of consumer groups as the engine serves them: the
// validation of group and member ids, CommitOffsets, FetchOffsets and the
// clamp of committed offsets to the high watermark (docs/architecture.md
// §6). offsets.go holds the log they are stored in.

import (
	"maps"
	"unicode/utf8"

	"github.com/seedqueue/sq/api"
)

// GroupOffsetsErr returns why the group offsets log failed (a failed
// fsync of groups/offsets.log, or a compaction that could not replace the
// file durably), or nil while it works. Once it failed, offset commits,
// offset resets and group deletes fail with STORAGE_ERROR until the engine
// is reopened; the server's /readyz reports it.
func (e *Engine) GroupOffsetsErr() error { return e.offsets.err() }

// maxGroupNameLength bounds a group id, in bytes.
const maxGroupNameLength = 255

// MaxGroupIDBytes is the longest group id, in bytes.
const MaxGroupIDBytes = maxGroupNameLength

// ValidateGroupName checks a consumer group's id: 1 to 255 bytes of
// valid UTF-8. Errors: INVALID_REQUEST naming the problem.
func ValidateGroupName(group string) error { return validateGroup(group) }

// checkGroup validates group's id and checks that this engine serves it
// now (groupServing).
func (e *Engine) checkGroup(group string) error {
	if err := validateGroup(group); err != nil {
		return err
	}
	return e.groupServing(group)
}

func validateGroup(group string) error {
	if group == "" || len(group) > maxGroupNameLength {
		return api.NewError(api.CodeInvalidRequest, "group id must be 1 to %d bytes, got %d", maxGroupNameLength, len(group))
	}
	return validUTF8("group id", group)
}

// validUTF8 refuses, with INVALID_REQUEST, a string that is not valid
// UTF-8. Group ids, client ids and commit metadata are strings on both
// planes (proto3 string on gRPC, which must be valid UTF-8, and the JSON
// groups log): bytes that either could not carry are refused at the
// engine, the one place both planes pass, so what one plane accepts the
// other can read.
func validUTF8(what, s string) error {
	if !utf8.ValidString(s) {
		// At most 64 characters of it: the text may be large (commit
		// metadata) and comes back in the error.
		return api.NewError(api.CodeInvalidRequest, "%s %.64q is not valid UTF-8", what, s)
	}
	return nil
}

// MaxCommitMetadataBytes bounds the metadata stored with one committed
// offset, in bytes (Kafka's offset.metadata.max.bytes default, 4096): it
// is kept in memory and in the offsets log for every partition of every
// group, so it is a note, not a payload. A larger entry is refused with
// INVALID_REQUEST and nothing is stored for it.
const MaxCommitMetadataBytes = 4096

// MaxIDLength bounds, in bytes, a member id and a client id. JoinGroup
// hands out member ids far shorter; the bound keeps an error that names
// the id, and the client id every DescribeGroup shows, small, on both
// planes.
const MaxIDLength = 255

// validateID refuses, with INVALID_REQUEST, a member id or client id
// (what) over MaxIDLength bytes or not valid UTF-8, before any error can
// echo it.
func validateID(what, s string) error {
	if len(s) > MaxIDLength {
		return api.NewError(api.CodeInvalidRequest, "%s of %d bytes: want at most %d (a member id is the one JoinGroup returned)", what, len(s), MaxIDLength)
	}
	return validUTF8(what, s)
}

// CommitOffsets stores committed offsets for group (docs/architecture.md §6). A member
// commits with its memberID and the generation of its latest join or
// heartbeat answer; a stale generation or an unknown member gets
// FENCED_GENERATION and nothing is stored. A standalone consumer commits
// with generation -1 and an empty memberID, accepted only while the group
// has no members (FENCED_GENERATION otherwise). Each entry is checked on
// its own: metadata that is not valid UTF-8 (INVALID_REQUEST), an unknown
// topic or partition, an offset beyond the high watermark
// (OFFSET_OUT_OF_RANGE with the valid range; only for the partitions
// SetCommitCheck selects), or a partition the
// member does not hold (FENCED_GENERATION) sets that entry's Err and stores
// nothing for it; the valid entries are stored together, durably, before
// CommitOffsets returns. The returned slice has one entry per input entry.
func (e *Engine) CommitOffsets(group, memberID string, generation int32, offsets []OffsetCommit) ([]OffsetCommit, error) {
	if err := e.checkGroup(group); err != nil {
		return nil, err
	}
	if err := validateID("member id", memberID); err != nil {
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
		if out[i].TopicID, out[i].Err = e.checkCommit(o); out[i].Err != nil {
			continue
		}
		if m != nil && !m.held[tp{o.Topic, o.Partition}] {
			out[i].Err = api.NewError(api.CodeFencedGeneration, "%s/%d is not assigned to member %q of group %q", o.Topic, o.Partition, memberID, group)
			continue
		}
		rec.Offsets = append(rec.Offsets, offsetEntry{Topic: o.Topic, Partition: o.Partition, Offset: o.Offset, Metadata: o.Metadata, ID: out[i].TopicID})
	}
	if len(rec.Offsets) == 0 {
		return out, nil
	}
	stale, err := e.offsets.commitIDs(rec)
	if err != nil {
		return nil, err
	}
	for i := range out {
		if out[i].Err == nil && stale[topicRef{out[i].Topic, out[i].TopicID}] {
			out[i].Err = unknownTopicID(out[i].Topic, out[i].TopicID)
		}
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

// checkCommit checks that o's metadata is valid UTF-8 and that o names an
// existing partition (of the topic with o.TopicID when set) and an offset
// at most its high watermark, and returns the topic's id.
func (e *Engine) checkCommit(o OffsetCommit) (api.TopicID, error) {
	if len(o.Metadata) > MaxCommitMetadataBytes {
		return o.TopicID, api.NewError(api.CodeInvalidRequest, "commit metadata of %d bytes: want at most %d", len(o.Metadata), MaxCommitMetadataBytes)
	}
	if err := validUTF8("commit metadata", o.Metadata); err != nil {
		return o.TopicID, err
	}
	t, p, err := e.partitionID(o.Topic, o.TopicID, o.Partition)
	if err != nil {
		return o.TopicID, err
	}
	hw := p.hw.Load()
	start := uint64(0)
	if p.log != nil {
		start = p.log.LogStartOffset()
	}
	if o.Offset > hw && e.checksHighWatermark(o.Topic, o.Partition) {
		return o.TopicID, api.NewRangeError(api.CodeOffsetOutOfRange, start, hw,
			"commit of offset %d beyond the high watermark %d of %s/%d", o.Offset, hw, o.Topic, o.Partition)
	}
	return t.meta().ID, nil
}

// FetchOffsets returns the committed offsets of group in topic (every
// topic when topic is ""), sorted by topic and partition. Partitions
// without a committed offset are absent.
func (e *Engine) FetchOffsets(group, topic string) ([]OffsetCommit, error) {
	if err := e.checkGroup(group); err != nil {
		return nil, err
	}
	return e.offsets.get(group, topic), nil
}

// ClampOffsets lowers the committed offsets above the high watermark of
// the partitions for which leads(topic, partition) is true (every
// partition when leads is nil) to that high watermark, with a warning,
// and returns how many it lowered. It is what Open does unless
// Options.DeferOffsetClamp is set: a node of a cluster calls it once it
// has caught up with the metadata, for the partitions it leads, whose
// logs it holds; the offsets of the others are left as committed. The
// change is in memory, like Open's: the offsets log keeps the committed
// value until the group commits again. leads must not call back into
// the engine's group methods.
func (e *Engine) ClampOffsets(leads func(topic string, partition int) bool) int {
	// A copy of the topics, so that e.mu is not held with the store's
	// lock (the store takes e.mu under its own).
	e.mu.RLock()
	topics := maps.Clone(e.topics)
	e.mu.RUnlock()
	return e.clampOffsets(topics, leads)
}

// clampOffsets lowers committed offsets above the recovered high
// watermark to it, with a warning (docs/architecture.md §3.6): after a crash under a
// lax sync policy the log may end before a commit that referred to it.
// Only the partitions of topics that leads selects (nil: all) are
// clamped.
func (e *Engine) clampOffsets(topics map[string]*topic, leads func(topic string, partition int) bool) int {
	s := e.offsets
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for g, m := range s.groups {
		for k, c := range m {
			t, ok := topics[k.Topic]
			if !ok || k.Partition >= len(t.parts()) || t.parts()[k.Partition].log == nil {
				continue
			}
			if leads != nil && !leads(k.Topic, k.Partition) {
				continue
			}
			part := t.parts()[k.Partition]
			hw := part.hw.Load()
			if part.repl != nil {
				// A replica's high watermark restarts from its checkpoint
				// and catches up as followers fetch, below what was
				// committed (and accepted against the high watermark of
				// then, so held by the in-sync set); only an offset past
				// the log end refers to records this replica lacks.
				hw = part.log.NextOffset()
			}
			if c.Offset > hw {
				e.log.Warn("committed offset beyond the recovered high watermark; clamped",
					"group", g, "topic", k.Topic, "partition", k.Partition, "committed", c.Offset, "high_watermark", hw)
				m[k] = committed{Offset: hw, Metadata: c.Metadata, TopicID: c.TopicID}
				n++
			}
		}
	}
	return n
}
