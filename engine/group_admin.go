package engine

import (
	"errors"
	"sort"

	"github.com/seedqueue/sq/api"
)

// ResetMode selects the offset ResetOffsets sets.
type ResetMode int

// Reset modes (values match api.ResetMode).
const (
	ResetEarliest  ResetMode = 0 // the log start offset
	ResetLatest    ResetMode = 1 // the high watermark
	ResetOffset    ResetMode = 2 // the given offset, within [log start, high watermark]
	ResetTimestamp ResetMode = 3 // not supported in this build
)

// state returns the group's state; g.mu held.
func (g *group) state() string {
	if len(g.members) == 0 {
		return GroupEmpty
	}
	for _, m := range g.members {
		if !sameSet(m.target, m.held) {
			return GroupRebalancing
		}
	}
	return GroupStable
}

func (g *group) summary() GroupSummary {
	return GroupSummary{Group: g.name, State: g.state(), Members: len(g.members), Generation: g.generation}
}

// ListGroups returns every group that has members or committed offsets,
// sorted by name. Each summary is the one DescribeGroup reports.
func (e *Engine) ListGroups() []GroupSummary {
	names := map[string]bool{}
	for _, g := range e.coord().snapshot() {
		names[g.name] = true
	}
	e.offsets.mu.Lock()
	for name := range e.offsets.groups {
		names[name] = true
	}
	e.offsets.mu.Unlock()
	out := make([]GroupSummary, 0, len(names))
	for name := range names {
		if s, ok := e.groupSummary(name); ok {
			out = append(out, s)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Group < out[j].Group })
	return out
}

// groupSummary is the one source of a group's summary for ListGroups and
// DescribeGroup: the coordinator's state and generation (kept after the
// last member leaves), or empty with generation 0 for a group known only
// by its committed offsets. ok is false when the group has neither members
// nor committed offsets (it does not exist).
func (e *Engine) groupSummary(name string) (s GroupSummary, ok bool) {
	s = GroupSummary{Group: name, State: GroupEmpty}
	members := false
	if g := e.coord().get(name, false); g != nil {
		g.mu.Lock()
		if !g.deleted {
			s, members = g.summary(), len(g.members) > 0
		}
		g.mu.Unlock()
	}
	return s, members || e.hasOffsets(name)
}

// hasOffsets reports whether the group has committed offsets.
func (e *Engine) hasOffsets(name string) bool {
	e.offsets.mu.Lock()
	defer e.offsets.mu.Unlock()
	return len(e.offsets.groups[name]) > 0
}

// errUnknownGroup is the UNKNOWN_GROUP error of a group with no members
// and no committed offsets.
func errUnknownGroup(name string) error {
	return api.NewError(api.CodeUnknownGroup, "group %q has no members and no committed offsets", name)
}

// errGroupHasMembers refuses an admin change while the group has members.
// INVALID_REQUEST (not retriable): the caller must stop the members first.
func errGroupHasMembers(name string, n int, what string) error {
	return api.NewError(api.CodeInvalidRequest, "group %q has %d active members; stop them first (%s only while it has none)", name, n, what)
}

