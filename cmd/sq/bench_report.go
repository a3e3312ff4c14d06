package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// BenchConditions are the conditions of a run, printed beside its figures
// and written at the top level of the JSON result.
type BenchConditions struct {
	Mode            string  `json:"mode"` // produce, consume or e2e
	Topic           string  `json:"topic"`
	RecordSizeBytes int     `json:"record_size_bytes"` // value bytes per record
	BatchBytes      int     `json:"batch_bytes"`       // BatchProducer batch bound
	LingerMs        float64 `json:"linger_ms"`
	InFlight        int     `json:"in_flight"`    // batches in flight per producer
	BufferBytes     int     `json:"buffer_bytes"` // BatchProducer buffer per producer
	SyncPolicy      string  `json:"sync_policy"`
	Acks            string  `json:"acks"` // all or leader (--acks)
	Partitions      int     `json:"partitions"`
	Producers       int     `json:"producers"`
	Consumers       int     `json:"consumers,omitempty"` // 0 (absent from the JSON) in produce mode
	Keys            int     `json:"keys"`
	RateTarget      float64 `json:"rate_target"` // offered records/s; 0 unlimited
	CPUs            int     `json:"cpus"`        // of the machine running sq bench
	GoVersion       string  `json:"go_version"`
	IOBackend       string  `json:"io_backend"` // from NodeInfo of the topic's leaders (benchIOBackends); "unknown" when unreachable
	ServerVersion   string  `json:"server_version"`
}

// LatencySummary holds percentiles of one latency histogram, in
// milliseconds.
type LatencySummary struct {
	Count int64   `json:"count"`
	P50   float64 `json:"p50"`
	P90   float64 `json:"p90"`
	P99   float64 `json:"p99"`
	P999  float64 `json:"p999"`
	Max   float64 `json:"max"`
}

// BenchSample is the throughput of one interval of the run (250 ms; the
// last one may be shorter).
type BenchSample struct {
	Second   float64 `json:"t_sec"`              // seconds since the start, end of the interval
	Produced int64   `json:"produced"`           // records acknowledged in the interval
	Consumed int64   `json:"consumed,omitempty"` // records read in the interval (absent: none, as always in produce mode)
}

// BenchResult is the outcome of a run. RecordsPerSec and MBPerSec are the
// headline of the mode: publish throughput for produce and e2e, read
// throughput for consume. MB are 10^6 bytes of record values.
type BenchResult struct {
	BenchConditions
	RecordsPerSec float64 `json:"records_per_sec"`
	MBPerSec      float64 `json:"mb_per_sec"`
	// Interrupted is set when Ctrl-C stopped the run: the figures cover
	// what was done until then.
	Interrupted bool `json:"interrupted,omitempty"`
	// SentRecords counts the records the producers accepted; those of
	// them not in PublishedRecords were not acknowledged (failed, or in
	// flight at Ctrl-C).
	SentRecords int64 `json:"sent_records"`

	PublishedRecords     int64           `json:"published_records"`
	PublishSeconds       float64         `json:"publish_seconds"`
	PublishRecordsPerSec float64         `json:"publish_records_per_sec"`
	PublishMBPerSec      float64         `json:"publish_mb_per_sec"`
	AckLatencyMs         *LatencySummary `json:"ack_latency_ms"`

	ConsumedRecords      int64           `json:"consumed_records,omitempty"`
	ConsumeSeconds       float64         `json:"consume_seconds,omitempty"`
	ConsumeRecordsPerSec float64         `json:"consume_records_per_sec,omitempty"`
	ConsumeMBPerSec      float64         `json:"consume_mb_per_sec,omitempty"`
	E2ELatencyMs         *LatencySummary `json:"e2e_latency_ms,omitempty"`

	Errors     int64         `json:"errors"`
	FirstError string        `json:"first_error,omitempty"`
	Throughput []BenchSample `json:"throughput"`

	ackHist, e2eHist *hdrhistogram.Histogram // for the plot
}

// summarize returns the percentiles of h (microseconds) in milliseconds,
// or nil when h is empty.
func summarize(h *hdrhistogram.Histogram) *LatencySummary {
	if h.TotalCount() == 0 {
		return nil
	}
	ms := func(us int64) float64 { return float64(us) / 1000 }
	return &LatencySummary{
		Count: h.TotalCount(),
		P50:   ms(h.ValueAtQuantile(50)),
		P90:   ms(h.ValueAtQuantile(90)),
		P99:   ms(h.ValueAtQuantile(99)),
		P999:  ms(h.ValueAtQuantile(99.9)),
		Max:   ms(h.Max()),
	}
}

