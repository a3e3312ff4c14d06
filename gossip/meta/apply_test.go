package meta

import (
	"slices"
	"testing"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/engine"
)

// newTopic is a valid topic for create-topic over n1..n3 (rf 1, 1 partition).
func newTopic(name string, b byte) *Topic {
	return &Topic{Name: name, ID: tid(b), Config: engine.TopicConfig{ReplicationFactor: 1},
		Partitions: []Partition{{Replicas: []string{"n1"}, Leader: "n1", ISR: []string{"n1"}}}}
}

// applyCase is one command applied to base(t): the code of its refusal
// (0: applied) and a check of the state and result.
type applyCase struct {
	name  string
	setup func(*State)
	cmd   Command
	code  api.Code
	check func(*testing.T, *State, Result)
}

// runApply runs cases; a refused command must leave the state unchanged.
func runApply(t *testing.T, tests []applyCase) {
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := base(t)
			if tc.setup != nil {
				tc.setup(s)
			}
			before := s.Hash()
			r := s.Apply(tc.cmd)
			wantCode(t, errOf(r), tc.code)
			if tc.code != 0 && s.Hash() != before {
				t.Fatal("a refused command changed the state")
			}
			if tc.check != nil {
				tc.check(t, s, r)
			}
		})
	}
}

func TestApplyNodes(t *testing.T) {
	runApply(t, []applyCase{
		{name: "register-node adds", cmd: Command{Op: OpRegisterNode, Node: &Node{ID: "n4"}},
			check: func(t *testing.T, s *State, _ Result) {
				if _, ok := s.Nodes["n4"]; !ok {
					t.Fatal("n4 not registered")
				}
			}},
		{name: "register-node replaces addresses", cmd: Command{Op: OpRegisterNode, Node: &Node{ID: "n1", DataAddr: "new:1"}},
			check: func(t *testing.T, s *State, _ Result) {
				if s.Nodes["n1"].DataAddr != "new:1" {
					t.Fatalf("n1 = %+v", s.Nodes["n1"])
				}
			}},
		{name: "register-node without id", cmd: Command{Op: OpRegisterNode, Node: &Node{}}, code: api.CodeInvalidRequest},
		{name: "register-node without node", cmd: Command{Op: OpRegisterNode}, code: api.CodeInvalidRequest},
	})
}

func TestApplyCreateTopic(t *testing.T) {
	rf2 := func(mod func(*Topic)) *Topic {
		tp := &Topic{Name: "t2", ID: tid(9), Config: engine.TopicConfig{ReplicationFactor: 2},
			Partitions: []Partition{{Replicas: []string{"n1", "n2"}, Leader: "n1", ISR: []string{"n1", "n2"}}}}
		mod(tp)
		return tp
	}
	runApply(t, []applyCase{
		{name: "create-topic", cmd: Command{Op: OpCreateTopic, Topic: newTopic("new", 2)},
			check: func(t *testing.T, s *State, r Result) {
				if r.Topic == nil || r.Topic.Name != "new" || s.Topics["new"].ID != tid(2) {
					t.Fatalf("result %+v, state %+v", r.Topic, s.Topics["new"])
				}
				if r.Topic == s.Topics["new"] {
					t.Fatal("result shares the state's topic")
				}
			}},
		{name: "create-topic existing name", cmd: Command{Op: OpCreateTopic, Topic: newTopic("orders", 2)}, code: api.CodeTopicExists},
		{name: "create-topic bad name", cmd: Command{Op: OpCreateTopic, Topic: newTopic("a/b", 2)}, code: api.CodeInvalidTopicName},
		{name: "create-topic zero id", cmd: Command{Op: OpCreateTopic, Topic: rf2(func(tp *Topic) { tp.ID = api.TopicID{} })}, code: api.CodeInvalidRequest},
		{name: "create-topic id of a live topic", cmd: Command{Op: OpCreateTopic, Topic: newTopic("new", 1)}, code: api.CodeInvalidRequest},
		{name: "create-topic id of a deleted topic",
			setup: func(s *State) { s.DeletedIDs = []api.TopicID{tid(7)} },
			cmd:   Command{Op: OpCreateTopic, Topic: newTopic("new", 7)}, code: api.CodeInvalidRequest},
		{name: "create-topic no partitions", cmd: Command{Op: OpCreateTopic, Topic: rf2(func(tp *Topic) { tp.Partitions = nil })}, code: api.CodeInvalidConfig},
		{name: "create-topic rf 0", cmd: Command{Op: OpCreateTopic, Topic: rf2(func(tp *Topic) { tp.Config.ReplicationFactor = 0 })}, code: api.CodeInvalidConfig},
		{name: "create-topic replica count is not rf", cmd: Command{Op: OpCreateTopic, Topic: rf2(func(tp *Topic) { tp.Config.ReplicationFactor = 3 })}, code: api.CodeInvalidRequest},
		{name: "create-topic unregistered replica", cmd: Command{Op: OpCreateTopic, Topic: rf2(func(tp *Topic) { tp.Partitions[0].Replicas[1] = "n9" })}, code: api.CodeInvalidRequest},
		{name: "create-topic duplicate replica", cmd: Command{Op: OpCreateTopic, Topic: rf2(func(tp *Topic) { tp.Partitions[0].Replicas[1] = "n1" })}, code: api.CodeInvalidRequest},
		{name: "create-topic leader not a replica", cmd: Command{Op: OpCreateTopic, Topic: rf2(func(tp *Topic) { tp.Partitions[0].Leader = "n3" })}, code: api.CodeInvalidRequest},
		{name: "create-topic isr not replicas", cmd: Command{Op: OpCreateTopic, Topic: rf2(func(tp *Topic) { tp.Partitions[0].ISR = []string{"n3"} })}, code: api.CodeInvalidRequest},
		{name: "create-topic without topic", cmd: Command{Op: OpCreateTopic}, code: api.CodeInvalidRequest},
	})
}

