package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"sort"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/seedqueue/sq/sdk"
)

// Timing of `sq consume --group`.
const (
	// groupLeaveTimeout bounds leaving the group at exit, after the final
	// commit: leaving is best effort (the session timeout removes a member
	// that did not), so a hung server costs at most finalCommitTimeout
	// plus this.
	groupLeaveTimeout = 2 * time.Second
	// emptyAssignmentWait is how long a member without --follow waits
	// for the group to assign it a partition before it exits.
	emptyAssignmentWait = 5 * time.Second
	// groupHeartbeat is how often the member heartbeats, so that it sees
	// the group's assignment changes within about a second.
	groupHeartbeat = time.Second
)

// syncWriter serializes writes to w: the group member's callbacks write to
// stderr from the consumer's goroutines.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// groupSession is one `sq consume --group` run: a member of the group
// built on sdk.Consumer with AutoCommitMarked, so that every commit
// (periodic, at a partition's revocation, at exit) stores the position
// after the last record written to stdout.
type groupSession struct {
	f      consumeFlags
	addr   string
	out    *recordWriter
	stderr io.Writer
	cons   *sdk.Consumer
	// end is the high watermark of each partition at start: without
	// --follow the member reads its partitions up to it.
	end     map[uint32]uint64
	next    map[uint32]uint64 // offset after the last record printed
	timeout time.Duration     // --timeout: each dial plus handshake, and each probe
	tls     *tls.Config       // the TLS flags' configuration; nil: plaintext
	sasl    sdk.SASLMechanism // --user's credentials; nil: anonymous
	probe   serverProbe
	stalls  fetchStalls // partitions that cannot be read for now
	printed int64
	// emptySince is when the member was first seen holding no partition
	// (zero while it holds some).
	emptySince time.Time
}

// runGroupConsume runs `sq consume --group`.
func runGroupConsume(cmd *cobra.Command, g *globals, f consumeFlags, out *recordWriter, start startSpec, fromMs int64) error {
	ctx := cmd.Context()
	addr := g.addr(cmd)
	from, err := start.groupStart()
	if cmd.Flags().Changed("from-time") {
		from, err = sdk.StartAtTime(time.UnixMilli(fromMs)), nil
	}
	if err != nil {
		return err
	}
	s, err := newGroupSession(cmd, g, f, out)
	if err != nil {
		return err
	}
	if err := s.highWatermarks(cmd, g); err != nil || ctx.Err() != nil {
		if err == nil || stopped(ctx, err) { // Ctrl-C while connecting
			noteInterrupted(ctx, s.stderr, f.topic)
			return nil
		}
		return err
	}
	s.cons, err = newConsumer(ctx, s.consumerConfig(from))
	if err != nil {
		if stopped(ctx, err) {
			noteInterrupted(ctx, s.stderr, f.topic)
			return nil
		}
		return apiError(addr, err)
	}
	err = out.finish(s.loop(ctx))
	// Commit what was printed, even after Ctrl-C; bounded by
	// finalCommitTimeout, then Close leaves the group within
	// groupLeaveTimeout.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finalCommitTimeout)
	commitErr := s.cons.Commit(cctx)
	cancel()
	if errors.Is(commitErr, context.DeadlineExceeded) {
		commitErr = fmt.Errorf("%w (no answer from %s within %v)", commitErr, addr, finalCommitTimeout)
	}
	var closeErr error
	if commitErr == nil {
		closeErr = s.cons.Close() // leaves the group; nothing left to commit
	} else {
		s.cons.CloseWithoutCommit() // the commit failed once already: leave without retrying it
	}
	if _, ok := interrupted(ctx); ok {
		s.summary("interrupted", commitErr)
	} else if err != nil {
		s.summary("stopped", commitErr) // before the error, as after Ctrl-C
	}
	if stopped(ctx, err) {
		err = nil
	}
	// The server answered at start: a connection lost since is said so.
	return errors.Join(lostServer(addr, err), lostServer(addr, commitErr), lostServer(addr, closeErr))
}

// newGroupSession returns the session of a group member reading f.topic,
// writing records to out, connecting to the flags' address within
// --timeout.
func newGroupSession(cmd *cobra.Command, g *globals, f consumeFlags, out *recordWriter) (*groupSession, error) {
	timeout, err := g.connectTimeout(cmd)
	if err != nil {
		return nil, err
	}
	stderr := &syncWriter{w: g.stderr}
	return &groupSession{f: f, addr: g.addr(cmd), timeout: timeout, tls: g.tlsConf, sasl: g.sasl, out: out, stderr: stderr,
		end: map[uint32]uint64{}, next: map[uint32]uint64{},
		probe: serverProbe{addr: g.addr(cmd), topic: f.topic, follow: f.follow, timeout: timeout, stderr: stderr,
			reading: fmt.Sprintf("reading %s as group %s", f.topic, f.group)}}, nil
}

