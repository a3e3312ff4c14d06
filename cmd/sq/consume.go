package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/seedqueue/sq/api"
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
	// consumeRequestTimeout bounds each request of the consumer, a
	// group member's commit and leave at exit included.
	consumeRequestTimeout = 10 * time.Second
	// consumeReconnectBackoffMax caps the wait between reconnection
	// attempts, and between reads of a partition whose start is past the
	// end of its log: a consumer that lost the server retries often, and
	// a group member's commit and leave after Ctrl-C wait at most this
	// long to try.
	consumeReconnectBackoffMax = 500 * time.Millisecond
	// probeInterval is the least time between checks that the server
	// still answers while Poll returns nothing.
	probeInterval = 2 * time.Second
)

type consumeFlags struct {
	topic     string
	group     string
	from      string
	fromTime  string
	count     int64
	follow    bool
	format    string
	partition partitionFlag
}

// consumeLong is the --help text of `sq consume`.
const consumeLong = `Print the records of a topic, each partition in offset order.

Without --follow, sq reads every partition (one after the other, in
partition order) up to the high watermark it saw at start, or until --count
records were printed, and exits. With --follow it reads all partitions at
once and keeps waiting for new records until Ctrl-C or --count.
-p/--partition N reads only partition N (default: all).

Start position (-o/--from), for partitions without a committed offset:
  earliest, beginning   the log start offset (the default)
  latest, end           the high watermark: only new records
  N                     offset N, in every partition read
  -N                    the last N records of each partition:
                        max(log start, high watermark - N)
  +N                    N records after each partition's log start
--from-time TIME starts them instead at the first record the server
appended at or after TIME (the server's append time, not the producer's
timestamp): an RFC 3339 time (2026-01-02T15:04:05Z), a duration before now
(-1h, -30m, -1h30m), or a Unix time with its unit (1796079000s,
1796079000000ms). A bare number is read as Unix milliseconds only when it
has 12 digits or more (1973 onwards; as seconds it would be past the year
5000); a shorter one is ambiguous and refused.

With -g/--group, sq is a member of the consumer group, as the SDK's
consumers are: the group shares the topic's partitions among its members
(two sq consume -g G --follow split them; sq group describe G lists both),
each partition starts at the group's committed offset when it has one, and
sq commits the position after the last record it printed: every 5s with
--follow, when the group moves a partition to another member, and when it
stops (also after Ctrl-C). A record is committed only after it was written
to stdout: none is skipped, and after a stop (Ctrl-C included) the group's
next member starts right after the last record printed. Without --follow
the member reads the partitions it is assigned up to the high watermarks
seen at start and exits (as kcat -G with -e). -p/--partition cannot be
combined with --group (the group assigns the partitions), nor can -o -N or
+N (use earliest, latest, an offset or --from-time).

-f/--format (case-insensitive):
  raw    each value followed by a newline (the default)
  json   one object per line: {"topic","partition","offset","timestamp",
         "key","value"}; key is null when the record has no key; a key or
         value that is not valid UTF-8 is printed as base64 with
         "key_encoding":"base64" or "value_encoding":"base64"; headers,
         when present, are a list of {"key","value"} objects
  a template containing %, as kcat -f: %t topic, %p partition, %o offset,
         %k key, %v (or kcat's %s) value, %T timestamp (Unix ms), %h headers (k=v,k=v),
         %K key length (-1 without a key), %S value length, %% a percent
         sign; escapes \n \t \r \\ \0. Nothing is added after a record:
         end the template with \n for one per line.

In a cluster, a partition that cannot be described for a retriable reason
(its leader is down or unreachable from the node asked, or lags behind in
the metadata) is warned about once and described again every 0.5s: with
--follow it is read from when it can be; without, sq reads the others, then
waits up to 30s from the start for it and fails naming it.

Ctrl-C stops: sq commits (with --group), prints a one-line summary of what
it printed to stderr and exits with status 130; a second Ctrl-C exits at
once. A server that cannot be reached at start fails the command, naming
its address (with --follow too: check --server); one lost while reading
fails it without --follow, while with --follow sq reports the outage once
and keeps retrying until Ctrl-C.`

