package gossip

import (
	"errors"
	"strings"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/control"
)

func TestOptionsValidate(t *testing.T) {
	ok := Options{NodeID: "a", ClusterID: "c", DataDir: "/d", GRPCAddr: "127.0.0.1:1"}.Defaults()
	if err := ok.Validate(); err != nil {
		t.Fatalf("valid options refused: %v", err)
	}
	bad := Options{Seeds: []string{"nohost"}, GossipBind: "x", DefaultReplicationFactor: -1,
		HeartbeatTimeout: 1, LeaderLeaseTimeout: 2, MaxVoters: -1}.Defaults()
	err := bad.Validate()
	for _, want := range []string{"node id", "cluster id", "data dir", "gRPC address", `seed "nohost"`, `gossip bind address "x"`,
		"replication factor -1", "leader lease", "max voters"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %v: nothing about %s", err, want)
		}
	}
}

// TestFromStatus: a catalog error that crossed gRPC (control.ToStatus)
// comes back with its code and leader; other errors are left alone and
// transport failures are retriable.
func TestFromStatus(t *testing.T) {
	e := api.NewError(api.CodeNotLeader, "not me")
	e.LeaderID, e.LeaderAddr = "n2", "10.0.0.2:6060"
	got := api.AsError(fromStatus(control.ToStatus(e)))
	if got == nil || got.Code != api.CodeNotLeader || got.LeaderID != "n2" || got.LeaderAddr != "10.0.0.2:6060" || !retriable(got) {
		t.Fatalf("round trip: %#v", got)
	}
	if got := api.AsError(fromStatus(control.ToStatus(api.NewError(api.CodeInvalidRequest, "other cluster")))); got.Code != api.CodeInvalidRequest || retriable(got) {
		t.Fatalf("invalid request: %#v", got)
	}
	plain := status.Error(codes.Unavailable, "connection refused")
	if fromStatus(plain) != plain || !retriable(plain) {
		t.Fatal("an Unavailable status without details is not left as is and retriable")
	}
	if st, _ := status.New(codes.NotFound, "x").WithDetails(&errdetails.ErrorInfo{Metadata: map[string]string{}}); retriable(fromStatus(st.Err())) {
		t.Fatal("NotFound retriable")
	}
	other := errors.New("boom")
	if fromStatus(other) != other || fromStatus(nil) != nil {
		t.Fatal("a non-status error changed")
	}
}
