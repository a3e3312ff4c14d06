package control_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/api/batch"
	"github.com/seedqueue/sq/api/sqv1"
	"github.com/seedqueue/sq/control"
	"github.com/seedqueue/sq/engine"
	"github.com/seedqueue/sq/sdk"
)

// bigNode is a node with the default batch limit (16 MiB) and a record
// limit above the gRPC bound, holding topic "big": one batch of 12
// records of 1 MiB (offsets 0-11), then one record of 4.5 MiB (offset 12).
func bigNode(t *testing.T) *node {
	t.Helper()
	n := startNodeWith(t, control.Options{}, func(o *engine.Options) {
		o.MaxBatchBytes, o.MaxRecordBytes, o.SegmentBytes = api.DefaultMaxBatchBytes, 6<<20, 64<<20
	})
	ctx := context.Background()
	c, err := sdk.Dial(ctx, sdk.ClientConfig{Addr: n.capnpAddr})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.CreateTopic(ctx, "big", 1, sdk.TopicConfig{}); err != nil {
		t.Fatal(err)
	}
	var b batch.Builder
	for i := range 12 {
		b.Add(nil, bigValue(i, 1<<20), nil, 1)
	}
	b12 := buildBatch(t, &b)
	if len(b12) <= 3*control.GrpcMaxMessageBytes || len(b12) > api.DefaultMaxBatchBytes {
		t.Fatalf("batch of %d bytes; want above three gRPC responses and within the batch limit", len(b12))
	}
	b.Reset()
	b.Add(nil, bigValue(12, 4<<20+1<<19), nil, 1)
	for _, buf := range [][]byte{b12, buildBatch(t, &b)} {
		if _, err := c.Publish(ctx, "big", 0, buf); err != nil {
			t.Fatal(err)
		}
	}
	return n
}

func buildBatch(t *testing.T, b *batch.Builder) []byte {
	t.Helper()
	buf, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	return buf
}

// bigValue is n bytes that name offset off.
func bigValue(off, n int) []byte { return bytes.Repeat([]byte{byte(off + 1)}, n) }