// DescribeGroup returns the group's members with the partitions each holds
// and, for every partition of the topics its members subscribe to or it
// has offsets for, the committed offset, log end, high watermark and lag.
// Errors: INVALID_REQUEST for a bad group id; UNKNOWN_GROUP for a group
// with no members and no committed offsets.
func (e *Engine) DescribeGroup(name string) (GroupDescription, error) {
	if err := e.checkGroup(name); err != nil {
		return GroupDescription{}, err
	}
	sum, ok := e.groupSummary(name)
	if !ok {
		return GroupDescription{}, errUnknownGroup(name)
	}
	d := GroupDescription{Summary: sum}
	holder := map[tp]string{}
	topics := map[string]bool{}
	if g := e.coord().get(name, false); g != nil {
		g.mu.Lock()
		for _, m := range g.members {
			info := GroupMemberInfo{MemberID: m.id, ClientID: m.clientID, Assignment: GroupAssignment{}}
			for k := range m.held {
				info.Assignment[k.Topic] = append(info.Assignment[k.Topic], k.Partition)
				holder[k] = m.id
			}
			for _, ps := range info.Assignment {
				sort.Ints(ps)
			}
			for _, t := range m.topics {
				topics[t] = true
			}
			d.Members = append(d.Members, info)
		}
		g.mu.Unlock()
	}
	sort.Slice(d.Members, func(i, j int) bool { return d.Members[i].MemberID < d.Members[j].MemberID })
	committedOf := map[tp]uint64{}
	for _, o := range e.offsets.get(name, "") {
		committedOf[tp{o.Topic, o.Partition}] = o.Offset
		topics[o.Topic] = true
	}
	names := make([]string, 0, len(topics))
	for t := range topics {
		names = append(names, t)
	}
	sort.Strings(names)
	for _, t := range names {
		ti, err := e.groupTopicStats(t)
		if err != nil {
			// The topic's statistics cannot be read now (in a cluster,
			// its leaders or the metadata may be out of reach): its
			// committed offsets and owned partitions are still the
			// group's, listed with their statistics unknown.
			d.Offsets = append(d.Offsets, unknownStats(t, committedOf, holder)...)
			continue
		}
		for _, pi := range ti.Partitions {
			k := tp{t, pi.Partition}
			l := GroupPartitionLag{Topic: t, TopicID: ti.ID, Partition: pi.Partition, CommittedOffset: -1,
				LogEndOffset: pi.LogEndOffset, HighWatermark: pi.HighWatermark, MemberID: holder[k]}
			c, ok := committedOf[k]
			if ok {
				l.CommittedOffset = int64(c)
			}
			l.Lag = ConsumerLag(c, ok, pi.LogStartOffset, pi.HighWatermark)
			if StatsUnavailable(pi.Err) {
				l.Lag = LagUnknown
			}
			d.Offsets = append(d.Offsets, l)
		}
	}
	return d, nil
}

// unknownStats lists topic's partitions that the group committed or
// that a member owns, sorted, with CommittedOffset (-1: none) and owner
// but unknown statistics: Lag LagUnknown, LogEndOffset and HighWatermark
// 0 (the CLI prints them as unknown with the lag).
func unknownStats(topic string, committedOf map[tp]uint64, holder map[tp]string) []GroupPartitionLag {
	parts := map[int]bool{}
	for k := range committedOf {
		if k.Topic == topic {
			parts[k.Partition] = true
		}
	}
	for k := range holder {
		if k.Topic == topic {
			parts[k.Partition] = true
		}
	}
	out := make([]GroupPartitionLag, 0, len(parts))
	for p := range parts {
		k := tp{topic, p}
		l := GroupPartitionLag{Topic: topic, Partition: p, CommittedOffset: -1, Lag: LagUnknown, MemberID: holder[k]}
		if c, ok := committedOf[k]; ok {
			l.CommittedOffset = int64(c)
		}
		out = append(out, l)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Partition < out[j].Partition })
	return out
}

// LagUnknown is the Lag of a GroupPartitionLag whose partition's high
// watermark could not be read (its leader is not available): the CLI
// prints it as "-".
const LagUnknown = -1

// StatsUnavailable reports whether a partition's Err (of a TopicInfo from
// the topic statistics, SetTopicStats) says that its statistics could not
// be read: LEADER_NOT_AVAILABLE. Its offsets are then zeros, not values.
func StatsUnavailable(err error) bool {
	return err != nil && errors.Is(err, api.ErrLeaderNotAvailable)
}

// SetTopicStats sets where DescribeGroup and ResetOffsets read a topic's
// partition statistics (log start, high watermark, log end): stats(topic)
// returns the topic as DescribeTopic does, a partition whose statistics
// cannot be read marked with a LEADER_NOT_AVAILABLE Err. In a cluster the
// coordinator of a group holds the logs of the partitions it leads only,
// so the cluster layer passes a describe that asks each partition's
// leader (docs/cluster.md). nil, the default, is this engine's own
// DescribeTopic. stats must be safe for concurrent use and must not call
// the engine's group methods.
func (e *Engine) SetTopicStats(stats func(topic string) (TopicInfo, error)) {
	if stats == nil {
		e.topicStats.Store(nil)
		return
	}
	e.topicStats.Store(&stats)
}

// groupTopicStats describes topic for the group methods (SetTopicStats).
func (e *Engine) groupTopicStats(topic string) (TopicInfo, error) {
	if f := e.topicStats.Load(); f != nil {
		return (*f)(topic)
	}
	return e.DescribeTopic(topic)
}