func TestApplyTopicChanges(t *testing.T) {
	cfg := engine.TopicConfig{RetentionMs: 5, ReplicationFactor: 2}
	cfgRF3 := engine.TopicConfig{ReplicationFactor: 3}
	cfgNoRF := engine.TopicConfig{RetentionMs: 7}
	part := func(r ...string) Partition { return Partition{Replicas: r, Leader: r[0], ISR: r} }
	runApply(t, []applyCase{
		{name: "delete-topic", cmd: Command{Op: OpDeleteTopic, Name: "orders", ID: tid(1)},
			check: func(t *testing.T, s *State, _ Result) {
				if _, ok := s.Topics["orders"]; ok || !slices.Equal(s.DeletedIDs, []api.TopicID{tid(1)}) {
					t.Fatalf("topics %v, deleted %v", s.Topics, s.DeletedIDs)
				}
			}},
		{name: "delete-topic unknown name", cmd: Command{Op: OpDeleteTopic, Name: "nope", ID: tid(1)}, code: api.CodeUnknownTopic},
		{name: "delete-topic other id", cmd: Command{Op: OpDeleteTopic, Name: "orders", ID: tid(2)}, code: api.CodeUnknownTopicID},
		{name: "delete-topic without id", cmd: Command{Op: OpDeleteTopic, Name: "orders"}, code: api.CodeInvalidRequest},
		{name: "alter-topic", cmd: Command{Op: OpAlterTopic, Name: "orders", ID: tid(1), Config: &cfg},
			check: func(t *testing.T, s *State, r Result) {
				if s.Topics["orders"].Config != cfg || r.Topic.Config != cfg {
					t.Fatalf("config %+v", s.Topics["orders"].Config)
				}
			}},
		{name: "alter-topic rf 0 keeps it", cmd: Command{Op: OpAlterTopic, Name: "orders", ID: tid(1), Config: &cfgNoRF},
			check: func(t *testing.T, s *State, _ Result) {
				if c := s.Topics["orders"].Config; c.ReplicationFactor != 2 || c.RetentionMs != 7 {
					t.Fatalf("config %+v", c)
				}
			}},
		{name: "alter-topic rf change", cmd: Command{Op: OpAlterTopic, Name: "orders", ID: tid(1), Config: &cfgRF3}, code: api.CodeInvalidConfig},
		{name: "alter-topic without config", cmd: Command{Op: OpAlterTopic, Name: "orders", ID: tid(1)}, code: api.CodeInvalidRequest},
		{name: "alter-topic other id", cmd: Command{Op: OpAlterTopic, Name: "orders", ID: tid(3), Config: &cfg}, code: api.CodeUnknownTopicID},
		{name: "create-partitions", cmd: Command{Op: OpCreatePartitions, Name: "orders", ID: tid(1), NewPartitions: []Partition{part("n3", "n2")}},
			check: func(t *testing.T, s *State, r Result) {
				if ps := s.Topics["orders"].Partitions; len(ps) != 4 || ps[3].Leader != "n3" || len(r.Topic.Partitions) != 4 {
					t.Fatalf("partitions %+v", ps)
				}
			}},
		{name: "create-partitions wrong rf", cmd: Command{Op: OpCreatePartitions, Name: "orders", ID: tid(1), NewPartitions: []Partition{part("n3")}}, code: api.CodeInvalidRequest},
		{name: "create-partitions none", cmd: Command{Op: OpCreatePartitions, Name: "orders", ID: tid(1)}, code: api.CodeInvalidRequest},
		{name: "create-partitions above max", cmd: Command{Op: OpCreatePartitions, Name: "orders", ID: tid(1), NewPartitions: make([]Partition, engine.MaxPartitions)}, code: api.CodeInvalidConfig},
		{name: "create-partitions unknown", cmd: Command{Op: OpCreatePartitions, Name: "nope", ID: tid(1), NewPartitions: []Partition{part("n3", "n2")}}, code: api.CodeUnknownTopic},
		{name: "mark-data", cmd: Command{Op: OpMarkData, Name: "orders", ID: tid(1), Partition: 2, NodeID: "n3"},
			check: func(t *testing.T, s *State, _ Result) {
				if ps := s.Topics["orders"].Partitions; !ps[2].HasData || ps[1].HasData {
					t.Fatalf("partitions %+v", ps)
				}
			}},
		{name: "mark-data by a node that does not lead", cmd: Command{Op: OpMarkData, Name: "orders", ID: tid(1), Partition: 2, NodeID: "n1"}, code: api.CodeNotLeader,
			check: func(t *testing.T, _ *State, r Result) {
				if r.Err.LeaderID != "n3" || r.Err.LeaderAddr != "n3:6064" {
					t.Fatalf("hint %q %q", r.Err.LeaderID, r.Err.LeaderAddr)
				}
			}},
		{name: "mark-data partition out of range", cmd: Command{Op: OpMarkData, Name: "orders", ID: tid(1), Partition: 3}, code: api.CodeInvalidRequest},
		{name: "mark-data other id", cmd: Command{Op: OpMarkData, Name: "orders", ID: tid(4)}, code: api.CodeUnknownTopicID},
		{name: "unknown op", cmd: Command{Op: "explode"}, code: api.CodeInvalidRequest},
	})
}

