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
	// maxPrintedErrors bounds the per-record errors printed.
	maxPrintedErrors = 10
)

type produceFlags struct {
	topic        string
	file         string
	keySeparator string
	partition    int
}

func newProduceCommand(g *globals) *cobra.Command {
	var f produceFlags
	cmd := &cobra.Command{
		Use:   "produce --topic TOPIC [--file FILE]",
		Short: "Produce one record per line of the input",
		Long: `Produce one record per line of the input (stdin, or --file).

Every '\n' ends a record, so an empty line is an empty record, and the bytes
after the last '\n' are one more record: a final newline adds no record
("a\n" is 1 record, "a\n\nb" is 3, an empty input is 0, "\n" is one empty
record). All other bytes are kept exactly: with CRLF line ends each value
ends in '\r', and invalid UTF-8 is sent as is. A line may be as long as the
record limit the server states in its handshake (1 MiB by default); a longer
line is an error naming its line number, and the records before it are sent.

The input is sent in chunks of up to 4096 records or about 1 MiB, one chunk
after the other; a chunk also ends when the input pauses, so lines typed at a
terminal are sent as they are entered. Records without a key are spread over
the partitions, one partition per chunk; with --key-separator, records go to
the partition of their key's hash. Either way each partition receives the
records in input order. With --partition every record goes to that partition.
Ctrl-C stops reading; records not yet acknowledged are reported as failed.

When every record is acknowledged sq prints how many, with the offset ranges
per partition. Any record that fails is printed with its line number and sq
exits with status 1 after reporting what was acknowledged.`,
		Example: "  sq produce --topic orders --file orders.txt\n" +
			"  printf 'alice:hello\\nbob:hi\\n' | sq produce --topic chat --key-separator :",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runProduce(cmd, g, f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.topic, "topic", "", "topic to produce to (required)")
	fl.StringVar(&f.file, "file", "", "read records from this file instead of stdin")
	fl.StringVar(&f.keySeparator, "key-separator", "", "split each line at the first occurrence of this string: key before, value after (a line without it has no key)")
	fl.IntVar(&f.partition, "partition", -1, "send every record to this partition; -1 spreads keyless records and places keyed ones by the hash of the key")
	_ = cmd.MarkFlagRequired("topic")
	return cmd
}

func runProduce(cmd *cobra.Command, g *globals, f produceFlags) error {
	in := g.stdin
	if f.file != "" {
		fh, err := os.Open(f.file)
		if err != nil {
			return err
		}
		defer fh.Close()
		in = fh
	}
	addr := g.addr(cmd)
	ctx := cmd.Context()
	p, err := sdk.NewProducer(ctx, sdk.ProducerConfig{Addr: addr, ClientID: "sq-cli", DialTimeout: dialTimeout})
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
	s := &produceSession{
		addr:      addr,
		p:         p,
		topic:     f.topic,
		sep:       []byte(f.keySeparator),
		partition: f.partition,
		maxRecord: int(p.Client().Limits().MaxRecordBytes),
		maxBatch:  int(p.Client().Limits().MaxBatchBytes),
		ranges:    map[uint32]*offsetRanges{},
		stderr:    g.stderr,
	}
	runErr := s.run(cmd, newLineReader(in, s.maxRecord+len(s.sep)))
	fmt.Fprintln(g.stdout, s.summary(info.Partitions))
	if errors.Is(runErr, sdk.ErrConnection) {
		return connectError(addr, runErr)
	}
	return runErr
}

// produceSession sends the records of one `sq produce` run.
type produceSession struct {
	addr      string // the server address, for error messages
	p         *sdk.Producer
	topic     string
	sep       []byte
	partition int // -1: let the producer choose
	maxRecord int
	maxBatch  int
	stderr    io.Writer

	acked  int
	failed int
	ranges map[uint32]*offsetRanges
}

// chunk is a run of input records sent with one SendBatch call. err, set
// in the last chunk only, is why reading stopped (nil at the end of input).
type chunk struct {
	msgs  []sdk.ProducerMessage
	lines []int // input line number of each record
	last  bool
	err   error
}

// run sends the chunks that read produces, one after the other. It stops at
// the end of the input, the first line that cannot be sent, the first chunk
// with a failed record, or Ctrl-C. Reading runs in its own goroutine so
// Ctrl-C is noticed while the input (a terminal, say) has nothing to read.
func (s *produceSession) run(cmd *cobra.Command, lr *lineReader) error {
	ctx := cmd.Context()
	chunks := make(chan chunk, 1)
	stop := make(chan struct{})
	defer close(stop)
	go s.read(lr, chunks, stop)
	for {
		select {
		case <-ctx.Done():
			return errors.New("interrupted")
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

// read splits the input into chunks of at most produceBatchRecords records
// and about produceBatchBytes bytes. A chunk also ends when no more input is
// buffered, so lines typed at a terminal are sent as they are entered.
func (s *produceSession) read(lr *lineReader, chunks chan<- chunk, stop <-chan struct{}) {
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
	for {
		line, n, err := lr.next()
		if tl := (*lineTooLongError)(nil); errors.As(err, &tl) {
			err = api.NewError(api.CodeMessageTooLarge, "line %d is longer than the server's record limit of %d bytes", tl.line, s.maxRecord)
		}
		if err == nil {
			key, value := splitKey(line, s.sep)
			if size := batch.RecordSize(key, value, nil); size > s.maxRecord {
				err = api.NewError(api.CodeMessageTooLarge, "line %d: record of %d bytes (key+value) over the server's record limit of %d bytes", n, size, s.maxRecord)
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
		if len(c.msgs) >= produceBatchRecords || len(buf) >= produceBatchBytes || lr.r.Buffered() == 0 {
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
// never written again.
func (s *produceSession) add(c *chunk, buf, key, value []byte, line int) []byte {
	var k []byte
	if key != nil {
		start := len(buf)
		buf = append(buf, key...)
		k = buf[start:len(buf):len(buf)]
	}
	start := len(buf)
	buf = append(buf, value...)
	v := buf[start:len(buf):len(buf)]
	c.msgs = append(c.msgs, sdk.ProducerMessage{Topic: s.topic, Key: k, Value: v})
	c.lines = append(c.lines, line)
	return buf
}

// send sends the records of c and records the outcome.
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
	var first error
	for i, a := range acks {
		if a.Err != nil {
			if s.failed < maxPrintedErrors {
				fmt.Fprintf(s.stderr, "sq: line %d: %v\n", c.lines[i], apiError(s.addr, a.Err))
			}
			s.failed++
			if first == nil {
				first = a.Err
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
	if first != nil {
		return &notAckedError{n: s.failed, first: first}
	}
	return nil
}

// notAckedError reports records whose errors were already printed one by
// one; it wraps the first of them for errors.Is.
type notAckedError struct {
	n     int
	first error
}

func (e *notAckedError) Error() string {
	return fmt.Sprintf("%d record%s not acknowledged", e.n, plural(e.n))
}

func (e *notAckedError) Unwrap() error { return e.first }

// sendToPartition publishes the queued records to partition p in batches
// under the server's batch limit, one after the other, retrying retriable
// failures as the SDK producer does.
func (s *produceSession) sendToPartition(ctx context.Context, msgs []sdk.ProducerMessage, p uint32) []sdk.Ack {
	acks := make([]sdk.Ack, len(msgs))
	var b batch.Builder
	var failed error
	send := func(from, to int) {
		defer b.Reset()
		if failed == nil {
			data, err := b.Build()
			var res sdk.PublishResult
			for attempt := 0; err == nil; attempt++ {
				res, err = s.p.Client().Publish(ctx, s.topic, p, data)
				if err == nil || !sdk.IsRetriable(err) || attempt >= sdk.DefaultRetries {
					break
				}
				if sleepErr := sleepCtx(ctx, sdk.DefaultRetryBackoff); sleepErr != nil {
					err = sleepErr
				}
			}
			failed = err
			for j := from; j < to && err == nil; j++ {
				acks[j] = sdk.Ack{Topic: s.topic, Partition: p, Offset: res.BaseOffset + uint64(j-from), Durability: res.Durability}
			}
		}
		for j := from; j < to && failed != nil; j++ {
			acks[j] = sdk.Ack{Topic: s.topic, Partition: p, Err: failed}
		}
	}
	from := 0
	for i, m := range msgs {
		// 128 bytes of slack per record for the Cap'n Proto encoding.
		if b.Len() > 0 && b.EstimatedSize()+len(m.Key)+len(m.Value)+128 > s.maxBatch {
			send(from, i)
			from = i
		}
		b.Add(m.Key, m.Value, nil, 0)
	}
	send(from, len(msgs))
	return acks
}

// summary describes what was acknowledged, for example "produced 1234
// records to orders: partition 0 offsets 0-411, partition 1 offsets 0-822".
func (s *produceSession) summary(partitions uint32) string {
	var b strings.Builder
	fmt.Fprintf(&b, "produced %d record%s to %s", s.acked, plural(s.acked), s.topic)
	sep := ": "
	for p := range partitions {
		r := s.ranges[p]
		if r == nil {
			continue
		}
		fmt.Fprintf(&b, "%spartition %d offsets %s", sep, p, r)
		sep = ", "
	}
	if s.failed > 0 {
		fmt.Fprintf(&b, " (%d failed)", s.failed)
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
func (o *offsetRanges) String() string {
	parts := make([]string, len(o.r))
	for i, r := range o.r {
		if r[0] == r[1] {
			parts[i] = fmt.Sprint(r[0])
		} else {
			parts[i] = fmt.Sprintf("%d-%d", r[0], r[1])
		}
	}
	return strings.Join(parts, ",")
}
