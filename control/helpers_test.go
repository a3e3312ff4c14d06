package control_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/seedqueue/sq/control"
	"github.com/seedqueue/sq/engine"
	"github.com/seedqueue/sq/net/dataplane"
)

// node is one engine with its control plane (gRPC + HTTP) and Cap'n Proto
// data plane, all on loopback.
type node struct {
	eng       *engine.Engine
	srv       *control.Server
	dp        *dataplane.Server
	grpcAddr  string
	httpAddr  string
	capnpAddr string
	conn      *grpc.ClientConn
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// startNode starts a ready node; every server stops at the end of the test.
func startNode(t *testing.T, opts control.Options) *node {
	t.Helper()
	return startNodeWith(t, opts, nil)
}

// startNodeWith is startNode with the engine options changed by tune
// (when not nil) before the engine opens.
func startNodeWith(t *testing.T, opts control.Options, tune func(*engine.Options)) *node {
	t.Helper()
	n := &node{}
	if opts.Logger == nil {
		opts.Logger = quietLogger()
	}
	opts.SubscribeMaxWait = 100 * time.Millisecond
	srv, err := control.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	n.srv = srv
	eo := engine.Options{DataDir: t.TempDir(), SegmentBytes: 1 << 20, PreallocBytes: 64 << 10,
		MaxBatchBytes: 256 << 10, MaxRecordBytes: 64 << 10, Logger: quietLogger(), Observer: srv.Observer()}
	if tune != nil {
		tune(&eo)
	}
	eng, err := engine.Open(eo)
	if err != nil {
		t.Fatal(err)
	}
	n.eng = eng
	srv.SetEngine(eng)
	gl := listen(t)
	hl := listen(t)
	cl := listen(t)
	n.grpcAddr, n.httpAddr, n.capnpAddr = gl.Addr().String(), hl.Addr().String(), cl.Addr().String()
	n.dp, err = dataplane.New(eng, dataplane.Options{NodeID: "n1", Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{}, 3)
	go func() { _ = srv.ServeGRPC(gl); done <- struct{}{} }()
	go func() { _ = srv.ServeHTTP(hl); done <- struct{}{} }()
	go func() { _ = n.dp.Serve(srv.CountConns(cl, "capnp")); done <- struct{}{} }()
	srv.SetReady(true)
	eventually(t, "HTTP serving", func() bool {
		resp, err := http.Get("http://" + n.httpAddr + "/healthz")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil
	})
	n.conn, err = grpc.NewClient(n.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		n.conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		_ = n.dp.Shutdown(ctx)
		for range 3 {
			<-done
		}
		eng.Close()
	})
	return n
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// httpGet returns the status and body of GET url.
func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// eventually polls cond until it holds or 5 s pass.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// errorReason returns the ErrorInfo reason in st's details.
func errorReason(st *status.Status) string {
	for _, d := range st.Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok {
			return ei.Reason
		}
	}
	return ""
}
