package sdk

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"time"

	"github.com/seedqueue/sq/api"
)

// readLoop reads one partition until its fetcher is stopped: by push
// subscription unless UseFetch is set or the server does not serve it.
func (c *Consumer) readLoop(pf *partFetcher) {
	// A bounded partition is fetched: a subscription would push records
	// past its end.
	if !c.cfg.UseFetch && !pf.bounds.hasEnd && c.pushLoop(pf) {
		return
	}
	c.fetchLoop(pf)
}

// waitDrained waits until Poll has taken pf's records and error. It
// returns false when the fetcher is stopped.
func (c *Consumer) waitDrained(pf *partFetcher) bool {
	for {
		c.mu.Lock()
		busy := len(pf.buf) > 0 || pf.err != nil
		c.mu.Unlock()
		if !busy {
			return true
		}
		select {
		case <-pf.wake:
		case <-pf.ctx.Done():
			return false
		}
	}
}

// post hands fetched records to Poll; false when the fetcher was stopped
// meanwhile (the records are dropped).
func (c *Consumer) post(pf *partFetcher, msgs []Message) bool {
	c.mu.Lock()
	if pf.ctx.Err() != nil {
		c.mu.Unlock()
		return false
	}
	pf.buf = msgs
	c.mu.Unlock()
	notify(c.ready)
	return true
}

// pushLoop reads pf through push subscriptions, granting back the credit
// of each push once Poll has taken its records. It returns false when the
// server does not serve subscriptions (the caller falls back to fetch),
// true when the fetcher was stopped.
func (c *Consumer) pushLoop(pf *partFetcher) bool {
	failures := 0
	for pf.ctx.Err() == nil {
		sub, err := c.core.client(pf.ctx, c.cfg.Topic, pf.partition).SubscribeID(pf.ctx, c.cfg.Topic, pf.topicID, pf.partition, pf.pos, c.cfg.MaxBytes)
		pushed := false
		if err == nil {
			pushed, err = c.consumeSubscription(pf, sub)
			closeSub(c, sub)
		}
		if pf.ctx.Err() != nil {
			return true
		}
		if errors.Is(err, api.ErrInvalidRequest) || errors.Is(err, ErrUnexpectedResponse) {
			c.log.Info("sdk: server does not push; reading with fetch", "topic", c.cfg.Topic, "partition", pf.partition)
			return false
		}
		if errors.Is(err, ErrSubscriptionEnded) && pushed {
			failures = 0
			continue
		}
		failures++
		// A subscription the server ended before it pushed anything is
		// opened again after the backoff, as after a failure, so that a
		// server ending every subscription at once cannot make this
		// loop spin.
		if errors.Is(err, ErrSubscriptionEnded) || !c.fetchFailed(pf, err) {
			if sleep(pf.ctx, backoff(failures, c.client.cfg.ReconnectBackoff, c.client.cfg.ReconnectBackoffMax)) != nil {
				return true
			}
		}
	}
	return true
}

func closeSub(c *Consumer, sub *Subscription) {
	if c.ctx.Err() != nil {
		return // Close ends the connection, and the subscriptions with it
	}
	// Unsubscribe on a live connection so the server stops pushing; the
	// fetcher's context may be cancelled already. The wait for an
	// in-flight slot ends with Close, which waits for this goroutine
	// within its CloseTimeout.
	ctx, cancel := context.WithTimeout(c.ctx, c.client.cfg.RequestTimeout)
	defer cancel()
	_ = sub.Close(ctx)
}

// consumeSubscription hands the pushes of sub to Poll until an error. It
// reports whether any push with records arrived.
func (c *Consumer) consumeSubscription(pf *partFetcher, sub *Subscription) (bool, error) {
	pushed := false
	for {
		res, err := sub.Next(pf.ctx)
		if err != nil {
			return pushed, err
		}
		pushed = true
		pf.pos = res.NextOffset
		if len(res.Messages) > 0 {
			if !c.post(pf, res.Messages) || !c.waitDrained(pf) {
				return pushed, pf.ctx.Err()
			}
		}
		if err := sub.Grant(pf.ctx, res.Bytes); err != nil {
			return pushed, err
		}
	}
}

