package sdk

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seedqueue/sq/control"
	"github.com/seedqueue/sq/engine"
	"github.com/seedqueue/sq/internal/quota"
	"github.com/seedqueue/sq/net/dataplane"
)

// quotaNode is a real engine served on both planes with byte-rate quotas.
type quotaNode struct {
	capnpAddr, grpcAddr string
	quotas              *quota.Manager
	reg                 *prometheus.Registry
}

// startQuotaNode serves a fresh engine on loopback with the quotas of
// table, measured over 2 samples of 100 ms: a throttle is at most 200 ms.
func startQuotaNode(t *testing.T, table quota.Table) *quotaNode {
	t.Helper()
	quiet := slog.New(slog.DiscardHandler)
	m := quota.New(quota.Options{Samples: 2, Window: 100 * time.Millisecond})
	m.SetTable(table)
	reg := prometheus.NewRegistry()
	reg.MustRegister(m.Collectors()...)
	ctl, err := control.New(control.Options{Logger: quiet, Quotas: m})
	if err != nil {
		t.Fatal(err)
	}
	eng, err := engine.Open(engine.Options{DataDir: t.TempDir(), SyncPolicy: "none", Logger: quiet, Observer: ctl.Observer()})
	if err != nil {
		t.Fatal(err)
	}
	ctl.SetEngine(eng)
	dp, err := dataplane.New(eng, dataplane.Options{Logger: quiet, Quotas: m})
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
	return &quotaNode{capnpAddr: lns[0].Addr().String(), grpcAddr: lns[1].Addr().String(), quotas: m, reg: reg}
}

// throttled returns the count of sq_throttle_time_seconds{plane, quota}.
func (n *quotaNode) throttled(t *testing.T, plane, kind string) uint64 {
	t.Helper()
	mfs, err := n.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var count uint64
	for _, mf := range mfs {
		if mf.GetName() != "sq_throttle_time_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["plane"] == plane && labels["quota"] == kind {
				count += m.GetHistogram().GetSampleCount()
			}
		}
	}
	return count
}

const quotaRecords, quotaRecordBytes = 40, 1024

// quotaValue is record i's value: its number, padded to quotaRecordBytes.
func quotaValue(i int) []byte {
	v := make([]byte, quotaRecordBytes)
	copy(v, fmt.Sprintf("record-%04d", i))
	return v
}

// TestQuotasOnTheDataPlane: a producer (fetcher) over its principal's
// produce (fetch) quota gets throttle times back, waits them out, and
// still has every record acknowledged (read) in order; the server counts
// the throttles in sq_throttle_time_seconds. A principal without a quota
// (another principal has one) is never throttled. The plaintext client's
// principal is User:ANONYMOUS.
func TestQuotasOnTheDataPlane(t *testing.T) {
	// 40 records of 1 KiB: 40 KiB against 100 KB/s with a 100 ms
	// allowance of 10 KB per window is throttled within a few batches.
	tests := []struct {
		name                   string
		table                  quota.Table
		produceThr, fetchThrot bool
	}{
		{"own produce quota", quota.Table{Principals: map[string]quota.Limits{"User:ANONYMOUS": {ProduceBytesPerSec: 100_000}}}, true, false},
		{"default fetch quota", quota.Table{Default: &quota.Limits{FetchBytesPerSec: 100_000}}, false, true},
		{"quota of another principal only", quota.Table{Principals: map[string]quota.Limits{"User:other": {ProduceBytesPerSec: 1, FetchBytesPerSec: 1}}}, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := startQuotaNode(t, tt.table)
			ctx := testCtx(t)
			p, err := NewProducer(ctx, ProducerConfig{Addr: n.capnpAddr})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			if _, err := p.Client().CreateTopic(ctx, "q", 1, TopicConfig{}); err != nil {
				t.Fatal(err)
			}
			for i := range quotaRecords {
				ack, err := p.Send(ctx, "q", nil, quotaValue(i))
				if err != nil {
					t.Fatalf("record %d: %v", i, err)
				}
				if ack.Offset != uint64(i) {
					t.Fatalf("record %d acknowledged at offset %d", i, ack.Offset)
				}
			}
			ps := p.Client().ThrottleStats()
			if got := ps.Responses > 0; got != tt.produceThr {
				t.Fatalf("producer throttled %d times (%v in all), want throttled %v", ps.Responses, ps.Total, tt.produceThr)
			}
			if got := n.throttled(t, "dataplane", "produce") > 0; got != tt.produceThr {
				t.Fatalf("sq_throttle_time_seconds{produce} counted %v, want %v", got, tt.produceThr)
			}
			c := newConsumerAt(t, n.capnpAddr, ConsumerConfig{Topic: "q", MaxBytes: 2 * quotaRecordBytes})
			msgs := pollN(t, c, quotaRecords)
			for i, m := range msgs {
				if m.Offset != uint64(i) || string(m.Value) != string(quotaValue(i)) {
					t.Fatalf("message %d: offset %d value %.11q", i, m.Offset, m.Value)
				}
			}
			cs := c.Client().ThrottleStats()
			if got := cs.Responses > 0; got != tt.fetchThrot {
				t.Fatalf("consumer throttled %d times, want throttled %v", cs.Responses, tt.fetchThrot)
			}
			if got := n.throttled(t, "dataplane", "fetch") > 0; got != tt.fetchThrot {
				t.Fatalf("sq_throttle_time_seconds{fetch} counted %v, want %v", got, tt.fetchThrot)
			}
			if max := 200 * time.Millisecond; ps.Last > max || cs.Last > max {
				t.Fatalf("a throttle above the window: %v, %v", ps.Last, cs.Last)
			}
		})
	}
}