func TestApplySetLeaders(t *testing.T) {
	ch := func(p int, leader string, epoch uint32) LeaderChange {
		return LeaderChange{Topic: "orders", ID: tid(1), Partition: p, Leader: leader, Epoch: epoch}
	}
	tests := []struct {
		name    string
		hasData bool
		isr     []string // of partition 0 before, when set
		unclean bool
		changes []LeaderChange
		code    api.Code
		moved   int
		leaders []string // of partitions 0..2 after
		epochs  []uint32
		isr0    []string // of partition 0 after, when set
	}{
		{name: "move to a replica", changes: []LeaderChange{ch(0, "n2", 0)}, moved: 1, leaders: []string{"n2", "n2", "n3"}, epochs: []uint32{1, 0, 0}},
		{name: "stale epoch skipped", changes: []LeaderChange{ch(0, "n2", 5)}, leaders: []string{"n1", "n2", "n3"}, epochs: []uint32{0, 0, 0}},
		{name: "not a replica skipped", changes: []LeaderChange{ch(0, "n3", 0)}, leaders: []string{"n1", "n2", "n3"}, epochs: []uint32{0, 0, 0}},
		{name: "same leader skipped", changes: []LeaderChange{ch(0, "n1", 0)}, leaders: []string{"n1", "n2", "n3"}, epochs: []uint32{0, 0, 0}},
		{name: "no leader", changes: []LeaderChange{ch(1, "", 0)}, moved: 1, leaders: []string{"n1", "", "n3"}, epochs: []uint32{0, 1, 0}},
		{name: "second change of one partition is stale", changes: []LeaderChange{ch(0, "n2", 0), ch(0, "n1", 0)}, moved: 1, leaders: []string{"n2", "n2", "n3"}, epochs: []uint32{1, 0, 0}},
		{name: "partition with data to an in-sync replica", hasData: true, changes: []LeaderChange{ch(0, "n2", 0)}, moved: 1, leaders: []string{"n2", "n2", "n3"}, epochs: []uint32{1, 0, 0},
			isr0: []string{"n2"}},
		{name: "partition with data to a replica outside the ISR skipped", hasData: true, isr: []string{"n1"}, changes: []LeaderChange{ch(0, "n2", 0)}, leaders: []string{"n1", "n2", "n3"}, epochs: []uint32{0, 0, 0},
			isr0: []string{"n1"}},
		{name: "unclean election", hasData: true, isr: []string{"n1"}, unclean: true, changes: []LeaderChange{ch(0, "n2", 0)}, moved: 1, leaders: []string{"n2", "n2", "n3"}, epochs: []uint32{1, 0, 0},
			isr0: []string{"n2"}},
		{name: "without data the new leader joins the ISR", isr: []string{"n1"}, changes: []LeaderChange{ch(0, "n2", 0)}, moved: 1, leaders: []string{"n2", "n2", "n3"}, epochs: []uint32{1, 0, 0},
			isr0: []string{"n2"}},
		{name: "no leader keeps the last in-sync replica", isr: []string{"n1"}, changes: []LeaderChange{ch(0, "", 0)}, moved: 1, leaders: []string{"", "n2", "n3"}, epochs: []uint32{1, 0, 0},
			isr0: []string{"n1"}},
		{name: "unknown topic refuses all", changes: []LeaderChange{ch(0, "n2", 0), {Topic: "nope", ID: tid(1)}}, code: api.CodeUnknownTopic, leaders: []string{"n1", "n2", "n3"}, epochs: []uint32{0, 0, 0}},
		{name: "other id refuses all", changes: []LeaderChange{ch(0, "n2", 0), {Topic: "orders", ID: tid(2)}}, code: api.CodeUnknownTopicID, leaders: []string{"n1", "n2", "n3"}, epochs: []uint32{0, 0, 0}},
		{name: "partition out of range", changes: []LeaderChange{ch(3, "n2", 0)}, code: api.CodeInvalidRequest, leaders: []string{"n1", "n2", "n3"}, epochs: []uint32{0, 0, 0}},
		{name: "negative partition", changes: []LeaderChange{ch(-1, "n2", 0)}, code: api.CodeInvalidRequest, leaders: []string{"n1", "n2", "n3"}, epochs: []uint32{0, 0, 0}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := base(t)
			p0 := &s.Topics["orders"].Partitions[0]
			p0.HasData = tc.hasData
			if tc.isr != nil {
				p0.ISR = tc.isr
			}
			s.Topics["orders"].Config.UncleanLeaderElection = tc.unclean
			r := s.Apply(Command{Op: OpSetLeaders, Leaders: tc.changes})
			wantCode(t, errOf(r), tc.code)
			if r.Moved != tc.moved {
				t.Errorf("moved %d, want %d", r.Moved, tc.moved)
			}
			for i, p := range s.Topics["orders"].Partitions {
				if p.Leader != tc.leaders[i] || p.LeaderEpoch != tc.epochs[i] {
					t.Errorf("partition %d: leader %q epoch %d, want %q %d", i, p.Leader, p.LeaderEpoch, tc.leaders[i], tc.epochs[i])
				}
				if p.Leader != "" && !slices.Contains(p.ISR, p.Leader) {
					t.Errorf("partition %d: leader %q not in isr %v", i, p.Leader, p.ISR)
				}
			}
			if isr := s.Topics["orders"].Partitions[0].ISR; tc.isr0 != nil && !slices.Equal(isr, tc.isr0) {
				t.Errorf("partition 0: isr %v, want %v", isr, tc.isr0)
			}
		})
	}
}

