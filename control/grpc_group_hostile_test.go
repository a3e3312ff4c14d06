package control_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/seedqueue/sq/api/sqv1"
	"github.com/seedqueue/sq/control"
)

// TestGroupRPCHostile sends the Groups membership RPCs requests a
// well-behaved client never sends and checks each gets its precise code,
// never Internal or Unknown, and that ListGroups and DescribeGroup still
// answer afterwards.
func TestGroupRPCHostile(t *testing.T) {
	n := startNode(t, control.Options{NodeID: "n-h"})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	topics := sqv1.NewTopicsClient(n.conn)
	for _, name := range []string{"ht", "gone"} {
		if _, err := topics.CreateTopic(ctx, &sqv1.CreateTopicRequest{Name: name, Partitions: 2}); err != nil {
			t.Fatal(err)
		}
	}
	gc := sqv1.NewGroupsClient(n.conn)
	a, err := gc.JoinGroup(ctx, &sqv1.JoinGroupRequest{Group: "h", Topics: []string{"ht", "gone"}})
	if err != nil {
		t.Fatal(err)
	}
	other, err := gc.JoinGroup(ctx, &sqv1.JoinGroupRequest{Group: "h2", Topics: []string{"ht"}})
	if err != nil {
		t.Fatal(err)
	}
	want := func(what string, err error, code codes.Code, reason string) {
		t.Helper()
		st, _ := status.FromError(err)
		if st.Code() != code || (reason != "" && errorReason(st) != reason) {
			t.Errorf("%s: %v, want %v %s", what, err, code, reason)
		}
		if len(st.Message()) > 4096 {
			t.Errorf("%s: message of %d bytes, want at most 4096", what, len(st.Message()))
		}
	}
	huge := strings.Repeat("x", 1<<20)
	hb := func(group, member string, gen int32, owned ...*sqv1.TopicPartitions) error {
		_, err := gc.Heartbeat(ctx, &sqv1.HeartbeatRequest{Group: group, MemberId: member, Generation: gen, Owned: owned})
		return err
	}
	commit := func(group, member string, gen int32, topic string, p int32) error {
		_, err := gc.CommitGroupOffsets(ctx, &sqv1.CommitGroupOffsetsRequest{Group: group, MemberId: member, Generation: gen,
			Offsets: []*sqv1.OffsetEntry{{Topic: topic, Partition: p, Offset: 1}}})
		return err
	}

	_, err = gc.JoinGroup(ctx, &sqv1.JoinGroupRequest{Group: huge, Topics: []string{"ht"}})
	want("join with a 1 MiB group id", err, codes.InvalidArgument, "INVALID_REQUEST")
	_, err = gc.JoinGroup(ctx, &sqv1.JoinGroupRequest{Group: "h", MemberId: huge, Topics: []string{"ht"}})
	want("join with a 1 MiB member id", err, codes.InvalidArgument, "INVALID_REQUEST")
	_, err = gc.JoinGroup(ctx, &sqv1.JoinGroupRequest{Group: "h", MemberId: "m-unknown", Topics: []string{"ht"}})
	want("join with an unknown member id", err, codes.FailedPrecondition, "FENCED_GENERATION")
	_, err = gc.JoinGroup(ctx, &sqv1.JoinGroupRequest{Group: "h", ClientId: huge, Topics: []string{"ht"}})
	want("join with a 1 MiB client id", err, codes.InvalidArgument, "INVALID_REQUEST")
	_, err = gc.JoinGroup(ctx, &sqv1.JoinGroupRequest{Group: "h", Topics: []string{huge}})
	want("join for a 1 MiB topic name", err, codes.InvalidArgument, "")
	_, err = gc.JoinGroup(ctx, &sqv1.JoinGroupRequest{Group: "h", Topics: []string{""}})
	want("join for an empty topic name", err, codes.InvalidArgument, "")
	_, err = gc.JoinGroup(ctx, &sqv1.JoinGroupRequest{Group: "h"})
	want("join without topics", err, codes.InvalidArgument, "INVALID_REQUEST")

	want("heartbeat with an empty group", hb("", a.MemberId, a.Generation), codes.InvalidArgument, "INVALID_REQUEST")
	want("heartbeat with a 1 MiB group", hb(huge, a.MemberId, a.Generation), codes.InvalidArgument, "INVALID_REQUEST")
	want("heartbeat with an empty member id", hb("h", "", a.Generation), codes.FailedPrecondition, "FENCED_GENERATION")
	want("heartbeat with a 1 MiB member id", hb("h", huge, a.Generation), codes.InvalidArgument, "INVALID_REQUEST")
	_, err = gc.LeaveGroup(ctx, &sqv1.LeaveGroupRequest{Group: "h", MemberId: huge})
	want("leave with a 1 MiB member id", err, codes.InvalidArgument, "INVALID_REQUEST")
	want("heartbeat for a member of another group", hb("h", other.MemberId, other.Generation), codes.FailedPrecondition, "FENCED_GENERATION")
	want("heartbeat naming a 1 MiB topic", hb("h", a.MemberId, a.Generation, &sqv1.TopicPartitions{Topic: huge, Partitions: []int32{0}}),
		codes.InvalidArgument, "INVALID_TOPIC_NAME")
	want("heartbeat owning partition 1<<30", hb("h", a.MemberId, a.Generation, &sqv1.TopicPartitions{Topic: "ht", Partitions: []int32{1 << 30}}),
		codes.InvalidArgument, "INVALID_REQUEST")
	want("heartbeat owning a partition out of the topic's range", hb("h", a.MemberId, a.Generation, &sqv1.TopicPartitions{Topic: "ht", Partitions: []int32{9}}),
		codes.OK, "")
	many := make([]int32, 1<<20)
	for i := range many {
		many[i] = int32(i)
	}
	want("heartbeat owning 1 Mi partitions", hb("h", a.MemberId, a.Generation, &sqv1.TopicPartitions{Topic: "ht", Partitions: many}),
		codes.InvalidArgument, "INVALID_REQUEST")
	var lots []*sqv1.TopicPartitions
	for i := range 100000 {
		lots = append(lots, &sqv1.TopicPartitions{Topic: "t" + strings.Repeat("y", i%10), Partitions: []int32{0}})
	}
	want("heartbeat listing 100000 topics", hb("h", a.MemberId, a.Generation, lots...), codes.InvalidArgument, "INVALID_REQUEST")

	want("commit with a 1 MiB member id", commit("h", huge, a.Generation, "ht", 0), codes.InvalidArgument, "INVALID_REQUEST")
	want("commit with a negative generation", commit("h", a.MemberId, -1, "ht", 0), codes.FailedPrecondition, "FENCED_GENERATION")
	want("commit of a member of another group", commit("h", other.MemberId, other.Generation, "ht", 0), codes.FailedPrecondition, "FENCED_GENERATION")

	// Entry-level answers: a partition out of range, a topic the member
	// does not subscribe to.
	cr, err := gc.CommitGroupOffsets(ctx, &sqv1.CommitGroupOffsetsRequest{Group: "h", MemberId: a.MemberId, Generation: a.Generation,
		Offsets: []*sqv1.OffsetEntry{{Topic: "ht", Partition: 7, Offset: 1}, {Topic: "missing", Partition: 0, Offset: 1}}})
	if err != nil {
		t.Fatalf("commit with bad entries: %v, want per-entry errors", err)
	}
	for i, o := range cr.Offsets {
		if o.Error == "" {
			t.Errorf("commit entry %d (%s/%d): no error", i, o.Topic, o.Partition)
		}
	}

	// The member's second topic is deleted: its heartbeat still answers,
	// its assignment drops that topic, and a new join for it is UNKNOWN_TOPIC.
	if _, err := topics.DeleteTopic(ctx, &sqv1.DeleteTopicRequest{Name: "gone"}); err != nil {
		t.Fatal(err)
	}
	r, err := gc.Heartbeat(ctx, &sqv1.HeartbeatRequest{Group: "h", MemberId: a.MemberId, Generation: a.Generation})
	if err != nil {
		t.Fatalf("heartbeat after a subscribed topic was deleted: %v", err)
	}
	for _, tp := range r.Assignment {
		if tp.Topic == "gone" {
			t.Errorf("assignment after delete still has %v", tp)
		}
	}
	want("commit for a deleted topic", func() error {
		res, err := gc.CommitGroupOffsets(ctx, &sqv1.CommitGroupOffsetsRequest{Group: "h", MemberId: a.MemberId, Generation: r.Generation,
			Offsets: []*sqv1.OffsetEntry{{Topic: "gone", Partition: 0, Offset: 1}}})
		if err != nil {
			return err
		}
		if len(res.Offsets) != 1 || res.Offsets[0].Error == "" {
			t.Errorf("commit for a deleted topic: %v, want an entry error", res.Offsets)
		}
		return status.Error(codes.NotFound, "")
	}(), codes.NotFound, "")
	_, err = gc.JoinGroup(ctx, &sqv1.JoinGroupRequest{Group: "h", Topics: []string{"gone"}})
	want("join for a deleted topic", err, codes.NotFound, "UNKNOWN_TOPIC")

	// The group state still answers.
	lg, err := gc.ListGroups(ctx, &sqv1.ListGroupsRequest{})
	if err != nil {
		t.Fatalf("ListGroups: %v", err)
	}
	if len(lg.Groups) < 2 {
		t.Errorf("ListGroups: %v, want h and h2", lg.Groups)
	}
	d, err := gc.DescribeGroup(ctx, &sqv1.DescribeGroupRequest{Group: "h"})
	if err != nil {
		t.Fatalf("DescribeGroup: %v", err)
	}
	if len(d.Members) != 1 {
		t.Errorf("DescribeGroup h: %d members, want 1", len(d.Members))
	}
}

