package gossip

import (
	"testing"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/engine"
	"github.com/seedqueue/sq/gossip/meta"
)

func TestOnlyAddsShuttingDown(t *testing.T) {
	id := api.TopicID{1}
	s := meta.NewState()
	for _, n := range []string{"n1", "n2", "n3"} {
		s.Nodes[n] = meta.Node{ID: n}
	}
	s.Topics["t"] = &meta.Topic{Name: "t", ID: id, Partitions: []meta.Partition{{Replicas: []string{"n1", "n2", "n3"}, Leader: "n1", ISR: []string{"n1", "n2"}}}}
	s.DrainedNodes = map[string]meta.Drain{"n3": {Shutdown: true}}
	tests := []struct {
		name string
		isr  []string
		want bool
	}{
		{"adds only the node shutting down", []string{"n1", "n2", "n3"}, true},
		{"also removes a member", []string{"n1", "n3"}, false},
		{"removes only", []string{"n1"}, false},
		{"no change", []string{"n1", "n2"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ch := engine.ISRProposal{Topic: "t", ID: id, Partition: 0, ISR: tt.isr}
			if got := onlyAddsShuttingDown(s, ch); got != tt.want {
				t.Fatalf("onlyAddsShuttingDown(%v) = %v, want %v", tt.isr, got, tt.want)
			}
		})
	}
	// An operator drain does not keep a node out of the ISR.
	s.DrainedNodes = map[string]meta.Drain{"n3": {Operator: true}}
	if onlyAddsShuttingDown(s, engine.ISRProposal{Topic: "t", ID: id, ISR: []string{"n1", "n2", "n3"}}) {
		t.Fatal("a node drained by an operator is kept out of the ISR")
	}
}