func newConsumeCommand(g *globals) *cobra.Command {
	f := consumeFlags{partition: partitionFlag{all: true}}
	cmd := &cobra.Command{
		Use:   "consume -t TOPIC",
		Short: "Print the records of a topic",
		Long:  consumeLong,
		Example: "  sq consume -t orders\n" +
			"  sq consume -t orders -o -10                  # the last 10 of each partition\n" +
			"  sq consume -t orders -g billing -f json\n" +
			"  sq consume -t orders -g billing --follow     # run two: they share the partitions\n" +
			"  sq consume -t orders -o end --follow\n" +
			"  sq consume -t orders --from-time -1h\n" +
			"  sq consume -t orders -p 2 -f '%p:%o %k=%v\\n'",
		Args: topicArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runConsume(cmd, g, f)
		},
	}
	fl := cmd.Flags()
	fl.StringVarP(&f.topic, "topic", "t", "", "topic to read (required)")
	fl.StringVarP(&f.group, "group", "g", "", "consumer group to join: share the partitions with its other members, resume from its committed offsets and commit what was printed")
	fl.StringVarP(&f.from, "from", "o", "earliest", "start of partitions without a committed offset: "+fromForms)
	fl.StringVar(&f.fromTime, "from-time", "", "start of partitions without a committed offset: the first record appended at or after this time: RFC 3339, -DURATION (before now), or Unix time with a unit (1796079000s, 1796079000000ms); replaces -o")
	fl.VarP((*countFlag)(&f.count), "count", "c", "stop after printing this many records (0: no limit)")
	fl.BoolVar(&f.follow, "follow", false, "keep waiting for new records until Ctrl-C instead of stopping at the high watermark seen at start")
	fl.StringVarP(&f.format, "format", "f", formatRaw, "output format: raw, json, or a template with % tokens such as '%k\\t%v\\n' (see --help)")
	fl.VarP(&f.partition, "partition", "p", "read only this partition; all: every partition")
	_ = cmd.MarkFlagRequired("topic")
	return cmd
}

// consumeSession is the state of one `sq consume` run without --group:
// sq resolves each partition's start from -o/--from-time itself, then
// reads through sdk.Consumer, bounded by the high watermarks seen at
// start unless --follow.
type consumeSession struct {
	// r describes the topic and resolves --from-time at start (on each
	// partition's leader).
	r       *sdk.Producer
	f       consumeFlags
	start   startSpec
	fromMs  int64 // --from-time in Unix ms, when given
	addr    string
	timeout time.Duration     // --timeout: the consumer's dial
	tls     *tls.Config       // the TLS flags' configuration; nil: plaintext
	sasl    sdk.SASLMechanism // --user's credentials; nil: anonymous
	out     *recordWriter
	stderr  io.Writer
	probe   serverProbe
	stalls  fetchStalls // partitions that cannot be read for now

	parts []uint32
	pos   map[uint32]uint64 // next offset to print, per partition
	end   map[uint32]uint64 // high watermark at start
	// cut marks partitions whose records the consumer returned past the
	// last one printed (--count reached): their position is pos, not the
	// consumer's.
	cut map[uint32]bool
	// unreadable holds the errors of failed partitions, skipped at start.
	unreadable []error
	// pending holds the partitions that could not be described for a
	// retriable reason, described again (consume_pending.go), with their
	// last error in pendingErr.
	pending    []uint32
	pendingErr map[uint32]error
	printed    int64
}

