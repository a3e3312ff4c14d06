package control_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/api/sqv1"
	"github.com/seedqueue/sq/engine"
)

// placedEngine is an engine in a cluster of three nodes, as the cluster
// layer's broker presents it: it lists the nodes and fills in each
// partition's placement.
type placedEngine struct {
	*engine.Engine
	created []engine.TopicConfig
}

func (p *placedEngine) Nodes() []api.Node {
	return []api.Node{{ID: "a", Alive: true}, {ID: "b", Alive: true}, {ID: "c", Alive: true}}
}

func (p *placedEngine) CreateTopic(name string, partitions int, cfg engine.TopicConfig) (engine.TopicInfo, error) {
	p.created = append(p.created, cfg)
	return p.Engine.CreateTopic(name, partitions, cfg)
}

func (p *placedEngine) DescribeTopic(name string) (engine.TopicInfo, error) {
	ti, err := p.Engine.DescribeTopic(name)
	for i := range ti.Partitions {
		ti.Partitions[i].Leader = "b"
		ti.Partitions[i].LeaderEpoch = uint32(i + 2)
		ti.Partitions[i].Replicas = []string{"b", "c", "a"}
		ti.Partitions[i].ISR = []string{"b", "c"}
	}
	return ti, err
}

func TestBareNodeLeadsEveryPartition(t *testing.T) {
	n := serve(t, openEngine(t), nil)
	ctx := context.Background()
	topics := sqv1.NewTopicsClient(n.conn)
	r, err := topics.CreateTopic(ctx, &sqv1.CreateTopicRequest{Name: "t", Partitions: 2})
	if err != nil {
		t.Fatal(err)
	}
	if r.Topic.ReplicationFactor != 1 {
		t.Fatalf("created replication factor %d, want 1", r.Topic.ReplicationFactor)
	}
	d, err := topics.DescribeTopic(ctx, &sqv1.DescribeTopicRequest{Name: "t"})
	if err != nil {
		t.Fatal(err)
	}
	if d.Topic.ReplicationFactor != 1 || len(d.Topic.Partitions) != 2 {
		t.Fatalf("describe = %v", d.Topic)
	}
	for _, p := range d.Topic.Partitions {
		if p.Leader != "n1" || p.LeaderEpoch != 0 || !slices.Equal(p.Replicas, []string{"n1"}) || !slices.Equal(p.Isr, []string{"n1"}) {
			t.Fatalf("partition %d placement = %v", p.Partition, p)
		}
	}
	l, err := topics.ListTopics(ctx, &sqv1.ListTopicsRequest{})
	if err != nil || len(l.Topics) != 1 || l.Topics[0].ReplicationFactor != 1 {
		t.Fatalf("list = %v, %v", l, err)
	}

	// One node holds one replica: a larger factor is refused, naming it.
	_, err = topics.CreateTopic(ctx, &sqv1.CreateTopicRequest{Name: "t3", Partitions: 1, ReplicationFactor: 3})
	st, _ := status.FromError(err)
	if st.Code() != codes.InvalidArgument || errorReason(st) != "INVALID_CONFIG" ||
		!strings.Contains(st.Message(), "replication factor 3 exceeds the 1 node(s) of this cluster") {
		t.Fatalf("rf 3 on a single node: %v", err)
	}
	_, err = topics.CreateTopic(ctx, &sqv1.CreateTopicRequest{Name: "tn", Partitions: 1, ReplicationFactor: -1})
	if st, _ := status.FromError(err); errorReason(st) != "INVALID_CONFIG" {
		t.Fatalf("rf -1: %v", err)
	}
	r, err = topics.CreateTopic(ctx, &sqv1.CreateTopicRequest{Name: "t1", Partitions: 1, ReplicationFactor: 1})
	if err != nil || r.Topic.ReplicationFactor != 1 {
		t.Fatalf("rf 1: %v, %v", r, err)
	}
	l, err = topics.ListTopics(ctx, &sqv1.ListTopicsRequest{})
	if err != nil || len(l.Topics) != 2 {
		t.Fatalf("refused creates left topics behind: %v, %v", l, err)
	}
}

func TestClusteredEngineCarriesPlacement(t *testing.T) {
	eng := &placedEngine{Engine: openEngine(t)}
	n := serve(t, eng, nil)
	ctx := context.Background()
	topics := sqv1.NewTopicsClient(n.conn)
	if _, err := topics.CreateTopic(ctx, &sqv1.CreateTopicRequest{Name: "t", Partitions: 2, ReplicationFactor: 3}); err != nil {
		t.Fatal(err)
	}
	if _, err := topics.CreateTopic(ctx, &sqv1.CreateTopicRequest{Name: "u", Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	if len(eng.created) != 2 || eng.created[0].ReplicationFactor != 3 || eng.created[1].ReplicationFactor != 0 {
		t.Fatalf("engine got configs %+v, want replication factors 3 and 0 (the cluster's default)", eng.created)
	}
	d, err := topics.DescribeTopic(ctx, &sqv1.DescribeTopicRequest{Name: "t"})
	if err != nil {
		t.Fatal(err)
	}
	if d.Topic.ReplicationFactor != 3 {
		t.Fatalf("replication factor %d, want 3", d.Topic.ReplicationFactor)
	}
	for i, p := range d.Topic.Partitions {
		if p.Leader != "b" || p.LeaderEpoch != uint32(i+2) || !slices.Equal(p.Replicas, []string{"b", "c", "a"}) || !slices.Equal(p.Isr, []string{"b", "c"}) {
			t.Fatalf("partition %d placement = %v", p.Partition, p)
		}
	}
}
