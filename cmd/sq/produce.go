package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/api/batch"
	"github.com/seedqueue/sq/sdk"
)

// Bounds of one SendBatch call of `sq produce`: the input is sent in
// chunks of at most produceBatchRecords records and about
// produceBatchBytes bytes, one chunk after the other.
const (
	produceBatchRecords = 4096
	produceBatchBytes   = 1 << 20
)

type produceFlags struct {
	topic        string
	file         string
	valueFile    string
	delimiter    string
	keySeparator string
	key          string
	headers      []string
	partition    int
	acks         string // all or leader (sdk.ParseAcks)
}

const produceLong = `Produce records to a topic: one per line of the input (stdin, or --file),
one per --delimiter-separated piece, or one whole file (--value-file).
Typing records at a terminal, end the input with Ctrl-D at the start of a
line.

Splitting: every delimiter (a newline unless --delimiter says otherwise)
ends a record, so two in a row make an empty record, and the bytes after the
last delimiter are one more record: a final delimiter adds no record, as
with kcat -D ("a\n" is 1 record, "a\n\nb" is 3, an empty input is 0, "\n"
is one empty record). All other bytes are kept exactly: with CRLF line ends
each value ends in '\r' (or give --delimiter '\r\n'), and NUL bytes and
invalid UTF-8 are sent as they are. --delimiter takes literal bytes and the
escapes \n \t \r \0 (NUL) \\ and \xNN, and may be several bytes long:
--delimiter '\0' reads the output of find -print0. A record may be as long as
the record limit the server states in its handshake (1 MiB by default; key,
value and headers together); a longer one is an error naming its number, and
the records before it are sent.

--value-file PATH sends the whole file (- for stdin) as one record, byte for
byte, as kcat -P sends a file named on its command line; a file over the
server's record limit is refused before anything is sent.

Keys and headers: -k/--key gives every record that key (-k '' an empty
key). --key-separator S splits each record at the first S: key before, value
after (a record without S has no key); S takes the escapes of --delimiter,
as kcat's -K takes those of -D ('\t' is a tab, '\\' a backslash); -k and
--key-separator cannot be combined. -H/--header name=value (repeatable; "name=" is an empty value)
adds the header to every record.

Placement: records are sent in chunks of up to 4096 records or about 1 MiB,
one chunk after the other; a chunk also ends when the input pauses, so lines
typed at a terminal are sent as they are entered. Records without a key are
spread over the partitions, one partition per chunk; keyed records go to
the partition of their key's hash. Either way each partition receives the
records in input order. With -p/--partition N every record goes to
partition N; -1 (the default) means any partition, as above.

Acknowledgement: with --acks all (the default) a record is acknowledged once
every in-sync replica of its partition holds it (at least the topic's
min.insync.replicas of them; on a single node, once the node stored it
under the topic's sync policy); with --acks leader, once the partition's
leader stored it (a failover before the followers copy it loses it).
Records are sent by an idempotent producer, with -p/--partition N too: a
batch retried after a lost acknowledgement is stored once (against a server
that grants no producer ids sq warns, and such a retry may store it twice).

When every record is acknowledged sq prints how many, with the offset
ranges per partition. When records fail (the server cannot be reached
within the retries, say) sq stops, prints what was acknowledged and one
line saying how many records were not, with their line numbers and the
server's address, and exits with status 1. Ctrl-C stops reading and prints
the same summary (records in flight count as not acknowledged: they may or
may not be stored); sq then exits with status 130. A second Ctrl-C exits at
once.`