func runConsume(cmd *cobra.Command, g *globals, f consumeFlags) error {
	out, err := newRecordWriter(g.stdout, f.format)
	if err != nil {
		return err
	}
	start, err := parseFrom(f.from)
	if err != nil {
		return err
	}
	fromMs, err := checkFromTime(cmd, f, time.Now())
	if err != nil {
		return err
	}
	if cmd.Flags().Changed("group") && strings.TrimSpace(f.group) == "" {
		return errors.New("--group/-g is empty: give the group's name, or drop -g to read without a group")
	}
	if f.group != "" {
		if !f.partition.all {
			return fmt.Errorf("--partition/-p %d with --group: a group member reads the partitions the group assigns it; "+
				"drop -p to share the topic with the group's members, or drop -g to read partition %d alone", f.partition.p, f.partition.p)
		}
		return runGroupConsume(cmd, g, f, out, start, fromMs)
	}
	timeout, err := g.connectTimeout(cmd)
	if err != nil {
		return err
	}
	r, err := g.dialRouter(cmd)
	if err != nil {
		if stopped(cmd.Context(), err) { // Ctrl-C while connecting
			noteInterrupted(cmd.Context(), g.stderr, f.topic)
			return nil
		}
		return err
	}
	stderr := &syncWriter{w: g.stderr}
	s := &consumeSession{r: r, f: f, start: start, fromMs: fromMs, addr: g.addr(cmd), timeout: timeout, tls: g.tlsConf, sasl: g.sasl, out: out, stderr: stderr,
		probe: serverProbe{addr: g.addr(cmd), topic: f.topic, follow: f.follow, timeout: timeout, stderr: stderr, reading: "reading " + f.topic},
		pos:   map[uint32]uint64{}, end: map[uint32]uint64{}, cut: map[uint32]bool{}}
	ctx := cmd.Context()
	began := time.Now()
	err = s.begin(ctx)
	if len(s.pending) > 0 {
		defer r.Close() // it describes the pending partitions again
	} else {
		r.Close() // the consumers have connections of their own
	}
	if err != nil {
		if stopped(ctx, err) {
			noteInterrupted(ctx, s.stderr, f.topic)
			return nil
		}
		return apiError(s.addr, err)
	}
	switch {
	case f.follow:
		// With every partition failed, nothing to follow until Ctrl-C,
		// which reports them.
		err = s.followAll(ctx)
	default:
		err = s.readToEnd(ctx)
		if err == nil {
			err = s.readPending(ctx, began)
		}
	}
	err = out.finish(err)
	if _, ok := interrupted(ctx); ok {
		fmt.Fprintln(s.stderr, interruptSummary(s.printed, f.topic, formatPositions(s.parts, s.pos)))
	}
	if stopped(ctx, err) {
		return nil // Ctrl-C: a clean stop (main exits 128+signal)
	}
	if err == nil && len(s.unreadable) > 0 {
		return fmt.Errorf("%d partition%s could not be read: %w", len(s.unreadable), plural(len(s.unreadable)), errors.Join(s.unreadable...))
	}
	if err != nil {
		// What was printed, and where to go on from (-o per partition),
		// before the cause.
		fmt.Fprintln(s.stderr, failedSummary(s.printed, f.topic, formatPositions(s.parts, s.pos)))
		return lostServer(s.addr, err)
	}
	return nil
}

// lostServer is apiError for a failure after the server at addr answered
// (the read started): a connection error says the server was lost rather
// than pointing at the address, or names the partition's leader it came
// from when that is another node. nil stays nil.
func lostServer(addr string, err error) error {
	if why, ok := leaderUnreachable(addr, err); ok {
		return why
	}
	if err != nil && errors.Is(err, sdk.ErrConnection) {
		return fmt.Errorf("lost the SQ server at %s: %w", addr, err)
	}
	if err == nil {
		return nil
	}
	return apiError(addr, err)
}

// failedSummary is the line printed before the error that ended a read:
// "sq: stopped: printed N records of TOPIC; next offsets P:O ...".
func failedSummary(printed int64, topic, positions string) string {
	return progressSummary("stopped", printed, topic, positions)
}

