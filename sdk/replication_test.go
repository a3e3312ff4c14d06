package sdk

import (
	"errors"
	"testing"

	"github.com/seedqueue/sq/api"
)

// TestCreateTopicSendsReplicationFactor: Client.CreateTopic puts
// TopicConfig.ReplicationFactor in the createTopic request (0 stays 0, the
// server's default), as the fake server sees it.
func TestCreateTopicSendsReplicationFactor(t *testing.T) {
	s := newFakeServer(t)
	c := dialTest(t, s)
	ctx := testCtx(t)
	sent := make(chan uint32, 2)
	s.setHook(func(f api.Frame) {
		if f.Which() == api.Frame_Which_createTopicRequest {
			cr, _ := f.CreateTopicRequest()
			sent <- cr.ReplicationFactor()
		}
	})
	for _, tc := range []struct {
		name string
		rf   uint32
	}{{"three", 3}, {"default", 0}} {
		if _, err := c.CreateTopic(ctx, tc.name, 2, TopicConfig{ReplicationFactor: tc.rf}); err != nil {
			t.Fatalf("CreateTopic(%s): %v", tc.name, err)
		}
		if got := <-sent; got != tc.rf {
			t.Errorf("CreateTopic(%s, ReplicationFactor %d) sent replicationFactor %d", tc.name, tc.rf, got)
		}
	}
}

// TestCreateTopicReplicationFactorRealServer: against a single node's data
// plane and gRPC API (a bare engine), a factor of 1 creates the topic and
// the answer and a describe state it, in TopicInfo and its Config, with
// the partition's placement (this node, unnamed here, leads and is the
// only replica); a factor
// of 2 reaches the server, which refuses it (one node holds one replica).
func TestCreateTopicReplicationFactorRealServer(t *testing.T) {
	n := startFaultyNode(t)
	ctx := testCtx(t)
	c, err := Dial(ctx, ClientConfig{Addr: n.capnpAddr})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	admin, err := NewAdmin(AdminConfig{GrpcConfig: GrpcConfig{Addr: n.grpcAddr}})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	create := map[string]func(name string, rf uint32) (TopicInfo, error){
		"capnp": func(name string, rf uint32) (TopicInfo, error) {
			return c.CreateTopic(ctx, name, 2, TopicConfig{ReplicationFactor: rf})
		},
		"grpc": func(name string, rf uint32) (TopicInfo, error) {
			return admin.CreateTopic(ctx, name, 2, TopicConfig{ReplicationFactor: rf})
		},
	}
	for plane, create := range create {
		if _, err := create("two-"+plane, 2); !errors.Is(err, api.ErrInvalidConfig) {
			t.Errorf("%s: CreateTopic with ReplicationFactor 2 on one node: %v, want INVALID_CONFIG", plane, err)
		}
		ti, err := create("one-"+plane, 1)
		if err != nil {
			t.Fatalf("%s: CreateTopic with ReplicationFactor 1: %v", plane, err)
		}
		if ti.ReplicationFactor != 1 || ti.Config.ReplicationFactor != 1 {
			t.Errorf("%s: CreateTopic answer: replication factor %d, config's %d; want 1 and 1", plane, ti.ReplicationFactor, ti.Config.ReplicationFactor)
		}
	}
	for _, name := range []string{"one-capnp", "one-grpc"} {
		d, err := c.DescribeTopic(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if d.ReplicationFactor != 1 || d.Config.ReplicationFactor != 1 || len(d.PartitionInfos) != 2 {
			t.Fatalf("DescribeTopic(%s) = %+v, want replication factor 1 and 2 partitions", name, d)
		}
		for _, pi := range d.PartitionInfos {
			if len(pi.Replicas) != 1 || pi.Replicas[0] != pi.Leader || len(pi.ISR) != 1 {
				t.Errorf("DescribeTopic(%s) partition %d: leader %q, replicas %v, isr %v; want this node alone", name, pi.Partition, pi.Leader, pi.Replicas, pi.ISR)
			}
		}
	}
}
