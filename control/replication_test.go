package control_test

import (
	"context"
	"sync"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/seedqueue/sq/api/sqv1"
	"github.com/seedqueue/sq/control"
	"github.com/seedqueue/sq/engine"
)

// A topic's min.insync.replicas and unclean.leader.election.enable travel
// through create, describe and alter; a single node refuses an in-sync
// minimum above its one replica.
func TestTopicReplicationSettings(t *testing.T) {
	n := startNode(t, control.Options{})
	ctx := context.Background()
	topics := sqv1.NewTopicsClient(n.conn)
	cr, err := topics.CreateTopic(ctx, &sqv1.CreateTopicRequest{Name: "r", Partitions: 1,
		Config: &sqv1.TopicConfig{MinInsyncReplicas: 1, UncleanLeaderElection: true}})
	if err != nil {
		t.Fatal(err)
	}
	if c := cr.Topic.Config; c.MinInsyncReplicas != 1 || !c.UncleanLeaderElection {
		t.Fatalf("created config %v, want min_insync_replicas 1 and unclean_leader_election", c)
	}
	d, err := topics.DescribeTopic(ctx, &sqv1.DescribeTopicRequest{Name: "r"})
	if err != nil {
		t.Fatal(err)
	}
	if c := d.Topic.Config; c.MinInsyncReplicas != 1 || !c.UncleanLeaderElection {
		t.Fatalf("described config %v", c)
	}
	ar, err := topics.AlterTopicConfig(ctx, &sqv1.AlterTopicConfigRequest{Name: "r", UncleanLeaderElection: proto.Bool(false)})
	if err != nil {
		t.Fatal(err)
	}
	if c := ar.Topic.Config; c.MinInsyncReplicas != 1 || c.UncleanLeaderElection {
		t.Fatalf("altered config %v, want min_insync_replicas kept at 1 and unclean_leader_election false", c)
	}
	for _, tc := range []struct {
		name string
		call func() error
	}{
		{"alter min 2", func() error {
			_, err := topics.AlterTopicConfig(ctx, &sqv1.AlterTopicConfigRequest{Name: "r", MinInsyncReplicas: proto.Int32(2)})
			return err
		}},
		{"alter min -1", func() error {
			_, err := topics.AlterTopicConfig(ctx, &sqv1.AlterTopicConfigRequest{Name: "r", MinInsyncReplicas: proto.Int32(-1)})
			return err
		}},
		{"create min 2", func() error {
			_, err := topics.CreateTopic(ctx, &sqv1.CreateTopicRequest{Name: "r2", Partitions: 1, Config: &sqv1.TopicConfig{MinInsyncReplicas: 2}})
			return err
		}},
	} {
		if err := tc.call(); status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s: %v, want InvalidArgument", tc.name, err)
		}
	}
}

// replEngine is an engine that acknowledges like a replicated leader
// (Replicas 3, DurabilityReplicated), records the acks of each append and
// grants producer ids.
type replEngine struct {
	*engine.Engine
	mu   sync.Mutex
	acks []engine.Acks
	pid  int64
}

func (e *replEngine) Append(ctx context.Context, topic string, partition int, b []byte) (engine.AppendResult, error) {
	e.mu.Lock()
	e.acks = append(e.acks, engine.AcksFrom(ctx))
	e.mu.Unlock()
	res, err := e.Engine.Append(ctx, topic, partition, b)
	res.Replicas, res.Durability = 3, engine.DurabilityReplicated
	return res, err
}

func (e *replEngine) InitProducerID(context.Context) (int64, int16, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.pid++
	return e.pid, 0, nil
}

// Publish passes its acks to the engine and reports replicas and
// durability; InitProducerId grants ids from an engine that has them.
func TestPublishAcksAndInitProducerID(t *testing.T) {
	n := startNode(t, control.Options{})
	ctx := context.Background()
	msg := sqv1.NewMessagingClient(n.conn)
	if _, err := sqv1.NewTopicsClient(n.conn).CreateTopic(ctx, &sqv1.CreateTopicRequest{Name: "p", Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	rec := []*sqv1.Record{{Value: []byte("v")}}
	res, err := msg.Publish(ctx, &sqv1.PublishRequest{Topic: "p", Partition: 0, Records: rec, Acks: sqv1.Acks_ACKS_LEADER})
	if err != nil {
		t.Fatal(err)
	}
	if res.Replicas != 1 {
		t.Fatalf("single node: replicas %d, want 1", res.Replicas)
	}
	// A single node's engine grants ids from 2^48 up (apart from a
	// cluster's).
	if r, err := msg.InitProducerId(ctx, &sqv1.InitProducerIdRequest{}); err != nil || r.ProducerId < 1<<48 || r.ProducerEpoch != 0 {
		t.Fatalf("InitProducerId on a single node's engine: %v, %v; want an id from 2^48 and epoch 0", r, err)
	}
	if _, err := msg.Publish(ctx, &sqv1.PublishRequest{Topic: "p", Partition: 0, Records: rec, Acks: 5}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("acks 5: %v, want InvalidArgument", err)
	}

	re := &replEngine{Engine: n.eng}
	n.srv.SetEngine(re)
	for _, acks := range []sqv1.Acks{sqv1.Acks_ACKS_LEADER, sqv1.Acks_ACKS_ALL} {
		res, err := msg.Publish(ctx, &sqv1.PublishRequest{Topic: "p", Partition: 0, Records: rec, Acks: acks})
		if err != nil {
			t.Fatal(err)
		}
		if res.Replicas != 3 || res.Durability != sqv1.Durability_DURABILITY_REPLICATED {
			t.Fatalf("acks %v: replicas %d durability %v, want 3 and REPLICATED", acks, res.Replicas, res.Durability)
		}
	}
	re.mu.Lock()
	got := append([]engine.Acks(nil), re.acks...)
	re.mu.Unlock()
	if len(got) != 2 || got[0] != engine.AcksLeader || got[1] != engine.AcksAll {
		t.Fatalf("engine saw acks %v, want [leader all]", got)
	}
	for want := int64(1); want <= 2; want++ {
		r, err := msg.InitProducerId(ctx, &sqv1.InitProducerIdRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if r.ProducerId != want || r.ProducerEpoch != 0 {
			t.Fatalf("InitProducerId: id %d epoch %d, want %d and 0", r.ProducerId, r.ProducerEpoch, want)
		}
	}
}