// stopped reports whether err is only the cancellation of ctx (Ctrl-C).
func stopped(ctx context.Context, err error) bool {
	return err != nil && ctx.Err() != nil && errors.Is(err, context.Canceled)
}

// interruptSummary is the first part of the line printed after Ctrl-C:
// "sq: interrupted: printed N records of TOPIC; next offsets P:O ...".
func interruptSummary(printed int64, topic, positions string) string {
	return progressSummary("interrupted", printed, topic, positions)
}

// progressSummary is "sq: HOW: printed N records of TOPIC; next offsets
// P:O ...".
func progressSummary(how string, printed int64, topic, positions string) string {
	word := "records"
	if printed == 1 {
		word = "record"
	}
	return fmt.Sprintf("sq: %s: printed %d %s of %s; next offsets %s", how, printed, word, topic, positions)
}

// noteInterrupted prints the summary of a run interrupted before it read
// anything.
func noteInterrupted(ctx context.Context, stderr io.Writer, topic string) {
	if _, ok := interrupted(ctx); ok {
		fmt.Fprintln(stderr, interruptSummary(0, topic, "none"))
	}
}

// formatPositions renders per-partition positions as "0:12 1:40", in the
// order of parts; "none" when parts is empty.
func formatPositions(parts []uint32, pos map[uint32]uint64) string {
	if len(parts) == 0 {
		return "none"
	}
	var b strings.Builder
	for i, p := range parts {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%d:%d", p, pos[p])
	}
	return b.String()
}

