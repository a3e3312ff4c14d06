package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"time"
)

// sqBenchJSON is the part of `sq bench --json` the table uses.
type sqBenchJSON struct {
	RecordsPerSec float64 `json:"records_per_sec"`
	MBPerSec      float64 `json:"mb_per_sec"`
	Errors        int64   `json:"errors"`
	ServerVersion string  `json:"server_version"`
	Ack           *struct {
		P50 float64 `json:"p50"`
		P99 float64 `json:"p99"`
	} `json:"ack_latency_ms"`
}

// sqBufferBytes is the BatchProducer buffer of the SQ runs: a few 1 MiB
// batches, so the ack latency reflects the broker rather than a deep
// client queue (the peers' clients hold 4096 and 500 records).
const sqBufferBytes = 8 << 20

var backendLine = regexp.MustCompile(`io_backend=(\w+)`)

// runSQ starts sq-server and runs `sq bench produce` once per sync policy.
func runSQ(ctx context.Context, w workload, binDir, work string) ([]row, error) {
	dir, err := mustTempDir(work, "sq")
	if err != nil {
		return nil, err
	}
	addr, err := freePort()
	if err != nil {
		return nil, err
	}
	srv, err := start("sq-server", filepath.Join(binDir, "sq-server"), "serve", "--capnp-host", addr,
		"--data-dir", filepath.Join(dir, "data"), "--grpc-host", "", "--http-host", "")
	if err != nil {
		return nil, err
	}
	defer srv.stop()
	if err := waitPort(srv, addr, 30*time.Second); err != nil {
		return nil, err
	}
	var rows []row
	for _, policy := range []string{"every-batch", "none"} {
		out := filepath.Join(dir, policy+".json")
		args := []string{"--server", addr, "bench", "produce", "--quiet", "--duration", w.duration.String(),
			"--record-size", fmt.Sprint(w.recordSize), "--partitions", "1", "--producers", "1",
			"--sync-policy", policy, "--buffer-bytes", fmt.Sprint(sqBufferBytes), "--json", out}
		cmd := exec.CommandContext(ctx, filepath.Join(binDir, "sq"), args...)
		var load loadWindow
		load.before = readLoadAvg()
		b, err := cmd.CombinedOutput()
		load.after = readLoadAvg()
		if err != nil {
			return rows, fmt.Errorf("sq bench (%s): %v\n%s", policy, err, b)
		}
		data, err := os.ReadFile(out)
		if err != nil {
			return rows, err
		}
		var r sqBenchJSON
		if err := json.Unmarshal(data, &r); err != nil {
			return rows, err
		}
		backend := "unknown"
		if m := backendLine.FindStringSubmatch(srv.output()); m != nil {
			backend = m[1]
		}
		durability := "every-batch (fdatasync before ack)"
		if policy == "none" {
			durability = "none (page cache, not durable at ack)"
		}
		rr := row{system: fmt.Sprintf("SQ %s (%s backend)", r.ServerVersion, backend),
			mode: fmt.Sprintf("sq bench produce, %d MiB buffer", sqBufferBytes>>20), config: durability,
			recordsPerSec: r.RecordsPerSec, mbPerSec: r.MBPerSec, load: load}
		if policy == "every-batch" {
			rr.role = roleSQ
		}
		if r.Ack != nil {
			rr.p50, rr.p99 = r.Ack.P50, r.Ack.P99
		}
		rows = append(rows, rr)
	}
	return rows, nil
}
