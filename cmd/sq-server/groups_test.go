package main

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/seedqueue/sq/api/batch"
	"github.com/seedqueue/sq/api/sqv1"
	"github.com/seedqueue/sq/engine"
	"github.com/seedqueue/sq/internal/testutil"
)

// TestSingleNodeGroupsKeptInACluster: a data directory of a single node
// whose group committed offsets, started as a cluster (of one), imports
// them into the offsets topic once at startup, so the group's offsets are
// still served and listed, and retires its single-node groups log.
func TestSingleNodeGroupsKeptInACluster(t *testing.T) {
	dir := t.TempDir()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	eng, err := engine.Open(engine.Options{DataDir: dir, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := eng.CreateTopic("t", 2, engine.TopicConfig{}); err != nil {
		t.Fatal(err)
	}
	var bb batch.Builder
	for range 3 {
		bb.Add(nil, []byte("v"), nil, 1)
	}
	rec, err := bb.Build()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := eng.Append(context.Background(), "t", 0, rec); err != nil {
		t.Fatal(err)
	}
	if _, err := eng.CommitOffsets("billing", "", -1, []engine.OffsetCommit{{Topic: "t", Partition: 0, Offset: 2}}); err != nil {
		t.Fatal(err)
	}
	if err := eng.Close(); err != nil {
		t.Fatal(err)
	}

	var c config
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	bindFlags(fs, &c)
	if err := fs.Parse([]string{"--data-dir", dir, "--capnp-host", "127.0.0.1:0",
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
	done := make(chan error, 1)
	go func() { done <- run(ctx, &c, quiet) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	}()
	conn, err := grpc.NewClient(<-grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	wctx, wcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer wcancel()
	watchUntilServing(t, wctx, conn)
	// The import runs in the background: the offsets topic is created
	// and loaded first (COORDINATOR_NOT_AVAILABLE meanwhile).
	var offs *sqv1.FetchOffsetsResponse
	for {
		offs, err = sqv1.NewMessagingClient(conn).FetchOffsets(wctx, &sqv1.FetchOffsetsRequest{Group: "billing"})
		if err == nil && len(offs.Offsets) == 1 && offs.Offsets[0].Offset == 2 {
			break
		}
		if wctx.Err() != nil {
			t.Fatalf("offsets of the single node's group in the cluster: %v, %v; want t/0 at 2", offs, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	testutil.Eventually(t, 10*time.Second, "the single-node groups log retired", func() bool {
		m, _ := filepath.Glob(filepath.Join(dir, "groups", "offsets.log.imported-*"))
		return len(m) == 1
	})
	list, err := sqv1.NewGroupsClient(conn).ListGroups(wctx, &sqv1.ListGroupsRequest{})
	if err != nil || len(list.Groups) != 1 || list.Groups[0].Group != "billing" || list.Groups[0].State != engine.GroupEmpty {
		t.Fatalf("groups: %v, %v; want billing, empty", list, err)
	}
}