// begin reads the topic's partitions and high watermarks and sets each
// partition's starting position.
func (s *consumeSession) begin(ctx context.Context) error {
	info, err := s.r.Client().DescribeTopic(ctx, s.f.topic)
	if err != nil {
		return err
	}
	if !s.f.partition.all {
		if s.f.partition.p >= info.Partitions {
			return api.NewError(api.CodeUnknownPartition, "topic %q has partitions 0-%d, not %d", s.f.topic, info.Partitions-1, s.f.partition.p)
		}
		s.parts = []uint32{s.f.partition.p}
	} else {
		for p := range info.Partitions {
			s.parts = append(s.parts, p)
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
		if pi.Err != nil && sdk.IsRetriable(pi.Err) {
			s.addPending(p, pi.Err)
			continue
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

// noteLost says on stderr that partition p starts at the log start offset
// to instead of from, which retention removed.
func noteLost(stderr io.Writer, p uint32, from, to uint64) {
	fmt.Fprintf(stderr, "sq: partition %d: offset %d is no longer stored; starting at the log start offset %d (%d records lost to retention skipped)\n",
		p, from, to, to-from)
}

// startOffset is where partition p starts: --from-time when given, else
// --from/-o; raised to the log start offset when retention removed it. A
// start past the high watermark is kept, and said on stderr.
func (s *consumeSession) startOffset(ctx context.Context, p uint32, pi sdk.PartitionInfo) (uint64, error) {
	start := s.start.offset(pi.LogStartOffset, pi.HighWatermark)
	if s.f.fromTime != "" {
		off, err := s.timeStart(ctx, p)
		if err != nil {
			return 0, err
		}
		start = off
	}
	if start < pi.LogStartOffset {
		noteLost(s.stderr, p, start, pi.LogStartOffset)
		start = pi.LogStartOffset
	}
	if start > pi.HighWatermark {
		// Said once, so that a mistyped -o does not look like an empty topic.
		what := "nothing to read there"
		if s.f.follow {
			what = "waiting until the log reaches it"
		}
		fmt.Fprintf(s.stderr, "sq: partition %d: start offset %d is past the end of the log (high watermark %d); %s\n",
			p, start, pi.HighWatermark, what)
	}
	return start, nil
}

// done reports whether --count records were printed.
func (s *consumeSession) done() bool { return s.f.count > 0 && s.printed >= s.f.count }

// readToEnd reads each partition in turn, in partition order, up to its
// high watermark at start, each through a consumer of its own.
func (s *consumeSession) readToEnd(ctx context.Context) error {
	for _, p := range s.parts {
		if s.done() {
			return nil
		}
		if s.pos[p] >= s.end[p] {
			continue // nothing to read below the high watermark at start
		}
		if err := s.read(ctx, []uint32{p}, true); err != nil {
			return err
		}
	}
	return nil
}

// consumerConfig is the configuration of the consumer reading parts, each
// from its position; bounded by the high watermarks at start when toEnd.
// Records lost to retention while reading are said on stderr.
func (s *consumeSession) consumerConfig(parts []uint32, toEnd bool) sdk.ConsumerConfig {
	cfg := consumerBase(s.addr, s.f.topic, s.timeout, s.tls, s.sasl)
	// Fetched, not pushed: at most one response per partition is read
	// ahead of what was printed.
	cfg.UseFetch = true
	cfg.Partitions = parts
	cfg.StartOffsets = map[uint32]uint64{}
	if toEnd {
		cfg.EndOffsets = map[uint32]uint64{}
	}
	for _, p := range parts {
		cfg.StartOffsets[p] = s.pos[p]
		if toEnd {
			cfg.EndOffsets[p] = s.end[p]
		}
	}
	s.stalls.to(s.stderr)
	cfg.OnFetchRetry = s.stalls.failed
	cfg.OnRecordsLost = func(p uint32, from, to uint64) {
		fmt.Fprintf(s.stderr, "sq: partition %d: offsets %d-%d are no longer stored; going on at %d (%d records lost to retention skipped)\n",
			p, from, to-1, to, to-from)
	}
	return cfg
}

// read prints the records of parts through one sdk.Consumer until ctx
// ends, --count records were printed, a read fails for good or, when
// toEnd, every partition was read up to its high watermark at start. The
// positions of parts are then the consumer's.
func (s *consumeSession) read(ctx context.Context, parts []uint32, toEnd bool) error {
	cons, err := newConsumer(ctx, s.consumerConfig(parts, toEnd))
	if err != nil {
		return err
	}
	defer cons.Close()
	defer s.settle(cons, parts)
	for !s.done() {
		msgs, err := cons.Poll(ctx)
		if errors.Is(err, sdk.ErrEndOffsetsReached) {
			s.noteShort(cons, parts)
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading %s: %w", s.f.topic, err)
		}
		if len(msgs) == 0 {
			if err := s.probe.idle(ctx, cons.Client()); err != nil {
				return err
			}
			continue
		}
		s.probe.answered()
		for _, m := range msgs {
			if s.done() {
				s.cut[m.Partition] = true
				continue
			}
			s.stalls.read(m.Partition, m.Offset)
			if err := s.out.write(m); err != nil {
				return err
			}
			s.printed++
			s.pos[m.Partition] = m.Offset + 1
		}
		if err := s.out.flush(); err != nil {
			return err
		}
	}
	return nil
}

// noteShort says on stderr which of parts ended below their high
// watermark at start: their log holds fewer records than it did then (the
// server restarted without having synced them, say).
func (s *consumeSession) noteShort(cons *sdk.Consumer, parts []uint32) {
	for _, p := range parts {
		if pos, ok := cons.Position(p); ok && pos < s.end[p] {
			fmt.Fprintf(s.stderr, "sq: partition %d: no records at offset %d below the high watermark %d; skipping the rest\n", p, pos, s.end[p])
		}
	}
}

// settle takes the consumer's position of each of parts whose records
// were all printed: past the records lost to retention it skipped.
func (s *consumeSession) settle(cons *sdk.Consumer, parts []uint32) {
	for _, p := range parts {
		if pos, ok := cons.Position(p); ok && !s.cut[p] {
			s.pos[p] = pos
		}
	}
}

// sleepCtx waits d (a retry's backoff, say) or until ctx ends, returning
// ctx's error then.
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