// fetchLoop fetches one partition until its fetcher is stopped, keeping at
// most one fetched response buffered.
func (c *Consumer) fetchLoop(pf *partFetcher) {
	failures := 0
	for {
		if !c.waitDrained(pf) || c.reachedEnd(pf) {
			return
		}
		started := time.Now()
		res, err := c.core.client(pf.ctx, c.cfg.Topic, pf.partition).Fetch(pf.ctx, FetchRequest{
			Topic:     c.cfg.Topic,
			TopicID:   pf.topicID,
			Partition: pf.partition,
			Offset:    pf.pos,
			MaxBytes:  c.cfg.MaxBytes,
			MaxWait:   c.cfg.MaxWait,
		})
		if pf.ctx.Err() != nil {
			return
		}
		if err != nil {
			failures++
			if !c.fetchFailed(pf, err) {
				d := backoff(failures, c.client.cfg.ReconnectBackoff, c.client.cfg.ReconnectBackoffMax)
				if sleep(pf.ctx, d) != nil {
					return
				}
			}
			continue
		}
		failures = 0
		pf.pos = res.NextOffset
		if len(res.Messages) == 0 {
			if c.logEndsShort(pf, res.HighWatermark) {
				continue // at its end now
			}
			// A server that does not hold an empty fetch for MaxWait
			// must not make this loop spin.
			if time.Since(started) < c.cfg.MaxWait/4 && sleep(pf.ctx, min(c.cfg.MaxWait/4, 100*time.Millisecond)) != nil {
				return
			}
			continue
		}
		if !c.post(pf, pf.bounds.trim(res.Messages)) {
			return
		}
	}
}

// fetchFailed handles a failed read. It returns true when the read can be
// retried at once (the position was moved), false to back off first.
func (c *Consumer) fetchFailed(pf *partFetcher, err error) bool {
	c.core.notePartitionError(c.cfg.Topic, pf.partition, err)
	if pf.bounds.waitBeyond(err, pf.pos) {
		return false // kept: read once the log reaches it
	}
	if start, end, ok := c.validRange(err, pf.partition); ok && c.reposition(pf, start, end) {
		return true
	}
	if errors.Is(err, api.ErrUnknownTopicID) {
		// The topic was deleted, maybe created again: restartTopic stops
		// this fetcher and starts over on the topic now under the name.
		c.log.Info("sdk: topic id no longer current", "topic", c.cfg.Topic, "partition", pf.partition, "topic_id", pf.topicID, "err", err)
		c.topicGone()
		return false
	}
	if IsRetriable(err) {
		c.log.Warn("sdk: fetch failed, retrying", "topic", c.cfg.Topic, "partition", pf.partition, "offset", pf.pos, "err", err)
		if c.cfg.OnFetchRetry != nil {
			c.cfg.OnFetchRetry(pf.partition, err)
		}
		return false
	}
	c.log.Error("sdk: fetch failed", "topic", c.cfg.Topic, "partition", pf.partition, "offset", pf.pos, "err", err)
	c.mu.Lock()
	if pf.ctx.Err() == nil {
		pf.err = err
	}
	c.mu.Unlock()
	notify(c.ready)
	return false
}

// reposition moves an out-of-range position into [start, end] and reports
// whether it moved. Nothing is buffered for the partition (reads happen
// only with an empty buffer), so the consumed position moves with it.
func (c *Consumer) reposition(pf *partFetcher, start, end uint64) bool {
	old := pf.pos
	switch {
	case old < start:
		pf.pos = start
		if c.cfg.OnRecordsLost != nil {
			c.cfg.OnRecordsLost(pf.partition, old, start)
		} else {
			logLost(c.lossLog, c.cfg.Topic, pf.partition, old, start)
		}
	case old > end:
		pf.pos = end
		if old != math.MaxUint64 {
			c.log.Warn("sdk: offset beyond the high watermark: moving to the high watermark",
				"topic", c.cfg.Topic, "partition", pf.partition, "offset", old, "high_watermark", end)
		}
	default:
		return false
	}
	c.mu.Lock()
	if pf.ctx.Err() == nil {
		c.consumed[pf.partition] = pf.pos
		if from, ok := c.from[pf.partition]; ok && from > pf.pos {
			c.from[pf.partition] = pf.pos // "latest" resolved
		}
	}
	c.mu.Unlock()
	return true
}

// lossLogger is where a consumer reports records lost to retention: l, or
// slog.Default() when l is nil, so the loss is never silent.
func lossLogger(l *slog.Logger) *slog.Logger {
	if l == nil {
		return slog.Default()
	}
	return l
}

// logLost warns that a position of topic/partition below the log start
// moved up to it: the offsets [from, to) were removed by retention before
// they were read (the policy of Kafka's auto.offset.reset=earliest).
func logLost(l *slog.Logger, topic string, partition uint32, from, to uint64) {
	l.Warn("sdk: offset below the log start: records lost to retention are skipped",
		"topic", topic, "partition", partition, "offset", from, "log_start", to, "skipped", to-from)
}
