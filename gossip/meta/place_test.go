package meta

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/engine"
)

func TestPlace(t *testing.T) {
	three := []string{"n1", "n2", "n3"}
	tests := []struct {
		name       string
		nodes      []string
		partitions int
		rf         int
		topic      map[string]int
		load       map[string]int
		code       api.Code
		want       [][]string
	}{
		{name: "3x6 rf1", nodes: three, partitions: 6, rf: 1,
			want: [][]string{{"n1"}, {"n2"}, {"n3"}, {"n1"}, {"n2"}, {"n3"}}},
		{name: "3x6 rf2", nodes: three, partitions: 6, rf: 2,
			want: [][]string{{"n1", "n2"}, {"n2", "n3"}, {"n3", "n1"}, {"n1", "n2"}, {"n2", "n3"}, {"n3", "n1"}}},
		{name: "3x6 rf3", nodes: three, partitions: 6, rf: 3,
			want: [][]string{{"n1", "n2", "n3"}, {"n2", "n3", "n1"}, {"n3", "n1", "n2"}, {"n1", "n2", "n3"}, {"n2", "n3", "n1"}, {"n3", "n1", "n2"}}},
		{name: "unsorted nodes with a duplicate", nodes: []string{"n3", "n1", "n3", "n2"}, partitions: 3, rf: 2,
			want: [][]string{{"n1", "n2"}, {"n2", "n3"}, {"n3", "n1"}}},
		{name: "a topic's leaders cover every node whatever the cluster's load", nodes: three, partitions: 3, rf: 1, load: map[string]int{"n1": 2, "n3": 1},
			want: [][]string{{"n2"}, {"n3"}, {"n1"}}},
		{name: "the cluster's load breaks ties within the topic", nodes: three, partitions: 6, rf: 1, load: map[string]int{"n1": 9, "n3": 1},
			want: [][]string{{"n2"}, {"n3"}, {"n1"}, {"n2"}, {"n3"}, {"n1"}}},
		{name: "the topic's load comes before the cluster's", nodes: three, partitions: 2, rf: 1, topic: map[string]int{"n1": 2}, load: map[string]int{"n2": 5},
			want: [][]string{{"n3"}, {"n2"}}},
		{name: "load of unknown nodes ignored", nodes: three, partitions: 1, rf: 1, load: map[string]int{"n9": -5},
			want: [][]string{{"n1"}}},
		{name: "one node", nodes: []string{"a"}, partitions: 2, rf: 1, want: [][]string{{"a"}, {"a"}}},
		{name: "rf above nodes", nodes: three, partitions: 6, rf: 4, code: api.CodeInvalidConfig},
		{name: "rf 0", nodes: three, partitions: 6, rf: 0, code: api.CodeInvalidConfig},
		{name: "no nodes", partitions: 1, rf: 1, code: api.CodeInvalidConfig},
		{name: "no partitions", nodes: three, partitions: 0, rf: 1, code: api.CodeInvalidConfig},
		{name: "too many partitions", nodes: three, partitions: engine.MaxPartitions + 1, rf: 1, code: api.CodeInvalidConfig},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Place(tc.nodes, tc.partitions, tc.rf, tc.topic, tc.load)
			wantCode(t, err, tc.code)
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("placement %v, want %v", got, tc.want)
			}
		})
	}
}

