package meta

import (
	"bytes"
	"slices"
	"testing"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/engine"
)

func TestApplySetISR(t *testing.T) {
	// base: orders-0 has replicas [n1 n2], leader n1, epoch 0, ISR [n1 n2].
	isr := func(epoch uint32, nodes ...string) Command {
		return Command{Op: OpSetISR, Name: "orders", ID: tid(1), Partition: 0, Epoch: epoch, ISR: nodes}
	}
	isr0 := func(want ...string) func(*testing.T, *State, Result) {
		return func(t *testing.T, s *State, _ Result) {
			if got := s.Topics["orders"].Partitions[0].ISR; !slices.Equal(got, want) {
				t.Fatalf("isr %v, want %v", got, want)
			}
		}
	}
	runApply(t, []applyCase{
		{name: "shrink to the leader", cmd: isr(0, "n1"), check: isr0("n1")},
		{name: "expand in replica order", setup: func(s *State) { s.Topics["orders"].Partitions[0].ISR = []string{"n1"} },
			cmd: isr(0, "n2", "n1"), check: isr0("n1", "n2")},
		{name: "same set", cmd: isr(0, "n1", "n2"), check: isr0("n1", "n2")},
		{name: "stale epoch", setup: func(s *State) { s.Topics["orders"].Partitions[0].LeaderEpoch = 2 },
			cmd: isr(1, "n1"), code: api.CodeFencedLeaderEpoch},
		{name: "newer epoch", cmd: isr(1, "n1"), code: api.CodeUnknownLeaderEpoch},
		{name: "without the leader", cmd: isr(0, "n2"), code: api.CodeInvalidRequest},
		{name: "empty", cmd: isr(0), code: api.CodeInvalidRequest},
		{name: "not a replica", cmd: isr(0, "n1", "n3"), code: api.CodeInvalidRequest},
		{name: "listed twice", cmd: isr(0, "n1", "n1"), code: api.CodeInvalidRequest},
		{name: "no leader", setup: func(s *State) { s.Topics["orders"].Partitions[0].Leader = "" }, cmd: isr(0, "n1"), code: api.CodeInvalidRequest},
		{name: "partition out of range", cmd: Command{Op: OpSetISR, Name: "orders", ID: tid(1), Partition: 3, ISR: []string{"n1"}}, code: api.CodeInvalidRequest},
		{name: "other topic id", cmd: Command{Op: OpSetISR, Name: "orders", ID: tid(2), ISR: []string{"n1"}}, code: api.CodeUnknownTopicID},
		{name: "unknown topic", cmd: Command{Op: OpSetISR, Name: "nope", ID: tid(1), ISR: []string{"n1"}}, code: api.CodeUnknownTopic},
	})
}

// A leader change fences the ISR proposals of the old leader's epoch.
func TestSetISRFencedByLeaderChange(t *testing.T) {
	s := base(t)
	s.Topics["orders"].Partitions[0].HasData = true
	mustApply(t, s, Command{Op: OpSetLeaders, Leaders: LeadersAfterDeath(s, alive("n2", "n3"))})
	p := s.Topics["orders"].Partitions[0]
	if p.Leader != "n2" || p.LeaderEpoch != 1 || !slices.Equal(p.ISR, []string{"n2"}) {
		t.Fatalf("after the failover: %+v", p)
	}
	r := s.Apply(Command{Op: OpSetISR, Name: "orders", ID: tid(1), Epoch: 0, ISR: []string{"n1", "n2"}})
	wantCode(t, errOf(r), api.CodeFencedLeaderEpoch)
	mustApply(t, s, Command{Op: OpSetISR, Name: "orders", ID: tid(1), Epoch: 1, ISR: []string{"n1", "n2"}})
}

