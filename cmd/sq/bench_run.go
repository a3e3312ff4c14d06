package main

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/schollz/progressbar/v3"

	"github.com/seedqueue/sq/sdk"
)

// Bounds of the latency histograms, in microseconds, and their precision.
const (
	histMinMicros = 1
	histMaxMicros = 60_000_000 // 60 s
	histSigFigs   = 3
	// slabBytes is the size of the blocks record values are cut from.
	slabBytes = 1 << 20
	// fetchWait bounds one consumer long poll, so consumers notice the end.
	fetchWait = 100 * time.Millisecond
	// sampleEvery is the period of the throughput samples.
	sampleEvery = 250 * time.Millisecond
	// progressLineEvery is the period of the progress lines printed when
	// stderr is not a terminal.
	progressLineEvery = 2 * time.Second
)

// hist is an HdrHistogram of latencies in microseconds, safe for
// concurrent use.
type hist struct {
	mu sync.Mutex
	h  *hdrhistogram.Histogram
}

func newHist() *hist {
	return &hist{h: hdrhistogram.New(histMinMicros, histMaxMicros, histSigFigs)}
}

// recordSince records now minus each value's intended send time.
func (h *hist) recordSince(now int64, values [][]byte) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, v := range values {
		if len(v) < 8 {
			continue
		}
		us := (now - int64(binary.LittleEndian.Uint64(v))) / 1000
		_ = h.h.RecordValue(min(max(us, histMinMicros), histMaxMicros))
	}
}

// benchRun is one `sq bench` run.
type benchRun struct {
	addr     string
	timeout  time.Duration     // --timeout: bounds each dial plus handshake; 0: the SDK's default
	tls      *tls.Config       // the TLS flags' configuration; nil: plaintext
	sasl     sdk.SASLMechanism // --user's credentials; nil: anonymous
	f        benchFlags
	progress io.Writer // where the progress bar goes; nil: no bar
	lines    io.Writer // where progress lines go (stderr not a terminal); nil: none

	// stopProducing ends the producers' loops: the first batch that fails
	// for good stops the run, so a dead server is reported instead of
	// being fed for the whole --count or --duration.
	stopProducing context.CancelFunc

	sent     atomic.Int64 // records accepted by the producers
	produced atomic.Int64 // records acknowledged
	consumed atomic.Int64 // records read by consumers
	errs     atomic.Int64 // records failed
	firstErr atomic.Pointer[error]
	// unreached gathers the partition leaders that failed records could
	// not reach, so a failure names them rather than the --server node.
	unreached unreachedLeaders

	ack, e2e *hist

	mu      sync.Mutex
	samples []BenchSample
}

// newBenchRun prepares a run; progress receives the progress bar and lines
// the progress lines (either may be nil).
func newBenchRun(addr string, f benchFlags, progress, lines io.Writer) *benchRun {
	return &benchRun{addr: addr, f: f, progress: progress, lines: lines, ack: newHist(), e2e: newHist(), stopProducing: func() {}}
}

// fail records a failure of n records (at least one, so a failed run never
// reports zero errors).
func (b *benchRun) fail(n int64, err error) {
	b.errs.Add(max(n, 1))
	b.firstErr.CompareAndSwap(nil, &err)
	b.unreached.note(err)
}

// firstError returns the first failure, or nil.
func (b *benchRun) firstError() error {
	if e := b.firstErr.Load(); e != nil {
		return *e
	}
	return nil
}

