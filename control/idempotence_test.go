package control_test

import (
	"context"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/seedqueue/sq/api/sqv1"
	"github.com/seedqueue/sq/control"
	"github.com/seedqueue/sq/sdk"
)

// idemRecords returns n records valued prefix-0, prefix-1, ...
func idemRecords(prefix string, n int) []*sqv1.Record {
	rs := make([]*sqv1.Record, n)
	for i := range rs {
		rs[i] = &sqv1.Record{Value: fmt.Appendf(nil, "%s-%d", prefix, i)}
	}
	return rs
}

// TestGrpcIdempotentPublish: a gRPC publish stamped with a producer id,
// epoch and base sequence is checked as a Cap'n Proto batch is. A retry
// of the same sequence (Publish and PublishStream) is answered with the
// original offsets and not stored again; a gap in the sequence, an
// unknown producer at a sequence other than 0 and malformed producer
// fields are refused and store nothing.
func TestGrpcIdempotentPublish(t *testing.T) {
	n := startNode(t, control.Options{})
	ctx := context.Background()
	msg := sqv1.NewMessagingClient(n.conn)
	if _, err := sqv1.NewTopicsClient(n.conn).CreateTopic(ctx, &sqv1.CreateTopicRequest{Name: "idem", Partitions: 2}); err != nil {
		t.Fatal(err)
	}
	pid, err := msg.InitProducerId(ctx, &sqv1.InitProducerIdRequest{})
	if err != nil {
		t.Fatal(err)
	}
	stamped := func(partition, seq int32, recs []*sqv1.Record) *sqv1.PublishRequest {
		return &sqv1.PublishRequest{Topic: "idem", Partition: partition, Records: recs,
			Idempotent: true, ProducerId: pid.ProducerId, ProducerEpoch: pid.ProducerEpoch, BaseSequence: seq}
	}
	// A record of another writer first, so the producer's offsets do not
	// start at 0.
	if _, err := msg.Publish(ctx, &sqv1.PublishRequest{Topic: "idem", Partition: 0, Records: idemRecords("plain", 1)}); err != nil {
		t.Fatal(err)
	}
	first := stamped(0, 0, idemRecords("a", 3))
	orig, err := msg.Publish(ctx, first)
	if err != nil {
		t.Fatal(err)
	}
	if orig.BaseOffset != 1 || orig.RecordCount != 3 {
		t.Fatalf("first publish: %v, want base offset 1, 3 records", orig)
	}
	second, err := msg.Publish(ctx, stamped(0, 3, idemRecords("b", 2)))
	if err != nil || second.BaseOffset != 4 {
		t.Fatalf("next sequence: %v, %v; want base offset 4", second, err)
	}

	// The retry of an earlier batch, as after a lost response: the
	// original's offsets, nothing written.
	dup, err := msg.Publish(ctx, stamped(0, 0, idemRecords("a", 3)))
	if err != nil {
		t.Fatalf("retried publish: %v", err)
	}
	if dup.BaseOffset != orig.BaseOffset || dup.RecordCount != orig.RecordCount || dup.Partition != 0 {
		t.Fatalf("retried publish answered %v, want the original's %v", dup, orig)
	}
	// The same over PublishStream.
	stream, err := msg.PublishStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(stamped(0, 3, idemRecords("b", 2))); err != nil {
		t.Fatal(err)
	}
	sres, err := stream.CloseAndRecv()
	if err != nil {
		t.Fatalf("PublishStream retry: %v", err)
	}
	if len(sres.Results) != 1 || sres.Results[0].BaseOffset != second.BaseOffset {
		t.Fatalf("PublishStream retry answered %v, want base offset %d", sres.Results, second.BaseOffset)
	}

	refusals := []struct {
		name   string
		req    *sqv1.PublishRequest
		code   codes.Code
		reason string
	}{
		{"a gap in the sequence", stamped(0, 9, idemRecords("gap", 1)), codes.FailedPrecondition, "OUT_OF_ORDER_SEQUENCE"},
		{"a sequence already passed, not a retry", stamped(0, 1, idemRecords("old", 1)), codes.FailedPrecondition, "OUT_OF_ORDER_SEQUENCE"},
		{"an id the partition does not hold, past 0", stamped(1, 5, idemRecords("unknown", 1)), codes.FailedPrecondition, "UNKNOWN_PRODUCER_ID"},
		{"partition chosen by the server", stamped(-1, 5, idemRecords("any", 1)), codes.InvalidArgument, "INVALID_REQUEST"},
		{"negative producer id", &sqv1.PublishRequest{Topic: "idem", Partition: 0, Records: idemRecords("neg", 1), Idempotent: true, ProducerId: -1}, codes.InvalidArgument, "INVALID_REQUEST"},
		{"epoch over int16", &sqv1.PublishRequest{Topic: "idem", Partition: 0, Records: idemRecords("epoch", 1), Idempotent: true, ProducerEpoch: 1 << 15}, codes.InvalidArgument, "INVALID_REQUEST"},
		{"negative sequence", &sqv1.PublishRequest{Topic: "idem", Partition: 0, Records: idemRecords("seq", 1), Idempotent: true, BaseSequence: -1}, codes.InvalidArgument, "INVALID_REQUEST"},
		{"producer fields without idempotent", &sqv1.PublishRequest{Topic: "idem", Partition: 0, Records: idemRecords("flag", 1), ProducerId: pid.ProducerId, BaseSequence: 5}, codes.InvalidArgument, "INVALID_REQUEST"},
	}
	for _, tc := range refusals {
		t.Run(tc.name, func(t *testing.T) {
			_, err := msg.Publish(ctx, tc.req)
			st, _ := status.FromError(err)
			if st.Code() != tc.code || errorReason(st) != tc.reason {
				t.Fatalf("Publish: %v (reason %q), want %v with %s", err, errorReason(st), tc.code, tc.reason)
			}
		})
	}

	// The log holds each record once: the other writer's, then a-0..a-2,
	// b-0, b-1, and nothing of the refused requests.
	c, err := sdk.Dial(ctx, sdk.ClientConfig{Addr: n.capnpAddr})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	want := []string{"plain-0", "a-0", "a-1", "a-2", "b-0", "b-1"}
	for p, w := range [][]string{want, nil} {
		fr, err := c.Fetch(ctx, sdk.FetchRequest{Topic: "idem", Partition: uint32(p), Offset: 0})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, m := range fr.Messages {
			got = append(got, string(m.Value))
		}
		if fmt.Sprint(got) != fmt.Sprint(w) {
			t.Errorf("partition %d holds %q, want %q", p, got, w)
		}
	}
	// The producer goes on after the refusals at its next sequence.
	if r, err := msg.Publish(ctx, stamped(0, 5, idemRecords("c", 1))); err != nil || r.BaseOffset != 6 {
		t.Fatalf("next sequence after the refusals: %v, %v; want base offset 6", r, err)
	}
}
