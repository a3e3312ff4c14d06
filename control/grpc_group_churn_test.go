package control_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/api/sqv1"
	"github.com/seedqueue/sq/control"
	"github.com/seedqueue/sq/sdk"
)

// cutProxy forwards TCP connections to target until cut, which closes its
// listener and every connection at once: to the server, a client behind it
// has crashed.
type cutProxy struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
	cut   bool
	wg    sync.WaitGroup
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	t.Helper()
	p := &cutProxy{ln: listen(t)}
	p.wg.Go(func() {
		for {
			in, err := p.ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				in.Close()
				continue
			}
			p.mu.Lock()
			if p.cut {
				p.mu.Unlock()
				in.Close()
				out.Close()
				return
			}
			p.conns = append(p.conns, in, out)
			p.mu.Unlock()
			p.wg.Go(func() { _, _ = io.Copy(out, in); out.Close() })
			p.wg.Go(func() { _, _ = io.Copy(in, out); in.Close() })
		}
	})
	t.Cleanup(p.close)
	return p
}

func (p *cutProxy) addr() string { return p.ln.Addr().String() }

// close cuts every connection and waits for the proxy's goroutines.
func (p *cutProxy) close() {
	p.mu.Lock()
	p.cut = true
	for _, c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.ln.Close()
	p.wg.Wait()
}

