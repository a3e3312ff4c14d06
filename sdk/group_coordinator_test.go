package sdk

import (
	"context"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/api/batch"
	"github.com/seedqueue/sq/control"
	"github.com/seedqueue/sq/engine"
	"github.com/seedqueue/sq/net/dataplane"
)

// flakyCoordinator is an engine whose group joins, heartbeats and commits
// first fail with COORDINATOR_NOT_AVAILABLE a set number of times each, as
// a cluster node does while a group's coordinator restarts.
type flakyCoordinator struct {
	*engine.Engine
	mu     sync.Mutex
	left   map[string]int // failures still to inject, per call
	failed map[string]int // failures injected, per call
}

func (f *flakyCoordinator) fail(call string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.left[call] == 0 {
		return nil
	}
	f.left[call]--
	f.failed[call]++
	return api.NewError(api.CodeCoordinatorNotAvailable, "the coordinator of the group is not alive (injected)")
}

func (f *flakyCoordinator) arm(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, call := range []string{"join", "heartbeat", "commit"} {
		f.left[call] += n
	}
}

func (f *flakyCoordinator) injected() map[string]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]int{}
	for k, v := range f.failed {
		out[k] = v
	}
	return out
}

func (f *flakyCoordinator) JoinGroup(group, memberID, clientID string, topics []string, session time.Duration) (engine.JoinResult, error) {
	if err := f.fail("join"); err != nil {
		return engine.JoinResult{}, err
	}
	return f.Engine.JoinGroup(group, memberID, clientID, topics, session)
}

func (f *flakyCoordinator) Heartbeat(group, memberID string, generation int32, owned engine.GroupAssignment) (engine.JoinResult, error) {
	if err := f.fail("heartbeat"); err != nil {
		return engine.JoinResult{}, err
	}
	return f.Engine.Heartbeat(group, memberID, generation, owned)
}

func (f *flakyCoordinator) CommitOffsets(group, memberID string, generation int32, offsets []engine.OffsetCommit) ([]engine.OffsetCommit, error) {
	if err := f.fail("commit"); err != nil {
		return nil, err
	}
	return f.Engine.CommitOffsets(group, memberID, generation, offsets)
}

// serveFlaky serves f on both planes on loopback and returns the
// Cap'n Proto and gRPC addresses.
func serveFlaky(t *testing.T, f *flakyCoordinator) (string, string) {
	t.Helper()
	quiet := slog.New(slog.DiscardHandler)
	dp, err := dataplane.New(f, dataplane.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	ctl, err := control.New(control.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	ctl.SetEngine(f)
	dln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{}, 2)
	go func() { _ = dp.Serve(dln); served <- struct{}{} }()
	go func() { _ = ctl.ServeGRPC(gln); served <- struct{}{} }()
	ctl.SetReady(true)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = ctl.Shutdown(ctx)
		dp.Close()
		<-served
		<-served
	})
	return dln.Addr().String(), gln.Addr().String()
}

// TestGroupCallsRetryCoordinatorNotAvailable: a consumer of either plane
// retries its group join, heartbeats and commits while the coordinator
// answers COORDINATOR_NOT_AVAILABLE for less than a request timeout: it
// joins, keeps its membership and commits without an error.
func TestGroupCallsRetryCoordinatorNotAvailable(t *testing.T) {
	eng, err := engine.Open(engine.Options{DataDir: t.TempDir(), SyncPolicy: "none", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	if _, err := eng.CreateTopic("t", 1, engine.TopicConfig{}); err != nil {
		t.Fatal(err)
	}
	for _, plane := range []string{"capnp", "grpc"} {
		t.Run(plane, func(t *testing.T) {
			f := &flakyCoordinator{Engine: eng, left: map[string]int{}, failed: map[string]int{}}
			dataAddr, grpcAddr := serveFlaky(t, f)
			ctx := testCtx(t)
			group := "g-" + plane
			f.arm(2)
			var poll func(context.Context) ([]Message, error)
			var commit func(context.Context) error
			var assigned func() []uint32
			switch plane {
			case "capnp":
				c, err := NewConsumer(ctx, ConsumerConfig{Addr: dataAddr, RequestTimeout: 5 * time.Second, Topic: "t",
					ConsumerGroup: group, SessionTimeout: time.Minute, HeartbeatInterval: 10 * time.Millisecond, MaxWait: 10 * time.Millisecond})
				if err != nil {
					t.Fatalf("join while the coordinator is briefly unavailable: %v", err)
				}
				defer c.Close()
				poll, commit, assigned = c.Poll, c.Commit, c.Assignment
			default:
				c, err := NewGrpcConsumer(ctx, GrpcConsumerConfig{GrpcConfig: GrpcConfig{Addr: grpcAddr, RequestTimeout: 5 * time.Second}, Topic: "t",
					ConsumerGroup: group, SessionTimeout: time.Minute, HeartbeatInterval: 10 * time.Millisecond, MaxWait: 10 * time.Millisecond})
				if err != nil {
					t.Fatalf("join while the coordinator is briefly unavailable: %v", err)
				}
				defer c.Close()
				poll, commit, assigned = c.Poll, c.Commit, c.Assignment
			}
			waitFor(t, 10*time.Second, "two heartbeats refused and retried", func() bool { return f.injected()["heartbeat"] == 2 })
			d, err := eng.DescribeGroup(group)
			if err != nil || len(d.Members) != 1 || len(assigned()) != 1 {
				t.Fatalf("after refused heartbeats: %+v, %v, assignment %v; want the one member still holding partition 0", d.Members, err, assigned())
			}
			gen := d.Summary.Generation
			var bb batch.Builder
			bb.Add(nil, []byte(plane), nil, 1)
			rec, err := bb.Build()
			if err != nil {
				t.Fatal(err)
			}
			if _, err := eng.Append(ctx, "t", 0, rec); err != nil {
				t.Fatal(err)
			}
			waitFor(t, 10*time.Second, "the record", func() bool {
				msgs, err := poll(ctx)
				if err != nil {
					t.Fatal(err)
				}
				for _, m := range msgs {
					if string(m.Value) == plane {
						return true
					}
				}
				return false
			})
			if err := commit(ctx); err != nil {
				t.Fatalf("commit while the coordinator is briefly unavailable: %v", err)
			}
			got := f.injected()
			if got["join"] != 2 || got["commit"] != 2 {
				t.Fatalf("injected failures %v: want 2 joins and 2 commits retried", got)
			}
			if offs, _ := eng.FetchOffsets(group, "t"); len(offs) != 1 {
				t.Fatalf("offsets after the retried commit: %+v", offs)
			}
			if d, _ := eng.DescribeGroup(group); d.Summary.Generation != gen || len(d.Members) != 1 {
				t.Fatalf("the member rejoined (generation %d, then %d): a retriable error fenced it", gen, d.Summary.Generation)
			}
		})
	}
}
