package control_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/api/sqv1"
	"github.com/seedqueue/sq/control"
	"github.com/seedqueue/sq/sdk"
)

// groupPoller is what the group tests drive: GrpcConsumer and Consumer.
type groupPoller interface {
	Poll(ctx context.Context) ([]sdk.Message, error)
	Assignment() []uint32
}

// produceKeyed sends records from..to-1 of topic, keyed so that they
// spread over its partitions; each value names the record.
func produceKeyed(ctx context.Context, t *testing.T, addr, topic string, from, to int) {
	t.Helper()
	p, err := sdk.NewGrpcProducer(sdk.GrpcProducerConfig{GrpcConfig: sdk.GrpcConfig{Addr: addr}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var msgs []sdk.ProducerMessage
	for i := from; i < to; i++ {
		msgs = append(msgs, sdk.NewProducerMessage(topic, fmt.Appendf(nil, "r%d", i)).WithKey(fmt.Appendf(nil, "k%d", i)))
	}
	acks, err := p.SendBatch(ctx, msgs)
	if err != nil {
		t.Fatal(err)
	}
	for i, a := range acks {
		if a.Err != nil {
			t.Fatalf("ack %d: %v", i, a.Err)
		}
	}
}

// drive polls every member in turn, counting each record value in seen,
// until done holds (checked between rounds) or the test's deadline.
func drive(ctx context.Context, t *testing.T, what string, members []groupPoller, seen map[string]int, done func() bool) {
	t.Helper()
	for !done() {
		if ctx.Err() != nil {
			as := make([][]uint32, len(members))
			for i, m := range members {
				as[i] = m.Assignment()
			}
			t.Fatalf("%s: not reached before the deadline; assignments %v, %d distinct records seen", what, as, len(seen))
		}
		for _, m := range members {
			got, err := m.Poll(ctx)
			if err != nil && ctx.Err() == nil {
				t.Fatalf("%s: Poll: %v", what, err)
			}
			for _, r := range got {
				seen[string(r.Value)]++
			}
		}
	}
}

// split reports whether the members' assignments are disjoint, cover
// partitions 0..n-1 and have the sizes want (in member order).
func split(members []groupPoller, n int, want ...int) bool {
	var all []uint32
	for i, m := range members {
		a := m.Assignment()
		if len(a) != want[i] {
			return false
		}
		all = append(all, a...)
	}
	slices.Sort(all)
	if len(all) != n {
		return false
	}
	for i, p := range all {
		if p != uint32(i) {
			return false
		}
	}
	return true
}

// checkOnce fails the test for a record of r0..r(n-1) never seen or seen
// twice: every commit succeeded, so at-least-once allows no repeat.
func checkOnce(t *testing.T, seen map[string]int, n int) {
	t.Helper()
	for i := range n {
		if c := seen[fmt.Sprintf("r%d", i)]; c != 1 {
			t.Errorf("record r%d seen %d times, want once", i, c)
		}
	}
	if len(seen) != n {
		t.Errorf("%d distinct records seen, want %d", len(seen), n)
	}
}

func grpcMember(ctx context.Context, t *testing.T, addr, topic, group string) *sdk.GrpcConsumer {
	t.Helper()
	c, err := sdk.NewGrpcConsumer(ctx, sdk.GrpcConsumerConfig{GrpcConfig: sdk.GrpcConfig{Addr: addr}, Topic: topic, ConsumerGroup: group,
		AutoCommit: true, AutoCommitInterval: 10 * time.Millisecond, HeartbeatInterval: 20 * time.Millisecond, MaxWait: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestGrpcConsumerGroupSplitAndTakeOver: three GrpcConsumers of one group
// split six partitions 2/2/2; when one closes (committing, then leaving)
// the other two take its partitions over 3/3 from its commits, and every
// record is read exactly once.
func TestGrpcConsumerGroupSplitAndTakeOver(t *testing.T) {
	n := startNode(t, control.Options{NodeID: "n-g"})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := sqv1.NewTopicsClient(n.conn).CreateTopic(ctx, &sqv1.CreateTopicRequest{Name: "gt", Partitions: 6}); err != nil {
		t.Fatal(err)
	}
	produceKeyed(ctx, t, n.grpcAddr, "gt", 0, 300)
	var assigned, revoked [3][]uint32
	ms := make([]groupPoller, 3)
	for i := range ms {
		c, err := sdk.NewGrpcConsumer(ctx, sdk.GrpcConsumerConfig{GrpcConfig: sdk.GrpcConfig{Addr: n.grpcAddr}, Topic: "gt", ConsumerGroup: "g",
			AutoCommit: true, AutoCommitInterval: 10 * time.Millisecond, HeartbeatInterval: 20 * time.Millisecond, MaxWait: 20 * time.Millisecond,
			MaxPollRecords:       7,
			OnPartitionsAssigned: func(ps []uint32) { assigned[i] = append(assigned[i], ps...) },
			OnPartitionsRevoked:  func(ps []uint32) { revoked[i] = append(revoked[i], ps...) }})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		ms[i] = c
	}
	seen := map[string]int{}
	drive(ctx, t, "split 2/2/2", ms, seen, func() bool { return split(ms, 6, 2, 2, 2) })
	// The callbacks tell the same story as Assignment: what a member was
	// given and not taken back is what it reads (a partition started by
	// the heartbeat goroutine is announced by the next Poll).
	rounds := 0
	drive(ctx, t, "one more Poll each", ms, seen, func() bool { rounds++; return rounds > 1 })
	for i, m := range ms {
		held := map[uint32]int{}
		for _, p := range assigned[i] {
			held[p]++
		}
		for _, p := range revoked[i] {
			held[p]--
		}
		var now []uint32
		for p, c := range held {
			if c == 1 {
				now = append(now, p)
			} else if c != 0 {
				t.Errorf("member %d: partition %d assigned %d times more than revoked", i, p, c)
			}
		}
		slices.Sort(now)
		if !slices.Equal(now, m.Assignment()) {
			t.Errorf("member %d: callbacks give %v, Assignment %v", i, now, m.Assignment())
		}
	}
	gone := ms[2].Assignment()
	if err := ms[2].(*sdk.GrpcConsumer).Close(); err != nil {
		t.Fatalf("Close of the leaving member: %v", err)
	}
	produceKeyed(ctx, t, n.grpcAddr, "gt", 300, 600)
	ms = ms[:2]
	drive(ctx, t, "take-over 3/3", ms, seen, func() bool { return split(ms, 6, 3, 3) && len(seen) >= 600 })
	checkOnce(t, seen, 600)
	for _, p := range gone {
		if !slices.Contains(ms[0].Assignment(), p) && !slices.Contains(ms[1].Assignment(), p) {
			t.Errorf("partition %d of the member that left has no reader", p)
		}
	}
}

// TestGrpcConsumerMixedGroup: a GrpcConsumer and a Cap'n Proto Consumer
// in one group share its partitions 3/3 and read every record once.
func TestGrpcConsumerMixedGroup(t *testing.T) {
	n := startNode(t, control.Options{NodeID: "n-mix"})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := sqv1.NewTopicsClient(n.conn).CreateTopic(ctx, &sqv1.CreateTopicRequest{Name: "mt", Partitions: 6}); err != nil {
		t.Fatal(err)
	}
	produceKeyed(ctx, t, n.grpcAddr, "mt", 0, 300)
	g := grpcMember(ctx, t, n.grpcAddr, "mt", "mix")
	c, err := sdk.NewConsumer(ctx, sdk.ConsumerConfig{Addr: n.capnpAddr, Topic: "mt", ConsumerGroup: "mix", AutoCommit: true,
		AutoCommitInterval: 10 * time.Millisecond, HeartbeatInterval: 20 * time.Millisecond, MaxWait: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ms := []groupPoller{g, c}
	seen := map[string]int{}
	drive(ctx, t, "split 3/3", ms, seen, func() bool { return split(ms, 6, 3, 3) })
	produceKeyed(ctx, t, n.grpcAddr, "mt", 300, 400)
	drive(ctx, t, "every record", ms, seen, func() bool { return len(seen) >= 400 })
	checkOnce(t, seen, 400)
	d, err := sqv1.NewGroupsClient(n.conn).DescribeGroup(ctx, &sqv1.DescribeGroupRequest{Group: "mix"})
	if err != nil || len(d.Members) != 2 {
		t.Fatalf("DescribeGroup = %v, %v; want two members", d, err)
	}
}

// TestGroupRPCFencing: CommitGroupOffsets and Heartbeat refuse, with
// FailedPrecondition FENCED_GENERATION, a stale generation, an unknown
// member and a member that left; malformed requests are InvalidArgument.
func TestGroupRPCFencing(t *testing.T) {
	n := startNode(t, control.Options{NodeID: "n-f"})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := sqv1.NewTopicsClient(n.conn).CreateTopic(ctx, &sqv1.CreateTopicRequest{Name: "ft", Partitions: 2}); err != nil {
		t.Fatal(err)
	}
	gc := sqv1.NewGroupsClient(n.conn)
	join := func(member string) *sqv1.JoinGroupResponse {
		t.Helper()
		r, err := gc.JoinGroup(ctx, &sqv1.JoinGroupRequest{Group: "f", MemberId: member, Topics: []string{"ft"}})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	a := join("")
	b := join("")
	hb, err := gc.Heartbeat(ctx, &sqv1.HeartbeatRequest{Group: "f", MemberId: a.MemberId, Generation: a.Generation})
	if err != nil {
		t.Fatal(err)
	}
	if hb.Generation <= a.Generation {
		t.Fatalf("generation %d after a second member joined, want above %d", hb.Generation, a.Generation)
	}
	commit := func(member string, gen int32) error {
		_, err := gc.CommitGroupOffsets(ctx, &sqv1.CommitGroupOffsetsRequest{Group: "f", MemberId: member, Generation: gen,
			Offsets: []*sqv1.OffsetEntry{{Topic: "ft", Partition: 0, Offset: 0}}})
		return err
	}
	if err := commit(a.MemberId, hb.Generation); err != nil {
		t.Fatalf("commit with the current generation: %v", err)
	}
	fenced := func(what string, err error) {
		t.Helper()
		st, _ := status.FromError(err)
		if st.Code() != codes.FailedPrecondition || errorReason(st) != "FENCED_GENERATION" {
			t.Errorf("%s: %v, want FailedPrecondition FENCED_GENERATION", what, err)
		}
	}
	fenced("commit with the generation before the second join", commit(a.MemberId, a.Generation))
	fenced("commit with a future generation", commit(a.MemberId, hb.Generation+1))
	fenced("commit of an unknown member", commit("nobody", hb.Generation))
	if _, err := gc.LeaveGroup(ctx, &sqv1.LeaveGroupRequest{Group: "f", MemberId: b.MemberId}); err != nil {
		t.Fatal(err)
	}
	fenced("commit of a member that left", commit(b.MemberId, b.Generation))
	_, err = gc.Heartbeat(ctx, &sqv1.HeartbeatRequest{Group: "f", MemberId: b.MemberId, Generation: b.Generation})
	fenced("heartbeat of a member that left", err)

	invalid := func(what string, err error) {
		t.Helper()
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s: %v, want InvalidArgument", what, err)
		}
	}
	_, err = gc.JoinGroup(ctx, &sqv1.JoinGroupRequest{Group: "f", Topics: []string{"ft"}, SessionTimeoutMs: -1})
	invalid("negative session timeout", err)
	_, err = gc.JoinGroup(ctx, &sqv1.JoinGroupRequest{Topics: []string{"ft"}})
	invalid("join without a group", err)
	_, err = gc.Heartbeat(ctx, &sqv1.HeartbeatRequest{Group: "f", MemberId: a.MemberId, Generation: hb.Generation,
		Owned: []*sqv1.TopicPartitions{{Topic: "ft", Partitions: []int32{-1}}}})
	invalid("negative owned partition", err)
	invalid("group commit without a member id", commit("", hb.Generation))
	_, err = gc.CommitGroupOffsets(ctx, &sqv1.CommitGroupOffsetsRequest{MemberId: a.MemberId, Generation: hb.Generation})
	invalid("group commit without a group", err)
	_, err = gc.CommitGroupOffsets(ctx, &sqv1.CommitGroupOffsetsRequest{Group: "f", MemberId: a.MemberId, Generation: hb.Generation,
		Offsets: []*sqv1.OffsetEntry{{Topic: "ft", Partition: -1}}})
	invalid("group commit of a negative partition", err)
	_, err = gc.JoinGroup(ctx, &sqv1.JoinGroupRequest{Group: "f", Topics: []string{"missing"}})
	if st, _ := status.FromError(err); st.Code() != codes.NotFound || errorReason(st) != "UNKNOWN_TOPIC" {
		t.Errorf("join for a missing topic: %v, want NotFound UNKNOWN_TOPIC", err)
	}
}

// TestGrpcConsumerFenced: a GrpcConsumer removed from its group has its
// Commit refused with FENCED_GENERATION (its generation is stale); its
// heartbeat then finds it removed, and it joins again as a new member and
// reads on from the group's committed offsets.
func TestGrpcConsumerFenced(t *testing.T) {
	n := startNode(t, control.Options{NodeID: "n-fc"})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := sqv1.NewTopicsClient(n.conn).CreateTopic(ctx, &sqv1.CreateTopicRequest{Name: "fc", Partitions: 2}); err != nil {
		t.Fatal(err)
	}
	produceKeyed(ctx, t, n.grpcAddr, "fc", 0, 50)
	gc := sqv1.NewGroupsClient(n.conn)
	memberOf := func(group string) string {
		t.Helper()
		d, err := gc.DescribeGroup(ctx, &sqv1.DescribeGroupRequest{Group: group})
		if err != nil || len(d.Members) != 1 {
			t.Fatalf("DescribeGroup %s = %v, %v; want one member", group, d, err)
		}
		return d.Members[0].MemberId
	}
	remove := func(group, member string) {
		t.Helper()
		if _, err := gc.LeaveGroup(ctx, &sqv1.LeaveGroupRequest{Group: group, MemberId: member}); err != nil {
			t.Fatal(err)
		}
	}

	// A session of 5 min heartbeats every 100 s: the removal is not seen
	// before the commit.
	slow, err := sdk.NewGrpcConsumer(ctx, sdk.GrpcConsumerConfig{GrpcConfig: sdk.GrpcConfig{Addr: n.grpcAddr}, Topic: "fc", ConsumerGroup: "slow",
		SessionTimeout: 5 * time.Minute, MaxWait: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	seen := map[string]int{}
	drive(ctx, t, "a record", []groupPoller{slow}, seen, func() bool { return len(seen) > 0 })
	remove("slow", memberOf("slow"))
	if err := slow.Commit(ctx); !errors.Is(err, api.ErrFencedGeneration) {
		t.Fatalf("Commit of a removed member: %v, want FENCED_GENERATION", err)
	}

	// With frequent heartbeats the member finds out, drops its partitions
	// without committing and joins again under a new member id.
	fast := grpcMember(ctx, t, n.grpcAddr, "fc", "fast")
	seen = map[string]int{}
	drive(ctx, t, "every record", []groupPoller{fast}, seen, func() bool { return len(seen) >= 50 })
	if err := fast.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	old := memberOf("fast")
	remove("fast", old)
	produceKeyed(ctx, t, n.grpcAddr, "fc", 50, 80)
	drive(ctx, t, "rejoined and read on", []groupPoller{fast}, seen, func() bool {
		d, err := gc.DescribeGroup(ctx, &sqv1.DescribeGroupRequest{Group: "fast"})
		return err == nil && len(d.Members) == 1 && d.Members[0].MemberId != old && len(fast.Assignment()) == 2 && len(seen) >= 80
	})
	// Records returned before the member found out it was removed were
	// not committed: read again after the join (at-least-once), never lost.
	for i := range 80 {
		if c := seen[fmt.Sprintf("r%d", i)]; c == 0 || (i < 50 && c != 1) {
			t.Errorf("record r%d seen %d times", i, c)
		}
	}
}

// TestGrpcConsumerRevokeWakesPoll: a revocation ends an idle Poll (here
// with MaxWait of an hour) so the partition is released and its new
// owner need not wait for the old one's records.
func TestGrpcConsumerRevokeWakesPoll(t *testing.T) {
	n := startNode(t, control.Options{NodeID: "n-w"})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := sqv1.NewTopicsClient(n.conn).CreateTopic(ctx, &sqv1.CreateTopicRequest{Name: "wt", Partitions: 2}); err != nil {
		t.Fatal(err)
	}
	idle, err := sdk.NewGrpcConsumer(ctx, sdk.GrpcConsumerConfig{GrpcConfig: sdk.GrpcConfig{Addr: n.grpcAddr}, Topic: "wt", ConsumerGroup: "w",
		HeartbeatInterval: 20 * time.Millisecond, MaxWait: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	polled := make(chan error, 1)
	go func() {
		_, err := idle.Poll(ctx) // no record will come: only the revocation ends it
		polled <- err
	}()
	other := grpcMember(ctx, t, n.grpcAddr, "wt", "w")
	drive(ctx, t, "split 1/1", []groupPoller{other}, map[string]int{}, func() bool { return len(other.Assignment()) == 1 })
	if err := <-polled; err != nil {
		t.Fatalf("idle Poll: %v", err)
	}
	if a := idle.Assignment(); len(a) != 1 || a[0] == other.Assignment()[0] {
		t.Fatalf("assignments %v and %v, want one partition each", a, other.Assignment())
	}
}