// TestGrpcConsumerGroupChurn: GrpcConsumers join, leave (Close) and crash
// (their connection cut, never closed) while records are produced. Every
// record is read; a record is read twice only when one of its readers is
// the member that crashed (its work after its last commit is read again);
// and the group's committed offsets end at the log end, never past a
// record no member returned.
func TestGrpcConsumerGroupChurn(t *testing.T) {
	n := startNode(t, control.Options{NodeID: "n-churn"})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	const parts = 4
	if _, err := sqv1.NewTopicsClient(n.conn).CreateTopic(ctx, &sqv1.CreateTopicRequest{Name: "churn", Partitions: parts}); err != nil {
		t.Fatal(err)
	}
	prod, err := sdk.NewGrpcProducer(sdk.GrpcProducerConfig{GrpcConfig: sdk.GrpcConfig{Addr: n.grpcAddr}})
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	produced := 0
	produce := func(k int) {
		t.Helper()
		var msgs []sdk.ProducerMessage
		for i := produced; i < produced+k; i++ {
			msgs = append(msgs, sdk.NewProducerMessage("churn", fmt.Appendf(nil, "r%d", i)).WithKey(fmt.Appendf(nil, "k%d", i)))
		}
		acks, err := prod.SendBatch(ctx, msgs)
		if err != nil {
			t.Fatal(err)
		}
		for i, a := range acks {
			if a.Err != nil {
				t.Fatalf("ack %d: %v", i, a.Err)
			}
		}
		produced += k
	}
	type member struct {
		name string
		c    *sdk.GrpcConsumer
	}
	join := func(name, addr string) *member {
		t.Helper()
		c, err := sdk.NewGrpcConsumer(ctx, sdk.GrpcConsumerConfig{GrpcConfig: sdk.GrpcConfig{Addr: addr, RequestTimeout: 2 * time.Second},
			Topic: "churn", ConsumerGroup: "cg", AutoCommit: true, AutoCommitInterval: 10 * time.Millisecond,
			SessionTimeout: 2 * time.Second, HeartbeatInterval: 20 * time.Millisecond, MaxWait: 10 * time.Millisecond,
			MaxPollRecords: 5, CloseTimeout: 3 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return &member{name, c}
	}
	readers := map[string][]string{} // record -> names of the members that returned it
	poll := func(m *member) {
		t.Helper()
		got, err := m.c.Poll(ctx)
		if err != nil && ctx.Err() == nil {
			t.Fatalf("%s: Poll: %v", m.name, err)
		}
		for _, r := range got {
			readers[string(r.Value)] = append(readers[string(r.Value)], m.name)
		}
	}
	proxy := newCutProxy(t, n.grpcAddr)
	live := []*member{join("a", n.grpcAddr), join("b", n.grpcAddr)}
	crashing := join("crashed", proxy.addr())
	for round := range 60 {
		produce(10)
		switch round {
		case 10:
			live = append(live, join("d", n.grpcAddr))
		case 20:
			proxy.close() // the crashed member is no longer polled either
			crashing = nil
		case 30:
			if err := live[1].c.Close(); err != nil {
				t.Fatalf("Close of b: %v", err)
			}
			live = append(live[:1], live[2:]...)
		case 40:
			live = append(live, join("e", n.grpcAddr))
		}
		if crashing != nil {
			poll(crashing)
		}
		for _, m := range live {
			poll(m)
		}
	}
	for len(readers) < produced {
		if ctx.Err() != nil {
			t.Fatalf("%d of %d records read before the deadline", len(readers), produced)
		}
		for _, m := range live {
			poll(m)
		}
	}
	crashedRead := 0
	for i := range produced {
		r := fmt.Sprintf("r%d", i)
		if containsName(readers[r], "crashed") {
			crashedRead++
		}
		names := readers[r]
		if len(names) > 1 && !containsName(names, "crashed") {
			t.Errorf("record %s read by %v: a duplicate without the crashed member", r, names)
		}
	}
	if crashedRead == 0 {
		t.Errorf("the member that crashed read no record: the test did not exercise a crash")
	}
	for _, m := range live {
		if err := m.c.Close(); err != nil {
			t.Fatalf("Close of %s: %v", m.name, err)
		}
	}
	fo, err := sqv1.NewMessagingClient(n.conn).FetchOffsets(ctx, &sqv1.FetchOffsetsRequest{Group: "cg", Topic: "churn"})
	if err != nil {
		t.Fatal(err)
	}
	var total uint64
	for _, o := range fo.Offsets {
		total += o.Offset
	}
	if len(fo.Offsets) != parts || total != uint64(produced) {
		t.Errorf("committed offsets %v (sum %d), want all %d partitions summing to %d records", fo.Offsets, total, parts, produced)
	}
}

func containsName(names []string, name string) bool {
	for _, n := range names {
		if n == name {
			return true
		}
	}
	return false
}

// TestGrpcConsumerGroupTopicDeleted: the topic of a two-member GrpcConsumer
// group is deleted and not created again. Poll reports UNKNOWN_TOPIC (or
// nothing) and never panics, the group still answers DescribeGroup, and
// both members close cleanly.
func TestGrpcConsumerGroupTopicDeleted(t *testing.T) {
	n := startNode(t, control.Options{NodeID: "n-del"})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := sqv1.NewTopicsClient(n.conn).CreateTopic(ctx, &sqv1.CreateTopicRequest{Name: "dt", Partitions: 2}); err != nil {
		t.Fatal(err)
	}
	produceKeyed(ctx, t, n.grpcAddr, "dt", 0, 50)
	ms := []groupPoller{grpcMember(ctx, t, n.grpcAddr, "dt", "dg"), grpcMember(ctx, t, n.grpcAddr, "dt", "dg")}
	seen := map[string]int{}
	drive(ctx, t, "read before the delete", ms, seen, func() bool { return len(seen) >= 50 })
	if _, err := sqv1.NewTopicsClient(n.conn).DeleteTopic(ctx, &sqv1.DeleteTopicRequest{Name: "dt"}); err != nil {
		t.Fatal(err)
	}
	unknown := 0
	for unknown < 2 {
		if ctx.Err() != nil {
			t.Fatalf("no UNKNOWN_TOPIC from Poll after the delete")
		}
		for _, m := range ms {
			got, err := m.Poll(ctx)
			if len(got) > 0 {
				t.Errorf("Poll after the delete returned %d records", len(got))
			}
			if err != nil {
				if !errors.Is(err, api.ErrUnknownTopic) {
					t.Fatalf("Poll after the delete: %v, want UNKNOWN_TOPIC", err)
				}
				unknown++
			}
		}
	}
	if _, err := sqv1.NewGroupsClient(n.conn).DescribeGroup(ctx, &sqv1.DescribeGroupRequest{Group: "dg"}); err != nil {
		t.Fatalf("DescribeGroup after the delete: %v", err)
	}
	for i, m := range ms {
		if err := m.(*sdk.GrpcConsumer).Close(); err != nil && !errors.Is(err, api.ErrUnknownTopic) {
			t.Errorf("Close of member %d: %v", i, err)
		}
	}
}
