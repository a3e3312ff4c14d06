package main

import (
	"context"
	"encoding/binary"
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
	f        benchFlags
	progress io.Writer // where the progress bar goes; nil: no bar

	produced atomic.Int64 // records acknowledged
	consumed atomic.Int64 // records read by consumers
	errs     atomic.Int64 // records failed
	firstErr atomic.Pointer[string]

	ack, e2e *hist

	mu      sync.Mutex
	samples []BenchSample
}

func newBenchRun(addr string, f benchFlags, progress io.Writer) *benchRun {
	return &benchRun{addr: addr, f: f, progress: progress, ack: newHist(), e2e: newHist()}
}

// fail records a failure of n records (at least one, so a failed run never
// reports zero errors).
func (b *benchRun) fail(n int64, err error) {
	b.errs.Add(max(n, 1))
	s := err.Error()
	b.firstErr.CompareAndSwap(nil, &s)
}

// run executes the mode and returns its result.
func (b *benchRun) run(ctx context.Context) (*BenchResult, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stopSampler := b.startSampler(ctx)
	res := &BenchResult{}
	var (
		consumers *benchConsumers
		err       error
	)
	if b.f.mode == "e2e" {
		if consumers, err = b.startConsumers(ctx); err != nil {
			stopSampler()
			return nil, err
		}
	}
	pubStart := time.Now()
	if err := b.produce(ctx); err != nil {
		stopSampler()
		return nil, err
	}
	pubElapsed := time.Since(pubStart)
	consStart := pubStart
	if b.f.mode == "consume" {
		consStart = time.Now()
		if consumers, err = b.startConsumers(ctx); err != nil {
			stopSampler()
			return nil, err
		}
	}
	if consumers != nil {
		consumers.drain(b, b.f.drainWindow)
	}
	consElapsed := time.Since(consStart)
	stopSampler()
	b.fill(res, pubElapsed, consElapsed, consumers != nil)
	return res, ctx.Err()
}

// produce runs the producers until --count records or --duration.
func (b *benchRun) produce(ctx context.Context) error {
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
			if err := b.producer(ctx, i, n, start); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// producer sends n records (or until --duration when n is 0) through one
// BatchProducer, paced by --rate when set.
func (b *benchRun) producer(ctx context.Context, id int, n int64, start time.Time) error {
	bp, err := sdk.NewBatchProducer(ctx, sdk.BatchProducerConfig{
		ProducerConfig: sdk.ProducerConfig{Addr: b.addr, ClientID: fmt.Sprintf("sq-bench-%d", id)},
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
		},
		OnError: func(e sdk.BatchError) { b.fail(int64(len(e.Messages)), e) },
	})
	if err != nil {
		return fmt.Errorf("producer %d: %w", id, err)
	}
	sched := benchSchedule{rate: b.f.rate, producers: b.f.producers, id: id}
	keys := benchKeys(b.f.keys, id)
	var slab []byte
	var sendErr error
	for i := int64(0); n == 0 || i < n; i++ {
		intended, ok := b.waitTurn(sched, i, n, start)
		if !ok || ctx.Err() != nil {
			break
		}
		if len(slab) < b.f.recordSize {
			slab = make([]byte, max(slabBytes, b.f.recordSize))
		}
		v := slab[:b.f.recordSize:b.f.recordSize]
		slab = slab[b.f.recordSize:]
		if len(v) >= 8 {
			binary.LittleEndian.PutUint64(v, uint64(intended.UnixNano()))
		}
		m := sdk.ProducerMessage{Topic: b.f.topic, Value: v, Timestamp: intended.UnixMilli()}
		if len(keys) > 0 {
			m.Key = keys[i%int64(len(keys))]
		}
		if err := bp.SendMessage(ctx, m); err != nil {
			sendErr = fmt.Errorf("producer %d: send: %w", id, err)
			break
		}
	}
	if err := bp.Close(); err != nil && sendErr == nil {
		sendErr = err
	}
	if sendErr != nil && ctx.Err() == nil {
		return sendErr
	}
	return nil
}

// waitTurn waits until the intended send time of the producer's record i
// under --rate (now without it) and returns it; ok is false when the run
// has no record i: with --count (n > 0) never, with --duration when the
// schedule is complete, or when a producer behind --rate reaches
// --duration plus --drain-timeout, or without --rate at --duration.
func (b *benchRun) waitTurn(sched benchSchedule, i, n int64, start time.Time) (intended time.Time, ok bool) {
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
		time.Sleep(d)
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
// sends each batch at once.
func benchLinger(d time.Duration) time.Duration {
	if d <= 0 {
		return -1
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
	clients []*sdk.Client
	catchUp bool          // consume mode: readers end at the high watermark
	stop    chan struct{} // closed by drain
	readers chan struct{} // closed when every reader has returned
	wg      sync.WaitGroup
}

// startConsumers connects --consumers clients and starts one reader per
// partition. In e2e mode a reader starts at the partition's high watermark
// (only this run's records) and runs until drain stops it; in consume mode
// it reads from the log start up to the high watermark at its start (the
// whole log, catch-up) and then ends.
func (b *benchRun) startConsumers(ctx context.Context) (*benchConsumers, error) {
	bc := &benchConsumers{stop: make(chan struct{}), readers: make(chan struct{})}
	for i := range b.f.consumers {
		c, err := sdk.Dial(ctx, sdk.ClientConfig{Addr: b.addr, ClientID: fmt.Sprintf("sq-bench-consumer-%d", i)})
		if err != nil {
			bc.close()
			return nil, fmt.Errorf("consumer %d: %w", i, err)
		}
		bc.clients = append(bc.clients, c)
	}
	ti, err := bc.clients[0].DescribeTopic(ctx, b.f.topic)
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

// consume reads partition p from offset from until offset to or until
// stop is closed.
func (b *benchRun) consume(ctx context.Context, c *sdk.Client, p uint32, from, to uint64, stop <-chan struct{}) {
	off := from
	vals := make([][]byte, 0, 1024)
	for off < to {
		select {
		case <-stop:
			return
		default:
		}
		res, err := c.Fetch(ctx, sdk.FetchRequest{Topic: b.f.topic, Partition: p, Offset: off, MaxBytes: 8 << 20, MaxWait: fetchWait})
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if !sdk.IsRetriable(err) {
				b.fail(0, fmt.Errorf("consume partition %d: %w", p, err))
				return
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
// watermark), or until window passes, then stops them.
func (bc *benchConsumers) drain(b *benchRun, window time.Duration) {
	deadline := time.NewTimer(window)
	defer deadline.Stop()
	if bc.catchUp {
		select {
		case <-bc.readers:
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
			case <-deadline.C:
				break wait
			}
		}
		if c, p := b.consumed.Load(), b.produced.Load(); c < p {
			b.fail(0, fmt.Errorf("consumers read %d of %d records within --drain-timeout %v", c, p, window))
		}
	}
	close(bc.stop)
	bc.wg.Wait()
	bc.close()
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
	bar.Describe(fmt.Sprintf("acked %d, consumed %d", p, c))
}