func newProduceCommand(g *globals) *cobra.Command {
	var f produceFlags
	cmd := &cobra.Command{
		Use:   "produce -t TOPIC [--file FILE | --value-file FILE]",
		Short: "Produce records: one per line of the input, per delimiter, or one whole file",
		Long:  produceLong,
		Example: "  sq produce -t orders --file orders.txt\n" +
			"  printf 'alice:hello\\nbob:hi\\n' | sq produce -t chat --key-separator :\n" +
			"  echo '{\"id\":1}' | sq produce -t orders -k order-1 -H source=web -H trace=\n" +
			"  sq produce -t images --value-file logo.png -k logo.png\n" +
			"  find . -print0 | sq produce -t files --delimiter '\\0' -p 0",
		Args: topicArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runProduce(cmd, g, f)
		},
	}
	fl := cmd.Flags()
	fl.StringVarP(&f.topic, "topic", "t", "", "topic to produce to (required)")
	fl.StringVar(&f.file, "file", "", "read records from this file instead of stdin (- for stdin)")
	fl.StringVar(&f.valueFile, "value-file", "", "send this whole file as one record, byte for byte (- for stdin)")
	fl.StringVar(&f.delimiter, "delimiter", "", `split the input at this delimiter instead of a newline: bytes and the escapes \n \t \r \0 \\ \xNN; several bytes allowed`)
	fl.StringVar(&f.keySeparator, "key-separator", "", `split each record at the first occurrence of this separator: key before, value after (a record without it has no key); the escapes of --delimiter apply ('\t' is a tab)`)
	fl.StringVarP(&f.key, "key", "k", "", "key of every record (not with --key-separator)")
	fl.StringArrayVarP(&f.headers, "header", "H", nil, "header name=value added to every record (repeatable; name= is an empty value)")
	fl.StringVar(&f.acks, "acks", "all", "when a record is acknowledged: all (every in-sync replica holds it, at least min.insync.replicas of them) or leader (the partition's leader alone)")
	fl.IntVarP(&f.partition, "partition", "p", -1, "send every record to this partition; -1 spreads keyless records and places keyed ones by the hash of the key (other negatives are refused)")
	_ = cmd.MarkFlagRequired("topic")
	return cmd
}

// produceInput is what `sq produce` sends besides the topic, checked
// before it connects.
type produceInput struct {
	delim     []byte
	sep       []byte
	key       []byte // nil: no fixed key
	headers   []sdk.Header
	valueFile string
	acks      sdk.Acks
}

// check validates the flags of produce and returns every problem at once.
func (f produceFlags) check(cmd *cobra.Command) (produceInput, error) {
	var in produceInput
	var errs []error
	if f.partition < -1 {
		errs = append(errs, fmt.Errorf("--partition %d: a partition is 0 or more, or -1 for any partition (keyless records spread, keyed ones by the hash of the key)", f.partition))
	}
	acks, err := sdk.ParseAcks(f.acks)
	if err != nil {
		errs = append(errs, fmt.Errorf("--%w", err))
	}
	in.acks = acks
	in.delim = []byte{'\n'}
	if cmd.Flags().Changed("delimiter") {
		d, err := parseDelimiter(f.delimiter)
		if err != nil {
			errs = append(errs, err)
		}
		in.delim = d
	}
	sepGiven := cmd.Flags().Changed("key-separator")
	if sepGiven {
		sep, err := parseKeySeparator(f.keySeparator)
		if err != nil {
			errs = append(errs, err)
		}
		in.sep = sep
	}
	if len(in.sep) > 0 && len(in.delim) > 0 && bytes.Contains(in.sep, in.delim) {
		// The delimiter ends a record before the separator can be seen:
		// every record would go out without a key.
		errs = append(errs, fmt.Errorf("--key-separator %q contains the record delimiter %q, so no record can contain it; give a separator without the delimiter (or another --delimiter)", in.sep, in.delim))
	}
	keyGiven := cmd.Flags().Changed("key")
	if keyGiven {
		in.key = []byte(f.key)
	}
	if keyGiven && sepGiven {
		errs = append(errs, errors.New("give either -k/--key (one key for every record) or --key-separator (a key per record), not both"))
	}
	for _, h := range f.headers {
		name, value, ok := strings.Cut(h, "=")
		switch {
		case !ok:
			errs = append(errs, fmt.Errorf("-H %q: a header is name=value (name= for an empty value)", h))
		case name == "":
			errs = append(errs, fmt.Errorf("-H %q: the header name is empty", h))
		default:
			in.headers = append(in.headers, sdk.Header{Key: name, Value: []byte(value)})
		}
	}
	if f.valueFile != "" {
		in.valueFile = f.valueFile
		for _, other := range []string{"file", "delimiter", "key-separator"} {
			if cmd.Flags().Changed(other) {
				errs = append(errs, fmt.Errorf("--value-file sends one whole file as one record: --%s does not apply", other))
			}
		}
	}
	return in, flagErrors(errs)
}