// fill computes the result's figures from the run's counters.
func (b *benchRun) fill(res *BenchResult, pub, cons time.Duration, consumed bool) {
	size := float64(b.f.recordSize)
	res.SentRecords = b.sent.Load()
	res.PublishedRecords = b.produced.Load()
	res.PublishSeconds = pub.Seconds()
	if pub > 0 {
		res.PublishRecordsPerSec = float64(res.PublishedRecords) / pub.Seconds()
	}
	res.PublishMBPerSec = res.PublishRecordsPerSec * size / 1e6
	res.ackHist = b.ack.h
	res.AckLatencyMs = summarize(b.ack.h)
	res.RecordsPerSec, res.MBPerSec = res.PublishRecordsPerSec, res.PublishMBPerSec
	if consumed {
		res.ConsumedRecords = b.consumed.Load()
		res.ConsumeSeconds = cons.Seconds()
		if cons > 0 {
			res.ConsumeRecordsPerSec = float64(res.ConsumedRecords) / cons.Seconds()
		}
		res.ConsumeMBPerSec = res.ConsumeRecordsPerSec * size / 1e6
		if b.f.mode == "e2e" {
			res.e2eHist = b.e2e.h
			res.E2ELatencyMs = summarize(b.e2e.h)
		}
		if b.f.mode == "consume" {
			res.RecordsPerSec, res.MBPerSec = res.ConsumeRecordsPerSec, res.ConsumeMBPerSec
		}
	}
	res.Errors = b.errs.Load()
	if err := b.firstError(); err != nil {
		res.FirstError = err.Error()
	}
	b.mu.Lock()
	res.Throughput = append([]BenchSample(nil), b.samples...)
	b.mu.Unlock()
}

// printBench writes the human-readable report.
func printBench(w io.Writer, r *BenchResult) {
	fmt.Fprintf(w, "sq bench %s: topic %s\n", r.Mode, r.Topic)
	if r.Interrupted {
		fmt.Fprintf(w, "interrupted after %.2fs: partial results\n", r.PublishSeconds)
	}
	fmt.Fprintf(w, "publish  %12s records in %.2fs: %s records/s, %.2f MB/s\n",
		commas(float64(r.PublishedRecords)), r.PublishSeconds, commas(r.PublishRecordsPerSec), r.PublishMBPerSec)
	if n := r.SentRecords - r.PublishedRecords; n > 0 {
		fmt.Fprintf(w, "         %12s of %s records sent not acknowledged (failed, or in flight when stopped)\n",
			commas(float64(n)), commas(float64(r.SentRecords)))
	}
	printLatency(w, "ack latency", r.AckLatencyMs)
	switch {
	case r.Mode == "consume" && r.ConsumeSeconds == 0:
		// The read phase did not start: stopped, or records failed.
		fmt.Fprintf(w, "consume  not run (the publish phase did not complete)\n")
	case r.Mode != "produce":
		fmt.Fprintf(w, "consume  %12s records in %.2fs: %s records/s, %.2f MB/s\n",
			commas(float64(r.ConsumedRecords)), r.ConsumeSeconds, commas(r.ConsumeRecordsPerSec), r.ConsumeMBPerSec)
		if r.Mode == "e2e" {
			printLatency(w, "e2e latency", r.E2ELatencyMs)
		}
	}
	rate := "unlimited"
	if r.RateTarget > 0 {
		rate = commas(r.RateTarget) + " records/s (latency from the intended send time)"
	}
	consumers := ""
	if r.Mode != "produce" {
		consumers = fmt.Sprintf(", consumers %d", r.Consumers)
	}
	fmt.Fprintf(w, "conditions: record size %d B, batch %d B, linger %gms, in-flight %d, sync policy %s, acks %s, "+
		"buffer %d B, partitions %d, producers %d%s, keys %d, rate %s, %d CPUs, %s, I/O backend %s, server %s\n",
		r.RecordSizeBytes, r.BatchBytes, r.LingerMs, r.InFlight, r.SyncPolicy, r.Acks, r.BufferBytes, r.Partitions, r.Producers,
		consumers, r.Keys, rate, r.CPUs, r.GoVersion, r.IOBackend, r.ServerVersion)
	if r.RateTarget == 0 && r.AckLatencyMs != nil {
		fmt.Fprintln(w, latencyFooter(r.PublishRecordsPerSec))
	}
	if r.Errors > 0 {
		fmt.Fprintf(w, "errors: %d records failed; first: %s\n", r.Errors, r.FirstError)
	}
}

// latencyFooter says what the latency of a run without --rate measured:
// producers kept as many records in flight as their buffer holds, so each
// figure includes the time a record queued. It suggests --rate at about
// half the measured throughput (rounded to two significant digits) for a
// latency measurement.
func latencyFooter(recordsPerSec float64) string {
	s := "latency: measured with unbounded in-flight batches (no --rate: producers send as fast as their buffer allows), " +
		"so it includes the time records queue in the producer's buffer, not just the server's service time; " +
		"for a latency measurement give a fixed load below the throughput with --rate"
	if half := recordsPerSec / 2; half >= 1 {
		mag := math.Pow(10, math.Floor(math.Log10(half))-1)
		s += fmt.Sprintf(" (for example --rate %.0f)", math.Round(half/mag)*mag)
	}
	return s
}

func printLatency(w io.Writer, name string, l *LatencySummary) {
	if l == nil {
		fmt.Fprintf(w, "  %-12s n/a (no records, or --record-size under 8)\n", name)
		return
	}
	fmt.Fprintf(w, "  %-12s ms: p50 %.3f  p90 %.3f  p99 %.3f  p999 %.3f  max %.3f\n", name, l.P50, l.P90, l.P99, l.P999, l.Max)
}

// commas formats v rounded to an integer with thousands separators.
func commas(v float64) string {
	s := fmt.Sprintf("%.0f", v)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// writeBenchJSON writes r as indented JSON to path.
func writeBenchJSON(path string, r *BenchResult) error {
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("write --json file: %w", err)
	}
	return nil
}
