package sdk

import (
	"context"
	"testing"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/engine"
)

// statsRemoteLog is an engine.RemoteLog with no remote data whose Stats
// answer from a table by partition.
type statsRemoteLog map[int]engine.RemoteStats

func (statsRemoteLog) Bounds(string, api.TopicID, int) (uint64, uint64, bool) { return 0, 0, false }

func (statsRemoteLog) Fetch(context.Context, string, api.TopicID, int, uint64, int) ([][]byte, error) {
	return nil, api.NewError(api.CodeOffsetOutOfRange, "no remote log")
}

func (s statsRemoteLog) Stats(_ string, _ api.TopicID, partition int) (engine.RemoteStats, bool) {
	st, ok := s[partition]
	return st, ok
}

// A partition's remote log stats travel through both planes: DescribeTopic
// over Cap'n Proto (Client) and over gRPC (Admin) give what the engine's
// remote log reports, and nil while tiered storage is off.
func TestDescribeTopicRemoteStats(t *testing.T) {
	b := startBroker(t)
	grpcAddr := serveGrpc(t, b)
	ctx := testCtx(t)
	c, err := Dial(ctx, ClientConfig{Addr: b.addr})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	a, err := NewAdmin(AdminConfig{GrpcConfig: GrpcConfig{Addr: grpcAddr}})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if _, err := c.CreateTopic(ctx, "t", 2, TopicConfig{}); err != nil {
		t.Fatal(err)
	}
	describe := map[string]func(context.Context, string) (TopicInfo, error){"Client": c.DescribeTopic, "Admin": a.DescribeTopic}

	for plane, d := range describe {
		ti, err := d(ctx, "t")
		if err != nil {
			t.Fatalf("%s.DescribeTopic: %v", plane, err)
		}
		for _, pi := range ti.PartitionInfos {
			if pi.Remote != nil {
				t.Fatalf("%s: partition %d has remote stats %+v without tiered storage", plane, pi.Partition, *pi.Remote)
			}
		}
	}

	b.eng.SetRemoteLog(statsRemoteLog{0: {LogStartOffset: 7, EndOffset: 1 << 40, Segments: 70000, Bytes: 5 << 40, LagSegments: 3, LagBytes: 3 << 30}})
	want := []RemoteStats{{LogStartOffset: 7, EndOffset: 1 << 40, Segments: 70000, Bytes: 5 << 40, LagSegments: 3, LagBytes: 3 << 30}, {}}
	for plane, d := range describe {
		ti, err := d(ctx, "t")
		if err != nil {
			t.Fatalf("%s.DescribeTopic: %v", plane, err)
		}
		if len(ti.PartitionInfos) != len(want) {
			t.Fatalf("%s: %d partitions", plane, len(ti.PartitionInfos))
		}
		for i, w := range want {
			if got := ti.PartitionInfos[i].Remote; got == nil || *got != w {
				t.Fatalf("%s: partition %d remote %+v, want %+v", plane, i, got, w)
			}
		}
	}
}