func TestMinInsync(t *testing.T) {
	for _, tc := range []struct {
		rf, set, want int32
		code          api.Code
	}{
		{rf: 1, want: 1}, {rf: 2, want: 1}, {rf: 3, want: 2}, {rf: 5, want: 2},
		{rf: 3, set: 3, want: 3}, {rf: 3, set: 1, want: 1},
		{rf: 2, set: 3, code: api.CodeInvalidConfig}, {rf: 2, set: -1, code: api.CodeInvalidConfig},
	} {
		cfg, err := ResolveMinInsync(engine.TopicConfig{ReplicationFactor: tc.rf, MinInsyncReplicas: tc.set})
		wantCode(t, err, tc.code)
		if tc.code == 0 && cfg.MinInsyncReplicas != tc.want {
			t.Errorf("rf %d min.insync %d resolves to %d, want %d", tc.rf, tc.set, cfg.MinInsyncReplicas, tc.want)
		}
		if tc.code == 0 && MinInsync(engine.TopicConfig{ReplicationFactor: tc.rf, MinInsyncReplicas: tc.set}) != int(tc.want) {
			t.Errorf("MinInsync(rf %d, %d) != %d", tc.rf, tc.set, tc.want)
		}
	}
	if got := MinInsync(engine.TopicConfig{}); got != 1 {
		t.Errorf("MinInsync of a zero config = %d, want 1", got)
	}
}

func TestPrepareCreateResolvesMinInsync(t *testing.T) {
	s := withNodes(t, "n1", "n2", "n3")
	for _, tc := range []struct {
		rf, set, want int32
		code          api.Code
	}{
		{rf: 3, want: 2}, {rf: 2, want: 1}, {rf: 0, want: 2}, {rf: 3, set: 3, want: 3},
		{rf: 2, set: 3, code: api.CodeInvalidConfig},
	} {
		c, err := PrepareCreate(s, "new", tid(5), 1, engine.TopicConfig{ReplicationFactor: tc.rf, MinInsyncReplicas: tc.set}, []string{"n1", "n2", "n3"}, 1)
		wantCode(t, err, tc.code)
		if tc.code == 0 && c.Topic.Config.MinInsyncReplicas != tc.want {
			t.Errorf("rf %d min.insync %d: created with %d, want %d", tc.rf, tc.set, c.Topic.Config.MinInsyncReplicas, tc.want)
		}
	}
}

func TestApplyMinInsyncChecked(t *testing.T) {
	big := engine.TopicConfig{ReplicationFactor: 2, MinInsyncReplicas: 3}
	ok := engine.TopicConfig{RetentionMs: 5, MinInsyncReplicas: 2}
	tooBig := newTopic("new", 2)
	tooBig.Config.MinInsyncReplicas = 2 // rf 1
	runApply(t, []applyCase{
		{name: "create above rf", cmd: Command{Op: OpCreateTopic, Topic: tooBig}, code: api.CodeInvalidConfig},
		{name: "alter above rf", cmd: Command{Op: OpAlterTopic, Name: "orders", ID: tid(1), Config: &big}, code: api.CodeInvalidConfig},
		{name: "alter to rf", cmd: Command{Op: OpAlterTopic, Name: "orders", ID: tid(1), Config: &ok},
			check: func(t *testing.T, s *State, _ Result) {
				if c := s.Topics["orders"].Config; c.MinInsyncReplicas != 2 || c.ReplicationFactor != 2 {
					t.Fatalf("config %+v", c)
				}
			}},
	})
}

// A command without the set-isr fields encodes as before they existed.
func TestSetISRFieldsOmittedWhenZero(t *testing.T) {
	b, err := Encode(Command{Op: OpMarkData, Name: "t", ID: tid(1), Partition: 1, NodeID: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(b, []byte(`"epoch"`)) || bytes.Contains(b, []byte(`"isr"`)) {
		t.Fatalf("encoding %s carries the set-isr fields", b)
	}
}

// Removing the leader of a partition with data hands it to an in-sync
// replica with the next epoch, and leaves the ISR without the node.
func TestRemoveNodeLeaderWithData(t *testing.T) {
	s := withNodes(t, "n1", "n2", "n3")
	addTopic(t, s, "orders", 1, 1, 3) // replicas n1 n2 n3
	p := &s.Topics["orders"].Partitions[0]
	p.HasData, p.ISR = true, []string{"n1", "n3"}
	leaders, err := LeadersForRemoval(s, "n1", alive("n1", "n2", "n3"))
	if err != nil {
		t.Fatal(err)
	}
	mustApply(t, s, Command{Op: OpRemoveNode, NodeID: "n1", Leaders: leaders})
	got := s.Topics["orders"].Partitions[0]
	if got.Leader != "n3" || got.LeaderEpoch != 1 || !slices.Equal(got.ISR, []string{"n3"}) || !slices.Equal(got.Replicas, []string{"n2", "n3"}) {
		t.Fatalf("after removing n1: %+v", got)
	}
}
