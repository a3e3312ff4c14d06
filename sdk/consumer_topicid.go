package sdk

import (
	"context"
	"errors"
	"sort"
	"time"

	"github.com/seedqueue/sq/api"
)

// Topic ids (KIP-516). The consumer reads, subscribes and commits with the
// id of the topic each position belongs to. When the server answers
// UNKNOWN_TOPIC_ID the topic was deleted, maybe created again under the
// same name: the consumer re-reads the topic's metadata and starts over on
// the topic now under the name as on a new topic. Positions of the old
// topic (and records buffered from it) are dropped, and each partition
// starts at the group's committed offset of the new topic when there is
// one, else at StartFrom. Group members do this on the heartbeat
// goroutine, which applies assignment changes; a standalone consumer on
// restartLoop, which also reads the topic's metadata every MetadataMaxAge
// and starts reading partitions added to the topic.

// topicGone asks for restartTopic.
func (c *Consumer) topicGone() {
	c.core.invalidate(c.cfg.Topic)
	c.mu.Lock()
	c.restartPending = true
	c.mu.Unlock()
	notify(c.restartCh)
}

// restartDue reports whether restartTopic is pending.
func (c *Consumer) restartDue() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.restartPending
}

// restartLoop runs restartTopic for a standalone consumer when asked, or
// when the topic's metadata, read every MetadataMaxAge, changed, retrying
// with backoff until it succeeds, until Close.
func (c *Consumer) restartLoop() {
	tick := time.NewTicker(c.cfg.MetadataMaxAge)
	defer tick.Stop()
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-c.restartCh:
		case <-tick.C:
			if !c.metadataChanged() {
				continue
			}
			c.mu.Lock()
			c.restartPending = true
			c.mu.Unlock()
		}
		for failures := 1; c.restartDue() && c.ctx.Err() == nil; failures++ {
			if c.restartTopic() == nil {
				break
			}
			if sleep(c.ctx, backoff(failures, c.client.cfg.ReconnectBackoff, c.client.cfg.ReconnectBackoffMax)) != nil {
				return
			}
		}
	}
}

// metadataChanged reads the topic's metadata (from the core's cache when
// younger than MetadataMaxAge) and reports whether its id differs from the
// one the consumer reads, the topic is gone, or (without a group) the
// topic has partitions the consumer should read and does not (or the
// reverse).
func (c *Consumer) metadataChanged() bool {
	ctx, cancel := context.WithTimeout(c.ctx, c.client.cfg.RequestTimeout)
	defer cancel()
	tm, err := c.core.topic(ctx, c.cfg.Topic)
	if err != nil {
		return errors.Is(err, api.ErrUnknownTopic)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.group.left {
		return false
	}
	if tm.id != c.topicID {
		return true
	}
	if c.group.memberID != "" {
		return false // the coordinator assigns partitions added to the topic
	}
	want := 0
	for p := range tm.partitions {
		if c.reads(p) {
			want++
		}
	}
	return want != len(c.parts)
}

// restartTopic reads the topic's metadata and starts over every partition whose
// position belongs to another topic id. A standalone consumer also starts
// the partitions the new topic has beyond the old one and stops those it
// lacks; a group member keeps its assignment (the coordinator moves
// partitions at the next heartbeat if the count changed). While the topic
// does not exist, Poll returns api.ErrUnknownTopic and the restart is
// retried.
func (c *Consumer) restartTopic() error {
	ctx, cancel := context.WithTimeout(c.ctx, c.client.cfg.RequestTimeout)
	defer cancel()
	tm, err := c.core.refresh(ctx, c.cfg.Topic)
	if err != nil {
		if c.ctx.Err() != nil {
			return err
		}
		c.log.Warn("sdk: topic id no longer current and the topic cannot be described; retrying", "topic", c.cfg.Topic, "err", err)
		if errors.Is(err, api.ErrUnknownTopic) {
			c.mu.Lock()
			c.topicErr = err
			c.mu.Unlock()
			notify(c.ready)
		}
		return err
	}
	c.mu.Lock()
	c.restartPending = false
	c.topicErr = nil // the topic exists again
	start, dones, dropped, old := c.dropStaleLocked(tm)
	c.mu.Unlock()
	for _, d := range dones {
		<-d
	}
	if len(start) == 0 && len(dropped) == 0 {
		return nil
	}
	if len(dropped) > 0 {
		c.log.Info("sdk: dropped the positions of a deleted topic", "topic", c.cfg.Topic, "old_topic_id", old,
			"positions", dropped)
	} else {
		c.log.Info("sdk: reading the partitions added to the topic", "topic", c.cfg.Topic, "partitions", start)
	}
	// assign logs the start-over with both ids.
	if err := c.assign(ctx, start, TopicInfo{}); err != nil {
		c.log.Warn("sdk: starting to read the topic's partitions failed; retrying", "topic", c.cfg.Topic, "err", err)
		c.topicGone()
		return err
	}
	return nil
}

// dropStaleLocked stops the fetchers and forgets the positions of every
// partition whose position is not of topic tm, and returns the partitions
// to start again, the fetchers to wait for, the positions dropped and the
// old id; c.mu held.
func (c *Consumer) dropStaleLocked(tm topicMeta) (start []uint32, dones []chan struct{}, dropped map[uint32]uint64, old api.TopicID) {
	dropped = map[uint32]uint64{}
	stop := func(p uint32) {
		if d := c.stopFetcher(p); d != nil {
			dones = append(dones, d)
		}
		if pos, ok := c.consumed[p]; ok {
			dropped[p] = pos
		}
		delete(c.consumed, p)
		delete(c.committed, p)
		delete(c.returned, p)
		delete(c.lost, p)
		delete(c.lostID, p)
		delete(c.posID, p)
	}
	for p, id := range c.posID {
		if id == tm.id {
			continue
		}
		old = id
		stop(p)
		// A revoked partition stays revoked: Poll releases it, with
		// nothing to commit.
		if !c.revoking[p] && p < tm.partitions {
			start = append(start, p)
		}
	}
	if c.group.memberID == "" && !c.group.left {
		for p := range c.parts {
			if p >= tm.partitions {
				stop(p)
			}
		}
		for p := range tm.partitions {
			if c.parts[p] == nil && !contains(start, p) && c.reads(p) {
				start = append(start, p)
			}
		}
	}
	if len(c.lost) == 0 {
		c.lostErr = nil
	}
	sort.Slice(start, func(i, j int) bool { return start[i] < start[j] })
	return start, dones, dropped, old
}

func contains(ps []uint32, p uint32) bool {
	for _, q := range ps {
		if q == p {
			return true
		}
	}
	return false
}
