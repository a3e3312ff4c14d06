package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"
)

// natsMaxPending bounds the asynchronous publishes awaiting an ack.
const natsMaxPending = 4096

// natsFastFlow is the flow of the fast batch publisher: the server acks
// every natsFastFlow messages (what `nats bench js pub fast --batch 500`
// asks for).
const natsFastFlow = 500

// natsFastMaxAcks is how many flow acks the fast batch publisher lets be
// outstanding before it stalls: up to natsFastFlow x natsFastMaxAcks
// messages unacknowledged.
const natsFastMaxAcks = 2

// natsAckTimeout bounds the wait for any JetStream ack.
const natsAckTimeout = 30 * time.Second

// natsMode is one way of publishing into JetStream.
type natsMode struct {
	name string // the table's mode column
	fast bool   // fast batch publish (jetstreamext.FastPublisher), else PublishAsync
}

var (
	natsAsync = natsMode{name: "JetStream async", fast: false}
	natsFast  = natsMode{name: fmt.Sprintf("JetStream fast batch %d", natsFastFlow), fast: true}
)

// natsVersion returns the version the nats-server binary at bin reports.
func natsVersion(ctx context.Context, bin string) string {
	out, err := exec.CommandContext(ctx, bin, "--version").Output()
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(out))
	if len(f) == 0 {
		return "unknown"
	}
	return f[len(f)-1]
}

// buildNATS builds the nats-server binary of go.mod's version into work.
func buildNATS(ctx context.Context, work string) (string, error) {
	bin := filepath.Join(work, "nats-server")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/nats-io/nats-server/v2")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build nats-server: %v\n%s", err, out)
	}
	return bin, nil
}

// runNATS measures JetStream file storage with sync_interval always and
// default, each with PublishAsync and with fast batch publish.
func runNATS(ctx context.Context, w workload, work string) ([]row, error) {
	bin, err := buildNATS(ctx, work)
	if err != nil {
		return nil, err
	}
	var rows []row
	for _, sync := range []string{"always", "default"} {
		for _, mode := range []natsMode{natsAsync, natsFast} {
			r, err := runNATSOnce(ctx, w, work, bin, sync, mode)
			if err != nil {
				return rows, fmt.Errorf("%s, sync %s: %w", mode.name, sync, err)
			}
			r.system = "NATS " + natsVersion(ctx, bin)
			if sync == "default" {
				r.role = roleJetStreamDefault
			}
			rows = append(rows, r)
		}
	}
	return rows, nil
}

func runNATSOnce(ctx context.Context, w workload, work, bin, sync string, mode natsMode) (row, error) {
	dir, err := mustTempDir(work, "nats-"+sync)
	if err != nil {
		return row{}, err
	}
	addr, err := freePort()
	if err != nil {
		return row{}, err
	}
	host, port := splitHostPort(addr)
	conf := fmt.Sprintf("host: %s\nport: %s\njetstream {\n  store_dir: %q\n", host, port, dir)
	if sync == "always" {
		conf += "  sync_interval: always\n"
	}
	conf += "}\n"
	confFile := filepath.Join(dir, "nats.conf")
	if err := os.WriteFile(confFile, []byte(conf), 0o644); err != nil {
		return row{}, err
	}
	srv, err := start("nats-server", bin, "-c", confFile)
	if err != nil {
		return row{}, err
	}
	defer srv.stop()
	if err := waitPort(srv, addr, 30*time.Second); err != nil {
		return row{}, err
	}
	nc, err := nats.Connect("nats://"+addr, nats.Timeout(10*time.Second))
	if err != nil {
		return row{}, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(natsMaxPending),
		jetstream.WithPublishAsyncTimeout(natsAckTimeout), jetstream.WithDefaultTimeout(natsAckTimeout))
	if err != nil {
		return row{}, err
	}
	cfg := jetstream.StreamConfig{Name: "BENCH", Subjects: []string{"bench"}, Storage: jetstream.FileStorage,
		AllowBatchPublish: mode.fast}
	if _, err := js.CreateStream(ctx, cfg); err != nil {
		return row{}, err
	}
	config := "file, sync_interval always (fsync per write)"
	if sync == "default" {
		config = "file, default sync (every 2 min; not durable at ack)"
	}
	var m natsMeasure
	if mode.fast {
		m, err = natsPublishFast(ctx, w, js)
		config += fmt.Sprintf(", flow ack every %d, <= %d acks outstanding", natsFastFlow, natsFastMaxAcks)
	} else {
		m, err = natsPublishAsync(ctx, w, js)
		config += fmt.Sprintf(", <= %d pending", natsMaxPending)
	}
	if err != nil {
		return row{}, err
	}
	if m.failed > 0 {
		config += fmt.Sprintf(" [%d failed]", m.failed)
	}
	r := row{mode: mode.name, config: config, load: m.load,
		recordsPerSec: float64(m.acked) / m.elapsed.Seconds()}
	r.mbPerSec = r.recordsPerSec * float64(w.recordSize) / 1e6
	r.p50, r.p99 = m.lat.percentiles()
	return r, nil
}