// TestQuotasOnGrpc: over gRPC a publish over the produce quota comes back
// with its throttle time (the server held it that long), and a Subscribe
// stream over the fetch quota reports one; every record is acknowledged
// and read in order.
func TestQuotasOnGrpc(t *testing.T) {
	n := startQuotaNode(t, quota.Table{Default: &quota.Limits{ProduceBytesPerSec: 100_000, FetchBytesPerSec: 100_000}})
	ctx := testCtx(t)
	p, err := NewGrpcProducer(GrpcProducerConfig{GrpcConfig: GrpcConfig{Addr: n.grpcAddr}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, err := p.Admin().CreateTopic(ctx, "q", 1, TopicConfig{}); err != nil {
		t.Fatal(err)
	}
	for i := range quotaRecords {
		ack, err := p.Send(ctx, "q", nil, quotaValue(i))
		if err != nil || ack.Offset != uint64(i) {
			t.Fatalf("record %d: offset %d, %v", i, ack.Offset, err)
		}
	}
	if st := p.ThrottleStats(); st.Responses == 0 || n.throttled(t, "grpc", "produce") == 0 {
		t.Fatalf("gRPC producer never throttled: %+v", st)
	}
	c, err := NewGrpcConsumer(ctx, GrpcConsumerConfig{GrpcConfig: GrpcConfig{Addr: n.grpcAddr}, Topic: "q", MaxBytes: 2 * quotaRecordBytes})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var got []Message
	deadline := time.Now().Add(10 * time.Second)
	for len(got) < quotaRecords && time.Now().Before(deadline) {
		msgs, err := c.Poll(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, msgs...)
	}
	for i, m := range got {
		if m.Offset != uint64(i) || string(m.Value) != string(quotaValue(i)) {
			t.Fatalf("message %d: offset %d", i, m.Offset)
		}
	}
	if len(got) != quotaRecords {
		t.Fatalf("read %d of %d records", len(got), quotaRecords)
	}
	if st := c.ThrottleStats(); st.Responses == 0 || n.throttled(t, "grpc", "fetch") == 0 {
		t.Fatalf("gRPC consumer never throttled: %+v", st)
	}
}

// TestClientWaitsOutThrottle: while a node's throttle lasts the Client
// sends it no publish or fetch (one ends with its context, unsent), while
// the requests the quotas do not cover (metadata here; group heartbeats
// alike) go out at once; once it has passed, publishes go out again.
func TestClientWaitsOutThrottle(t *testing.T) {
	n := startQuotaNode(t, quota.Table{})
	ctx := testCtx(t)
	p, err := NewProducer(ctx, ProducerConfig{Addr: n.capnpAddr, DisableIdempotence: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, err := p.Client().CreateTopic(ctx, "q", 1, TopicConfig{}); err != nil {
		t.Fatal(err)
	}
	cl := p.Client()
	cl.throttle.until.Store(time.Now().Add(time.Hour).UnixNano())
	for name, send := range map[string]func(context.Context) error{
		"publish": func(ctx context.Context) error {
			_, err := p.Send(ctx, "q", nil, []byte("v"))
			return err
		},
		"fetch": func(ctx context.Context) error {
			_, err := cl.Fetch(ctx, FetchRequest{Topic: "q"})
			return err
		},
	} {
		short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		err := send(short)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("a %s during the throttle: %v, want it held until its deadline", name, err)
		}
	}
	if _, err := cl.ListTopics(ctx); err != nil {
		t.Fatalf("metadata during the throttle: %v", err)
	}
	cl.throttle.until.Store(0)
	if ack, err := p.Send(ctx, "q", nil, []byte("v")); err != nil || ack.Offset != 0 {
		t.Fatalf("after the throttle: offset %d, %v (want 0: nothing was sent during it)", ack.Offset, err)
	}
}
