package control_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/seedqueue/sq/api/sqv1"
	"github.com/seedqueue/sq/control"
)

// TestSubscribeFollowsAndEndsAtShutdown: a subscription at the end of a
// partition receives records published later, and ends with Unavailable
// (SHUTTING_DOWN) once shutdown starts.
func TestSubscribeFollowsAndEndsAtShutdown(t *testing.T) {
	n := startNode(t, control.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := sqv1.NewTopicsClient(n.conn).CreateTopic(ctx, &sqv1.CreateTopicRequest{Name: "follow", Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	msg := sqv1.NewMessagingClient(n.conn)
	st, err := msg.Subscribe(ctx, &sqv1.SubscribeRequest{Topic: "follow", Partition: 0, From: sqv1.StartFrom_START_FROM_LATEST})
	if err != nil {
		t.Fatal(err)
	}
	// The stream is open before the publish: Subscribe waits in a long poll.
	eventually(t, "subscription in flight", func() bool { return n.eng.InFlight() > 0 })
	if _, err := msg.Publish(ctx, &sqv1.PublishRequest{Topic: "follow", Partition: -1, Records: []*sqv1.Record{{Value: []byte("later")}}}); err != nil {
		t.Fatal(err)
	}
	r, err := st.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Records) != 1 || string(r.Records[0].Value) != "later" || r.Records[0].Offset != 0 {
		t.Fatalf("received %v, want the one later record", r.Records)
	}
	n.srv.StartShutdown()
	_, err = st.Recv()
	if status.Code(err) != codes.Unavailable || errorReason(status.Convert(err)) != "SHUTTING_DOWN" {
		t.Fatalf("Recv after StartShutdown: %v, want Unavailable SHUTTING_DOWN", err)
	}
}
