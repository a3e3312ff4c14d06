package main

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// TestReadyzDuringRecovery holds recovery open through the beforeRecovery
// hook: /healthz answers 200 and /readyz 503 until it is released, then
// /readyz 200 and gRPC health SERVING; the server stops cleanly.
func TestReadyzDuringRecovery(t *testing.T) {
	var c config
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	bindFlags(fs, &c)
	if err := fs.Parse([]string{"--data-dir", t.TempDir(), "--capnp-host", "127.0.0.1:0",
		"--grpc-host", "127.0.0.1:0", "--http-host", "127.0.0.1:0", "--io-backend", "portable"}); err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	var mu sync.Mutex
	addrs := map[string]string{}
	listened := make(chan struct{}, 3)
	c.hooks = &hooks{
		beforeRecovery: func() { <-release },
		listening: func(plane, addr string) {
			mu.Lock()
			addrs[plane] = addr
			mu.Unlock()
			listened <- struct{}{}
		},
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- run(ctx, &c, slog.New(slog.NewTextHandler(io.Discard, nil))) }()
	addr := func(plane string) string {
		mu.Lock()
		defer mu.Unlock()
		return addrs[plane]
	}
	<-listened // http
	base := "http://" + addr("http")
	if code := get(t, base+"/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz = %d during recovery, want 200", code)
	}
	if code := get(t, base+"/readyz"); code != http.StatusServiceUnavailable {
		t.Fatalf("/readyz = %d during recovery, want 503", code)
	}
	close(release)
	<-listened // capnp
	<-listened // grpc
	deadline := time.Now().Add(10 * time.Second)
	for get(t, base+"/readyz") != http.StatusOK {
		if time.Now().After(deadline) {
			t.Fatal("/readyz not 200 after recovery")
		}
		time.Sleep(5 * time.Millisecond)
	}
	conn, err := grpc.NewClient(addr("grpc"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	r, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil || r.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health = %v, %v; want SERVING", r, err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run: %v", err)
	}
}

func get(t *testing.T, url string) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestShutdownWithOpenWatch: an open grpc.health.v1 Watch stream does not
// hold the stop for the whole shutdown timeout; it sees NOT_SERVING, and
// the server stops within the control plane's grace.
func TestShutdownWithOpenWatch(t *testing.T) {
	var c config
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	bindFlags(fs, &c)
	if err := fs.Parse([]string{"--data-dir", t.TempDir(), "--capnp-host", "127.0.0.1:0",
		"--grpc-host", "127.0.0.1:0", "--http-host", "", "--io-backend", "portable"}); err != nil {
		t.Fatal(err)
	}
	grpcAddr := make(chan string, 1)
	c.hooks = &hooks{listening: func(plane, addr string) {
		if plane == "grpc" {
			grpcAddr <- addr
		}
	}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- run(ctx, &c, slog.New(slog.NewTextHandler(io.Discard, nil))) }()
	conn, err := grpc.NewClient(<-grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	wctx, wcancel := context.WithCancel(context.Background())
	defer wcancel()
	watchUntilServing(t, wctx, conn)
	cancel() // SIGTERM
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run: %v", err)
		}
	case <-time.After(shutdownTimeout - 5*time.Second):
		t.Fatal("an open Watch stream held the stop for the whole shutdown timeout")
	}
}

// watchUntilServing opens a grpc.health.v1 Watch on conn and returns once
// it reports SERVING; the stream stays open until ctx ends.
func watchUntilServing(t *testing.T, ctx context.Context, conn *grpc.ClientConn) {
	t.Helper()
	w, err := healthpb.NewHealthClient(conn).Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for {
		r, err := w.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if r.Status == healthpb.HealthCheckResponse_SERVING {
			return
		}
	}
}