// TestPlaceBalance checks, for 3 nodes and 6 partitions at every
// replication factor, that each node leads 2 partitions and holds 2*rf
// replicas, with no node twice in one replica set.
func TestPlaceBalance(t *testing.T) {
	for rf := 1; rf <= 3; rf++ {
		t.Run(fmt.Sprintf("rf%d", rf), func(t *testing.T) {
			got, err := Place([]string{"c", "a", "b"}, 6, rf, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			leads, holds := map[string]int{}, map[string]int{}
			for _, rs := range got {
				leads[rs[0]]++
				seen := map[string]bool{}
				for _, r := range rs {
					if seen[r] {
						t.Fatalf("replica set %v repeats %s", rs, r)
					}
					seen[r] = true
					holds[r]++
				}
			}
			for _, n := range []string{"a", "b", "c"} {
				if leads[n] != 2 || holds[n] != 2*rf {
					t.Errorf("node %s leads %d and holds %d, want 2 and %d", n, leads[n], holds[n], 2*rf)
				}
			}
		})
	}
}

// TestPrepareCreateBalancesAcrossTopics creates single-partition topics
// one after another: the leaders rotate because the state's leader counts
// are taken into account.
func TestPrepareCreateBalancesAcrossTopics(t *testing.T) {
	s := withNodes(t, "n1", "n2", "n3")
	var leaders []string
	for i := range 6 {
		tp := addTopic(t, s, fmt.Sprintf("t%d", i), byte(i+1), 1, 1)
		leaders = append(leaders, tp.Partitions[0].Leader)
	}
	if want := []string{"n1", "n2", "n3", "n1", "n2", "n3"}; !reflect.DeepEqual(leaders, want) {
		t.Fatalf("leaders %v, want %v", leaders, want)
	}
}

// TestPrepareCreateSpreadsEachTopic builds a cluster whose first node
// leads every partition (the others joined later): a new topic's leaders
// still go to every node, and so do those of partitions added to it,
// rather than piling onto the nodes that lead the fewest overall.
func TestPrepareCreateSpreadsEachTopic(t *testing.T) {
	s := withNodes(t, "n1")
	for i := range 6 {
		addTopic(t, s, fmt.Sprintf("old%d", i), byte(i+1), 1, 1)
	}
	for _, id := range []string{"n2", "n3"} {
		mustApply(t, s, Command{Op: OpRegisterNode, Node: &Node{ID: id, DataAddr: id + ":6064", GRPCAddr: id + ":6060"}})
	}
	leads := func(tp *Topic) map[string]int {
		m := map[string]int{}
		for _, p := range tp.Partitions {
			m[p.Leader]++
		}
		return m
	}
	tp := addTopic(t, s, "new", 10, 3, 1)
	if got, want := leads(tp), map[string]int{"n1": 1, "n2": 1, "n3": 1}; !reflect.DeepEqual(got, want) {
		t.Fatalf("leaders of a new topic per node %v, want %v", got, want)
	}
	c, err := PrepareCreatePartitions(s, "new", 6, []string{"n1", "n2", "n3"})
	if err != nil {
		t.Fatal(err)
	}
	tp = mustApply(t, s, c).Topic
	if got, want := leads(tp), map[string]int{"n1": 2, "n2": 2, "n3": 2}; !reflect.DeepEqual(got, want) {
		t.Fatalf("leaders per node after growing to 6: %v, want %v", got, want)
	}
}

func TestPrepareCreate(t *testing.T) {
	tests := []struct {
		name   string
		topic  string
		id     api.TopicID
		parts  int
		rf     int32
		nodes  []string
		code   api.Code
		text   string // in the error's text, when code is set
		wantRF int32
	}{
		{name: "default rf is min(3, nodes): 2", topic: "new", id: tid(5), parts: 2, nodes: []string{"n1", "n2"}, wantRF: 2},
		{name: "default rf is min(3, nodes): 3", topic: "new", id: tid(5), parts: 2, nodes: []string{"n1", "n2", "n3", "n4", "n5"}, wantRF: 3},
		{name: "explicit rf", topic: "new", id: tid(5), parts: 2, rf: 1, nodes: []string{"n1", "n2"}, wantRF: 1},
		{name: "unregistered nodes ignored", topic: "new", id: tid(5), parts: 2, rf: 3, nodes: []string{"n1", "n2", "n9"}, code: api.CodeInvalidConfig},
		{name: "rf above nodes", topic: "new", id: tid(5), parts: 2, rf: 6, nodes: []string{"n1", "n2", "n3", "n4", "n5"}, code: api.CodeInvalidConfig,
			text: `INVALID_CONFIG: topic "new": cannot place its 2 partitions: replication.factor 6 is above the 5 live nodes`},
		{name: "existing name", topic: "orders", id: tid(5), parts: 2, nodes: []string{"n1"}, code: api.CodeTopicExists},
		{name: "bad name", topic: "", id: tid(5), parts: 2, nodes: []string{"n1"}, code: api.CodeInvalidTopicName},
		{name: "zero id", topic: "new", parts: 2, nodes: []string{"n1"}, code: api.CodeInvalidRequest},
		{name: "used id", topic: "new", id: tid(1), parts: 2, nodes: []string{"n1"}, code: api.CodeInvalidRequest},
		{name: "no partitions", topic: "new", id: tid(5), nodes: []string{"n1"}, code: api.CodeInvalidConfig},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := withNodes(t, "n1", "n2", "n3", "n4", "n5")
			addTopic(t, s, "orders", 1, 1, 1)
			c, err := PrepareCreate(s, tc.topic, tc.id, tc.parts, engine.TopicConfig{RetentionMs: 3, ReplicationFactor: tc.rf}, tc.nodes, 1234)
			wantCode(t, err, tc.code)
			if tc.text != "" && err.Error() != tc.text {
				t.Fatalf("error %q, want %q", err, tc.text)
			}
			if tc.code != 0 {
				return
			}
			tp := mustApply(t, s, c).Topic
			if tp.Config.ReplicationFactor != tc.wantRF || tp.Config.RetentionMs != 3 || tp.CreatedMs != 1234 || tp.ID != tc.id || len(tp.Partitions) != tc.parts {
				t.Fatalf("topic %+v", tp)
			}
			for i, p := range tp.Partitions {
				if len(p.Replicas) != int(tc.wantRF) || p.Leader != p.Replicas[0] || p.LeaderEpoch != 0 || !reflect.DeepEqual(p.ISR, p.Replicas) || p.HasData {
					t.Fatalf("partition %d: %+v", i, p)
				}
			}
		})
	}
}

