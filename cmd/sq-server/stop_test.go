package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/seedqueue/sq/sdk"
)

// startForStop runs the server with args until the returned cancel, and
// returns its data-plane address and the channel of run's result.
func startForStop(t *testing.T, args ...string) (string, context.CancelFunc, <-chan error) {
	t.Helper()
	var c config
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	bindFlags(fs, &c)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	capnp := make(chan string, 1)
	c.hooks = &hooks{listening: func(plane, addr string) {
		if plane == "capnp" {
			capnp <- addr
		}
	}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, &c, slog.New(slog.NewTextHandler(io.Discard, nil))) }()
	select {
	case addr := <-capnp:
		return addr, cancel, done
	case err := <-done:
		cancel()
		t.Fatalf("run ended at start: %v", err)
	case <-time.After(30 * time.Second):
		cancel()
		t.Fatal("the data plane did not listen within 30 s")
	}
	return "", nil, nil
}

// TestStopFinishesInFlightAppends stops a single node (alone, and as a
// cluster of one, where the controlled shutdown has nothing to hand
// over) while producers send: the stop refuses new work, lets the
// appends in flight finish, syncs and exits cleanly, and every
// acknowledged record is there after a restart, at its offset.
func TestStopFinishesInFlightAppends(t *testing.T) {
	tests := []struct {
		name string
		grpc string
	}{
		{"alone", ""},
		{"cluster of one", "127.0.0.1:0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := []string{"--data-dir", t.TempDir(), "--capnp-host", "127.0.0.1:0", "--grpc-host", tt.grpc,
				"--http-host", "", "--io-backend", "portable", "--node-id", "stop-1"}
			addr, stop, done := startForStop(t, args...)
			acked := produceUntilStopped(t, addr, stop)
			if err := <-done; err != nil {
				t.Fatalf("run after the stop: %v", err)
			}
			addr, stop, done = startForStop(t, args...)
			defer func() {
				stop()
				if err := <-done; err != nil {
					t.Error(err)
				}
			}()
			checkStored(t, addr, acked)
		})
	}
}

// produceUntilStopped creates topic "stop" and sends from 4 goroutines;
// after 200 acknowledgements it calls stop, and each goroutine ends at
// its first failed send. It returns the acknowledged values by
// partition and offset.
func produceUntilStopped(t *testing.T, addr string, stop context.CancelFunc) map[[2]uint64]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := sdk.Dial(ctx, sdk.ClientConfig{Addr: addr})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.CreateTopic(ctx, "stop", 4, sdk.TopicConfig{}); err != nil {
		t.Fatal(err)
	}
	cl.Close()
	p, err := sdk.NewProducer(ctx, sdk.ProducerConfig{Addr: addr, Retries: sdk.RetriesNone, DeliveryTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var (
		mu    sync.Mutex
		acked = map[[2]uint64]string{}
		once  sync.Once
		wg    sync.WaitGroup
	)
	for g := range 4 {
		wg.Go(func() {
			for k := 0; ; k++ {
				v := fmt.Sprintf("g%d-%d", g, k)
				a, err := p.Send(ctx, "stop", []byte(strconv.Itoa(k)), []byte(v))
				if err != nil {
					return
				}
				mu.Lock()
				acked[[2]uint64{uint64(a.Partition), a.Offset}] = v
				if len(acked) == 200 {
					once.Do(stop)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(acked) < 200 {
		t.Fatalf("%d sends acknowledged before the producers stopped, want at least 200", len(acked))
	}
	return acked
}

// checkStored reads every partition of topic "stop" and checks that each
// acknowledged value is at its partition and offset.
func checkStored(t *testing.T, addr string, acked map[[2]uint64]string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := sdk.Dial(ctx, sdk.ClientConfig{Addr: addr})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	stored := map[[2]uint64]string{}
	for part := range uint32(4) {
		for off := uint64(0); ; {
			fr, err := cl.Fetch(ctx, sdk.FetchRequest{Topic: "stop", Partition: part, Offset: off})
			if err != nil {
				t.Fatalf("fetch partition %d at %d: %v", part, off, err)
			}
			for _, m := range fr.Messages {
				stored[[2]uint64{uint64(part), m.Offset}] = string(m.Value)
			}
			if fr.NextOffset >= fr.HighWatermark {
				break
			}
			off = fr.NextOffset
		}
	}
	for at, v := range acked {
		if stored[at] != v {
			t.Errorf("partition %d offset %d: acknowledged %q, stored %q", at[0], at[1], v, stored[at])
		}
	}
}
