package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/seedqueue/sq/api/sqv1"
	"github.com/seedqueue/sq/sdk"
)

// quotasClient connects to the Quotas service of the server at addr.
func quotasClient(t *testing.T, addr string) sqv1.QuotasClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return sqv1.NewQuotasClient(conn)
}

// listQuotas returns the quotas as "principal:produce/fetch" in list
// order, polling until the server answers (it serves once ready).
func listQuotas(t *testing.T, q sqv1.QuotasClient) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		r, err := q.ListQuotas(ctx, &sqv1.ListQuotasRequest{})
		cancel()
		if err == nil {
			var out []string
			for _, e := range r.Quotas {
				name := e.Principal
				if e.DefaultEntity {
					name = "<default>"
				}
				out = append(out, fmt.Sprintf("%s:%d/%d", name, e.ProduceBytesPerSec, e.FetchBytesPerSec))
			}
			return strings.Join(out, " ")
		}
		if time.Now().After(deadline) {
			t.Fatalf("ListQuotas: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestQuotasKeptAcrossRestart: quotas set through the Quotas service are
// listed, audited, refused with INVALID_CONFIG naming the field when
// negative, enforced on the data plane, and still there (and enforced)
// after the server restarts on its data directory.
func TestQuotasKeptAcrossRestart(t *testing.T) {
	dir := t.TempDir()
	s := startServer(t, "--data-dir", dir)
	q := quotasClient(t, s.addrs["grpc"])
	if got := listQuotas(t, q); got != "" {
		t.Fatalf("a new server lists quotas: %s", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, req := range []*sqv1.SetQuotaRequest{
		{Principal: "alice", ProduceBytesPerSec: 100},
		{Principal: "User:alice", FetchBytesPerSec: 200},
		{DefaultEntity: true, ProduceBytesPerSec: 1000},
	} {
		if _, err := q.SetQuota(ctx, req); err != nil {
			t.Fatalf("SetQuota %v: %v", req, err)
		}
	}
	_, err := q.SetQuota(ctx, &sqv1.SetQuotaRequest{Principal: "bob", ProduceBytesPerSec: -1})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "INVALID_CONFIG") || !strings.Contains(err.Error(), "produce_bytes_per_sec") {
		t.Fatalf("negative rate: %v, want INVALID_CONFIG naming produce_bytes_per_sec", err)
	}
	const want = "<default>:1000/0 User:alice:100/200"
	if got := listQuotas(t, q); got != want {
		t.Fatalf("quotas %q, want %q", got, want)
	}
	if logs := s.logs.String(); !strings.Contains(logs, "action=quota.set resource=alice principal=User:ANONYMOUS") ||
		!strings.Contains(logs, "action=quota.set resource=<default>") || !strings.Contains(logs, "result=\"INVALID_CONFIG") {
		t.Fatalf("quota changes not audited:\n%s", logs)
	}
	throttledProducer(t, s.addrs["capnp"], "before")
	s.stop()

	s = startServer(t, "--data-dir", dir)
	if got := listQuotas(t, quotasClient(t, s.addrs["grpc"])); got != want {
		t.Fatalf("after a restart: quotas %q, want %q", got, want)
	}
	throttledProducer(t, s.addrs["capnp"], "after")
}

// throttledProducer publishes 8 KiB in 1 KiB records as User:ANONYMOUS,
// whose default quota is 1000 B/s (an allowance of 10,000 bytes over the
// 10 full windows a new rate is spread over), and fails unless some
// response is throttled: the quota in the metadata reaches the data
// plane. Each throttle is at most 11 s; 8 KiB over 1000 B/s is at most
// some seconds in all.
func throttledProducer(t *testing.T, addr, topic string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	p, err := sdk.NewProducer(ctx, sdk.ProducerConfig{Addr: addr})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, err := p.Client().CreateTopic(ctx, topic, 1, sdk.TopicConfig{}); err != nil {
		t.Fatal(err)
	}
	for i := 0; p.Client().ThrottleStats().Responses == 0; i++ {
		if i == 16 {
			t.Fatalf("16 KiB published without a throttle against a 1000 B/s quota")
		}
		if _, err := p.Send(ctx, topic, nil, make([]byte, 1024)); err != nil {
			t.Fatal(err)
		}
	}
}
