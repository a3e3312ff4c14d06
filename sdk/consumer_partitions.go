package sdk

import (
	"errors"
	"slices"

	"github.com/seedqueue/sq/api"
)

// A consumer without a ConsumerGroup reads the partitions it is given
// (ConsumerConfig.Partitions, as Kafka's assign), each from its own start
// (StartOffsets, as Kafka's seek) and, when bounded, up to its own end
// (EndOffsets, as kcat -e), after which Poll returns ErrEndOffsetsReached.

// ErrEndOffsetsReached is returned by Consumer.Poll, with no records, once
// every partition the consumer reads has an end in ConsumerConfig.EndOffsets
// and has been read up to it: there is nothing more to read.
var ErrEndOffsetsReached = errors.New("sdk: every partition read up to its end offset")

// partBounds is a partition's entry in StartOffsets and EndOffsets, as its
// fetcher applies them.
type partBounds struct {
	// fromStartOffsets: the partition started at its StartOffsets entry,
	// which is kept even above the high watermark.
	fromStartOffsets bool
	hasEnd           bool
	end              uint64 // exclusive; meaningful with hasEnd
	// ended is set, under Consumer.mu, once the fetcher reached end.
	ended bool
}

// checkPartitions adds to ck the problems of Partitions, StartOffsets and
// EndOffsets: any of them with a ConsumerGroup, a partition listed twice,
// and a start or end for a partition that is not read.
func (c ConsumerConfig) checkPartitions(ck *configCheck) {
	if c.ConsumerGroup != "" {
		for _, f := range []struct {
			field string
			set   bool
		}{{"Partitions", len(c.Partitions) > 0}, {"StartOffsets", len(c.StartOffsets) > 0}, {"EndOffsets", len(c.EndOffsets) > 0}} {
			if f.set {
				ck.add(f.field, "is set with ConsumerGroup %q: a group member reads the partitions the group assigns it, "+
					"from the group's committed offsets; drop %s, or the ConsumerGroup", c.ConsumerGroup, f.field)
			}
		}
		return
	}
	listed := make(map[uint32]bool, len(c.Partitions))
	for _, p := range c.Partitions {
		if listed[p] {
			ck.add("Partitions", "lists partition %d twice: want each partition once", p)
		}
		listed[p] = true
	}
	if len(c.Partitions) == 0 {
		return // every partition is read
	}
	for _, f := range []struct {
		field string
		offs  map[uint32]uint64
	}{{"StartOffsets", c.StartOffsets}, {"EndOffsets", c.EndOffsets}} {
		for _, p := range sortedPartitions(f.offs) {
			if !listed[p] {
				ck.add(f.field, "names partition %d, which is not in Partitions %v: want only partitions the consumer reads", p, c.Partitions)
			}
		}
	}
}

