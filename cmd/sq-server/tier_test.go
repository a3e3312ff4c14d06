package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
	"github.com/spf13/pflag"

	"github.com/seedqueue/sq/sdk"
)

// fakeS3 starts gofakes3 (in memory) over HTTP on 127.0.0.1 with the
// bucket "sq-test", and gives the AWS SDK static credentials, kept away
// from the machine's AWS files and IMDS.
func fakeS3(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for k, v := range map[string]string{"AWS_ACCESS_KEY_ID": "sqtestkey", "AWS_SECRET_ACCESS_KEY": "sqtestsecret", "AWS_SESSION_TOKEN": "",
		"AWS_REGION": "us-east-1", "AWS_PROFILE": "", "AWS_CONFIG_FILE": dir + "/config", "AWS_SHARED_CREDENTIALS_FILE": dir + "/credentials",
		"AWS_EC2_METADATA_DISABLED": "true"} {
		t.Setenv(k, v)
	}
	backend := s3mem.New()
	if err := backend.CreateBucket("sq-test"); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(gofakes3.New(backend).Server())
	t.Cleanup(srv.Close)
	return srv.URL
}

// realLines returns the lines of the repository's README, numbered and
// repeated until they hold at least n bytes: real text, not generated
// bytes.
func realLines(t *testing.T, n int) [][]byte {
	t.Helper()
	f, err := os.Open("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if s := strings.TrimSpace(sc.Text()); s != "" {
			lines = append(lines, s)
		}
	}
	var out [][]byte
	for size := 0; size < n; {
		for _, l := range lines {
			v := fmt.Appendf(nil, "%d %s", len(out), l)
			out = append(out, v)
			size += len(v)
		}
	}
	return out
}

// TestTieredStorageServer runs sq-server with --s3-bucket against an S3
// server (gofakes3 over real HTTP, the real AWS SDK client): records
// published to a topic with a small local retention leave the local disk
// once uploaded, and a consumer reading from offset 0 gets every one,
// byte for byte and in order; the tier metrics say the bucket is
// reachable, and they and the topic's describe that nothing is left to
// upload.
func TestTieredStorageServer(t *testing.T) {
	endpoint := fakeS3(t)
	dir := t.TempDir()
	var c config
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	bindFlags(fs, &c)
	if err := fs.Parse([]string{"--data-dir", dir, "--capnp-host", "127.0.0.1:0", "--grpc-host", "", "--http-host", "127.0.0.1:0",
		"--io-backend", "portable", "--s3-bucket", "sq-test", "--s3-endpoint", endpoint, "--tier-upload-interval", "100ms",
		"--max-batch-bytes", "65536", "--max-record-bytes", "16384", "--segment-bytes", "131072"}); err != nil {
		t.Fatal(err)
	}
	if err := c.validate(); err != nil {
		t.Fatal(err)
	}
	addrs := make(chan [2]string, 2)
	c.hooks = &hooks{listening: func(plane, addr string) {
		if plane == "capnp" || plane == "http" {
			addrs <- [2]string{plane, addr}
		}
	}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, &c, slog.New(slog.NewTextHandler(io.Discard, nil))) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	}()
	got := map[string]string{}
	for len(got) < 2 {
		a := <-addrs
		got[a[0]] = a[1]
	}
	tctx, tcancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer tcancel()
	cl, err := sdk.Dial(tctx, sdk.ClientConfig{Addr: got["capnp"]})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := cl.CreateTopic(tctx, "archive", 1, sdk.TopicConfig{SegmentBytes: 128 << 10, LocalRetentionBytes: 256 << 10}); err != nil {
		t.Fatal(err)
	}
	prod, err := sdk.NewProducer(tctx, sdk.ProducerConfig{Addr: got["capnp"]})
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	want := realLines(t, 3<<20)
	for i := 0; i < len(want); i += 500 {
		msgs := make([]sdk.ProducerMessage, 0, 500)
		for _, v := range want[i:min(i+500, len(want))] {
			msgs = append(msgs, sdk.NewProducerMessage("archive", v))
		}
		if _, err := prod.SendBatch(tctx, msgs); err != nil {
			t.Fatal(err)
		}
	}
	// The engine's retention runs every 5 s; uploads every 100 ms.
	deadline := time.Now().Add(90 * time.Second)
	for {
		ti, err := cl.DescribeTopic(tctx, "archive")
		if err != nil {
			t.Fatal(err)
		}
		p := ti.PartitionInfos[0]
		if p.LogStartOffset > 0 && p.SizeBytes <= 256<<10+128<<10 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("local log not trimmed after its upload: %+v", p)
		}
		time.Sleep(100 * time.Millisecond)
	}
	var read [][]byte
	next := uint64(0)
	for next < uint64(len(want)) {
		res, err := cl.Fetch(tctx, sdk.FetchRequest{Topic: "archive", Offset: next, MaxBytes: 256 << 10})
		if err != nil {
			t.Fatalf("fetch at %d: %v", next, err)
		}
		for _, m := range res.Messages {
			if m.Offset != next {
				t.Fatalf("offset %d after %d", m.Offset, next)
			}
			read = append(read, m.Value)
			next++
		}
		if len(res.Messages) == 0 {
			t.Fatalf("empty fetch at %d (high watermark %d)", next, res.HighWatermark)
		}
	}
	for i := range want {
		if !bytes.Equal(read[i], want[i]) {
			t.Fatalf("record %d: %q, want %q", i, read[i], want[i])
		}
	}
	resp, err := http.Get("http://" + got["http"] + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{"sq_tier_bucket_reachable 1", `sq_tier_upload_lag_segments{partition="0",topic="archive"} 0`, "sq_tier_remote_reads_total"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	if strings.Contains(string(body), "sq_tier_remote_reads_total 0\n") {
		t.Error("no fetch was served from the bucket")
	}
	// The describe shows the remote log: it starts at 0, reaches the
	// local log start, and nothing is left to upload.
	ti, err := cl.DescribeTopic(tctx, "archive")
	if err != nil {
		t.Fatal(err)
	}
	p := ti.PartitionInfos[0]
	if r := p.Remote; r == nil || r.Segments == 0 || r.Bytes == 0 || r.LogStartOffset != 0 || r.EndOffset < p.LogStartOffset ||
		r.LagSegments != 0 || r.LagBytes != 0 {
		t.Errorf("describe: remote %+v, local log start %d", r, p.LogStartOffset)
	}
}