// TestGroupRPCMemberCap: a join beyond a group's 1000 members is refused
// with INVALID_REQUEST naming the bound, the group keeps answering, and a
// slot freed by a leave is taken by the next join.
func TestGroupRPCMemberCap(t *testing.T) {
	n := startNode(t, control.Options{NodeID: "n-cap"})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := sqv1.NewTopicsClient(n.conn).CreateTopic(ctx, &sqv1.CreateTopicRequest{Name: "capt", Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	gc := sqv1.NewGroupsClient(n.conn)
	join := func() (*sqv1.JoinGroupResponse, error) {
		return gc.JoinGroup(ctx, &sqv1.JoinGroupRequest{Group: "cap", Topics: []string{"capt"}, SessionTimeoutMs: 300000})
	}
	var first string
	for i := range 1000 {
		r, err := join()
		if err != nil {
			t.Fatalf("join %d: %v", i, err)
		}
		if i == 0 {
			first = r.MemberId
		}
	}
	_, err := join()
	if st, _ := status.FromError(err); st.Code() != codes.InvalidArgument || errorReason(st) != "INVALID_REQUEST" || !strings.Contains(st.Message(), "1000") {
		t.Fatalf("join 1001: %v, want InvalidArgument INVALID_REQUEST naming the bound", err)
	}
	d, err := gc.DescribeGroup(ctx, &sqv1.DescribeGroupRequest{Group: "cap"})
	if err != nil || len(d.Members) != 1000 {
		t.Fatalf("DescribeGroup at the cap: %v members, %v", len(d.GetMembers()), err)
	}
	if _, err := gc.LeaveGroup(ctx, &sqv1.LeaveGroupRequest{Group: "cap", MemberId: first}); err != nil {
		t.Fatal(err)
	}
	if _, err := join(); err != nil {
		t.Fatalf("join after a leave freed a slot: %v", err)
	}
	if _, err := gc.ListGroups(ctx, &sqv1.ListGroupsRequest{}); err != nil {
		t.Fatalf("ListGroups: %v", err)
	}
}
