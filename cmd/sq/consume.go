package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/internal/longpoll"
	"github.com/seedqueue/sq/sdk"
)

// Timing of `sq consume`.
const (
	// followMaxWait is the long-poll wait of each fetch with --follow.
	followMaxWait = 500 * time.Millisecond
	// commitInterval is the least time between periodic commits with
	// --follow and --group.
	commitInterval = 5 * time.Second
	// finalCommitTimeout bounds the commit at exit, which runs even after
	// Ctrl-C.
	finalCommitTimeout = 10 * time.Second
	// retryBackoff is the wait before fetching again after a retriable
	// error with --follow.
	retryBackoff = 200 * time.Millisecond
)

type consumeFlags struct {
	topic     string
	group     string
	from      string
	fromTime  string
	count     int64
	follow    bool
	format    string
	partition int
}

func newConsumeCommand(g *globals) *cobra.Command {
	var f consumeFlags
	cmd := &cobra.Command{
		Use:   "consume --topic TOPIC",
		Short: "Print the records of a topic",
		Long: `Print the records of a topic, each partition in offset order.

Without --follow, sq reads every partition (one after the other, in
partition order) up to the high watermark it saw at start, or until --count
records were printed, and exits. With --follow it reads all partitions at
once and keeps waiting for new records until Ctrl-C or --count.

--from says where to start in partitions without a committed offset:
"earliest" (the log start offset), "latest" (the high watermark: only new
records) or an offset, used in every partition read.
--from-time TIME starts them instead at the first record the server
appended at or after TIME (RFC 3339, or Unix milliseconds): the server's
append time, not the producer's timestamp.

With --group, sq starts from the group's committed offsets where there are
any, and commits the position after the last record printed when it stops
(and every 5s with --follow), including after Ctrl-C.

--format raw prints each value followed by '\n'. --format json prints one
object per line: {"topic","partition","offset","timestamp","key","value"};
key is null when the record has no key; a key or value that is not valid
UTF-8 is printed as base64 with "key_encoding":"base64" or
"value_encoding":"base64"; headers, when present, are a list of
{"key","value"} objects.`,
		Example: "  sq consume --topic orders --from earliest\n" +
			"  sq consume --topic orders --group billing --format json\n" +
			"  sq consume --topic orders --from latest --follow\n" +
			"  sq consume --topic orders --from-time 2026-01-02T15:04:05Z",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runConsume(cmd, g, f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.topic, "topic", "", "topic to read (required)")
	fl.StringVar(&f.group, "group", "", "consumer group: resume from its committed offsets and commit the position when stopping")
	fl.StringVar(&f.from, "from", "earliest", "start of partitions without a committed offset: earliest, latest, or an offset")
	fl.StringVar(&f.fromTime, "from-time", "", "start of partitions without a committed offset: the first record the server appended at or after this time, RFC 3339 (2026-01-02T15:04:05Z) or Unix milliseconds; replaces --from")
	fl.Int64Var(&f.count, "count", 0, "stop after printing this many records (0: no limit)")
	fl.BoolVar(&f.follow, "follow", false, "keep waiting for new records until Ctrl-C instead of stopping at the high watermark seen at start")
	fl.StringVar(&f.format, "format", formatRaw, "output format: raw (values, one per line) or json (one object per line)")
	fl.IntVar(&f.partition, "partition", -1, "read only this partition; -1 reads them all")
	_ = cmd.MarkFlagRequired("topic")
	return cmd
}

// consumeSession is the state of one `sq consume` run.
type consumeSession struct {
	c      *sdk.Client
	f      consumeFlags
	addr   string
	out    *recordWriter
	stderr io.Writer

	parts     []uint32
	pos       map[uint32]uint64 // next offset to print, per partition
	end       map[uint32]uint64 // high watermark at start
	committed map[uint32]uint64 // last committed (or fetched) offsets of the group
	read      map[uint32]bool   // partitions with at least one record printed
	// unreadable holds the errors of failed partitions, skipped at start.
	unreadable []error
	printed    int64
}

func runConsume(cmd *cobra.Command, g *globals, f consumeFlags) error {
	out, err := newRecordWriter(g.stdout, f.format)
	if err != nil {
		return err
	}
	if f.count < 0 {
		return fmt.Errorf("--count %d: want 0 (no limit) or more", f.count)
	}
	if _, err := parseFrom(f.from); err != nil {
		return err
	}
	if err := checkFromTime(cmd, f); err != nil {
		return err
	}
	c, err := g.dial(cmd)
	if err != nil {
		return err
	}
	defer c.Close()
	s := &consumeSession{c: c, f: f, addr: g.addr(cmd), out: out, stderr: g.stderr,
		pos: map[uint32]uint64{}, end: map[uint32]uint64{}, committed: map[uint32]uint64{}, read: map[uint32]bool{}}
	ctx := cmd.Context()
	if err := s.start(ctx); err != nil {
		return apiError(s.addr, err)
	}
	if f.follow {
		err = s.follow(ctx)
	} else {
		err = s.readToEnd(ctx)
	}
	if errors.Is(err, context.Canceled) && ctx.Err() != nil {
		err = nil // Ctrl-C: a clean stop
	}
	err = errors.Join(err, out.flush(), s.commit(context.WithoutCancel(ctx)))
	if err == nil && len(s.unreadable) > 0 {
		return fmt.Errorf("%d partition%s could not be read: %w", len(s.unreadable), plural(len(s.unreadable)), errors.Join(s.unreadable...))
	}
	if err != nil {
		return apiError(s.addr, err)
	}
	return nil
}

// start reads the topic's partitions and high watermarks and the group's
// committed offsets, and sets each partition's starting position.
func (s *consumeSession) start(ctx context.Context) error {
	info, err := s.c.DescribeTopic(ctx, s.f.topic)
	if err != nil {
		return err
	}
	if s.f.partition >= 0 {
		if uint32(s.f.partition) >= info.Partitions {
			return api.NewError(api.CodeUnknownPartition, "topic %q has partitions 0-%d, not %d", s.f.topic, info.Partitions-1, s.f.partition)
		}
		s.parts = []uint32{uint32(s.f.partition)}
	} else {
		for p := range info.Partitions {
			s.parts = append(s.parts, p)
		}
	}
	if s.f.group != "" {
		offs, err := s.c.FetchOffsets(ctx, s.f.group, s.f.topic)
		if err != nil {
			return err
		}
		for _, o := range offs {
			if o.Err == nil && o.Topic == s.f.topic {
				s.committed[o.Partition] = o.Offset
			}
		}
	}
	byPart := map[uint32]sdk.PartitionInfo{}
	for _, pi := range info.PartitionInfos {
		byPart[pi.Partition] = pi
	}
	all := s.parts
	s.parts = nil
	for _, p := range all {
		pi, ok := byPart[p]
		if !ok {
			return fmt.Errorf("the server did not describe partition %d of %q", p, s.f.topic)
		}
		if pi.Err != nil {
			// Other partitions keep serving: read them, fail at the end.
			fmt.Fprintf(s.stderr, "sq: partition %d is skipped: %v\n", p, pi.Err)
			s.unreadable = append(s.unreadable, fmt.Errorf("partition %d: %w", p, pi.Err))
			continue
		}
		s.end[p] = pi.HighWatermark
		start, err := s.startOffset(ctx, p, pi)
		if err != nil {
			return err
		}
		s.pos[p] = start
		s.parts = append(s.parts, p)
	}
	return nil
}

// startOffset is where partition p starts: the committed offset, else
// --from-time when given, else --from; raised to the log start offset when
// retention removed it.
func (s *consumeSession) startOffset(ctx context.Context, p uint32, pi sdk.PartitionInfo) (uint64, error) {
	var start uint64
	if off, ok := s.committed[p]; ok {
		start = off
	} else if s.f.fromTime != "" {
		off, err := s.timeStart(ctx, p)
		if err != nil {
			return 0, err
		}
		start = off
	} else {
		from, err := parseFrom(s.f.from)
		if err != nil {
			return 0, err
		}
		switch from {
		case sdk.StartEarliest:
			start = pi.LogStartOffset
		case sdk.StartLatest:
			start = pi.HighWatermark
		default:
			start, _ = from.Offset()
		}
	}
	if start < pi.LogStartOffset {
		fmt.Fprintf(s.stderr, "sq: partition %d: offset %d is no longer stored; starting at the log start offset %d (%d records lost to retention skipped)\n",
			p, start, pi.LogStartOffset, pi.LogStartOffset-start)
		start = pi.LogStartOffset
	}
	return start, nil
}

// parseFrom parses --from: earliest, latest or an offset.
func parseFrom(s string) (sdk.StartPosition, error) {
	switch s {
	case "earliest":
		return sdk.StartEarliest, nil
	case "latest":
		return sdk.StartLatest, nil
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("--from %q: want earliest, latest or an offset", s)
	}
	return sdk.StartAt(n), nil
}

// done reports whether --count records were printed.
func (s *consumeSession) done() bool { return s.f.count > 0 && s.printed >= s.f.count }

// emit prints m and advances its partition's position past it.
func (s *consumeSession) emit(m sdk.Message) error {
	if err := s.out.write(m); err != nil {
		return err
	}
	s.printed++
	s.pos[m.Partition] = m.Offset + 1
	s.read[m.Partition] = true
	return nil
}

// readToEnd reads each partition in turn up to its high watermark at start.
func (s *consumeSession) readToEnd(ctx context.Context) error {
	for _, p := range s.parts {
		for s.pos[p] < s.end[p] && !s.done() {
			res, err := s.c.Fetch(ctx, sdk.FetchRequest{Topic: s.f.topic, Partition: p, Offset: s.pos[p]})
			if err != nil {
				if next, ok := s.outOfRange(p, err); ok {
					s.pos[p] = next
					continue
				}
				return fmt.Errorf("fetch %s/%d at offset %d: %w", s.f.topic, p, s.pos[p], err)
			}
			if len(res.Messages) == 0 {
				// Nothing readable below the high watermark seen at start
				// (the partition shrank or failed meanwhile): stop here
				// rather than ask again forever.
				fmt.Fprintf(s.stderr, "sq: partition %d: no records at offset %d below the high watermark %d; skipping the rest\n", p, s.pos[p], s.end[p])
				break
			}
			for _, m := range res.Messages {
				if m.Offset >= s.end[p] || s.done() {
					break
				}
				if err := s.emit(m); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// outOfRange handles OFFSET_OUT_OF_RANGE below the log start offset
// (retention removed the records): it returns the offset to go on from.
func (s *consumeSession) outOfRange(p uint32, err error) (uint64, bool) {
	var e *api.Error
	if !errors.As(err, &e) || e.Code != api.CodeOffsetOutOfRange || !e.HasRange || s.pos[p] >= e.RangeStart {
		return 0, false
	}
	fmt.Fprintf(s.stderr, "sq: partition %d: offsets %d-%d are no longer stored; going on at %d (%d records lost to retention skipped)\n",
		p, s.pos[p], e.RangeStart-1, e.RangeStart, e.RangeStart-s.pos[p])
	return e.RangeStart, true
}

// fetched is one partition's fetch result handed from its fetcher to the
// printing loop of follow.
type fetched struct {
	partition uint32
	msgs      []sdk.Message
	err       error
}

// follow fetches all partitions concurrently with long polls and prints
// what arrives until ctx ends, --count is reached or a fetch fails for good.
func (s *consumeSession) follow(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	results := make(chan fetched, len(s.parts))
	for _, p := range s.parts {
		go s.fetchLoop(ctx, p, s.pos[p], results)
	}
	ticker := time.NewTicker(commitInterval)
	defer ticker.Stop()
	for !s.done() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ticker.C:
			if err := s.commit(ctx); err != nil {
				return err
			}
		case r := <-results:
			if r.err != nil {
				return r.err
			}
			for _, m := range r.msgs {
				if s.done() {
					break
				}
				if err := s.emit(m); err != nil {
					return err
				}
			}
			if err := s.out.flush(); err != nil {
				return err
			}
		}
	}
	return nil
}

// fetchLoop long-polls partition p from offset next and sends each
// non-empty result (or a permanent error) to results until ctx ends.
// Retriable errors, such as a lost connection, are retried after a pause.
func (s *consumeSession) fetchLoop(ctx context.Context, p uint32, next uint64, results chan<- fetched) {
	for ctx.Err() == nil {
		started := time.Now()
		res, err := s.c.Fetch(ctx, sdk.FetchRequest{Topic: s.f.topic, Partition: p, Offset: next, MaxWait: followMaxWait})
		var e *api.Error
		switch {
		case ctx.Err() != nil:
			return
		case err == nil:
		case errors.As(err, &e) && e.Code == api.CodeOffsetOutOfRange && next > e.RangeEnd:
			// Started beyond the high watermark (--from OFFSET): wait
			// until the partition reaches it. (HasRange is not required:
			// the range [0, 0] of an empty partition arrives without it.)
			_ = sleepCtx(ctx, followMaxWait)
			continue
		case errors.As(err, &e) && e.Code == api.CodeOffsetOutOfRange && e.HasRange && next < e.RangeStart:
			fmt.Fprintf(s.stderr, "sq: partition %d: offsets %d-%d are no longer stored; going on at %d (%d records lost to retention skipped)\n",
				p, next, e.RangeStart-1, e.RangeStart, e.RangeStart-next)
			next = e.RangeStart
			continue
		case sdk.IsRetriable(err):
			_ = sleepCtx(ctx, retryBackoff)
			continue
		default:
			select {
			case results <- fetched{partition: p, err: fmt.Errorf("fetch %s/%d at offset %d: %w", s.f.topic, p, next, err)}:
			case <-ctx.Done():
			}
			return
		}
		if len(res.Messages) == 0 {
			next = max(next, res.NextOffset) // past batches without records to print
			// A server that answers before the long poll ran out (one
			// that caps it, or woke for nothing) must not make this loop
			// spin.
			longpoll.PauseAfterEmpty(ctx, started, followMaxWait)
			continue
		}
		next = res.NextOffset
		select {
		case results <- fetched{partition: p, msgs: res.Messages}:
		case <-ctx.Done():
			return
		}
	}
}

// commit stores, with --group, the position of every partition whose
// position differs from the group's committed offset (a partition without
// one is committed at its starting position, so the group resumes there).
func (s *consumeSession) commit(ctx context.Context) error {
	if s.f.group == "" {
		return nil
	}
	var offs []sdk.OffsetCommit
	for _, p := range s.parts {
		pos := s.pos[p]
		if c, ok := s.committed[p]; ok && c == pos {
			continue
		}
		if pos > s.end[p] && !s.read[p] {
			continue // --from beyond the high watermark and nothing read: nothing valid to commit
		}
		offs = append(offs, sdk.OffsetCommit{Topic: s.f.topic, Partition: p, Offset: pos})
	}
	if len(offs) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, finalCommitTimeout)
	defer cancel()
	res, err := s.c.CommitOffsets(ctx, s.f.group, offs)
	if err != nil {
		return fmt.Errorf("commit offsets of group %q: %w", s.f.group, err)
	}
	var errs []error
	for _, o := range res {
		if o.Err != nil {
			errs = append(errs, fmt.Errorf("commit %s/%d offset %d for group %q: %w", o.Topic, o.Partition, o.Offset, s.f.group, o.Err))
			continue
		}
		s.committed[o.Partition] = o.Offset
	}
	return errors.Join(errs...)
}

// sleepCtx waits d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