// ConsumerLag is the lag of a group in one partition, in records: the
// records it still has to read, HW - max(committed, log start). A committed
// offset below the log start counts only the records still stored, since a
// consumer resuming there moves to the log start (retention removed the
// rest). Without a committed offset (hasCommitted false) the lag is
// HW - log start: what a consumer starting at the earliest stored record
// (the default start, like Kafka's auto.offset.reset=earliest) has to read.
// It is 0 when that position is at or beyond the high watermark.
// DescribeGroup, the gRPC Groups service, the CLI and the
// sq_consumer_group_lag_records metric all use it.
func ConsumerLag(committed uint64, hasCommitted bool, logStart, highWatermark uint64) int64 {
	from := logStart
	if hasCommitted {
		from = max(committed, logStart)
	}
	if highWatermark <= from {
		return 0
	}
	return int64(highWatermark - from)
}

// ResetOffsets sets the group's committed offset of every partition of
// topic to the log start (ResetEarliest), the high watermark
// (ResetLatest) or value (ResetOffset, which must lie within every
// partition's [log start, high watermark]). Refused with
// INVALID_REQUEST while the group has members. Errors also:
// UNKNOWN_TOPIC, OFFSET_OUT_OF_RANGE (with the range), INVALID_REQUEST,
// and LEADER_NOT_AVAILABLE (retriable; nothing is reset) when the log
// start and high watermark of a partition cannot be read (SetTopicStats).
func (e *Engine) ResetOffsets(name, topicName string, mode ResetMode, value int64) ([]OffsetCommit, error) {
	if err := e.checkGroup(name); err != nil {
		return nil, err
	}
	ti, err := e.groupTopicStats(topicName)
	if err != nil {
		return nil, err
	}
	for _, pi := range ti.Partitions {
		if StatsUnavailable(pi.Err) {
			return nil, api.WrapError(api.CodeLeaderNotAvailable, pi.Err,
				"reset of group %q on %s: the log start and high watermark of partition %d are not available", name, topicName, pi.Partition)
		}
	}
	g := e.coord().lock(name, true)
	defer g.mu.Unlock()
	if len(g.members) > 0 {
		return nil, errGroupHasMembers(name, len(g.members), "offsets can be reset")
	}
	rec := offsetRecord{Group: name, Generation: -1}
	out := make([]OffsetCommit, 0, len(ti.Partitions))
	for _, pi := range ti.Partitions {
		var off uint64
		switch mode {
		case ResetEarliest:
			off = pi.LogStartOffset
		case ResetLatest:
			off = pi.HighWatermark
		case ResetOffset:
			if value < 0 || uint64(value) < pi.LogStartOffset || uint64(value) > pi.HighWatermark {
				return nil, api.NewRangeError(api.CodeOffsetOutOfRange, pi.LogStartOffset, pi.HighWatermark,
					"offset %d outside [%d, %d] of %s/%d", value, pi.LogStartOffset, pi.HighWatermark, topicName, pi.Partition)
			}
			off = uint64(value)
		default:
			return nil, api.NewError(api.CodeInvalidRequest, "reset mode %d not supported", mode)
		}
		rec.Offsets = append(rec.Offsets, offsetEntry{Topic: topicName, Partition: pi.Partition, Offset: off, ID: ti.ID})
		out = append(out, OffsetCommit{Topic: topicName, TopicID: ti.ID, Partition: pi.Partition, Offset: off})
	}
	if len(rec.Offsets) > 0 {
		stale, err := e.offsets.commitIDs(rec)
		if err != nil {
			return nil, err
		}
		if stale[topicRef{topicName, ti.ID}] {
			return nil, unknownTopicID(topicName, ti.ID)
		}
	}
	return out, nil
}

// DeleteGroup removes the group and its committed offsets, durably.
// Refused with INVALID_REQUEST while the group has members; UNKNOWN_GROUP
// for a group with no members and no committed offsets.
func (e *Engine) DeleteGroup(name string) error {
	if err := e.checkGroup(name); err != nil {
		return err
	}
	c := e.coord()
	g := c.lock(name, true)
	defer g.mu.Unlock()
	if len(g.members) > 0 {
		return errGroupHasMembers(name, len(g.members), "it can be deleted")
	}
	if !e.hasOffsets(name) {
		c.mu.Lock()
		if c.groups[name] == g {
			delete(c.groups, name)
		}
		c.mu.Unlock()
		g.deleted = true
		return errUnknownGroup(name)
	}
	if err := e.offsets.commit(offsetRecord{Group: name, Deleted: true}); err != nil {
		return err
	}
	g.deleted = true
	c.mu.Lock()
	if c.groups[name] == g {
		delete(c.groups, name)
	}
	c.mu.Unlock()
	return nil
}
