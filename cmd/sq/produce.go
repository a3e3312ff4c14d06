package main

import (
	"bytes"
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

Records without a key are spread over the partitions, one partition per chunk
of up to 4096 records or about 1 MiB; with --key-separator, records go to the
partition of their key's hash. Either way each partition receives the records
in input order. With --partition every record goes to that partition.

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
	fl.IntVar(&f.partition, "partition", -1, "send every record to this partition (default: spread keyless records, hash keyed ones)")
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
	p         *sdk.Producer
	topic     string
	sep       []byte
	partition int // -1: let the producer choose
	maxRecord int
	maxBatch  int
	stderr    io.Writer

	buf   []byte // backing store of the pending records' keys and values
	msgs  []sdk.ProducerMessage
	lines []int // input line number of each pending record

	acked  int
	failed int
	ranges map[uint32]*offsetRanges
}

// run reads every line and sends the records in chunks. It stops at the
// first line that cannot be read or the first chunk with a failed record.
func (s *produceSession) run(cmd *cobra.Command, lr *lineReader) error {
	for {
		if err := cmd.Context().Err(); err != nil {
			return errors.Join(errors.New("interrupted"), s.flush(cmd))
		}
		line, n, err := lr.next()
		if errors.Is(err, io.EOF) {
			return s.flush(cmd)
		}
		if tl := (*lineTooLongError)(nil); errors.As(err, &tl) {
			err = api.NewError(api.CodeMessageTooLarge, "line %d is longer than the server's record limit of %d bytes", tl.line, s.maxRecord)
		}
		if err != nil {
			return errors.Join(s.flush(cmd), err)
		}
		key, value := splitKey(line, s.sep)
		if size := batch.RecordSize(key, value, nil); size > s.maxRecord {
			return errors.Join(s.flush(cmd), api.NewError(api.CodeMessageTooLarge,
				"line %d: record of %d bytes (key+value) over the server's record limit of %d bytes", n, size, s.maxRecord))
		}
		s.add(key, value, n)
		if len(s.msgs) >= produceBatchRecords || len(s.buf) >= produceBatchBytes {
			if err := s.flush(cmd); err != nil {
				return err
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

// add copies key and value into the session's buffer and queues them. The
// buffer may be reallocated; earlier slices keep pointing at the old array,
// which is never written again.
func (s *produceSession) add(key, value []byte, line int) {
	var k []byte
	if key != nil {
		start := len(s.buf)
		s.buf = append(s.buf, key...)
		k = s.buf[start:len(s.buf):len(s.buf)]
	}
	start := len(s.buf)
	s.buf = append(s.buf, value...)
	v := s.buf[start:len(s.buf):len(s.buf)]
	s.msgs = append(s.msgs, sdk.ProducerMessage{Topic: s.topic, Key: k, Value: v})
	s.lines = append(s.lines, line)
}

// flush sends the queued records and records the outcome.
func (s *produceSession) flush(cmd *cobra.Command) error {
	if len(s.msgs) == 0 {
		return nil
	}
	defer func() {
		s.msgs = s.msgs[:0]
		s.lines = s.lines[:0]
		s.buf = nil // the old array may still be referenced by a retrying send
	}()
	var acks []sdk.Ack
	if s.partition >= 0 {
		acks = s.sendToPartition(cmd, uint32(s.partition))
	} else {
		// Ctrl-C ends the read loop, not a send in flight: the records
		// already read are sent so their outcome can be reported.
		acks, _ = s.p.SendBatch(contextWithoutCancel(cmd), s.msgs)
	}
	var first error
	for i, a := range acks {
		if a.Err != nil {
			if s.failed < maxPrintedErrors {
				fmt.Fprintf(s.stderr, "sq: line %d: %v\n", s.lines[i], apiError("", a.Err))
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
		return fmt.Errorf("%d record%s not acknowledged, first: %w", s.failed, plural(s.failed), first)
	}
	return nil
}

// sendToPartition publishes the queued records to partition p in batches
// under the server's batch limit, one after the other, retrying retriable
// failures as the SDK producer does.
func (s *produceSession) sendToPartition(cmd *cobra.Command, p uint32) []sdk.Ack {
	ctx := contextWithoutCancel(cmd)
	acks := make([]sdk.Ack, len(s.msgs))
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
	for i, m := range s.msgs {
		// 128 bytes of slack per record for the Cap'n Proto encoding.
		if b.Len() > 0 && b.EstimatedSize()+len(m.Key)+len(m.Value)+128 > s.maxBatch {
			send(from, i)
			from = i
		}
		b.Add(m.Key, m.Value, nil, 0)
	}
	send(from, len(s.msgs))
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