// flagErrors joins the problems found in the flags, one per line; the
// lines after the first get the "sq: " that main puts before the first.
// It is nil when errs is empty.
func flagErrors(errs []error) error {
	if len(errs) == 0 {
		return nil
	}
	return joinedFlagErrors(errs)
}

type joinedFlagErrors []error

func (e joinedFlagErrors) Error() string {
	parts := make([]string, len(e))
	for i, err := range e {
		parts[i] = err.Error()
	}
	return strings.Join(parts, "\nsq: ")
}

func (e joinedFlagErrors) Unwrap() []error { return e }

func runProduce(cmd *cobra.Command, g *globals, f produceFlags) error {
	pin, err := f.check(cmd)
	if err != nil {
		return err
	}
	addr := g.addr(cmd)
	ctx := cmd.Context()
	in := g.stdin
	for _, o := range []struct{ flag, path string }{{"file", f.file}, {"value-file", pin.valueFile}} {
		if o.path == "" || o.path == "-" {
			continue
		}
		fh, err := openInput(ctx, o.flag, o.path)
		if err != nil {
			if ctx.Err() != nil {
				fmt.Fprintf(g.stderr, "sq: interrupted while opening --%s %s (a FIFO without a writer?): nothing was sent to %s\n", o.flag, o.path, addr)
			}
			return err
		}
		defer fh.Close()
		in = fh
	}
	timeout, err := g.connectTimeout(cmd)
	if err != nil {
		return err
	}
	p, err := sdk.NewProducer(ctx, sdk.ProducerConfig{Addr: addr, ClientID: "sq-cli", DialTimeout: timeout, Acks: pin.acks, TLSConfig: g.tlsConf, SASL: g.sasl})
	if err != nil {
		return connectError(addr, err)
	}
	defer p.Close()
	info, err := p.Client().DescribeTopic(ctx, f.topic)
	if err != nil {
		return apiError(addr, err)
	}
	if f.partition >= 0 && uint32(f.partition) >= info.Partitions {
		return api.NewError(api.CodeUnknownPartition, "topic %q has partitions 0-%d, not %d", f.topic, info.Partitions-1, f.partition)
	}
	if in == g.stdin && isTerminal(in) {
		// Typed by hand: say that sq waits for input and how to end it.
		what := "records for %s from the terminal, one per line"
		if pin.valueFile != "" {
			what = "one record for %s from the terminal"
		} else if cmd.Flags().Changed("delimiter") {
			what = "records for %s from the terminal, split at --delimiter"
		}
		fmt.Fprintf(g.stderr, "sq: reading "+what+"; Ctrl-D ends the input, Ctrl-C stops\n", f.topic)
	}
	s := &produceSession{
		addr:      addr,
		p:         p,
		topic:     f.topic,
		in:        pin,
		partition: f.partition,
		maxRecord: int(p.Client().Limits().MaxRecordBytes),
		maxBatch:  int(p.Client().Limits().MaxBatchBytes),
		ranges:    map[uint32]*offsetRanges{},
		stderr:    g.stderr,
	}
	var src recordSource
	if pin.valueFile != "" {
		src = &wholeFile{r: in, name: pin.valueFile, limit: s.maxRecord}
	} else {
		src = newDelimReader(in, pin.delim, s.maxRecord+len(pin.sep))
	}
	runErr := s.run(ctx, src)
	fmt.Fprintln(g.stdout, s.summary(info.Partitions))
	return s.result(ctx, runErr)
}

// openInput opens the input file named by --flag, before sq connects: a
// directory or a file that cannot be opened is refused with the flag's
// name. Opening a FIFO waits for a writer; ctx (Ctrl-C) ends that wait,
// and then the error is ctx's.
func openInput(ctx context.Context, flag, path string) (*os.File, error) {
	type opened struct {
		fh  *os.File
		err error
	}
	done := make(chan opened, 1)
	abandoned := make(chan struct{})
	go func() {
		fh, err := os.Open(path)
		select {
		case done <- opened{fh, err}:
		case <-abandoned:
			if fh != nil {
				fh.Close()
			}
		}
	}()
	var o opened
	select {
	case o = <-done:
	case <-ctx.Done():
		close(abandoned)
		return nil, ctx.Err()
	}
	if o.err != nil {
		return nil, fmt.Errorf("--%s: %w", flag, o.err)
	}
	if st, err := o.fh.Stat(); err == nil && st.IsDir() {
		o.fh.Close()
		return nil, fmt.Errorf("--%s %s is a directory; give a file (or - for stdin)", flag, path)
	}
	return o.fh, nil
}