// sortedPartitions returns the keys of offs in increasing order.
func sortedPartitions(offs map[uint32]uint64) []uint32 {
	out := make([]uint32, 0, len(offs))
	for p := range offs {
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}

// standalonePartitions returns the partitions a consumer without a group
// (or on a server without a group coordinator) reads: Partitions, else
// every one of the topic's n partitions. A partition beyond them, listed in Partitions, in
// StartOffsets or in EndOffsets, fails with api.ErrUnknownPartition.
func (c *Consumer) standalonePartitions(n uint32) ([]uint32, error) {
	named := slices.Clone(c.cfg.Partitions)
	named = append(named, sortedPartitions(c.cfg.StartOffsets)...)
	named = append(named, sortedPartitions(c.cfg.EndOffsets)...)
	for _, p := range named {
		if p >= n {
			return nil, api.NewError(api.CodeUnknownPartition, "topic %q has partitions 0-%d, not %d", c.cfg.Topic, n-1, p)
		}
	}
	if len(c.cfg.Partitions) > 0 {
		out := slices.Clone(c.cfg.Partitions)
		slices.Sort(out)
		return out, nil
	}
	all := make([]uint32, n)
	for p := range all {
		all[p] = uint32(p)
	}
	return all, nil
}

// reads reports whether a consumer without a group reads partition p.
func (c *Consumer) reads(p uint32) bool {
	if len(c.cfg.Partitions) == 0 {
		return true
	}
	return slices.Contains(c.cfg.Partitions, p)
}

// onBoundsTopic reports whether id is the topic StartOffsets and
// EndOffsets are offsets of: the first topic id the consumer read (a
// topic of the name deleted and created again has another); c.mu held.
func (c *Consumer) onBoundsTopic(id api.TopicID) bool {
	if c.boundsID.IsZero() {
		c.boundsID = id
	}
	return id == c.boundsID
}

// configuredStart returns partition p's StartOffsets entry while the
// consumer reads the topic it started on (id); c.mu held.
func (c *Consumer) configuredStart(p uint32, id api.TopicID) (uint64, bool) {
	if !c.onBoundsTopic(id) {
		return 0, false
	}
	off, ok := c.cfg.StartOffsets[p]
	return off, ok
}

// bound sets pf's start and end bounds from the configuration (empty
// with a ConsumerGroup, which Validate refuses them with). On a topic
// created again under the name the bounds are of the old topic: a bounded
// partition is then at its end at once (an end of 0). c.mu held.
func (c *Consumer) bound(pf *partFetcher) {
	end, hasEnd := c.cfg.EndOffsets[pf.partition]
	if !c.onBoundsTopic(pf.topicID) {
		pf.bounds = partBounds{hasEnd: hasEnd}
		return
	}
	_, pf.bounds.fromStartOffsets = c.cfg.StartOffsets[pf.partition]
	pf.bounds.end, pf.bounds.hasEnd = end, hasEnd
}

// reachedEnd reports whether pf's position reached its end offset; the
// first time, it marks pf ended and wakes Poll, which returns
// ErrEndOffsetsReached once every partition has ended.
func (c *Consumer) reachedEnd(pf *partFetcher) bool {
	if !pf.bounds.hasEnd || pf.pos < pf.bounds.end {
		return false
	}
	c.mu.Lock()
	if pf.ctx.Err() == nil {
		pf.bounds.ended = true
	}
	c.mu.Unlock()
	notify(c.ready)
	return true
}

// logEndsShort handles an empty fetch of pf that reported the high
// watermark hw. A bounded partition whose log ends at or below its
// position, short of its end offset, is at its end: all the log holds was
// read. That is an end set above the high watermark (not waited for, as
// kcat -e), or a log that lost records it had when the end was set (a
// server that restarted without having synced them), which is logged. It
// reports whether the partition ended; Position says where.
func (c *Consumer) logEndsShort(pf *partFetcher, hw uint64) bool {
	b := &pf.bounds
	if !b.hasEnd || hw > pf.pos || pf.pos >= b.end {
		return false
	}
	c.log.Info("sdk: the log ends below the partition's end offset; ending the partition there",
		"topic", c.cfg.Topic, "partition", pf.partition, "offset", pf.pos, "high_watermark", hw, "end_offset", b.end)
	b.end = pf.pos
	return true
}

// allEndedLocked reports whether every partition read has an end and has
// reached it, with nothing left to return; c.mu held.
func (c *Consumer) allEndedLocked() bool {
	if len(c.order) == 0 {
		return false
	}
	for _, p := range c.order {
		pf := c.parts[p]
		if !pf.bounds.ended || len(pf.buf) > 0 || pf.err != nil {
			return false
		}
	}
	return true
}

// trim drops the records at or past the end offset.
func (b partBounds) trim(msgs []Message) []Message {
	if !b.hasEnd {
		return msgs
	}
	for i, m := range msgs {
		if m.Offset >= b.end {
			return msgs[:i]
		}
	}
	return msgs
}

// waitBeyond reports whether err says position pos is past the high
// watermark of a partition started at its StartOffsets entry: the position
// is kept and the read retried (after the fetch loop's backoff) until the
// log reaches it. The range of an empty partition may come without
// HasRange (as [0, 0]), so the end is used either way.
func (b partBounds) waitBeyond(err error, pos uint64) bool {
	if !b.fromStartOffsets {
		return false
	}
	var e *api.Error
	return errors.As(err, &e) && e.Code == api.CodeOffsetOutOfRange && pos > e.RangeEnd
}