// TestSubscribeFitsDefaultGrpcClient: a batch of 12 MiB, within the
// server's limits, reaches a gRPC client with default options (4 MiB
// receive limit) as several responses, each below the advertised bound; a
// single record above the bound ends the stream with MESSAGE_TOO_LARGE
// naming its offset.
func TestSubscribeFitsDefaultGrpcClient(t *testing.T) {
	n := bigNode(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ni, err := sqv1.NewClusterClient(n.conn).NodeInfo(ctx, &sqv1.NodeInfoRequest{})
	if err != nil || ni.GrpcMaxMessageBytes != control.GrpcMaxMessageBytes || ni.GrpcMaxMessageBytes >= 4<<20 {
		t.Fatalf("NodeInfo grpc_max_message_bytes = %d, %v; want %d, below 4 MiB", ni.GetGrpcMaxMessageBytes(), err, control.GrpcMaxMessageBytes)
	}
	for _, maxBytes := range []int32{0, 16 << 20} {
		// n.conn is a grpc.NewClient with no call options: default limits.
		st, err := sqv1.NewMessagingClient(n.conn).Subscribe(ctx, &sqv1.SubscribeRequest{Topic: "big", MaxBytes: maxBytes})
		if err != nil {
			t.Fatal(err)
		}
		var got []*sqv1.ConsumedRecord
		responses := 0
		for len(got) < 12 {
			r, err := st.Recv()
			if err != nil {
				t.Fatalf("max_bytes %d: after %d records: %v", maxBytes, len(got), err)
			}
			if s := proto.Size(r); s > control.GrpcMaxMessageBytes {
				t.Fatalf("max_bytes %d: response of %d bytes, above the bound %d", maxBytes, s, control.GrpcMaxMessageBytes)
			}
			responses++
			got = append(got, r.Records...)
		}
		for i, r := range got {
			if r.Offset != uint64(i) || !bytes.Equal(r.Value, bigValue(i, 1<<20)) {
				t.Fatalf("max_bytes %d: record %d is offset %d with %d bytes", maxBytes, i, r.Offset, len(r.Value))
			}
		}
		if responses < 4 {
			t.Errorf("max_bytes %d: 12 MiB came in %d responses, want at least 4", maxBytes, responses)
		}
		_, err = st.Recv()
		s, _ := status.FromError(err)
		if s.Code() != codes.ResourceExhausted || errorReason(s) != "MESSAGE_TOO_LARGE" || !strings.Contains(s.Message(), "record at offset 12") ||
			!strings.Contains(s.Message(), "Cap'n Proto") {
			t.Fatalf("max_bytes %d: the 4.5 MiB record: %v; want MESSAGE_TOO_LARGE naming offset 12", maxBytes, err)
		}
	}
}

// TestGrpcConsumerBigBatch: GrpcConsumer reads the 12 MiB batch and then
// reports MESSAGE_TOO_LARGE for the record above the bound.
func TestGrpcConsumerBigBatch(t *testing.T) {
	n := bigNode(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := sdk.NewGrpcConsumer(ctx, sdk.GrpcConsumerConfig{GrpcConfig: sdk.GrpcConfig{Addr: n.grpcAddr}, Topic: "big"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	info, err := c.Admin().NodeInfo(ctx)
	if err != nil || info.GrpcMaxMessageBytes != control.GrpcMaxMessageBytes {
		t.Fatalf("NodeInfo = %+v, %v", info, err)
	}
	read := 0
	for {
		msgs, err := c.Poll(ctx)
		if errors.Is(err, api.ErrMessageTooLarge) {
			break
		}
		if err != nil {
			t.Fatalf("after %d records: %v", read, err)
		}
		for _, m := range msgs {
			if m.Offset != uint64(read) || len(m.Value) != 1<<20 {
				t.Fatalf("record %d: offset %d, %d bytes", read, m.Offset, len(m.Value))
			}
			read++
		}
	}
	if read != 12 {
		t.Fatalf("read %d records before MESSAGE_TOO_LARGE, want 12", read)
	}
}

// TestPublishStreamResponseBound: a PublishStream's one response stays
// below the advertised bound: once the results of the requests appended
// would fill it, the next request fails with MESSAGE_TOO_LARGE and is not
// appended, instead of a response a default client cannot read.
func TestPublishStreamResponseBound(t *testing.T) {
	n := startNode(t, control.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	topic := strings.Repeat("t", engine.MaxTopicNameLength) // the largest results
	if _, err := sqv1.NewTopicsClient(n.conn).CreateTopic(ctx, &sqv1.CreateTopicRequest{Name: topic, Partitions: 1,
		Config: &sqv1.TopicConfig{SyncPolicy: "none"}}); err != nil {
		t.Fatal(err)
	}
	st, err := sqv1.NewMessagingClient(n.conn).PublishStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const most = 30_000 // far more than fit
	sent := 0
	for ; sent < most; sent++ {
		if err := st.Send(&sqv1.PublishRequest{Topic: topic, Partition: 0, Records: []*sqv1.Record{{Value: []byte("v")}}}); err != nil {
			break // the server ended the stream; CloseAndRecv has its status
		}
	}
	_, err = st.CloseAndRecv()
	s, _ := status.FromError(err)
	if s.Code() != codes.ResourceExhausted || errorReason(s) != "MESSAGE_TOO_LARGE" || !strings.Contains(s.Message(), "new one") {
		t.Fatalf("after %d requests: %v; want MESSAGE_TOO_LARGE", sent, err)
	}
	ti, err := n.eng.DescribeTopic(topic)
	if err != nil {
		t.Fatal(err)
	}
	appended := ti.Partitions[0].HighWatermark
	one := proto.Size(&sqv1.PublishStreamResponse{Results: []*sqv1.PublishResponse{{Topic: topic, Partition: 0,
		BaseOffset: appended, RecordCount: 1, LogAppendTimeMs: time.Now().UnixMilli(), Durability: sqv1.Durability_DURABILITY_WRITTEN}}})
	if full := int(appended) * one; full > control.GrpcMaxMessageBytes || full < control.GrpcMaxMessageBytes*9/10 {
		t.Fatalf("%d requests appended, whose results take about %d bytes; want at most and close to the bound %d", appended, full, control.GrpcMaxMessageBytes)
	}
}