// produceSession sends the records of one `sq produce` run.
type produceSession struct {
	addr      string // the server address, for error messages
	p         *sdk.Producer
	topic     string
	in        produceInput
	partition int // -1: let the producer choose
	maxRecord int
	maxBatch  int
	stderr    io.Writer

	sent     int // records handed to the server (acknowledged or not)
	acked    int
	failed   int
	firstErr error        // the first record's failure
	failedAt offsetRanges // record numbers of the failures
	ranges   map[uint32]*offsetRanges

	pinned partitionRun // -p: the batches' producer id and sequence
}

// recordSource yields the input's records: a lineReader, or a wholeFile.
type recordSource interface {
	// next returns the next record, valid until the following call, and
	// its 1-based number; io.EOF at the end.
	next() ([]byte, int, error)
	// pending reports whether more input is buffered, so a chunk need not
	// end yet.
	pending() bool
}

func (lr *lineReader) pending() bool { return lr.r.Buffered() > 0 }

// wholeFile is the input of --value-file: one record of every byte of r,
// at most limit of them.
type wholeFile struct {
	r     io.Reader
	name  string
	limit int
	done  bool
}

func (w *wholeFile) next() ([]byte, int, error) {
	if w.done {
		return nil, 1, io.EOF
	}
	w.done = true
	data, err := io.ReadAll(io.LimitReader(w.r, int64(w.limit)+1))
	if err != nil {
		return nil, 1, fmt.Errorf("--value-file %s: %w", w.name, err)
	}
	if len(data) > w.limit {
		return nil, 1, api.NewError(api.CodeMessageTooLarge, "--value-file %s: more than the server's record limit of %d bytes (key, value and headers; sq-server --max-record-bytes)", w.name, w.limit)
	}
	return data, 1, nil
}

func (w *wholeFile) pending() bool { return false }

// chunk is a run of input records sent with one SendBatch call. err, set
// in the last chunk only, is why reading stopped (nil at the end of input).
type chunk struct {
	msgs  []sdk.ProducerMessage
	lines []int // input record number of each record
	last  bool
	err   error
}

// run sends the chunks that read produces, one after the other. It stops at
// the end of the input, the first record that cannot be sent, the first
// chunk with a failed record, or Ctrl-C (then it returns ctx's error).
// Reading runs in its own goroutine so Ctrl-C is noticed while the input (a
// terminal, say) has nothing to read.
func (s *produceSession) run(ctx context.Context, src recordSource) error {
	chunks := make(chan chunk, 1)
	stop := make(chan struct{})
	defer close(stop)
	go s.read(src, chunks, stop)
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case c := <-chunks:
			if err := s.send(ctx, c); err != nil {
				return err
			}
			if c.last {
				return c.err
			}
		}
	}
}

// unit names one input record in messages: "line" when records are lines,
// "record" otherwise.
func (s *produceSession) unit() string {
	if s.in.valueFile == "" && string(s.in.delim) == "\n" {
		return "line"
	}
	return "record"
}

// read splits the input into chunks of at most produceBatchRecords records
// and about produceBatchBytes bytes. A chunk also ends when no more input is
// buffered, so lines typed at a terminal are sent as they are entered.
func (s *produceSession) read(src recordSource, chunks chan<- chunk, stop <-chan struct{}) {
	var (
		c   chunk
		buf []byte // backing store of c's keys and values
	)
	put := func() bool {
		select {
		case chunks <- c:
			c, buf = chunk{}, nil
			return true
		case <-stop:
			return false
		}
	}
	hdrs := make([]batch.RecordHeader, len(s.in.headers))
	for i, h := range s.in.headers {
		hdrs[i] = batch.RecordHeader{Key: h.Key, Value: h.Value}
	}
	for {
		line, n, err := src.next()
		if tl := (*lineTooLongError)(nil); errors.As(err, &tl) {
			err = api.NewError(api.CodeMessageTooLarge, "%s %d is longer than the server's record limit of %d bytes", s.unit(), tl.line, s.maxRecord)
		}
		if err == nil {
			key, value := splitKey(line, s.in.sep)
			if s.in.key != nil {
				key = s.in.key
			}
			if size := batch.RecordSize(key, value, hdrs); size > s.maxRecord {
				err = api.NewError(api.CodeMessageTooLarge, "%s %d: record of %d bytes (key+value+headers) over the server's record limit of %d bytes", s.unit(), n, size, s.maxRecord)
			} else {
				buf = s.add(&c, buf, key, value, n)
			}
		}
		if err != nil {
			c.last = true
			if !errors.Is(err, io.EOF) {
				c.err = err
			}
			put()
			return
		}
		if len(c.msgs) >= produceBatchRecords || len(buf) >= produceBatchBytes || !src.pending() {
			if !put() {
				return
			}
		}
	}
}

