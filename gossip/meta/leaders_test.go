package meta

import (
	"reflect"
	"strings"
	"testing"

	"github.com/seedqueue/sq/api"
)

// lc is a leader change of topic "orders" (id tid(1)).
func lc(p int, leader string, epoch uint32) LeaderChange {
	return LeaderChange{Topic: "orders", ID: tid(1), Partition: p, Leader: leader, Epoch: epoch}
}

func TestLeadersAfterDeath(t *testing.T) {
	tests := []struct {
		name  string
		parts int // partitions of "orders"
		rf    int
		setup func(*State)
		alive []string
		want  []LeaderChange
		// leaderless after applying the changes
		leaderless int
	}{
		{name: "all alive", parts: 3, rf: 2, alive: []string{"n1", "n2", "n3"}},
		{name: "leader dies", parts: 3, rf: 2, alive: []string{"n2", "n3"},
			want: []LeaderChange{lc(0, "n2", 0)}},
		{name: "epoch carried", parts: 3, rf: 2, alive: []string{"n2", "n3"},
			setup: func(s *State) { s.Topics["orders"].Partitions[0].LeaderEpoch = 4 },
			want:  []LeaderChange{lc(0, "n2", 4)}},
		{name: "partition with data moves to an in-sync replica", parts: 3, rf: 2, alive: []string{"n2", "n3"},
			setup: func(s *State) { s.Topics["orders"].Partitions[0].HasData = true },
			want:  []LeaderChange{lc(0, "n2", 0)}},
		{name: "partition with data whose ISR is the dead leader keeps it", parts: 3, rf: 2, alive: []string{"n2", "n3"},
			setup: func(s *State) {
				p := &s.Topics["orders"].Partitions[0]
				p.HasData, p.ISR = true, []string{"n1"}
			}, leaderless: 1},
		{name: "partition with data, unclean election allowed", parts: 3, rf: 2, alive: []string{"n2", "n3"},
			setup: func(s *State) {
				p := &s.Topics["orders"].Partitions[0]
				p.HasData, p.ISR = true, []string{"n1"}
				s.Topics["orders"].Config.UncleanLeaderElection = true
			}, want: []LeaderChange{lc(0, "n2", 0)}},
		{name: "partition with data: the first in-sync replica in replica order, not the least loaded", parts: 3, rf: 3, alive: []string{"n2", "n3"},
			setup: func(s *State) {
				p := &s.Topics["orders"].Partitions[0] // replicas n1 n2 n3; n2 leads partition 1
				p.HasData, p.ISR = true, []string{"n1", "n2", "n3"}
				s.Topics["orders"].Partitions[2].Leader = "n2"
			}, want: []LeaderChange{lc(0, "n2", 0)}},
		{name: "no alive replica", parts: 3, rf: 2, alive: []string{"n3"},
			want: []LeaderChange{lc(1, "n3", 0)}, leaderless: 1},
		{name: "single replica", parts: 3, rf: 1, alive: []string{"n2", "n3"}, leaderless: 1},
		{name: "spread over the survivors by load", parts: 6, rf: 3, alive: []string{"n2", "n3"},
			want: []LeaderChange{lc(0, "n2", 0), lc(3, "n3", 0)}},
		{name: "partition without a leader", parts: 3, rf: 2, alive: []string{"n1", "n2", "n3"},
			setup: func(s *State) { s.Topics["orders"].Partitions[1].Leader = "" },
			want:  []LeaderChange{lc(1, "n2", 0)}},
		{name: "nobody alive", parts: 3, rf: 3, leaderless: 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := withNodes(t, "n1", "n2", "n3")
			addTopic(t, s, "orders", 1, tc.parts, tc.rf)
			if tc.setup != nil {
				tc.setup(s)
			}
			live := alive(tc.alive...)
			got := LeadersAfterDeath(s, live)
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("changes %+v, want %+v", got, tc.want)
			}
			r := mustApply(t, s, Command{Op: OpSetLeaders, Leaders: got})
			if r.Moved != len(got) {
				t.Fatalf("moved %d of %d changes", r.Moved, len(got))
			}
			if n := s.Leaderless(live); n != tc.leaderless {
				t.Fatalf("leaderless %d, want %d", n, tc.leaderless)
			}
			if again := LeadersAfterDeath(s, live); len(again) != 0 {
				t.Fatalf("a second decision moves again: %+v", again)
			}
		})
	}
}

