package control_test

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/api/sqv1"
	"github.com/seedqueue/sq/control"
	"github.com/seedqueue/sq/engine"
)

// fakeBackend is a ClusterBackend that records its calls and answers
// with its fields.
type fakeBackend struct {
	mu       sync.Mutex
	ready    error
	err      error // returned by every call when set
	removed  []string
	joined   []*sqv1.JoinRequest
	proposed [][]byte
}

func (f *fakeBackend) Members(context.Context) (*sqv1.MembersResponse, error) {
	if f.err != nil {
		return nil, f.err
	}
	return &sqv1.MembersResponse{ClusterId: "cx", Members: []*sqv1.Member{
		{NodeId: "a", State: "alive", Voter: true, Controller: true, Self: true},
		{NodeId: "b", State: "suspect", Voter: true},
		{NodeId: "c", State: "dead"},
	}}, nil
}

func (f *fakeBackend) Info(context.Context) (*sqv1.ClusterInfoResponse, error) {
	if f.err != nil {
		return nil, f.err
	}
	return &sqv1.ClusterInfoResponse{ClusterId: "cx", NodeId: "a", ControllerId: "a", RaftState: "leader", RaftTerm: 3,
		AppliedIndex: 17, CommitIndex: 17, MetadataHash: "abc", MemberCount: 3, LeaderlessPartitions: 2}, nil
}

func (f *fakeBackend) RemoveNode(_ context.Context, id string) (*sqv1.RemoveNodeResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return nil, f.err
	}
	f.removed = append(f.removed, id)
	return &sqv1.RemoveNodeResponse{MovedPartitions: 4}, nil
}

func (f *fakeBackend) Join(_ context.Context, req *sqv1.JoinRequest) (*sqv1.JoinResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return nil, f.err
	}
	f.joined = append(f.joined, req)
	return &sqv1.JoinResponse{ClusterId: "cx", GossipAddresses: []string{"127.0.0.1:1"}, ControllerId: "a"}, nil
}

func (f *fakeBackend) Propose(_ context.Context, cmd []byte) (*sqv1.ProposeResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return nil, f.err
	}
	f.proposed = append(f.proposed, cmd)
	return &sqv1.ProposeResponse{Index: 9, Result: []byte("r")}, nil
}

func (f *fakeBackend) Ready() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ready
}

func (f *fakeBackend) setReady(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ready = err
}

// servedNode is a control plane over eng (nil: none yet), gRPC and HTTP
// on loopback; it stops at the end of the test.
type servedNode struct {
	srv  *control.Server
	conn *grpc.ClientConn
	base string // http://host:port
}

