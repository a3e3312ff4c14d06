package main

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/api/sqv1"
)

// fakeQuotas is a cluster backend that stores quotas in a map (the real
// one, through the metadata log, is tested in cmd/sq-server).
type fakeQuotas struct {
	fakeCluster
	mu sync.Mutex
	q  map[string]*sqv1.QuotaEntry // "" is the default
}

func (f *fakeQuotas) SetQuota(_ context.Context, r *sqv1.SetQuotaRequest) (*sqv1.SetQuotaResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	e := f.q[r.Principal]
	if e == nil {
		e = &sqv1.QuotaEntry{Principal: r.Principal, DefaultEntity: r.DefaultEntity}
		f.q[r.Principal] = e
	}
	if r.ProduceBytesPerSec > 0 {
		e.ProduceBytesPerSec = r.ProduceBytesPerSec
	}
	if r.FetchBytesPerSec > 0 {
		e.FetchBytesPerSec = r.FetchBytesPerSec
	}
	return &sqv1.SetQuotaResponse{Quota: e}, nil
}

func (f *fakeQuotas) RemoveQuota(_ context.Context, r *sqv1.RemoveQuotaRequest) (*sqv1.RemoveQuotaResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.q[r.Principal] == nil {
		return nil, api.NewError(api.CodeInvalidRequest, "principal %q has no quota", r.Principal)
	}
	delete(f.q, r.Principal)
	return &sqv1.RemoveQuotaResponse{}, nil
}

func (f *fakeQuotas) ListQuotas(context.Context) (*sqv1.ListQuotasResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	keys := make([]string, 0, len(f.q))
	for k := range f.q {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	out := &sqv1.ListQuotasResponse{}
	for _, k := range keys {
		out.Quotas = append(out.Quotas, f.q[k])
	}
	return out, nil
}

// TestQuotaCommands: set (one rate, then the other, kept), the default,
// list as text and JSON, remove, and the server's refusal of an unknown
// principal.
func TestQuotaCommands(t *testing.T) {
	addr := startClusterControl(t, &fakeQuotas{q: map[string]*sqv1.QuotaEntry{}})
	steps := []struct {
		args []string
		want string
	}{
		{[]string{"quota", "list"}, "no quotas\n"},
		{[]string{"quota", "set", "--principal", "alice", "--produce-bytes-per-sec", "1048576"}, "quota of User:alice: produce 1048576 B/s, fetch -\n"},
		{[]string{"quota", "set", "--principal", "User:alice", "--fetch-bytes-per-sec", "2048"}, "quota of User:alice: produce 1048576 B/s, fetch 2048 B/s\n"},
		{[]string{"quota", "set", "--default", "--fetch-bytes-per-sec", "10"}, "quota of <default>: produce -, fetch 10 B/s\n"},
		{[]string{"quota", "remove", "--principal", "alice"}, "removed the quota of alice\n"},
	}
	for _, st := range steps {
		out, err := runSQ(t, nil, append([]string{"--control", addr}, st.args...)...)
		if err != nil || out != st.want {
			t.Fatalf("sq %v: %q, %v; want %q", st.args, out, err, st.want)
		}
	}
	if _, err := runSQ(t, nil, "--control", addr, "quota", "set", "--principal", "carol", "--produce-bytes-per-sec", "5"); err != nil {
		t.Fatal(err)
	}
	out, err := runSQ(t, nil, "--control", addr, "quota", "list")
	if err != nil {
		t.Fatal(err)
	}
	wantLines(t, out, "PRINCIPAL", "PRODUCE", "FETCH", "<default>", "-", "10 B/s", "User:carol", "5 B/s", "-")
	out, err = runSQ(t, nil, "--control", addr, "quota", "list", "-f", "json")
	if err != nil || !strings.Contains(out, `"quotas": [`) || !strings.Contains(out, `"principal": "User:carol"`) || !strings.Contains(out, `"default": true`) {
		t.Fatalf("list json: %v\n%s", err, out)
	}
	if _, err := runSQ(t, nil, "--control", addr, "quota", "remove", "--principal", "nobody"); err == nil ||
		err.Error() != `cannot remove the quota of nobody: INVALID_REQUEST: principal "User:nobody" has no quota` {
		t.Fatalf("remove of a principal without a quota: %v", err)
	}
}

// TestQuotaBadInput: every mistake is refused before (or by) the server
// with an error naming the flag or field.
func TestQuotaBadInput(t *testing.T) {
	addr := startClusterControl(t, &fakeQuotas{q: map[string]*sqv1.QuotaEntry{}})
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"quota", "set", "--produce-bytes-per-sec", "1"}, "name the quota: --principal P, or --default"},
		{[]string{"quota", "set", "--principal", "a", "--default", "--produce-bytes-per-sec", "1"}, "--principal and --default name two quotas"},
		{[]string{"quota", "set", "--principal", "a"}, "give --produce-bytes-per-sec, --fetch-bytes-per-sec or both"},
		{[]string{"quota", "set", "--principal", "a", "--produce-bytes-per-sec", "0"}, "--produce-bytes-per-sec 0: want a whole number of bytes per second, 1 or more"},
		{[]string{"quota", "set", "--principal", "a", "--fetch-bytes-per-sec", "-5"}, "--fetch-bytes-per-sec -5: want a whole number"},
		{[]string{"quota", "set", "--principal", "a", "--fetch-bytes-per-sec", "lots"}, "want a whole number"},
		{[]string{"quota", "remove"}, "name the quota: --principal P, or --default"},
		{[]string{"quota", "list", "extra"}, "takes no arguments"},
	}
	for _, tt := range tests {
		_, err := runSQ(t, nil, append([]string{"--control", addr}, tt.args...)...)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Fatalf("sq %v: %v, want an error with %q", tt.args, err, tt.want)
		}
	}
	// The server refuses what the CLI lets through to it.
	q := sqv1.NewQuotasClient(dialControl(t, addr))
	_, err := q.SetQuota(context.Background(), &sqv1.SetQuotaRequest{Principal: "a", FetchBytesPerSec: -1})
	if err == nil || !strings.Contains(err.Error(), "INVALID_CONFIG: fetch_bytes_per_sec -1") {
		t.Fatalf("a negative rate over gRPC: %v", err)
	}
	_, err = q.SetQuota(context.Background(), &sqv1.SetQuotaRequest{Principal: "a"})
	if err == nil || !strings.Contains(err.Error(), "INVALID_CONFIG: neither produce_bytes_per_sec nor fetch_bytes_per_sec") {
		t.Fatalf("no rate over gRPC: %v", err)
	}
	_, err = q.SetQuota(context.Background(), &sqv1.SetQuotaRequest{FetchBytesPerSec: 1})
	if err == nil || !strings.Contains(err.Error(), "principal is empty") {
		t.Fatalf("no principal over gRPC: %v", err)
	}
}

// dialControl connects to the gRPC plane at addr, closed at the end of
// the test.
func dialControl(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}