func TestLeadersForRemoval(t *testing.T) {
	tests := []struct {
		name  string
		rf    int
		node  string
		data  int      // partition holding data, -1 none
		isr0  []string // the ISR of partition 0, when set
		alive []string
		code  api.Code
		want  []LeaderChange
		// partitions after applying remove-node with the changes
		leaders  []string
		replicas [][]string
	}{
		{name: "to a replica", rf: 2, node: "n1", data: -1, alive: []string{"n1", "n2", "n3"},
			want:    []LeaderChange{lc(0, "n2", 0)},
			leaders: []string{"n2", "n2", "n3"}, replicas: [][]string{{"n2"}, {"n2", "n3"}, {"n3"}}},
		{name: "dead node", rf: 2, node: "n1", data: -1, alive: []string{"n2", "n3"},
			want:    []LeaderChange{lc(0, "n2", 0)},
			leaders: []string{"n2", "n2", "n3"}, replicas: [][]string{{"n2"}, {"n2", "n3"}, {"n3"}}},
		{name: "single replica goes to the least-loaded node", rf: 1, node: "n2", data: -1, alive: []string{"n1", "n2", "n3"},
			want:    []LeaderChange{lc(1, "n1", 0)},
			leaders: []string{"n1", "n1", "n3"}, replicas: [][]string{{"n1"}, {"n1"}, {"n3"}}},
		{name: "no other node alive", rf: 1, node: "n2", data: -1, alive: []string{"n2"},
			want:    []LeaderChange{lc(1, "", 0)},
			leaders: []string{"n1", "", "n3"}, replicas: [][]string{{"n1"}, nil, {"n3"}}},
		{name: "follower of a partition with data", rf: 2, node: "n1", data: 2, alive: []string{"n1", "n2", "n3"},
			want:    []LeaderChange{lc(0, "n2", 0)},
			leaders: []string{"n2", "n2", "n3"}, replicas: [][]string{{"n2"}, {"n2", "n3"}, {"n3"}}},
		{name: "leader of a partition with data moves to an in-sync replica", rf: 2, node: "n1", data: 0, alive: []string{"n1", "n2", "n3"},
			want:    []LeaderChange{lc(0, "n2", 0)},
			leaders: []string{"n2", "n2", "n3"}, replicas: [][]string{{"n2"}, {"n2", "n3"}, {"n3"}}},
		{name: "leader of a partition with data and no other in-sync replica", rf: 2, node: "n1", data: 0, isr0: []string{"n1"}, alive: []string{"n1", "n2", "n3"}, code: api.CodeInvalidRequest},
		{name: "leader of a partition with data, its in-sync replica dead", rf: 2, node: "n1", data: 0, alive: []string{"n1", "n3"}, code: api.CodeInvalidRequest},
		{name: "leader of a single-replica partition with data", rf: 1, node: "n1", data: 0, alive: []string{"n1", "n2", "n3"}, code: api.CodeInvalidRequest},
		{name: "unknown node", rf: 2, node: "n9", data: -1, alive: []string{"n1"}, code: api.CodeInvalidRequest},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := withNodes(t, "n1", "n2", "n3")
			addTopic(t, s, "orders", 1, 3, tc.rf)
			if tc.data >= 0 {
				s.Topics["orders"].Partitions[tc.data].HasData = true
			}
			if tc.isr0 != nil {
				s.Topics["orders"].Partitions[0].ISR = tc.isr0
			}
			got, err := LeadersForRemoval(s, tc.node, alive(tc.alive...))
			wantCode(t, err, tc.code)
			if tc.code != 0 {
				if tc.data >= 0 && !strings.Contains(err.Error(), "orders-0") {
					t.Fatalf("error %v does not name the partition", err)
				}
				return
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("changes %+v, want %+v", got, tc.want)
			}
			mustApply(t, s, Command{Op: OpRemoveNode, NodeID: tc.node, Leaders: got})
			for i, p := range s.Topics["orders"].Partitions {
				if p.Leader != tc.leaders[i] || !reflect.DeepEqual(p.Replicas, tc.replicas[i]) {
					t.Errorf("partition %d: leader %q replicas %v, want %q %v", i, p.Leader, p.Replicas, tc.leaders[i], tc.replicas[i])
				}
			}
		})
	}
}

func TestLeaderCountsAndLeaderless(t *testing.T) {
	s := withNodes(t, "n1", "n2", "n3", "n4")
	addTopic(t, s, "a", 1, 6, 2)
	addTopic(t, s, "b", 2, 1, 1)
	s.Topics["a"].Partitions[5].Leader = "" // was n2; "b" went to n3
	if got, want := s.LeaderCounts(), map[string]int{"n1": 2, "n2": 1, "n3": 2, "n4": 1}; !reflect.DeepEqual(got, want) {
		t.Fatalf("leader counts %v, want %v", got, want)
	}
	tests := []struct {
		alive []string
		want  int
	}{
		{[]string{"n1", "n2", "n3", "n4"}, 1},
		{[]string{"n2", "n3", "n4"}, 3},
		{nil, 7},
	}
	for _, tc := range tests {
		if got := s.Leaderless(alive(tc.alive...)); got != tc.want {
			t.Errorf("alive %v: leaderless %d, want %d", tc.alive, got, tc.want)
		}
	}
}
