package control_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/api/sqv1"
	"github.com/seedqueue/sq/control"
	"github.com/seedqueue/sq/sdk"
)

// produce publishes values prefix-0 .. prefix-(n-1) to topic over the
// Cap'n Proto plane with a fresh producer (so its metadata is the topic's
// current one), ten records per batch.
func produce(t *testing.T, ctx context.Context, addr, topic, prefix string, n int) {
	t.Helper()
	p, err := sdk.NewProducer(ctx, sdk.ProducerConfig{Addr: addr})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for i := 0; i < n; i += 10 {
		var msgs []sdk.ProducerMessage
		for j := i; j < min(i+10, n); j++ {
			msgs = append(msgs, sdk.NewProducerMessage(topic, fmt.Appendf(nil, "%s-%d", prefix, j)))
		}
		if _, err := p.SendBatch(ctx, msgs); err != nil {
			t.Fatal(err)
		}
	}
}

// poller is the Poll of sdk.Consumer and sdk.GrpcConsumer.
type poller interface {
	Poll(ctx context.Context) ([]sdk.Message, error)
}

// pollValues polls c until want records have come, and returns them. An
// api.ErrUnknownTopic from Poll is allowed when tolerateGone is set (the
// topic is deleted and not yet created again); any other error fails.
func pollValues(t *testing.T, ctx context.Context, c poller, want int, tolerateGone bool) []sdk.Message {
	t.Helper()
	var out []sdk.Message
	deadline := time.Now().Add(20 * time.Second)
	for len(out) < want {
		if time.Now().After(deadline) {
			t.Fatalf("timed out with %d of %d records", len(out), want)
		}
		msgs, err := c.Poll(ctx)
		if err != nil && !(tolerateGone && errors.Is(err, api.ErrUnknownTopic)) {
			t.Fatalf("Poll after %d records: %v", len(out), err)
		}
		out = append(out, msgs...)
	}
	return out
}

// checkNew checks that msgs are exactly the records new-0..new-(n-1) of
// the recreated topic, each partition's from offset 0 in order, and no
// record of the old topic.
func checkNew(t *testing.T, msgs []sdk.Message, n int) map[uint32]uint64 {
	t.Helper()
	next := map[uint32]uint64{}
	seen := map[string]bool{}
	for _, m := range msgs {
		v := string(m.Value)
		if !strings.HasPrefix(v, "new-") {
			t.Fatalf("record %s at %d/%d after the topic was created again", v, m.Partition, m.Offset)
		}
		if m.Offset != next[m.Partition] {
			t.Fatalf("partition %d: offset %d (%s), want %d: the new topic must be read from its start", m.Partition, m.Offset, v, next[m.Partition])
		}
		next[m.Partition]++
		if seen[v] {
			t.Fatalf("record %s twice", v)
		}
		seen[v] = true
	}
	if len(seen) != n {
		t.Fatalf("%d distinct new records, want %d", len(seen), n)
	}
	return next
}

