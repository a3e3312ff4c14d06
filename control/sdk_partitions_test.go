package control_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/control"
	"github.com/seedqueue/sq/sdk"
)

// TestSDKAdminCreatePartitions grows a topic with the SDK's Admin: the
// answer shows the new count and the same id, refused counts and unknown
// topics come back as catalog errors, and a GrpcProducer whose metadata
// is read afresh spreads keyed records over every partition, new ones
// included, while the old records stay where they were.
func TestSDKAdminCreatePartitions(t *testing.T) {
	n := startNode(t, control.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cfg := sdk.GrpcConfig{Addr: n.grpcAddr}
	admin, err := sdk.NewAdmin(sdk.AdminConfig{GrpcConfig: cfg})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	created, err := admin.CreateTopic(ctx, "grow", 2, sdk.TopicConfig{})
	if err != nil {
		t.Fatal(err)
	}
	// A metadata age of 1ns reads the partition count at every send, as
	// a refresh after MetadataMaxAge does.
	p, err := sdk.NewGrpcProducer(sdk.GrpcProducerConfig{GrpcConfig: cfg, MetadataMaxAge: time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	send := func(round string) map[uint32]int {
		t.Helper()
		var msgs []sdk.ProducerMessage
		for i := range 64 {
			msgs = append(msgs, sdk.NewProducerMessage("grow", fmt.Appendf(nil, "%s%d", round, i)).WithKey(fmt.Appendf(nil, "key-%d", i)))
		}
		acks, err := p.SendBatch(ctx, msgs)
		if err != nil {
			t.Fatal(err)
		}
		per := map[uint32]int{}
		for i, a := range acks {
			if a.Err != nil {
				t.Fatalf("%s: ack %d: %v", round, i, a.Err)
			}
			per[a.Partition]++
		}
		return per
	}
	if per := send("before"); len(per) != 2 {
		t.Fatalf("keyed records before growing went to partitions %v, want 0 and 1", per)
	}
	info, err := admin.CreatePartitions(ctx, "grow", 4)
	if err != nil {
		t.Fatal(err)
	}
	if info.Partitions != 4 || len(info.PartitionInfos) != 4 || info.ID != created.ID {
		t.Fatalf("after growing: %+v (created %+v)", info, created)
	}
	per := send("after")
	for part := range uint32(4) {
		if per[part] == 0 {
			t.Fatalf("keyed records after growing went to partitions %v, want all of 0..3", per)
		}
	}
	d, err := admin.DescribeTopic(ctx, "grow")
	if err != nil {
		t.Fatal(err)
	}
	var total uint64
	for _, pi := range d.PartitionInfos {
		total += pi.HighWatermark
	}
	if d.Partitions != 4 || total != 128 {
		t.Fatalf("described after growing: %+v, %d records, want 4 partitions and 128", d, total)
	}

	for _, tc := range []struct {
		name  string
		total uint32
		want  error
		text  string
	}{
		{"grow", 4, api.ErrInvalidConfig, "has 4 partitions; the new total 4 must be larger"},
		{"grow", 3, api.ErrInvalidConfig, "the new total 3"},
		{"grow", 0, api.ErrInvalidConfig, "the new total 0 must be larger"},
		{"grow", 1 << 31, api.ErrInvalidConfig, "above"},
		{"missing", 8, api.ErrUnknownTopic, `"missing"`},
		{"bad name", 8, api.ErrInvalidTopicName, "bad name"},
	} {
		_, err := admin.CreatePartitions(ctx, tc.name, tc.total)
		if !errors.Is(err, tc.want) || !strings.Contains(fmt.Sprint(err), tc.text) {
			t.Errorf("CreatePartitions(%q, %d) = %v, want %v with %q", tc.name, tc.total, err, tc.want, tc.text)
		}
	}
}

// TestSDKClientCreatePartitions grows a topic with the SDK's data-plane
// Client: a Producer whose metadata is read afresh spreads keyed records
// over every partition, new ones included; the old records stay where
// they were; refused counts come back as catalog errors.
func TestSDKClientCreatePartitions(t *testing.T) {
	n := startNode(t, control.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	p, err := sdk.NewProducer(ctx, sdk.ProducerConfig{Addr: n.capnpAddr, MetadataMaxAge: time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c := p.Client()
	created, err := c.CreateTopic(ctx, "grow", 2, sdk.TopicConfig{})
	if err != nil {
		t.Fatal(err)
	}
	send := func(round string) map[uint32]int {
		t.Helper()
		var msgs []sdk.ProducerMessage
		for i := range 64 {
			msgs = append(msgs, sdk.NewProducerMessage("grow", fmt.Appendf(nil, "%s%d", round, i)).WithKey(fmt.Appendf(nil, "key-%d", i)))
		}
		acks, err := p.SendBatch(ctx, msgs)
		if err != nil {
			t.Fatal(err)
		}
		per := map[uint32]int{}
		for i, a := range acks {
			if a.Err != nil {
				t.Fatalf("%s: ack %d: %v", round, i, a.Err)
			}
			per[a.Partition]++
		}
		return per
	}
	before := send("before")
	info, err := c.CreatePartitions(ctx, "grow", 4)
	if err != nil {
		t.Fatal(err)
	}
	if info.Partitions != 4 || len(info.PartitionInfos) != 4 || info.ID != created.ID {
		t.Fatalf("after growing: %+v (created %+v)", info, created)
	}
	for part, n := range before {
		if hw := info.PartitionInfos[part].HighWatermark; hw != uint64(n) {
			t.Fatalf("partition %d at %d after growing, want its %d records", part, hw, n)
		}
	}
	per := send("after")
	for part := range uint32(4) {
		if per[part] == 0 {
			t.Fatalf("keyed records after growing went to partitions %v, want all of 0..3", per)
		}
	}
	for _, tc := range []struct {
		name  string
		total uint32
		want  error
		text  string
	}{
		{"grow", 4, api.ErrInvalidConfig, "has 4 partitions; the new total 4 must be larger"},
		{"grow", 0, api.ErrInvalidConfig, "the new total 0"},
		{"grow", 1<<32 - 1, api.ErrInvalidConfig, "above the maximum 10000"},
		{"missing", 8, api.ErrUnknownTopic, `"missing"`},
		{"bad name", 8, api.ErrInvalidTopicName, "bad name"},
	} {
		_, err := c.CreatePartitions(ctx, tc.name, tc.total)
		if !errors.Is(err, tc.want) || !strings.Contains(fmt.Sprint(err), tc.text) {
			t.Errorf("CreatePartitions(%q, %d) = %v, want %v with %q", tc.name, tc.total, err, tc.want, tc.text)
		}
	}
}

// TestSDKGroupConsumerTakesNewPartitions: a group consumer of a topic
// with 2 partitions is assigned the 2 new ones at its next heartbeat
// after the topic grows to 4, and reads the keyed records produced to
// them.
func TestSDKGroupConsumerTakesNewPartitions(t *testing.T) {
	n := startNode(t, control.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := sdk.NewProducer(ctx, sdk.ProducerConfig{Addr: n.capnpAddr, MetadataMaxAge: time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, err := p.Client().CreateTopic(ctx, "grow", 2, sdk.TopicConfig{}); err != nil {
		t.Fatal(err)
	}
	c, err := sdk.NewConsumer(ctx, sdk.ConsumerConfig{Addr: n.capnpAddr, Topic: "grow", ConsumerGroup: "g",
		StartFrom: sdk.StartEarliest, HeartbeatInterval: 20 * time.Millisecond, MaxWait: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	waitAssigned := func(want int) {
		t.Helper()
		for len(c.Assignment()) != want {
			if _, err := c.Poll(ctx); err != nil {
				t.Fatalf("waiting for %d assigned partitions (have %v): %v", want, c.Assignment(), err)
			}
		}
	}
	waitAssigned(2)
	if _, err := p.Client().CreatePartitions(ctx, "grow", 4); err != nil {
		t.Fatal(err)
	}
	waitAssigned(4)
	var msgs []sdk.ProducerMessage
	for i := range 64 {
		msgs = append(msgs, sdk.NewProducerMessage("grow", fmt.Appendf(nil, "v%d", i)).WithKey(fmt.Appendf(nil, "key-%d", i)))
	}
	if _, err := p.SendBatch(ctx, msgs); err != nil {
		t.Fatal(err)
	}
	per := map[uint32]int{}
	for got := 0; got < len(msgs); {
		recs, err := c.Poll(ctx)
		if err != nil {
			t.Fatalf("after %d of %d records (%v): %v", got, len(msgs), per, err)
		}
		for _, m := range recs {
			per[m.Partition]++
		}
		got += len(recs)
	}
	if len(per) != 4 {
		t.Fatalf("records read per partition %v, want all of 0..3", per)
	}
}