func serve(t *testing.T, eng control.Engine, backend control.ClusterBackend) *servedNode {
	t.Helper()
	srv, err := control.New(control.Options{NodeID: "n1", ClusterID: "c1", Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if backend != nil {
		srv.SetCluster(backend)
	}
	if eng != nil {
		srv.SetEngine(eng)
	}
	gl, hl := listen(t), listen(t)
	done := make(chan struct{}, 2)
	go func() { _ = srv.ServeGRPC(gl); done <- struct{}{} }()
	go func() { _ = srv.ServeHTTP(hl); done <- struct{}{} }()
	conn, err := grpc.NewClient(gl.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-done
		<-done
	})
	return &servedNode{srv: srv, conn: conn, base: "http://" + hl.Addr().String()}
}

func openEngine(t *testing.T) *engine.Engine {
	t.Helper()
	eng, err := engine.Open(engine.Options{DataDir: t.TempDir(), Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	return eng
}

func TestClusterServiceDelegatesToTheBackend(t *testing.T) {
	b := &fakeBackend{}
	// No engine yet: the cluster calls are served all the same, so that
	// peers can join a node that is still recovering.
	n := serve(t, nil, b)
	ctx := context.Background()
	cl := sqv1.NewClusterClient(n.conn)
	m, err := cl.Members(ctx, &sqv1.MembersRequest{})
	if err != nil || len(m.Members) != 3 || m.Members[1].State != "suspect" || m.ClusterId != "cx" {
		t.Fatalf("Members = %v, %v", m, err)
	}
	info, err := cl.Info(ctx, &sqv1.ClusterInfoRequest{})
	if err != nil || info.AppliedIndex != 17 || info.MetadataHash != "abc" || info.LeaderlessPartitions != 2 {
		t.Fatalf("Info = %v, %v", info, err)
	}
	rm, err := cl.RemoveNode(ctx, &sqv1.RemoveNodeRequest{NodeId: "c"})
	if err != nil || rm.MovedPartitions != 4 || !slices.Equal(b.removed, []string{"c"}) {
		t.Fatalf("RemoveNode = %v, %v (removed %v)", rm, err, b.removed)
	}
	j, err := cl.Join(ctx, &sqv1.JoinRequest{ClusterId: "cx", NodeId: "d", GossipAddress: "127.0.0.1:2"})
	if err != nil || j.ControllerId != "a" || len(b.joined) != 1 || b.joined[0].GossipAddress != "127.0.0.1:2" {
		t.Fatalf("Join = %v, %v", j, err)
	}
	p, err := cl.Propose(ctx, &sqv1.ProposeRequest{Command: []byte("cmd")})
	if err != nil || p.Index != 9 || string(b.proposed[0]) != "cmd" {
		t.Fatalf("Propose = %v, %v", p, err)
	}
	// NodeInfo needs the engine.
	if _, err := cl.NodeInfo(ctx, &sqv1.NodeInfoRequest{}); status.Code(err) != codes.Unavailable {
		t.Fatalf("NodeInfo without an engine: %v, want Unavailable", err)
	}
	// Requests the service checks itself never reach the backend.
	if _, err := cl.RemoveNode(ctx, &sqv1.RemoveNodeRequest{}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("RemoveNode without an id: %v", err)
	}
	if _, err := cl.Propose(ctx, &sqv1.ProposeRequest{}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("empty Propose: %v", err)
	}
	if len(b.removed) != 1 || len(b.proposed) != 1 {
		t.Fatalf("backend called: removed %v, proposed %d", b.removed, len(b.proposed))
	}
}

func TestClusterBackendErrorsKeepTheirCatalogCode(t *testing.T) {
	b := &fakeBackend{err: api.NewError(api.CodeNoQuorum, "no Raft majority reachable")}
	n := serve(t, openEngine(t), b)
	ctx := context.Background()
	cl := sqv1.NewClusterClient(n.conn)
	calls := map[string]func() error{
		"Members":    func() error { _, err := cl.Members(ctx, &sqv1.MembersRequest{}); return err },
		"Info":       func() error { _, err := cl.Info(ctx, &sqv1.ClusterInfoRequest{}); return err },
		"RemoveNode": func() error { _, err := cl.RemoveNode(ctx, &sqv1.RemoveNodeRequest{NodeId: "b"}); return err },
		"Join":       func() error { _, err := cl.Join(ctx, &sqv1.JoinRequest{NodeId: "d"}); return err },
		"Propose":    func() error { _, err := cl.Propose(ctx, &sqv1.ProposeRequest{Command: []byte{1}}); return err },
	}
	for name, call := range calls {
		st, _ := status.FromError(call())
		if st.Code() != codes.Unavailable || errorReason(st) != "NO_QUORUM" || !strings.Contains(st.Message(), "no Raft majority") {
			t.Errorf("%s: %v (reason %q), want Unavailable NO_QUORUM", name, st.Err(), errorReason(st))
		}
	}
}

func TestReadinessWaitsForTheClusterBackend(t *testing.T) {
	b := &fakeBackend{ready: errors.New("catching up with the metadata log: applied 3 of 9")}
	n := serve(t, openEngine(t), b)
	n.srv.SetReady(true)
	code, body := httpGet(t, n.base+"/readyz")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "applied 3 of 9") {
		t.Fatalf("/readyz = %d %q while the backend is not ready", code, body)
	}
	if n.srv.Ready() {
		t.Fatal("Ready() = true while the backend is not ready")
	}
	health := healthpb.NewHealthClient(n.conn)
	status := func() healthpb.HealthCheckResponse_ServingStatus {
		r, err := health.Check(context.Background(), &healthpb.HealthCheckRequest{Service: "sq.v1.Topics"})
		if err != nil {
			t.Fatal(err)
		}
		return r.Status
	}
	if s := status(); s != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("health = %v while the backend is not ready", s)
	}
	info, err := sqv1.NewClusterClient(n.conn).Info(context.Background(), &sqv1.ClusterInfoRequest{})
	if err != nil || info.Ready {
		t.Fatalf("Info = %v, %v", info, err)
	}

	b.setReady(nil)
	eventually(t, "health SERVING", func() bool { return status() == healthpb.HealthCheckResponse_SERVING })
	if code, body := httpGet(t, n.base+"/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz = %d %q once the backend is ready", code, body)
	}
	b.setReady(errors.New("left the cluster"))
	eventually(t, "health NOT_SERVING", func() bool { return status() == healthpb.HealthCheckResponse_NOT_SERVING })
}

func TestSingleNodeClusterAnswers(t *testing.T) {
	eng := openEngine(t)
	if _, err := eng.CreateTopic("t", 3, engine.TopicConfig{}); err != nil {
		t.Fatal(err)
	}
	n := serve(t, eng, nil)
	n.srv.SetReady(true)
	info, err := sqv1.NewClusterClient(n.conn).Info(context.Background(), &sqv1.ClusterInfoRequest{})
	if err != nil || info.ControllerId != "n1" || info.TopicCount != 1 || info.PartitionCount != 3 || info.MemberCount != 1 ||
		info.VoterCount != 1 || !info.Ready || info.LeaderlessPartitions != 0 {
		t.Fatalf("Info = %v, %v", info, err)
	}
}