// run executes the mode and returns its result. When ctx ends (Ctrl-C)
// the run stops at once and the result holds what was done so far, with
// Interrupted set, and the error is ctx's. Other errors (a producer or
// consumer that cannot connect) come with the result of what ran.
func (b *benchRun) run(ctx context.Context) (*BenchResult, error) {
	stopSampler := b.startSampler(ctx)
	res := &BenchResult{}
	var consumers *benchConsumers
	start := time.Now()
	pubElapsed, consElapsed := time.Duration(0), time.Duration(0)
	err := func() error {
		var err error
		if b.f.mode == "e2e" {
			if consumers, err = b.startConsumers(ctx); err != nil {
				return err
			}
		}
		err = b.produce(ctx)
		pubElapsed = time.Since(start)
		if err != nil {
			return err
		}
		consStart := start
		if b.f.mode == "consume" {
			if ctx.Err() != nil || b.firstError() != nil {
				// Stopped, or records failed (the server is gone,
				// say): there is no log of --count records to read
				// back, and the read phase is reported as not run.
				return nil
			}
			consStart = time.Now()
			if consumers, err = b.startConsumers(ctx); err != nil {
				return err
			}
		}
		if consumers != nil {
			consumers.drain(ctx, b, b.f.drainWindow)
		}
		consElapsed = time.Since(consStart)
		return nil
	}()
	if consumers != nil {
		consumers.stopAll()
	}
	stopSampler()
	b.fill(res, pubElapsed, consElapsed, consumers != nil)
	if ctx.Err() != nil {
		res.Interrupted = true
		return res, ctx.Err()
	}
	return res, err
}