// A consumer reads part of a topic; the topic is deleted and created again
// and 300 records are produced: the consumer delivers exactly the new
// topic's records from offset 0 (never the old topic's offsets, never the
// new records from the old position), and a group's committed offsets
// are then those of the new topic, with its id.
func TestConsumerStartsOverOnRecreatedTopic(t *testing.T) {
	cases := []struct {
		name string
		cfg  sdk.ConsumerConfig
		// partitions of the old and of the new topic.
		oldPartitions, partitions uint32
	}{
		{"standalone push", sdk.ConsumerConfig{}, 1, 1},
		{"standalone fetch, more partitions", sdk.ConsumerConfig{UseFetch: true}, 1, 3},
		{"standalone push, fewer partitions", sdk.ConsumerConfig{}, 3, 1},
		{"group auto-commit", sdk.ConsumerConfig{ConsumerGroup: "g", AutoCommit: true, AutoCommitInterval: time.Millisecond}, 1, 1},
		{"group fetch, more partitions", sdk.ConsumerConfig{ConsumerGroup: "g", UseFetch: true}, 1, 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			n := startNode(t, control.Options{NodeID: "n-recreate"})
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			admin, err := sdk.Dial(ctx, sdk.ClientConfig{Addr: n.capnpAddr})
			if err != nil {
				t.Fatal(err)
			}
			defer admin.Close()
			old, err := admin.CreateTopic(ctx, "t", tc.oldPartitions, sdk.TopicConfig{})
			if err != nil {
				t.Fatal(err)
			}
			if old.ID.IsZero() {
				t.Fatal("CreateTopic returned no topic id")
			}
			produce(t, ctx, n.capnpAddr, "t", "old", 100)
			group := tc.cfg.ConsumerGroup != ""
			readOld := 100
			if group {
				// The group has read 90 of them: the member reads the
				// last 10 and then has nothing buffered.
				if res, err := admin.CommitOffsets(ctx, "g", []sdk.OffsetCommit{{Topic: "t", TopicID: old.ID, Offset: 90}}); err != nil || res[0].Err != nil {
					t.Fatalf("commit 90: %v %+v", err, res)
				}
				readOld = 10
			}
			cfg := tc.cfg
			logs := &logBuf{}
			cfg.Addr, cfg.Topic, cfg.MaxWait = n.capnpAddr, "t", 50*time.Millisecond
			cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
			c, err := sdk.NewConsumer(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			for _, m := range pollValues(t, ctx, c, readOld, false) {
				if !strings.HasPrefix(string(m.Value), "old-") {
					t.Fatalf("before the recreate: %s", m.Value)
				}
			}
			if group {
				if err := c.Commit(ctx); err != nil {
					t.Fatal(err)
				}
			}
			if err := admin.DeleteTopic(ctx, "t"); err != nil {
				t.Fatal(err)
			}
			cur, err := admin.CreateTopic(ctx, "t", tc.partitions, sdk.TopicConfig{})
			if err != nil {
				t.Fatal(err)
			}
			if cur.ID == old.ID || cur.ID.IsZero() {
				t.Fatalf("recreated topic id %v, old %v", cur.ID, old.ID)
			}
			if offs, _ := admin.FetchOffsets(ctx, "g", "t"); len(offs) != 0 {
				t.Fatalf("recreated topic inherits committed offsets %+v", offs)
			}
			produce(t, ctx, n.capnpAddr, "t", "new", 300)
			next := checkNew(t, pollValues(t, ctx, c, 300, true), 300)
			// Nothing more: no old offset comes late.
			if msgs, err := c.Poll(ctx); len(msgs) != 0 || err != nil {
				t.Fatalf("after the 300 new records: %d more, %v", len(msgs), err)
			}
			if l := logs.String(); !strings.Contains(l, "topic was deleted and created again") || !strings.Contains(l, cur.ID.String()) {
				t.Errorf("the consumer did not log that it started over on topic id %v:\n%s", cur.ID, l)
			}
			if !group {
				return
			}
			if err := c.Commit(ctx); err != nil {
				t.Fatalf("commit after the recreate: %v", err)
			}
			offs, err := admin.FetchOffsets(ctx, "g", "t")
			if err != nil {
				t.Fatal(err)
			}
			total := uint64(0)
			for _, o := range offs {
				if o.TopicID != cur.ID || o.Offset != next[o.Partition] {
					t.Fatalf("committed %+v, want offset %d with the new topic id %v", o, next[o.Partition], cur.ID)
				}
				total += o.Offset
			}
			if total != 300 {
				t.Fatalf("committed offsets %+v sum to %d, want 300", offs, total)
			}
			// DescribeGroup on both planes: the new topic's id and offsets.
			d, err := admin.DescribeGroup(ctx, "g")
			if err != nil {
				t.Fatal(err)
			}
			for _, l := range d.Offsets {
				if l.TopicID != cur.ID || l.CommittedOffset != int64(next[l.Partition]) || l.Lag != 0 {
					t.Fatalf("DescribeGroup offset %+v, want the new topic's", l)
				}
			}
			gd, err := sqv1.NewGroupsClient(n.conn).DescribeGroup(ctx, &sqv1.DescribeGroupRequest{Group: "g"})
			if err != nil {
				t.Fatal(err)
			}
			for _, o := range gd.Offsets {
				if id, _ := api.TopicIDFromBytes(o.TopicId); id != cur.ID || o.CommittedOffset != int64(next[uint32(o.Partition)]) {
					t.Fatalf("gRPC DescribeGroup offset %+v, want the new topic's", o)
				}
			}
		})
	}
}

