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
)

// natsMaxPending bounds the asynchronous publishes awaiting an ack.
const natsMaxPending = 4096

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

// runNATS measures JetStream file storage with sync always and default.
func runNATS(ctx context.Context, w workload, work string) ([]row, error) {
	bin, err := buildNATS(ctx, work)
	if err != nil {
		return nil, err
	}
	var rows []row
	for _, sync := range []string{"always", "default"} {
		r, err := runNATSOnce(ctx, w, work, bin, sync)
		if err != nil {
			return rows, err
		}
		r.system = "NATS JetStream " + natsVersion(ctx, bin)
		rows = append(rows, r)
	}
	return rows, nil
}

func runNATSOnce(ctx context.Context, w workload, work, bin, sync string) (row, error) {
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
	js, err := nc.JetStream(nats.PublishAsyncMaxPending(natsMaxPending))
	if err != nil {
		return row{}, err
	}
	if _, err := js.AddStream(&nats.StreamConfig{Name: "BENCH", Subjects: []string{"bench"}, Storage: nats.FileStorage}); err != nil {
		return row{}, err
	}
	lat := newLatencies()
	futures := make(chan pending, natsMaxPending)
	var acked, failed atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for p := range futures {
			select {
			case <-p.f.Ok():
				lat.add(time.Since(p.sent))
				acked.Add(1)
			case <-p.f.Err():
				failed.Add(1)
			}
		}
	}()
	payload := make([]byte, w.recordSize)
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
	elapsed := time.Since(startT)
	cfg := "file, sync_interval always (fsync per write)"
	if sync == "default" {
		cfg = "file, default sync (every 2 min; not durable at ack)"
	}
	if n := failed.Load(); n > 0 {
		cfg += fmt.Sprintf(" [%d failed]", n)
	}
	r := row{config: cfg + ", PublishAsync <= 4096 pending",
		recordsPerSec: float64(acked.Load()) / elapsed.Seconds()}
	r.mbPerSec = r.recordsPerSec * float64(w.recordSize) / 1e6
	r.p50, r.p99 = lat.percentiles()
	return r, nil
}

// pending is one asynchronous publish awaiting its ack.
type pending struct {
	f    nats.PubAckFuture
	sent time.Time
}