// splitKey splits line at the first sep into key and value; without sep
// (or when sep is empty) the whole line is the value and the key is nil.
func splitKey(line, sep []byte) (key, value []byte) {
	if len(sep) == 0 {
		return nil, line
	}
	k, v, ok := bytes.Cut(line, sep)
	if !ok {
		return nil, line
	}
	return k, v
}

// add copies key and value into buf and queues them in c. buf may be
// reallocated; earlier slices keep pointing at the old array, which is
// never written again. A fixed key (-k) is shared, not copied.
func (s *produceSession) add(c *chunk, buf, key, value []byte, line int) []byte {
	k := key
	if key != nil && s.in.key == nil {
		start := len(buf)
		buf = append(buf, key...)
		k = buf[start:len(buf):len(buf)]
	}
	start := len(buf)
	buf = append(buf, value...)
	v := buf[start:len(buf):len(buf)]
	c.msgs = append(c.msgs, sdk.ProducerMessage{Topic: s.topic, Key: k, Value: v, Headers: s.in.headers})
	c.lines = append(c.lines, line)
	return buf
}

// send sends the records of c and records the outcome. It returns
// errNotAcked when a record failed.
func (s *produceSession) send(ctx context.Context, c chunk) error {
	if len(c.msgs) == 0 {
		return nil
	}
	var acks []sdk.Ack
	if s.partition >= 0 {
		acks = s.sendToPartition(ctx, c.msgs, uint32(s.partition))
	} else {
		// Ctrl-C cancels a send in flight: its records are reported as
		// not acknowledged (they may or may not be stored).
		acks, _ = s.p.SendBatch(ctx, c.msgs)
	}
	s.sent += len(acks)
	for i, a := range acks {
		if a.Err != nil {
			s.failed++
			s.failedAt.add(uint64(c.lines[i]))
			if s.firstErr == nil {
				s.firstErr = a.Err
			}
			continue
		}
		s.acked++
		r := s.ranges[a.Partition]
		if r == nil {
			r = &offsetRanges{}
			s.ranges[a.Partition] = r
		}
		r.add(a.Offset)
	}
	if s.failed > 0 {
		return errNotAcked
	}
	return nil
}

// errNotAcked stops a run at the first chunk with a failed record; result
// turns it into the summary error.
var errNotAcked = errors.New("records not acknowledged")

// maxListedRanges bounds the ranges of record numbers named in the
// not-acknowledged message.
const maxListedRanges = 5

// result is the error `sq produce` ends with, given the error its run
// stopped with. Failed records make one line: how many of those sent were
// not acknowledged, their record numbers (the first few ranges) and why,
// with the server's address when it could not be reached. After Ctrl-C
// that line, or one saying that every record sent was acknowledged, is
// printed here (main prints no context.Canceled) and ctx's error returned.
func (s *produceSession) result(ctx context.Context, runErr error) error {
	var notAcked error
	if s.failed > 0 {
		notAcked = s.notAcked()
	}
	if ctx.Err() != nil {
		switch {
		case notAcked == nil && s.sent == 0:
			fmt.Fprintf(s.stderr, "sq: interrupted: no records were sent to %s\n", s.addr)
		case notAcked == nil:
			fmt.Fprintf(s.stderr, "sq: interrupted: all %d record%s sent to %s acknowledged; the input after them was not sent\n", s.sent, plural(s.sent), s.addr)
		default:
			fmt.Fprintf(s.stderr, "sq: interrupted: %v\n", notAcked)
		}
		return ctx.Err()
	}
	if notAcked != nil {
		return notAcked
	}
	if errors.Is(runErr, sdk.ErrConnection) {
		return connectError(s.addr, runErr)
	}
	return runErr
}