// Requests with the id of a deleted topic get UNKNOWN_TOPIC_ID on both
// planes (gRPC NotFound, reason UNKNOWN_TOPIC_ID); the current id and no
// id work; a malformed id is INVALID_REQUEST; describe and list carry the
// id on both planes.
func TestTopicIDRequests(t *testing.T) {
	n := startNode(t, control.Options{NodeID: "n-ids"})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cl, err := sdk.Dial(ctx, sdk.ClientConfig{Addr: n.capnpAddr})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	topics := sqv1.NewTopicsClient(n.conn)
	msg := sqv1.NewMessagingClient(n.conn)
	old, err := cl.CreateTopic(ctx, "t", 2, sdk.TopicConfig{})
	if err != nil {
		t.Fatal(err)
	}
	produce(t, ctx, n.capnpAddr, "t", "old", 20)
	// A subscription by name, pinned to the topic it found.
	pinned, err := cl.Subscribe(ctx, "t", 0, 0, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer pinned.Close(ctx)
	if _, err := pinned.Next(ctx); err != nil {
		t.Fatal(err)
	}
	if err := cl.DeleteTopic(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	// Deleted, not yet created again: by id UNKNOWN_TOPIC_ID, by name
	// UNKNOWN_TOPIC.
	if _, err := cl.Fetch(ctx, sdk.FetchRequest{Topic: "t", TopicID: old.ID}); !errors.Is(err, api.ErrUnknownTopicID) {
		t.Fatalf("fetch with the id of a deleted topic: %v", err)
	}
	if _, err := cl.Fetch(ctx, sdk.FetchRequest{Topic: "t"}); !errors.Is(err, api.ErrUnknownTopic) {
		t.Fatalf("fetch by name of a deleted topic: %v", err)
	}
	cur, err := cl.CreateTopic(ctx, "t", 1, sdk.TopicConfig{})
	if err != nil {
		t.Fatal(err)
	}
	produce(t, ctx, n.capnpAddr, "t", "new", 5)
	for {
		// The pinned subscription ends; it never pushes the new topic.
		r, err := pinned.Next(ctx)
		if err != nil {
			if !errors.Is(err, api.ErrUnknownTopicID) {
				t.Fatalf("pinned subscription ended with %v, want UNKNOWN_TOPIC_ID", err)
			}
			break
		}
		for _, m := range r.Messages {
			if !strings.HasPrefix(string(m.Value), "old-") {
				t.Fatalf("subscription of the old topic pushed %s", m.Value)
			}
		}
		if err := pinned.Grant(ctx, r.Bytes); err != nil {
			t.Fatal(err)
		}
	}

	// Cap'n Proto plane.
	if _, err := cl.Fetch(ctx, sdk.FetchRequest{Topic: "t", TopicID: old.ID}); !errors.Is(err, api.ErrUnknownTopicID) || api.IsRetriable(err) {
		t.Fatalf("fetch with the old id: %v, want UNKNOWN_TOPIC_ID, not retriable", err)
	}
	for _, id := range []api.TopicID{cur.ID, {}} {
		r, err := cl.Fetch(ctx, sdk.FetchRequest{Topic: "t", TopicID: id})
		if err != nil || len(r.Messages) != 5 {
			t.Fatalf("fetch with id %v: %d records, %v", id, len(r.Messages), err)
		}
	}
	sub, err := cl.SubscribeID(ctx, "t", old.ID, 0, 0, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sub.Next(ctx); !errors.Is(err, api.ErrUnknownTopicID) {
		t.Fatalf("subscribe with the old id: %v", err)
	}
	res, err := cl.CommitOffsets(ctx, "g", []sdk.OffsetCommit{
		{Topic: "t", TopicID: old.ID, Offset: 1},
		{Topic: "t", TopicID: cur.ID, Offset: 2},
	})
	if err != nil || !errors.Is(res[0].Err, api.ErrUnknownTopicID) || res[1].Err != nil || res[1].TopicID != cur.ID {
		t.Fatalf("commit with old and new ids: %v %+v", err, res)
	}
	res, err = cl.CommitOffsets(ctx, "g", []sdk.OffsetCommit{{Topic: "t", Offset: 3}})
	if err != nil || res[0].Err != nil || res[0].TopicID != cur.ID {
		t.Fatalf("commit by name: %v %+v, want stored with id %v", err, res, cur.ID)
	}
	for _, f := range []func() (sdk.TopicInfo, error){
		func() (sdk.TopicInfo, error) { return cl.DescribeTopic(ctx, "t") },
		func() (sdk.TopicInfo, error) {
			l, err := cl.ListTopics(ctx)
			if err != nil || len(l) != 1 {
				return sdk.TopicInfo{}, fmt.Errorf("ListTopics = %+v, %v", l, err)
			}
			return l[0], nil
		},
		func() (sdk.TopicInfo, error) {
			md, err := cl.Metadata(ctx, "t")
			if err != nil || len(md.Topics) != 1 {
				return sdk.TopicInfo{}, fmt.Errorf("Metadata = %+v, %v", md, err)
			}
			return md.Topics[0], nil
		},
	} {
		if ti, err := f(); err != nil || ti.ID != cur.ID {
			t.Fatalf("Cap'n Proto metadata id %v, %v; want %v", ti.ID, err, cur.ID)
		}
	}

	// gRPC plane.
	dt, err := topics.DescribeTopic(ctx, &sqv1.DescribeTopicRequest{Name: "t"})
	if err != nil || string(dt.Topic.TopicId) != string(cur.ID[:]) {
		t.Fatalf("gRPC DescribeTopic id %x, %v; want %v", dt.GetTopic().GetTopicId(), err, cur.ID)
	}
	lt, err := topics.ListTopics(ctx, &sqv1.ListTopicsRequest{})
	if err != nil || len(lt.Topics) != 1 || string(lt.Topics[0].TopicId) != string(cur.ID[:]) {
		t.Fatalf("gRPC ListTopics %+v, %v", lt, err)
	}
	wantNotFoundID := func(what string, err error) {
		t.Helper()
		st := status.Convert(err)
		if st.Code() != codes.NotFound || errorReason(st) != "UNKNOWN_TOPIC_ID" {
			t.Fatalf("%s: %v, want NotFound with reason UNKNOWN_TOPIC_ID", what, err)
		}
	}
	stream, err := msg.Subscribe(ctx, &sqv1.SubscribeRequest{Topic: "t", TopicId: old.ID[:], From: sqv1.StartFrom_START_FROM_EARLIEST})
	if err == nil {
		_, err = stream.Recv()
	}
	wantNotFoundID("gRPC Subscribe with the old id", err)
	stream, err = msg.Subscribe(ctx, &sqv1.SubscribeRequest{Topic: "t", TopicId: cur.ID[:], Group: "g"})
	if err != nil {
		t.Fatal(err)
	}
	r, err := stream.Recv()
	if err != nil || len(r.Records) != 2 || r.Records[0].Offset != 3 || string(r.TopicId) != string(cur.ID[:]) {
		t.Fatalf("gRPC Subscribe with the current id from the group's offset 3: %+v, %v", r, err)
	}
	cr, err := msg.CommitOffsets(ctx, &sqv1.CommitOffsetsRequest{Group: "g", Offsets: []*sqv1.OffsetEntry{
		{Topic: "t", TopicId: old.ID[:], Offset: 4},
		{Topic: "t", TopicId: cur.ID[:], Offset: 5},
	}})
	if err != nil || !strings.HasPrefix(cr.Offsets[0].Error, "UNKNOWN_TOPIC_ID: ") || cr.Offsets[1].Error != "" ||
		string(cr.Offsets[1].TopicId) != string(cur.ID[:]) {
		t.Fatalf("gRPC commit with old and new ids: %+v, %v", cr, err)
	}
	fo, err := msg.FetchOffsets(ctx, &sqv1.FetchOffsetsRequest{Group: "g", Topic: "t"})
	if err != nil || len(fo.Offsets) != 1 || fo.Offsets[0].Offset != 5 || string(fo.Offsets[0].TopicId) != string(cur.ID[:]) {
		t.Fatalf("gRPC FetchOffsets %+v, %v", fo, err)
	}
	for _, bad := range [][]byte{{1}, make([]byte, 15), make([]byte, 17)} {
		_, err := msg.CommitOffsets(ctx, &sqv1.CommitOffsetsRequest{Group: "g", Offsets: []*sqv1.OffsetEntry{{Topic: "t", TopicId: bad}}})
		if status.Code(err) != codes.InvalidArgument {
			t.Fatalf("gRPC commit with a %d-byte id: %v, want InvalidArgument", len(bad), err)
		}
		stream, err := msg.Subscribe(ctx, &sqv1.SubscribeRequest{Topic: "t", TopicId: bad})
		if err == nil {
			_, err = stream.Recv()
		}
		if status.Code(err) != codes.InvalidArgument {
			t.Fatalf("gRPC subscribe with a %d-byte id: %v, want InvalidArgument", len(bad), err)
		}
	}
}

// The GrpcConsumer starts over on a topic deleted and created again: it
// delivers the new topic's records from offset 0, and its commits then
// store offsets of the new topic.
func TestGrpcConsumerStartsOverOnRecreatedTopic(t *testing.T) {
	for _, autoCommit := range []bool{false, true} {
		t.Run(fmt.Sprintf("autocommit=%v", autoCommit), func(t *testing.T) {
			n := startNode(t, control.Options{NodeID: "n-grpc-recreate"})
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			admin, err := sdk.NewAdmin(sdk.AdminConfig{GrpcConfig: sdk.GrpcConfig{Addr: n.grpcAddr}})
			if err != nil {
				t.Fatal(err)
			}
			defer admin.Close()
			if _, err := admin.CreateTopic(ctx, "t", 1, sdk.TopicConfig{}); err != nil {
				t.Fatal(err)
			}
			produce(t, ctx, n.capnpAddr, "t", "old", 100)
			c, err := sdk.NewGrpcConsumer(ctx, sdk.GrpcConsumerConfig{GrpcConfig: sdk.GrpcConfig{Addr: n.grpcAddr}, Topic: "t",
				ConsumerGroup: "g", AutoCommit: autoCommit, AutoCommitInterval: time.Millisecond, MaxWait: 50 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			pollValues(t, ctx, c, 100, false)
			if err := c.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			if err := admin.DeleteTopic(ctx, "t"); err != nil {
				t.Fatal(err)
			}
			cur, err := admin.CreateTopic(ctx, "t", 2, sdk.TopicConfig{})
			if err != nil {
				t.Fatal(err)
			}
			produce(t, ctx, n.capnpAddr, "t", "new", 300)
			next := checkNew(t, pollValues(t, ctx, c, 300, true), 300)
			if err := c.Commit(ctx); err != nil {
				t.Fatalf("commit after the recreate: %v", err)
			}
			cl, err := sdk.Dial(ctx, sdk.ClientConfig{Addr: n.capnpAddr})
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			offs, err := cl.FetchOffsets(ctx, "g", "t")
			if err != nil {
				t.Fatal(err)
			}
			total := uint64(0)
			for _, o := range offs {
				if o.TopicID != cur.ID || o.Offset != next[o.Partition] {
					t.Fatalf("committed %+v, want offset %d of the new topic %v", o, next[o.Partition], cur.ID)
				}
				total += o.Offset
			}
			if total != 300 {
				t.Fatalf("committed %+v, want 300 in all", offs)
			}
		})
	}
}