// natsMeasure is what one JetStream publishing loop measured.
type natsMeasure struct {
	acked, failed int64
	elapsed       time.Duration
	lat           *latencies
	load          loadWindow
}

// natsPublishAsync publishes with PublishAsync, up to natsMaxPending
// unacknowledged, for w.duration.
func natsPublishAsync(ctx context.Context, w workload, js jetstream.JetStream) (natsMeasure, error) {
	m := natsMeasure{lat: newLatencies()}
	futures := make(chan pending, natsMaxPending)
	var acked, failed atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for p := range futures {
			select {
			case <-p.f.Ok():
				m.lat.add(time.Since(p.sent))
				acked.Add(1)
			case <-p.f.Err(): //nolint:errcheck // a failed publish is counted; the run reports counts, not errors
				failed.Add(1)
			}
		}
	}()
	payload := make([]byte, w.recordSize)
	m.load.before = readLoadAvg()
	startT := time.Now()
	deadline := startT.Add(w.duration)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		sent := time.Now()
		f, err := js.PublishAsync("bench", payload)
		if err != nil {
			failed.Add(1)
			continue
		}
		futures <- pending{f: f, sent: sent}
	}
	close(futures)
	<-done
	m.elapsed = time.Since(startT)
	m.load.after = readLoadAvg()
	m.acked, m.failed = acked.Load(), failed.Load()
	return m, nil
}

// natsPublishFast publishes one fast batch (jetstreamext.FastPublisher)
// for w.duration and commits it. A record counts as acked when a flow ack
// or the commit ack covers it (gap: fail, so an ack of sequence n means
// every message up to n was stored); its latency runs from its publish to
// the Add or commit call that saw that ack.
func natsPublishFast(ctx context.Context, w workload, js jetstream.JetStream) (natsMeasure, error) {
	m := natsMeasure{lat: newLatencies()}
	var asyncErr atomic.Pointer[error]
	fp, err := jetstreamext.NewFastPublisher(js,
		jetstreamext.FastPublishFlowControl{Flow: natsFastFlow, MaxOutstandingAcks: natsFastMaxAcks, AckTimeout: natsAckTimeout},
		jetstreamext.WithFastPublisherErrorHandler(func(err error) { asyncErr.CompareAndSwap(nil, &err) }))
	if err != nil {
		return m, err
	}
	var q sentQueue
	payload := make([]byte, w.recordSize)
	m.load.before = readLoadAvg()
	startT := time.Now()
	deadline := startT.Add(w.duration)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		q.push(time.Now())
		ack, err := fp.Add("bench", payload)
		if err != nil {
			return m, fmt.Errorf("fast batch add: %w", err)
		}
		q.ack(ack.AckSequence, time.Now(), m.lat)
	}
	commitCtx, cancel := context.WithTimeout(context.Background(), natsAckTimeout)
	defer cancel()
	batch, err := fp.Close(commitCtx)
	if err != nil {
		return m, fmt.Errorf("fast batch commit: %w", err)
	}
	q.ack(batch.BatchSize, time.Now(), m.lat)
	m.elapsed = time.Since(startT)
	m.load.after = readLoadAvg()
	m.acked = int64(batch.BatchSize)
	m.failed = int64(q.sent) - m.acked
	if p := asyncErr.Load(); p != nil {
		return m, fmt.Errorf("fast batch: %w", *p)
	}
	return m, nil
}

// sentQueue holds the send times of the messages of one fast batch that
// are not acknowledged yet; batch sequences start at 1 and are consecutive.
type sentQueue struct {
	times []time.Time // times[head:] are sequences acked+1 .. sent
	head  int
	acked uint64 // highest sequence acknowledged
	sent  uint64 // highest sequence sent
}

// push records the send time of the next sequence.
func (q *sentQueue) push(t time.Time) {
	if q.head > 0 && q.head >= len(q.times)/2 {
		n := copy(q.times, q.times[q.head:])
		q.times = q.times[:n]
		q.head = 0
	}
	q.times = append(q.times, t)
	q.sent++
}

// ack marks every sequence up to seq acknowledged at now and adds their
// latencies to lat; a seq at or below the last one acked, or beyond the
// last one sent, adds nothing more than the sequences sent.
func (q *sentQueue) ack(seq uint64, now time.Time, lat *latencies) {
	seq = min(seq, q.sent)
	for ; q.acked < seq; q.acked++ {
		lat.add(now.Sub(q.times[q.head]))
		q.head++
	}
}

// pending is one asynchronous publish awaiting its ack.
type pending struct {
	f    jetstream.PubAckFuture
	sent time.Time
}