// notAcked describes the failed records, for example "1234 of 20000
// records not acknowledged (lines 18767-20000): server 127.0.0.1:6064
// unreachable: ...", or, when a partition's leader other than the server
// could not be reached, "...: the leader of orders partition 2,
// 10.0.0.3:6064, could not be reached: ...".
func (s *produceSession) notAcked() error {
	where := s.unit() + "s " + s.failedAt.first(maxListedRanges)
	if s.failed == 1 {
		where = s.unit() + " " + s.failedAt.first(maxListedRanges)
	}
	why, leader := leaderUnreachable(s.addr, s.firstErr)
	switch {
	case leader:
		// The partition's leader, which need not be the --server node.
	case errors.Is(s.firstErr, sdk.ErrConnection):
		why = fmt.Errorf("server %s unreachable: %w", s.addr, s.firstErr)
	case errors.Is(s.firstErr, sdk.ErrDeliveryTimeout):
		// A server that accepts connections but does not answer (stopped,
		// overloaded): name it, as for one that cannot be reached.
		why = fmt.Errorf("server %s did not acknowledge them in time: %w", s.addr, s.firstErr)
	case errors.Is(s.firstErr, context.Canceled):
		why = fmt.Errorf("the send to %s was interrupted; they may or may not be stored", s.addr)
	default:
		why = apiError(s.addr, s.firstErr)
	}
	return fmt.Errorf("%d of %d record%s not acknowledged (%s): %w", s.failed, s.sent, plural(s.sent), where, why)
}

// sendToPartition publishes the queued records to partition p in batches
// under the server's batch limit, one after the other, retrying retriable
// failures as the SDK producer does: sdk.DefaultRetries times, with the
// SDK's doubling backoff, within sdk.DefaultDeliveryTimeout per chunk.
// Each batch carries the run's producer id and next sequence (s.pinned), and
// a retry sends the same bytes, so a leader that stored an earlier attempt
// answers with its offsets and stores it once.
func (s *produceSession) sendToPartition(ctx context.Context, msgs []sdk.ProducerMessage, p uint32) []sdk.Ack {
	acks := make([]sdk.Ack, len(msgs))
	var b batch.Builder
	var failed error
	hdrs := make([]batch.RecordHeader, len(s.in.headers))
	for i, h := range s.in.headers {
		hdrs[i] = batch.RecordHeader{Key: h.Key, Value: h.Value}
	}
	// The chunk's delivery budget, as the SDK producer's: a silent server
	// fails it within the budget instead of once per attempt.
	dctx, cancel := context.WithTimeout(ctx, sdk.DefaultDeliveryTimeout)
	defer cancel()
	send := func(from, to int) {
		defer b.Reset()
		if failed == nil {
			err := s.pinned.stamp(dctx, s.p.LeaderClient(dctx, s.topic, p), &b, s.stderr)
			var data []byte
			if err == nil {
				data, err = b.Build()
			}
			var res sdk.PublishResult
			if err == nil {
				res, err = s.publishRetrying(ctx, dctx, p, data)
			}
			failed = err
			for j := from; j < to && err == nil; j++ {
				acks[j] = sdk.Ack{Topic: s.topic, Partition: p, Offset: res.BaseOffset + uint64(j-from), Durability: res.Durability, Replicas: res.Replicas}
			}
		}
		for j := from; j < to && failed != nil; j++ {
			acks[j] = sdk.Ack{Topic: s.topic, Partition: p, Err: failed}
		}
	}
	from := 0
	for i, m := range msgs {
		// 128 bytes of slack per record for the Cap'n Proto encoding.
		if b.Len() > 0 && b.EstimatedSize()+batch.RecordSize(m.Key, m.Value, hdrs)+128 > s.maxBatch {
			send(from, i)
			from = i
		}
		b.Add(m.Key, m.Value, hdrs, 0)
	}
	send(from, len(msgs))
	return acks
}

