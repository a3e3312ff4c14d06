package sdk

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/control"
	"github.com/seedqueue/sq/engine"
	"github.com/seedqueue/sq/internal/faultfs"
	"github.com/seedqueue/sq/net/dataplane"
)

// faultyNode is a real engine on a fault-injecting file system, with its
// Cap'n Proto data plane and gRPC control plane on loopback.
type faultyNode struct {
	fs        *faultfs.FS
	capnpAddr string
	grpcAddr  string
}

func startFaultyNode(t *testing.T) *faultyNode {
	t.Helper()
	quiet := slog.New(slog.DiscardHandler)
	dir := t.TempDir()
	fs := faultfs.New(dir, nil)
	ctl, err := control.New(control.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	eng, err := engine.Open(engine.Options{DataDir: dir, FS: fs, Backend: fs.Backend(), SyncPolicy: "every-batch",
		ScrubBytesPerSec: -1, Logger: quiet, Observer: ctl.Observer()})
	if err != nil {
		t.Fatal(err)
	}
	ctl.SetEngine(eng)
	dp, err := dataplane.New(eng, dataplane.Options{Logger: quiet})
	if err != nil {
		eng.Close()
		t.Fatal(err)
	}
	var lns [2]net.Listener
	for i := range lns {
		if lns[i], err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
	}
	done := make(chan struct{}, 2)
	go func() { _ = dp.Serve(lns[0]); done <- struct{}{} }()
	go func() { _ = ctl.ServeGRPC(lns[1]); done <- struct{}{} }()
	ctl.SetReady(true)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = ctl.Shutdown(ctx)
		_ = dp.Shutdown(ctx)
		<-done
		<-done
		eng.Close()
	})
	return &faultyNode{fs: fs, capnpAddr: lns[0].Addr().String(), grpcAddr: lns[1].Addr().String()}
}

// TestPartitionFailedReachesTheClient: a partition failed by an EIO from
// fdatasync gives every client, over Cap'n Proto and over gRPC, an error
// that matches api.ErrPartitionFailed and says "input/output error"; the
// server's cause itself (syscall.EIO) never crosses the wire.
func TestPartitionFailedReachesTheClient(t *testing.T) {
	n := startFaultyNode(t)
	ctx := testCtx(t)
	admin, err := NewAdmin(AdminConfig{GrpcConfig{Addr: n.grpcAddr}})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if _, err := admin.CreateTopic(ctx, "t", 1, TopicConfig{}); err != nil {
		t.Fatal(err)
	}
	n.fs.Inject(faultfs.Rule{Ops: faultfs.OpSync, Path: "*.log", Times: 1, Err: syscall.EIO})

	p, err := NewProducer(ctx, ProducerConfig{Addr: n.capnpAddr})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	_, err = p.Send(ctx, "t", nil, []byte("lost"))
	checkPartitionFailed(t, "Producer.Send", err)
	_, err = p.Send(ctx, "t", nil, []byte("after"))
	checkPartitionFailed(t, "Producer.Send after the failure", err)

	gp, err := NewGrpcProducer(GrpcProducerConfig{GrpcConfig: GrpcConfig{Addr: n.grpcAddr}})
	if err != nil {
		t.Fatal(err)
	}
	defer gp.Close()
	_, err = gp.Send(ctx, "t", nil, []byte("grpc"))
	checkPartitionFailed(t, "GrpcProducer.Send", err)

	info, err := admin.DescribeTopic(ctx, "t")
	if err != nil || len(info.PartitionInfos) != 1 {
		t.Fatalf("DescribeTopic = %+v, %v", info, err)
	}
	checkPartitionFailed(t, "Admin.DescribeTopic", info.PartitionInfos[0].Err)
	md, err := p.Client().DescribeTopic(ctx, "t")
	if err != nil || len(md.PartitionInfos) != 1 {
		t.Fatalf("Client.DescribeTopic = %+v, %v", md, err)
	}
	checkPartitionFailed(t, "Client.DescribeTopic", md.PartitionInfos[0].Err)
}

func checkPartitionFailed(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, api.ErrPartitionFailed) {
		t.Fatalf("%s = %v, want errors.Is(err, api.ErrPartitionFailed)", what, err)
	}
	if !strings.Contains(err.Error(), syscall.EIO.Error()) {
		t.Errorf("%s = %q does not say why (%q)", what, err, syscall.EIO.Error())
	}
	if errors.Is(err, syscall.EIO) {
		t.Errorf("%s = %v matches syscall.EIO: the server's cause crossed the wire", what, err)
	}
}

// TestTextError: a catalog error the gRPC API sends as a string keeps its
// code; text without a catalog NAME takes the given default.
func TestTextError(t *testing.T) {
	for _, tc := range []struct {
		in   string
		def  api.Code
		code api.Code
		msg  string
	}{
		{"FENCED_GENERATION: t/0 is not assigned to member \"m\"", api.CodeUnknown, api.CodeFencedGeneration, "t/0 is not assigned to member \"m\""},
		{"STORAGE_ERROR: partition t/0 failed to open: input/output error", api.CodePartitionFailed, api.CodeStorageError, "partition t/0 failed to open: input/output error"},
		{"PARTITION_FAILED: fdatasync of d failed: input/output error", api.CodePartitionFailed, api.CodePartitionFailed, "fdatasync of d failed: input/output error"},
		{"NONE: x", api.CodeUnknown, api.CodeUnknown, "NONE: x"},
		{"NOT_A_CODE: x", api.CodeUnknown, api.CodeUnknown, "NOT_A_CODE: x"},
		{"no name at all", api.CodePartitionFailed, api.CodePartitionFailed, "no name at all"},
		{"", api.CodeUnknown, api.CodeUnknown, ""},
	} {
		e := textError(tc.in, tc.def)
		if e.Code != tc.code || e.Message != tc.msg {
			t.Errorf("textError(%q) = %v %q, want %v %q", tc.in, e.Code, e.Message, tc.code, tc.msg)
		}
	}
}
