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

// startTiered runs sq-server on dir with tiered storage on the fake S3
// at endpoint (uploads every 100 ms, small batches and segments), plus
// extra flags, and returns its listening addresses by plane ("capnp",
// "http", "grpc" when on) and a function that stops it.
func startTiered(t *testing.T, endpoint, dir string, extra ...string) (map[string]string, func()) {
	t.Helper()
	var c config
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	bindFlags(fs, &c)
	args := append([]string{"--data-dir", dir, "--capnp-host", "127.0.0.1:0", "--http-host", "127.0.0.1:0",
		"--io-backend", "portable", "--s3-bucket", "sq-test", "--s3-endpoint", endpoint, "--tier-upload-interval", "100ms",
		"--max-batch-bytes", "65536", "--max-record-bytes", "16384", "--segment-bytes", "131072"}, extra...)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	if err := c.validate(); err != nil {
		t.Fatal(err)
	}
	addrs := make(chan [2]string, 3)
	c.hooks = &hooks{listening: func(plane, addr string) { addrs <- [2]string{plane, addr} }}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, &c, slog.New(slog.NewTextHandler(io.Discard, nil))) }()
	got := map[string]string{}
	for got["capnp"] == "" {
		select {
		case a := <-addrs:
			got[a[0]] = a[1]
		case err := <-done:
			cancel()
			t.Fatalf("run: %v", err)
		}
	}
	return got, func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	}
}

// TestTieredStorageServer runs sq-server with --s3-bucket against an S3
// server (gofakes3 over real HTTP, the real AWS SDK client): records
// published to a topic with a small local retention leave the local disk
// once uploaded, and a consumer reading from offset 0 gets every one,
// byte for byte and in order; the tier metrics say the bucket is
// reachable and nothing is left to upload.
func TestTieredStorageServer(t *testing.T) {
	endpoint := fakeS3(t)
	got, stop := startTiered(t, endpoint, t.TempDir(), "--grpc-host", "")
	defer stop()
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
}

// TestTieredRestore: a topic uploaded by one server is served again, byte
// for byte, by a second server with an empty data directory and the same
// bucket after `RestoreTopic` (sq topic restore); new records continue
// after the restored history. Both servers run as they do by default, a
// cluster of one node (gRPC on).
func TestTieredRestore(t *testing.T) {
	endpoint := fakeS3(t)
	tctx, tcancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer tcancel()
	a, stopA := startTiered(t, endpoint, t.TempDir(), "--grpc-host", "127.0.0.1:0")
	prod, err := sdk.NewProducer(tctx, sdk.ProducerConfig{Addr: a["capnp"]})
	if err != nil {
		t.Fatal(err)
	}
	cl, err := sdk.Dial(tctx, sdk.ClientConfig{Addr: a["capnp"]})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.CreateTopic(tctx, "history", 2, sdk.TopicConfig{SegmentBytes: 128 << 10}); err != nil {
		t.Fatal(err)
	}
	want := realLines(t, 2<<20)
	for i := 0; i < len(want); i += 500 {
		msgs := make([]sdk.ProducerMessage, 0, 500)
		for _, v := range want[i:min(i+500, len(want))] {
			msgs = append(msgs, sdk.ProducerMessage{Topic: "history", Key: []byte("k"), Value: v}) // one partition: key "k"
		}
		if _, err := prod.SendBatch(tctx, msgs); err != nil {
			t.Fatal(err)
		}
	}
	prod.Close()
	// Wait until the sealed segments are uploaded: the upload lag of
	// every partition is 0.
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get("http://" + a["http"] + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if lagZero(string(body)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("uploads not done:\n%s", grepLines(string(body), "sq_tier_upload_lag"))
		}
		time.Sleep(100 * time.Millisecond)
	}
	ti, err := cl.DescribeTopic(tctx, "history")
	if err != nil {
		t.Fatal(err)
	}
	cl.Close()
	stopA()

	b, stopB := startTiered(t, endpoint, t.TempDir(), "--grpc-host", "127.0.0.1:0")
	defer stopB()
	admin, err := sdk.NewAdmin(sdk.AdminConfig{GrpcConfig: sdk.GrpcConfig{Addr: b["grpc"]}})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	var restored sdk.TopicInfo
	deadline = time.Now().Add(30 * time.Second)
	for {
		restored, err = admin.RestoreTopic(tctx, "history", "")
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("restore: %v", err)
		}
		time.Sleep(100 * time.Millisecond) // the node may still be catching up with its metadata
	}
	if restored.ID != ti.ID || restored.Partitions != 2 {
		t.Fatalf("restored %+v, want id %s and 2 partitions", restored, ti.ID)
	}
	if _, err := admin.RestoreTopic(tctx, "history", ""); err == nil {
		t.Fatal("a second restore of the topic succeeded")
	}
	cb, err := sdk.Dial(tctx, sdk.ClientConfig{Addr: b["capnp"]})
	if err != nil {
		t.Fatal(err)
	}
	defer cb.Close()
	var total int
	for _, p := range restored.PartitionInfos {
		end := p.LogEndOffset
		total += int(end)
		// The history of A up to the remote log's end, from the bucket.
		var read [][]byte
		for next := uint64(0); next < end; {
			res, err := cb.Fetch(tctx, sdk.FetchRequest{Topic: "history", Partition: p.Partition, Offset: next, MaxBytes: 256 << 10})
			if err != nil {
				t.Fatalf("fetch partition %d at %d: %v", p.Partition, next, err)
			}
			for _, m := range res.Messages {
				if m.Offset != next {
					t.Fatalf("partition %d: offset %d after %d", p.Partition, m.Offset, next)
				}
				read = append(read, m.Value)
				next++
			}
			if len(res.Messages) == 0 {
				t.Fatalf("partition %d: empty fetch at %d", p.Partition, next)
			}
		}
		if end > 0 {
			for i := range read {
				if !bytes.Equal(read[i], want[i]) {
					t.Fatalf("partition %d record %d: %q, want %q", p.Partition, i, read[i], want[i])
				}
			}
		}
	}
	if total == 0 {
		t.Fatal("nothing restored")
	}
	// New records continue after the restored history.
	pb, err := sdk.NewProducer(tctx, sdk.ProducerConfig{Addr: b["capnp"]})
	if err != nil {
		t.Fatal(err)
	}
	defer pb.Close()
	ack, err := pb.Send(tctx, "history", []byte("k"), []byte("after the restore"))
	if err != nil {
		t.Fatal(err)
	}
	if want := restored.PartitionInfos[ack.Partition].LogEndOffset; ack.Offset != want {
		t.Fatalf("a new record at offset %d, want %d (after the restored history)", ack.Offset, want)
	}
}

// lagZero reports whether every sq_tier_upload_lag_segments sample of
// the metrics text is 0 and there is at least one.
func lagZero(text string) bool {
	n := 0
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, "sq_tier_upload_lag_segments{") {
			n++
			if !strings.HasSuffix(l, " 0") {
				return false
			}
		}
	}
	return n > 0
}

// grepLines returns the lines of text that contain s.
func grepLines(text, s string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