func TestApplyRemoveNode(t *testing.T) {
	type part struct {
		leader   string
		epoch    uint32
		replicas []string
	}
	ch := func(p int, leader string, epoch uint32) LeaderChange {
		return LeaderChange{Topic: "orders", ID: tid(1), Partition: p, Leader: leader, Epoch: epoch}
	}
	tests := []struct {
		name    string
		node    string
		hasData int      // partition that holds data, -1 none
		isr0    []string // the ISR of partition 0 before, when set
		unclean bool
		changes []LeaderChange
		code    api.Code
		moved   int
		want    []part
	}{
		{name: "to a replica", node: "n1", hasData: -1, changes: []LeaderChange{ch(0, "n2", 0)}, moved: 1,
			want: []part{{"n2", 1, []string{"n2"}}, {"n2", 0, []string{"n2", "n3"}}, {"n3", 0, []string{"n3"}}}},
		{name: "to a node that takes its place", node: "n1", hasData: -1, changes: []LeaderChange{ch(0, "n3", 0)}, moved: 1,
			want: []part{{"n3", 1, []string{"n3", "n2"}}, {"n2", 0, []string{"n2", "n3"}}, {"n3", 0, []string{"n3"}}}},
		{name: "without a change: no leader", node: "n1", hasData: -1, moved: 1,
			want: []part{{"", 1, []string{"n2"}}, {"n2", 0, []string{"n2", "n3"}}, {"n3", 0, []string{"n3"}}}},
		{name: "stale change: no leader", node: "n1", hasData: -1, changes: []LeaderChange{ch(0, "n2", 4)}, moved: 1,
			want: []part{{"", 1, []string{"n2"}}, {"n2", 0, []string{"n2", "n3"}}, {"n3", 0, []string{"n3"}}}},
		{name: "follower of a partition with data", node: "n1", hasData: 2, changes: []LeaderChange{ch(0, "n2", 0)}, moved: 1,
			want: []part{{"n2", 1, []string{"n2"}}, {"n2", 0, []string{"n2", "n3"}}, {"n3", 0, []string{"n3"}}}},
		{name: "leader of a partition with data to an in-sync replica", node: "n1", hasData: 0, changes: []LeaderChange{ch(0, "n2", 0)}, moved: 1,
			want: []part{{"n2", 1, []string{"n2"}}, {"n2", 0, []string{"n2", "n3"}}, {"n3", 0, []string{"n3"}}}},
		{name: "leader of a partition with data without a change", node: "n1", hasData: 0, code: api.CodeInvalidRequest,
			want: []part{{"n1", 0, []string{"n1", "n2"}}, {"n2", 0, []string{"n2", "n3"}}, {"n3", 0, []string{"n3", "n1"}}}},
		{name: "leader of a partition with data to a stale change", node: "n1", hasData: 0, changes: []LeaderChange{ch(0, "n2", 3)}, code: api.CodeInvalidRequest,
			want: []part{{"n1", 0, []string{"n1", "n2"}}, {"n2", 0, []string{"n2", "n3"}}, {"n3", 0, []string{"n3", "n1"}}}},
		{name: "leader of a partition with data to a node that is not a replica", node: "n1", hasData: 0, changes: []LeaderChange{ch(0, "n3", 0)}, code: api.CodeInvalidRequest,
			want: []part{{"n1", 0, []string{"n1", "n2"}}, {"n2", 0, []string{"n2", "n3"}}, {"n3", 0, []string{"n3", "n1"}}}},
		{name: "leader of a partition with data to a replica outside the ISR", node: "n1", hasData: 0, isr0: []string{"n1"}, changes: []LeaderChange{ch(0, "n2", 0)}, code: api.CodeInvalidRequest,
			want: []part{{"n1", 0, []string{"n1", "n2"}}, {"n2", 0, []string{"n2", "n3"}}, {"n3", 0, []string{"n3", "n1"}}}},
		{name: "leader of a partition with data, unclean", node: "n1", hasData: 0, isr0: []string{"n1"}, unclean: true, changes: []LeaderChange{ch(0, "n2", 0)}, moved: 1,
			want: []part{{"n2", 1, []string{"n2"}}, {"n2", 0, []string{"n2", "n3"}}, {"n3", 0, []string{"n3"}}}},
		{name: "unknown node", node: "n9", hasData: -1, code: api.CodeInvalidRequest,
			want: []part{{"n1", 0, []string{"n1", "n2"}}, {"n2", 0, []string{"n2", "n3"}}, {"n3", 0, []string{"n3", "n1"}}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := base(t)
			if tc.hasData >= 0 {
				s.Topics["orders"].Partitions[tc.hasData].HasData = true
			}
			if tc.isr0 != nil {
				s.Topics["orders"].Partitions[0].ISR = tc.isr0
			}
			s.Topics["orders"].Config.UncleanLeaderElection = tc.unclean
			before := s.Hash()
			r := s.Apply(Command{Op: OpRemoveNode, NodeID: tc.node, Leaders: tc.changes})
			wantCode(t, errOf(r), tc.code)
			if tc.code != 0 && s.Hash() != before {
				t.Fatal("a refused remove-node changed the state")
			}
			if _, ok := s.Nodes[tc.node]; tc.code == 0 && ok {
				t.Errorf("node %s still registered", tc.node)
			}
			if r.Moved != tc.moved {
				t.Errorf("moved %d, want %d", r.Moved, tc.moved)
			}
			for i, p := range s.Topics["orders"].Partitions {
				w := tc.want[i]
				if p.Leader != w.leader || p.LeaderEpoch != w.epoch || !slices.Equal(p.Replicas, w.replicas) {
					t.Errorf("partition %d: %q %d %v, want %q %d %v", i, p.Leader, p.LeaderEpoch, p.Replicas, w.leader, w.epoch, w.replicas)
				}
				for _, r := range p.ISR {
					if !slices.Contains(p.Replicas, r) {
						t.Errorf("partition %d: isr %v not within replicas %v", i, p.ISR, p.Replicas)
					}
				}
			}
		})
	}
}