// consumerConfig is the configuration of the member's sdk.Consumer:
// partitions without a committed offset start at from; dials are bounded
// by --timeout, as every other connection of sq.
func (s *groupSession) consumerConfig(from sdk.StartPosition) sdk.ConsumerConfig {
	cfg := consumerBase(s.addr, s.f.topic, s.timeout, s.tls, s.sasl)
	cfg.ConsumerGroup = s.f.group
	cfg.AutoCommitMarked = true
	cfg.AutoCommitInterval = commitInterval
	cfg.StartFrom = from
	cfg.HeartbeatInterval = groupHeartbeat
	cfg.CloseTimeout = groupLeaveTimeout
	cfg.OnPartitionsAssigned = func(ps []uint32) {
		fmt.Fprintf(s.stderr, "sq: group %s: assigned partition%s %v of %s\n", s.f.group, plural(len(ps)), ps, s.f.topic)
	}
	cfg.OnPartitionsRevoked = func(ps []uint32) {
		fmt.Fprintf(s.stderr, "sq: group %s: released partition%s %v of %s (the group is rebalancing)\n", s.f.group, plural(len(ps)), ps, s.f.topic)
	}
	cfg.OnRecordsLost = func(p uint32, from, to uint64) { noteLost(s.stderr, p, from, to) }
	s.stalls.to(s.stderr)
	cfg.OnFetchRetry = s.stalls.failed
	return cfg
}

// highWatermarks reads the high watermark of every partition at start,
// which also checks that the topic exists before joining the group.
func (s *groupSession) highWatermarks(cmd *cobra.Command, g *globals) error {
	c, err := g.dial(cmd)
	if err != nil {
		return err
	}
	defer c.Close()
	info, err := c.DescribeTopic(cmd.Context(), s.f.topic)
	if err != nil {
		if stopped(cmd.Context(), err) {
			return nil
		}
		return apiError(s.addr, err)
	}
	for _, pi := range info.PartitionInfos {
		if pi.Err == nil {
			s.end[pi.Partition] = pi.HighWatermark
		}
	}
	return nil
}

// loop polls and prints until ctx ends, --count records were printed, or
// (without --follow) the partitions held reached their high watermark at
// start.
func (s *groupSession) loop(ctx context.Context) error {
	last := map[uint32]sdk.Message{}
	for !s.done() {
		if !s.f.follow && s.reachedEnd() {
			return nil
		}
		msgs, err := s.cons.Poll(ctx)
		if err != nil {
			return err
		}
		if len(msgs) == 0 {
			if err := s.probe.idle(ctx, s.cons.Client()); err != nil {
				return err
			}
			continue
		}
		s.probe.answered()
		clear(last)
		for _, m := range msgs {
			if s.done() {
				break
			}
			if !s.f.follow && m.Offset >= s.end[m.Partition] {
				continue // beyond the high watermark seen at start
			}
			s.stalls.read(m.Partition, m.Offset)
			if err := s.out.write(m); err != nil {
				return err
			}
			s.printed++
			s.next[m.Partition] = m.Offset + 1
			last[m.Partition] = m
		}
		// Only what reached stdout may be committed: flush, then mark.
		if err := s.out.flush(); err != nil {
			return err
		}
		for _, m := range last {
			if err := s.cons.MarkProcessed(m); err != nil {
				fmt.Fprintf(s.stderr, "sq: partition %d offset %d was printed but will not be committed (another member reads it again): %v\n", m.Partition, m.Offset, err)
			}
		}
	}
	return nil
}

// done reports whether --count records were printed.
func (s *groupSession) done() bool { return s.f.count > 0 && s.printed >= s.f.count }

// reachedEnd reports, without --follow, whether every partition the
// member holds has been read up to its high watermark at start, or the
// member has held none for emptyAssignmentWait.
func (s *groupSession) reachedEnd() bool {
	held := s.cons.Assignment()
	if len(held) == 0 {
		if s.emptySince.IsZero() {
			s.emptySince = time.Now()
		}
		if time.Since(s.emptySince) < emptyAssignmentWait {
			return false
		}
		fmt.Fprintf(s.stderr, "sq: group %s assigned no partition of %s to this member within %v (its other members hold them all)\n", s.f.group, s.f.topic, emptyAssignmentWait)
		return true
	}
	s.emptySince = time.Time{}
	for _, p := range held {
		if pos, ok := s.cons.Position(p); ok && pos < s.end[p] {
			return false
		}
	}
	return true
}

// summary prints the one line of what was done, after Ctrl-C (how
// "interrupted") or a failure ("stopped").
func (s *groupSession) summary(how string, commitErr error) {
	parts := make([]uint32, 0, len(s.next))
	for p := range s.next {
		parts = append(parts, p)
	}
	sort.Slice(parts, func(i, j int) bool { return parts[i] < parts[j] })
	committed := "committed for group " + s.f.group
	if commitErr != nil {
		committed = "commit for group " + s.f.group + " failed (see below)"
	}
	fmt.Fprintf(s.stderr, "%s; %s\n", progressSummary(how, s.printed, s.f.topic, formatPositions(parts, s.next)), committed)
}
