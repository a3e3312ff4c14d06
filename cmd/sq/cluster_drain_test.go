package main

import (
	"context"
	"strings"
	"testing"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/api/sqv1"
)

// fakeDrainCluster is a fakeCluster that drains nodes (control's
// ClusterDrainer).
type fakeDrainCluster struct {
	fakeCluster
	calls []string // "drain ID", "undrain ID"
}

func (f *fakeDrainCluster) DrainNode(_ context.Context, id string) (*sqv1.DrainNodeResponse, error) {
	if f.err != nil {
		return nil, f.err
	}
	f.calls = append(f.calls, "drain "+id)
	return &sqv1.DrainNodeResponse{MovedPartitions: 3, RemainingPartitions: []string{"orders-5"}}, nil
}

func (f *fakeDrainCluster) UndrainNode(_ context.Context, id string) (*sqv1.UndrainNodeResponse, error) {
	if f.err != nil {
		return nil, f.err
	}
	f.calls = append(f.calls, "undrain "+id)
	return &sqv1.UndrainNodeResponse{}, nil
}

func TestClusterDrainAndUndrain(t *testing.T) {
	fc := &fakeDrainCluster{}
	addr := startClusterControl(t, fc)
	tests := []struct {
		args []string
		err  error
		out  string
		fail string
	}{
		{args: []string{"drain", "b"}, out: "drained node b; leadership of 3 partitions moved to in-sync followers\nstill led by b (no other alive, undrained in-sync replica yet): orders-5\n"},
		{args: []string{"undrain", "b"}, out: "node b is no longer drained\n"},
		{args: []string{"drain", "b"}, err: api.NewError(api.CodeNoQuorum, "no Raft majority"), fail: "cannot drain node b: NO_QUORUM: no Raft majority"},
		{args: []string{"undrain", "b"}, err: api.NewError(api.CodeNoQuorum, "no Raft majority"), fail: "cannot undrain node b: NO_QUORUM: no Raft majority"},
		{args: []string{"drain"}, fail: "sq cluster drain takes exactly one node ID"},
		{args: []string{"undrain", "a", "b"}, fail: "sq cluster undrain takes exactly one node ID"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			fc.err = tt.err
			out, err := runSQ(t, nil, append([]string{"--control", addr, "cluster"}, tt.args...)...)
			switch {
			case tt.fail != "" && (err == nil || !strings.Contains(err.Error(), tt.fail)):
				t.Fatalf("err = %v, want %q", err, tt.fail)
			case tt.fail == "" && (err != nil || out != tt.out):
				t.Fatalf("out %q, err %v; want %q", out, err, tt.out)
			}
		})
	}
	if strings.Join(fc.calls, ",") != "drain b,undrain b" {
		t.Fatalf("backend calls %v", fc.calls)
	}
}