func TestApplyImport(t *testing.T) {
	imp := func(names ...string) Command {
		c := Command{Op: OpImport}
		for i, n := range names {
			tp := newTopic(n, byte(20+i))
			tp.Config.ReplicationFactor = 0 // read as the replica count
			tp.Partitions[0].HasData = true
			c.Topics = append(c.Topics, tp)
		}
		return c
	}
	s := withNodes(t, "n1")
	addTopic(t, s, "live", 1, 1, 1)
	for _, c := range []Command{imp("live"), imp("a", "a"), imp("a", "__x"), {Op: OpImport, Topics: []*Topic{nil}}} {
		before := s.Hash()
		if r := s.Apply(c); r.Err == nil || s.Hash() != before || s.Imported {
			t.Fatalf("import %v: err %v, state changed %v", c.Topics, r.Err, s.Hash() != before)
		}
	}
	r := mustApply(t, s, imp("a", "b"))
	if !s.Imported || len(s.Topics) != 3 || s.Topics["a"].Config.ReplicationFactor != 1 || !s.Topics["b"].Partitions[0].HasData {
		t.Fatalf("after import: %+v", s)
	}
	if r.Topic != nil {
		t.Fatalf("import of two topics returned topic %v", r.Topic)
	}
	wantCode(t, errOf(s.Apply(imp("c"))), api.CodeInvalidRequest)

	s = withNodes(t, "n1")
	if r := mustApply(t, s, imp("only")); r.Topic == nil || r.Topic.Name != "only" {
		t.Fatalf("import of one topic returned %v", r.Topic)
	}
	s = withNodes(t, "n1")
	if mustApply(t, s, Command{Op: OpImport}); !s.Imported {
		t.Fatal("an empty import did not set Imported")
	}
}

