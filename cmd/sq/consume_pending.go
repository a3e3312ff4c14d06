package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/seedqueue/sq/sdk"
)

// Partitions that `sq consume` cannot describe yet: in a cluster, a
// partition whose leader the node sq asks cannot reach (or one that lags
// behind in the metadata log) is described with a retriable error
// (LEADER_NOT_AVAILABLE) while the others are served. sq warns once per
// partition and describes it again every pendingRetry: with --follow it
// reads the partition once it can; without, it waits at most pendingWait
// after the start for it, then fails naming it.
const (
	// pendingRetry is the pause between describes of partitions that
	// could not be described.
	pendingRetry = 500 * time.Millisecond
	// pendingWait bounds the wait, without --follow, for a partition that
	// could not be described, from the start of the run.
	pendingWait = 30 * time.Second
)

// addPending notes partition p, whose describe failed with the retriable
// error err: said once on stderr, described again later.
func (s *consumeSession) addPending(p uint32, err error) {
	what := "waiting up to " + pendingWait.String() + " for it"
	if s.f.follow {
		what = "it is read once it can be"
	}
	fmt.Fprintf(s.stderr, "sq: WARN: partition %d of %s cannot be described yet (%v); retrying, %s\n", p, s.f.topic, err, what)
	if s.pendingErr == nil {
		s.pendingErr = map[uint32]error{}
	}
	s.pending = append(s.pending, p)
	s.pendingErr[p] = err
}

// describePending describes the topic again and returns the pending
// partitions now described without error. It does not change s, so it
// may run while a read does.
func (s *consumeSession) describePending(ctx context.Context, pending []uint32) (map[uint32]sdk.PartitionInfo, map[uint32]error, error) {
	info, err := s.r.Client().DescribeTopic(ctx, s.f.topic)
	if err != nil {
		return nil, nil, err
	}
	ready, errs := map[uint32]sdk.PartitionInfo{}, map[uint32]error{}
	for _, pi := range info.PartitionInfos {
		if !slices.Contains(pending, pi.Partition) {
			continue
		}
		if pi.Err != nil {
			errs[pi.Partition] = pi.Err
			continue
		}
		ready[pi.Partition] = pi
	}
	return ready, errs, nil
}

// admit starts reading the pending partitions of ready: each gets its
// end (the high watermark now) and its start position, and joins parts.
func (s *consumeSession) admit(ctx context.Context, ready map[uint32]sdk.PartitionInfo) error {
	var left []uint32
	for _, p := range s.pending {
		pi, ok := ready[p]
		if !ok {
			left = append(left, p)
			continue
		}
		start, err := s.startOffset(ctx, p, pi)
		if err != nil {
			return err
		}
		s.end[p], s.pos[p] = pi.HighWatermark, start
		s.parts = append(s.parts, p)
		delete(s.pendingErr, p)
		fmt.Fprintf(s.stderr, "sq: partition %d of %s can be read now\n", p, s.f.topic)
	}
	slices.Sort(s.parts)
	s.pending = left
	return nil
}

// readPending reads, without --follow, the partitions that could not be
// described at start, each up to its high watermark once it can be
// described, waiting until pendingWait after since for them; then the
// ones left fail the run, named with their last error.
func (s *consumeSession) readPending(ctx context.Context, since time.Time) error {
	for len(s.pending) > 0 && !s.done() {
		ready, errs, err := s.describePending(ctx, s.pending)
		if err != nil && ctx.Err() != nil {
			return err
		}
		for p, e := range errs {
			s.pendingErr[p] = e
		}
		if err := s.admit(ctx, ready); err != nil {
			return err
		}
		for _, p := range slices.Sorted(maps.Keys(ready)) {
			if s.pos[p] < s.end[p] && !s.done() {
				if err := s.read(ctx, []uint32{p}, true); err != nil {
					return err
				}
			}
		}
		if len(s.pending) == 0 {
			return nil
		}
		if time.Since(since) >= pendingWait {
			var errs []error
			for _, p := range s.pending {
				errs = append(errs, fmt.Errorf("partition %d: %w", p, s.pendingErr[p]))
			}
			return fmt.Errorf("%d partition%s of %s could not be described within %v: %w", len(s.pending), plural(len(s.pending)), s.f.topic, pendingWait, errors.Join(errs...))
		}
		if err := sleepCtx(ctx, pendingRetry); err != nil {
			return err
		}
	}
	return nil
}

// followAll reads every partition with --follow: the ones described at
// start at once, and each pending one from when it can be described (the
// read stops and starts again with it, from the positions printed).
func (s *consumeSession) followAll(ctx context.Context) error {
	for {
		if len(s.pending) == 0 {
			if len(s.parts) == 0 {
				<-ctx.Done()
				return ctx.Err()
			}
			return s.read(ctx, s.parts, false)
		}
		rctx, cancel := context.WithCancel(ctx)
		found := make(chan map[uint32]sdk.PartitionInfo, 1)
		pending := slices.Clone(s.pending)
		go func() {
			defer cancel()
			found <- s.watchPending(rctx, pending)
		}()
		var err error
		if len(s.parts) > 0 {
			err = s.read(rctx, s.parts, false)
		} else {
			<-rctx.Done()
		}
		cancel()
		ready := <-found
		switch {
		case ctx.Err() != nil:
			if err == nil {
				err = ctx.Err()
			}
			return err
		case s.done():
			return nil
		case len(ready) == 0:
			return err // the read failed for good
		}
		if err := s.admit(ctx, ready); err != nil {
			return err
		}
	}
}

// watchPending describes the topic every pendingRetry until one of
// pending can be described, returning those, or until ctx ends (nil).
func (s *consumeSession) watchPending(ctx context.Context, pending []uint32) map[uint32]sdk.PartitionInfo {
	for sleepCtx(ctx, pendingRetry) == nil {
		if ready, _, err := s.describePending(ctx, pending); err == nil && len(ready) > 0 {
			return ready
		}
	}
	return nil
}