func TestPrepareCreatePartitions(t *testing.T) {
	all := []string{"n1", "n2", "n3"}
	tests := []struct {
		name  string
		topic string
		total int
		nodes []string
		code  api.Code
		text  string // the error's text, when code is set
		want  [][]string
	}{
		{name: "3 to 6", topic: "orders", total: 6, nodes: all,
			want: [][]string{{"n1", "n2"}, {"n2", "n3"}, {"n3", "n1"}}},
		{name: "to the least-loaded live nodes", topic: "orders", total: 4, nodes: []string{"n2", "n3"},
			want: [][]string{{"n2", "n3"}}},
		{name: "rf above live nodes", topic: "orders", total: 5, nodes: []string{"n1"}, code: api.CodeInvalidConfig,
			text: `INVALID_CONFIG: topic "orders": cannot place the 2 new partitions (3 to 4): replication.factor 2 is above the 1 live nodes`},
		{name: "not larger", topic: "orders", total: 3, nodes: all, code: api.CodeInvalidConfig},
		{name: "above max", topic: "orders", total: engine.MaxPartitions + 1, nodes: all, code: api.CodeInvalidConfig},
		{name: "unknown topic", topic: "nope", total: 4, nodes: all, code: api.CodeUnknownTopic},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := base(t)
			c, err := PrepareCreatePartitions(s, tc.topic, tc.total, tc.nodes)
			wantCode(t, err, tc.code)
			if tc.text != "" && err.Error() != tc.text {
				t.Fatalf("error %q, want %q", err, tc.text)
			}
			if tc.code != 0 {
				return
			}
			if c.ID != tid(1) || c.Name != "orders" {
				t.Fatalf("command %+v", c)
			}
			var got [][]string
			for _, p := range c.NewPartitions {
				got = append(got, p.Replicas)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("replicas %v, want %v", got, tc.want)
			}
			if n := len(mustApply(t, s, c).Topic.Partitions); n != tc.total {
				t.Fatalf("%d partitions after apply, want %d", n, tc.total)
			}
		})
	}
}