func TestDeletedIDsBounded(t *testing.T) {
	s := withNodes(t, "n1")
	const n = MaxDeletedIDs + 5
	idOf := func(i int) api.TopicID {
		var id api.TopicID
		id[0], id[1], id[2] = 1, byte(i>>8), byte(i)
		return id
	}
	for i := range n {
		tp := newTopic("t", 0)
		tp.ID = idOf(i)
		mustApply(t, s, Command{Op: OpCreateTopic, Topic: tp})
		mustApply(t, s, Command{Op: OpDeleteTopic, Name: "t", ID: tp.ID})
	}
	if len(s.DeletedIDs) != MaxDeletedIDs || s.DeletedIDs[0] != idOf(5) || s.DeletedIDs[MaxDeletedIDs-1] != idOf(n-1) {
		t.Fatalf("deleted ids: %d, first %s", len(s.DeletedIDs), s.DeletedIDs[0])
	}
}

func TestCloneIsDeep(t *testing.T) {
	s := base(t)
	before := s.Hash()
	c := s.Clone()
	c.Topics["orders"].Partitions[0].Replicas[0] = "x"
	c.Topics["orders"].Partitions[1].ISR[0] = "x"
	c.Topics["orders"].Config.RetentionMs = 1
	c.Nodes["n1"] = Node{ID: "n1", DataAddr: "x"}
	c.DeletedIDs = append(c.DeletedIDs, tid(3))
	if s.Hash() != before {
		t.Fatal("changing a clone changed the original")
	}
	var nilState *State
	if nilState.Clone().Hash() != NewState().Hash() {
		t.Fatal("a nil state does not clone to an empty one")
	}
}
