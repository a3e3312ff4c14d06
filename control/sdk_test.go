package control_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/control"
	"github.com/seedqueue/sq/sdk"
)

// TestSDKOverGrpc drives the SDK's Admin, GrpcProducer and GrpcConsumer
// against a node: create, describe, produce keyed and keyless records,
// consume them all with a group, commit, and resume after the commit.
func TestSDKOverGrpc(t *testing.T) {
	n := startNode(t, control.Options{NodeID: "n-sdk"})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cfg := sdk.GrpcConfig{Addr: n.grpcAddr}
	admin, err := sdk.NewAdmin(sdk.AdminConfig{GrpcConfig: cfg})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if _, err := admin.CreateTopic(ctx, "sdk", 3, sdk.TopicConfig{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CreateTopic(ctx, "sdk", 3, sdk.TopicConfig{}); !errors.Is(err, api.ErrTopicExists) {
		t.Fatalf("second create: %v, want TOPIC_EXISTS", err)
	}
	if _, err := admin.DescribeTopic(ctx, "missing"); !errors.Is(err, api.ErrUnknownTopic) {
		t.Fatalf("describe missing: %v, want UNKNOWN_TOPIC", err)
	}
	info, err := admin.NodeInfo(ctx)
	if err != nil || info.NodeID != "n-sdk" {
		t.Fatalf("NodeInfo = %+v, %v", info, err)
	}
	if _, err := admin.AlterTopicConfig(ctx, "sdk", sdk.TopicConfigChange{}); err != nil && status.Code(err) != codes.Unimplemented {
		t.Fatalf("AlterTopicConfig: %v", err)
	}

	p, err := sdk.NewGrpcProducer(sdk.GrpcProducerConfig{GrpcConfig: cfg})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	const records = 60
	var msgs []sdk.ProducerMessage
	for i := range records {
		m := sdk.NewProducerMessage("sdk", fmt.Appendf(nil, "v%d", i))
		if i%2 == 0 {
			m = m.WithKey(fmt.Appendf(nil, "k%d", i%7))
		}
		msgs = append(msgs, m)
	}
	acks, err := p.SendBatch(ctx, msgs)
	if err != nil {
		t.Fatal(err)
	}
	for i, a := range acks {
		if a.Err != nil || a.Durability != sdk.DurabilitySynced {
			t.Fatalf("ack %d = %+v", i, a)
		}
	}
	if _, err := p.Send(ctx, "missing", nil, []byte("x")); !errors.Is(err, api.ErrUnknownTopic) {
		t.Fatalf("send to missing topic: %v, want UNKNOWN_TOPIC", err)
	}

	consume := func(want int) map[string]bool {
		c, err := sdk.NewGrpcConsumer(ctx, sdk.GrpcConsumerConfig{GrpcConfig: cfg, Topic: "sdk", ConsumerGroup: "g", MaxWait: 50 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		seen := map[string]bool{}
		for len(seen) < want {
			got, err := c.Poll(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range got {
				seen[string(m.Value)] = true
			}
		}
		if err := c.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		return seen
	}
	if seen := consume(records); len(seen) != records {
		t.Fatalf("consumed %d distinct records, want %d", len(seen), records)
	}
	// After the commit a new consumer of the group sees only new records.
	if _, err := p.Send(ctx, "sdk", []byte("late"), []byte("after-commit")); err != nil {
		t.Fatal(err)
	}
	if seen := consume(1); !seen["after-commit"] || len(seen) != 1 {
		t.Fatalf("resumed consumer saw %v, want only after-commit", seen)
	}
}