// publishRetrying publishes data to partition p on its leader, retrying retriable
// failures sdk.DefaultRetries times with a doubling backoff, until dctx
// (the delivery budget) ends; then the error is the delivery timeout
// wrapping the last failure. When ctx (Ctrl-C) ends, the error is the
// failure being retried, or ctx's.
func (s *produceSession) publishRetrying(ctx, dctx context.Context, p uint32, data []byte) (sdk.PublishResult, error) {
	var last error
	wait := sdk.DefaultRetryBackoff
	for attempt := 0; ; attempt++ {
		res, err := onLeader(dctx, s.p, s.topic, p, func(c *sdk.Client) (sdk.PublishResult, error) {
			res, err := c.PublishAcks(dctx, s.topic, p, data, s.in.acks)
			if errors.Is(err, sdk.ErrConnection) {
				// Name the leader that could not be reached, which need
				// not be the --server node.
				err = &sdk.LeaderConnectionError{Topic: s.topic, Partition: p, Leader: c.Addr(), Err: err}
			}
			return res, err
		})
		switch {
		case err == nil:
			return res, nil
		case dctx.Err() != nil && ctx.Err() == nil:
			return res, deliveryTimeout(last)
		case !sdk.IsRetriable(err) || attempt >= sdk.DefaultRetries:
			return res, err
		}
		last = err
		if sleepCtx(dctx, wait) != nil {
			if ctx.Err() == nil {
				return res, deliveryTimeout(last)
			}
			return res, err
		}
		wait = min(2*wait, sdk.DefaultRetryBackoffMax)
	}
}

// deliveryTimeout is the failure of a batch of sendToPartition that was
// not acknowledged within the delivery budget, wrapping the last failure
// (nil when the first attempt used it all).
func deliveryTimeout(last error) error {
	if last == nil {
		return fmt.Errorf("%w: not acknowledged within %v", sdk.ErrDeliveryTimeout, sdk.DefaultDeliveryTimeout)
	}
	return fmt.Errorf("%w: not acknowledged within %v: %w", sdk.ErrDeliveryTimeout, sdk.DefaultDeliveryTimeout, last)
}

// summary describes what was acknowledged, for example "produced 1234
// records to orders: partition 0 offsets 0-411, partition 1 offsets 0-822";
// a partition that got one record says "partition 2 offset 8".
func (s *produceSession) summary(partitions uint32) string {
	var b strings.Builder
	fmt.Fprintf(&b, "produced %d record%s to %s", s.acked, plural(s.acked), s.topic)
	sep := ": "
	for p := range partitions {
		r := s.ranges[p]
		if r == nil {
			continue
		}
		word := "offsets"
		if len(r.r) == 1 && r.r[0][0] == r.r[0][1] {
			word = "offset"
		}
		fmt.Fprintf(&b, "%spartition %d %s %s", sep, p, word, r)
		sep = ", "
	}
	if s.failed > 0 {
		fmt.Fprintf(&b, " (%d not acknowledged)", s.failed)
	}
	return b.String()
}

// offsetRanges collects acknowledged offsets of one partition as sorted,
// merged ranges. Offsets arrive in increasing order from one run, except
// that another producer may interleave.
type offsetRanges struct {
	r [][2]uint64 // inclusive [first, last]
}

func (o *offsetRanges) add(off uint64) {
	if n := len(o.r); n > 0 && o.r[n-1][1]+1 == off {
		o.r[n-1][1] = off
		return
	}
	o.r = append(o.r, [2]uint64{off, off})
}

// String formats the ranges as "0-411" or "0-9,20-29" (a single offset as
// "7").
func (o *offsetRanges) String() string { return o.first(len(o.r)) }

// first formats the first n ranges as String does, followed by ",..." when
// there are more.
func (o *offsetRanges) first(n int) string {
	parts := make([]string, 0, min(n, len(o.r))+1)
	for i, r := range o.r {
		if i == n {
			parts = append(parts, "...")
			break
		}
		if r[0] == r[1] {
			parts = append(parts, fmt.Sprint(r[0]))
		} else {
			parts = append(parts, fmt.Sprintf("%d-%d", r[0], r[1]))
		}
	}
	return strings.Join(parts, ",")
}

// isTerminal reports whether r is a terminal (stdin typed by hand), for
// the hint of sq produce.
func isTerminal(r io.Reader) bool {
	f, ok := r.(interface{ Fd() uintptr })
	return ok && term.IsTerminal(int(f.Fd()))
}