// produce runs the producers until --count records or --duration, Ctrl-C
// (ctx ends) or the first batch that fails for good.
func (b *benchRun) produce(ctx context.Context) error {
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	b.stopProducing = cancel
	var wg sync.WaitGroup
	errs := make(chan error, b.f.producers)
	start := time.Now()
	for i := range b.f.producers {
		n := int64(0)
		if b.f.count > 0 {
			n = b.f.count / int64(b.f.producers)
			if int64(i) < b.f.count%int64(b.f.producers) {
				n++
			}
		}
		wg.Go(func() {
			if err := b.producer(ctx, pctx, i, n, start); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// producer sends n records (or until --duration when n is 0) through one
// BatchProducer, paced by --rate when set. pctx ends its loop (Ctrl-C, or
// a failed batch of any producer); ctx, which Ctrl-C ends, decides whether
// Close waits for the records in flight.
func (b *benchRun) producer(ctx, pctx context.Context, id int, n int64, start time.Time) error {
	acks, _ := sdk.ParseAcks(b.f.acks) // checked by validate
	slabs := newBenchSlabs(b.f.recordSize)
	bp, err := sdk.NewBatchProducer(ctx, sdk.BatchProducerConfig{
		ProducerConfig: sdk.ProducerConfig{Addr: b.addr, ClientID: fmt.Sprintf("sq-bench-%d", id), DialTimeout: b.timeout, Acks: acks, TLSConfig: b.tls, SASL: b.sasl},
		Linger:         benchLinger(b.f.linger),
		BatchBytes:     b.f.batchBytes,
		MaxInFlight:    b.f.inFlight,
		BufferBytes:    b.f.bufferBytes,
		OnAck: func(a sdk.BatchAck) {
			now := time.Now().UnixNano()
			vals := make([][]byte, len(a.Messages))
			for i := range a.Messages {
				vals[i] = a.Messages[i].Value
			}
			b.ack.recordSince(now, vals)
			b.produced.Add(int64(len(a.Messages)))
			slabs.release(vals)
		},
		OnError: func(e sdk.BatchError) {
			defer releaseMessages(slabs, e.Messages)
			if ctx.Err() != nil && errors.Is(e.Err, context.Canceled) {
				return // cut short by Ctrl-C: counted as not acknowledged
			}
			b.fail(int64(len(e.Messages)), e)
			b.stopProducing()
		},
	})
	if err != nil {
		return &benchConnectError{who: "producer", id: id, of: b.f.producers, err: err}
	}
	sched := benchSchedule{rate: b.f.rate, producers: b.f.producers, id: id}
	keys := benchKeys(b.f.keys, id)
	var sendErr error
	for i := int64(0); n == 0 || i < n; i++ {
		intended, ok := b.waitTurn(pctx, sched, i, n, start)
		if !ok || pctx.Err() != nil {
			break
		}
		v := slabs.next()
		if len(v) >= 8 {
			binary.LittleEndian.PutUint64(v, uint64(intended.UnixNano()))
		}
		m := sdk.ProducerMessage{Topic: b.f.topic, Value: v, Timestamp: intended.UnixMilli()}
		if len(keys) > 0 {
			m.Key = keys[i%int64(len(keys))]
		}
		if err := bp.SendMessage(pctx, m); err != nil {
			sendErr = fmt.Errorf("producer %d: send: %w", id, err)
			break
		}
		b.sent.Add(1)
	}
	// Close waits for the records in flight, within the producer's
	// delivery timeout; after Ctrl-C (ctx done) it gives them up at once.
	if err := bp.CloseContext(ctx); err != nil && sendErr == nil {
		sendErr = err
	}
	if sendErr != nil && pctx.Err() == nil {
		return sendErr
	}
	return nil
}

// releaseMessages gives the values of failed records back to slabs.
func releaseMessages(slabs *benchSlabs, msgs []sdk.ProducerMessage) {
	vals := make([][]byte, len(msgs))
	for i := range msgs {
		vals[i] = msgs[i].Value
	}
	slabs.release(vals)
}

// waitTurn waits until the intended send time of the producer's record i
// under --rate (now without it) and returns it; ok is false when the run
// has no record i: with --count (n > 0) never, with --duration when the
// schedule is complete, or when a producer behind --rate reaches
// --duration plus --drain-timeout, or without --rate at --duration.
func (b *benchRun) waitTurn(ctx context.Context, sched benchSchedule, i, n int64, start time.Time) (intended time.Time, ok bool) {
	now := time.Now()
	if sched.rate <= 0 {
		return now, n > 0 || now.Before(start.Add(b.f.duration))
	}
	at := sched.at(i)
	if n == 0 && at >= b.f.duration {
		return time.Time{}, false
	}
	intended = start.Add(at)
	if d := intended.Sub(now); d > 0 {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return time.Time{}, false
		}
		now = time.Now()
	}
	return intended, n > 0 || now.Before(start.Add(b.f.duration+b.f.drainWindow))
}

// benchSchedule is the send schedule of one producer under --rate: the
// run's records are spaced 1/rate apart and dealt to the producers in turn,
// so record i of producer id is record i*producers+id of the run.
type benchSchedule struct {
	rate          float64 // records/s over all producers; > 0
	producers, id int
}

// at returns the intended send time of the producer's record i, from the
// start of the run. Over a run of length d the producers together send
// the records with at(i) < d: ceil(rate x d) of them.
func (s benchSchedule) at(i int64) time.Duration {
	k := float64(i*int64(s.producers) + int64(s.id))
	return time.Duration(k * float64(time.Second) / s.rate)
}

// benchLinger maps --linger to BatchProducerConfig.Linger: 0 (and below)
// sends each batch at once (sdk.LingerNone).
func benchLinger(d time.Duration) time.Duration {
	if d <= 0 {
		return sdk.LingerNone
	}
	return d
}

// benchKeys returns the keys producer id uses: "key-<k>" for k in [0, n).
func benchKeys(n, id int) [][]byte {
	keys := make([][]byte, n)
	for k := range keys {
		keys[k] = fmt.Appendf(nil, "key-%d", (k+id)%n)
	}
	return keys
}

// benchConsumers are the consumer goroutines of a run.
type benchConsumers struct {
	// clients route each consumer's fetches to the partitions' leaders
	// (route.go); consumer i reads with clients[i].
	clients []*sdk.Producer
	catchUp bool          // consume mode: readers end at the high watermark
	stop    chan struct{} // closed by drain
	readers chan struct{} // closed when every reader has returned
	wg      sync.WaitGroup
	// stopOnce guards stopAll.
	stopOnce sync.Once
}

// startConsumers connects --consumers clients and starts one reader per
// partition. In e2e mode a reader starts at the partition's high watermark
// (only this run's records) and runs until drain stops it; in consume mode
// it reads from the log start up to the high watermark at its start (the
// whole log, catch-up) and then ends.
func (b *benchRun) startConsumers(ctx context.Context) (*benchConsumers, error) {
	bc := &benchConsumers{stop: make(chan struct{}), readers: make(chan struct{})}
	for i := range b.f.consumers {
		c, err := dialRouter(ctx, b.addr, fmt.Sprintf("sq-bench-consumer-%d", i), b.timeout, b.tls, b.sasl)
		if err != nil {
			bc.close()
			return nil, &benchConnectError{who: "consumer", id: i, of: b.f.consumers, err: err}
		}
		bc.clients = append(bc.clients, c)
	}
	ti, err := bc.clients[0].Client().DescribeTopic(ctx, b.f.topic)
	if err != nil {
		bc.close()
		return nil, fmt.Errorf("describe topic %s: %w", b.f.topic, err)
	}
	bc.catchUp = b.f.mode == "consume"
	for _, pi := range ti.PartitionInfos {
		c := bc.clients[int(pi.Partition)%len(bc.clients)]
		from, to := pi.HighWatermark, uint64(math.MaxUint64)
		if bc.catchUp {
			from, to = pi.LogStartOffset, pi.HighWatermark
		}
		bc.wg.Go(func() { b.consume(ctx, c, pi.Partition, from, to, bc.stop) })
	}
	go func() {
		bc.wg.Wait()
		close(bc.readers)
	}()
	return bc, nil
}

// consume reads partition p, on its leader, from offset from until offset
// to or until stop is closed.
func (b *benchRun) consume(ctx context.Context, r *sdk.Producer, p uint32, from, to uint64, stop <-chan struct{}) {
	off := from
	vals := make([][]byte, 0, 1024)
	for off < to {
		select {
		case <-stop:
			return
		default:
		}
		res, err := onLeader(ctx, r, b.f.topic, p, func(c *sdk.Client) (sdk.FetchResult, error) {
			return c.Fetch(ctx, sdk.FetchRequest{Topic: b.f.topic, Partition: p, Offset: off, MaxBytes: 8 << 20, MaxWait: fetchWait})
		})
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if !sdk.IsRetriable(err) {
				b.fail(0, fmt.Errorf("consume partition %d: %w", p, err))
				return
			}
			select { // the next fetch redials; do not spin meanwhile
			case <-stop:
				return
			case <-ctx.Done():
				return
			case <-time.After(fetchWait):
			}
			continue
		}
		now := time.Now().UnixNano()
		vals = vals[:0]
		for i := range res.Messages {
			vals = append(vals, res.Messages[i].Value)
		}
		b.e2e.recordSince(now, vals)
		b.consumed.Add(int64(len(res.Messages)))
		off = res.NextOffset
	}
}

// drain waits until the consumers have read every record of the run (e2e:
// every acknowledged record; consume: every partition up to its high
// watermark), or until window passes or ctx ends, then stops them.
func (bc *benchConsumers) drain(ctx context.Context, b *benchRun, window time.Duration) {
	defer bc.stopAll()
	deadline := time.NewTimer(window)
	defer deadline.Stop()
	if bc.catchUp {
		select {
		case <-bc.readers:
		case <-ctx.Done():
		case <-deadline.C:
			b.fail(0, fmt.Errorf("consumers did not read the log within --drain-timeout %v", window))
		}
	} else {
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
	wait:
		for b.consumed.Load() < b.produced.Load() {
			select {
			case <-t.C:
			case <-ctx.Done():
				return
			case <-deadline.C:
				break wait
			}
		}
		if c, p := b.consumed.Load(), b.produced.Load(); c < p {
			b.fail(0, fmt.Errorf("consumers read %d of %d records within --drain-timeout %v", c, p, window))
		}
	}
}

// stopAll stops the readers, waits for them and closes the connections.
// It may be called more than once.
func (bc *benchConsumers) stopAll() {
	bc.stopOnce.Do(func() {
		close(bc.stop)
		bc.wg.Wait()
		bc.close()
	})
}

func (bc *benchConsumers) close() {
	for _, c := range bc.clients {
		c.Close()
	}
}

// startSampler records throughput once per sampleEvery and drives the
// progress bar; the returned func stops it (and clears the bar).
func (b *benchRun) startSampler(ctx context.Context) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	var bar *progressbar.ProgressBar
	if b.progress != nil {
		bar = b.newBar()
	}
	wg.Go(func() {
		start := time.Now()
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		var lastP, lastC int64
		next := start.Add(sampleEvery)
		// The last progress line's time and count: the rate of a line is
		// over the time since then, and a late tick (a loaded machine)
		// prints one line, not a burst of lines at 0 records/s.
		lineAt, lineP := start, int64(0)
		sample := func(now time.Time) {
			p, c := b.produced.Load(), b.consumed.Load()
			b.mu.Lock()
			b.samples = append(b.samples, BenchSample{Second: now.Sub(start).Seconds(), Produced: p - lastP, Consumed: c - lastC})
			b.mu.Unlock()
			lastP, lastC = p, c
		}
		for {
			select {
			case <-done:
				sample(time.Now()) // the last, partial interval
				return
			case <-ctx.Done():
				return
			case now := <-tick.C:
				if bar != nil {
					b.updateBar(bar, now.Sub(start), b.produced.Load(), b.consumed.Load())
				}
				if b.lines != nil && now.Sub(lineAt) >= progressLineEvery {
					p := b.produced.Load()
					b.printProgressLine(now.Sub(start), p, float64(p-lineP)/now.Sub(lineAt).Seconds())
					lineAt, lineP = now, p
				}
				if now.Before(next) {
					continue
				}
				sample(now)
				next = next.Add(sampleEvery)
			}
		}
	})
	return func() {
		close(done)
		wg.Wait()
		if bar != nil {
			_ = bar.Finish()
			_ = bar.Clear()
		}
	}
}

// newBar makes the progress bar: over records with --count, over time
// otherwise.
func (b *benchRun) newBar() *progressbar.ProgressBar {
	max := int64(b.f.duration / time.Millisecond)
	if b.f.count > 0 {
		max = b.f.count
	}
	return progressbar.NewOptions64(max,
		progressbar.OptionSetWriter(b.progress),
		progressbar.OptionSetDescription("sq bench "+b.f.mode),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionSetWidth(30),
		progressbar.OptionShowDescriptionAtLineEnd(),
		progressbar.OptionClearOnFinish(),
	)
}

func (b *benchRun) updateBar(bar *progressbar.ProgressBar, elapsed time.Duration, p, c int64) {
	if b.f.count > 0 {
		_ = bar.Set64(min(p, b.f.count))
	} else {
		_ = bar.Set64(min(int64(elapsed/time.Millisecond), int64(b.f.duration/time.Millisecond)))
	}
	bar.Describe(b.progressText(p, c))
}

// progressText is what was done so far: "acked N" plus, when consumers
// run (not in produce mode), "consumed N", and the failures if any.
func (b *benchRun) progressText(p, c int64) string {
	s := "acked " + commas(float64(p))
	if b.f.mode != "produce" {
		s += ", consumed " + commas(float64(c))
	}
	if e := b.errs.Load(); e > 0 {
		s += ", failed " + commas(float64(e))
	}
	return s
}

// printProgressLine writes one progress line (stderr is not a terminal):
// the time since the start, what was done and the publish rate over the
// last period, for example
// "sq bench produce: 4.0s: acked 812,000 (203,000 records/s)".
func (b *benchRun) printProgressLine(elapsed time.Duration, p int64, rate float64) {
	fmt.Fprintf(b.lines, "sq bench %s: %.1fs: %s (%s records/s)\n",
		b.f.mode, elapsed.Seconds(), b.progressText(p, b.consumed.Load()), commas(rate))
}

// benchConnectError is the failure of one of a run's producers or
// consumers to connect; the others may have connected and worked.
type benchConnectError struct {
	who    string // "producer" or "consumer"
	id, of int    // which one, of how many
	err    error
}

func (e *benchConnectError) Error() string {
	return fmt.Sprintf("%s %d: %v", e.who, e.id, e.err)
}

func (e *benchConnectError) Unwrap() error { return e.err }
