package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// redisPipeline is the XADD commands sent per pipeline.
const redisPipeline = 500

// ensureRedis returns the redis-server binary, installing Debian's package
// with apt-get when it is missing.
func ensureRedis(ctx context.Context) (string, error) {
	if p, err := exec.LookPath("redis-server"); err == nil {
		return p, nil
	}
	fmt.Fprintln(os.Stderr, "peers: redis-server missing; apt-get install -y redis-server")
	for _, args := range [][]string{{"update"}, {"install", "-y", "redis-server"}} {
		cmd := exec.CommandContext(ctx, "apt-get", args...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", fmt.Errorf("apt-get %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	return exec.LookPath("redis-server")
}

var redisVersionRe = regexp.MustCompile(`v=(\S+)`)

// runRedis measures Redis Streams with AOF fsync always and everysec.
func runRedis(ctx context.Context, w workload, work string) ([]row, error) {
	bin, err := ensureRedis(ctx)
	if err != nil {
		return nil, err
	}
	version := "unknown"
	if out, err := exec.CommandContext(ctx, bin, "--version").Output(); err == nil {
		if m := redisVersionRe.FindSubmatch(out); m != nil {
			version = string(m[1])
		}
	}
	var rows []row
	for _, fsync := range []string{"always", "everysec"} {
		r, err := runRedisOnce(ctx, w, work, bin, fsync)
		if err != nil {
			return rows, err
		}
		r.system = "Redis " + version
		if fsync == "always" {
			r.role = roleRedisAlways
		}
		rows = append(rows, r)
	}
	return rows, nil
}

func runRedisOnce(ctx context.Context, w workload, work, bin, fsync string) (row, error) {
	dir, err := mustTempDir(work, "redis-"+fsync)
	if err != nil {
		return row{}, err
	}
	addr, err := freePort()
	if err != nil {
		return row{}, err
	}
	host, port := splitHostPort(addr)
	srv, err := start("redis-server", bin, "--bind", host, "--port", port, "--dir", dir,
		"--appendonly", "yes", "--appendfsync", fsync, "--save", "", "--protected-mode", "no", "--daemonize", "no")
	if err != nil {
		return row{}, err
	}
	defer srv.stop()
	if err := waitPort(srv, addr, 30*time.Second); err != nil {
		return row{}, err
	}
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	payload := string(make([]byte, w.recordSize))
	lat := newLatencies()
	var acked int64
	var load loadWindow
	load.before = readLoadAvg()
	startT := time.Now()
	deadline := startT.Add(w.duration)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		sent := time.Now()
		pipe := c.Pipeline()
		for range redisPipeline {
			pipe.XAdd(ctx, &redis.XAddArgs{Stream: "bench", ID: "*", Values: []string{"v", payload}})
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return row{}, fmt.Errorf("redis pipeline: %w", err)
		}
		d := time.Since(sent)
		for range redisPipeline {
			lat.add(d)
		}
		acked += redisPipeline
	}
	elapsed := time.Since(startT)
	load.after = readLoadAvg()
	r := row{mode: fmt.Sprintf("Redis Streams, XADD pipeline %d", redisPipeline),
		config:        fmt.Sprintf("appendonly yes, appendfsync %s", fsync),
		recordsPerSec: float64(acked) / elapsed.Seconds(), load: load}
	r.mbPerSec = r.recordsPerSec * float64(w.recordSize) / 1e6
	r.p50, r.p99 = lat.percentiles()
	return r, nil
}
