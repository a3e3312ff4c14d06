package gossip

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/seedqueue/sq/gossip/meta"
)

// TestRestartReconcilesOnlyTheReplayedState restarts a node whose log
// creates topic t, deletes it and creates it again: while the node
// replays its log, the hook sees none of the intermediate states (t
// absent, or t with its first id), only the state the replay ends at,
// with prev nil; then the calls go on as usual.
func TestRestartReconcilesOnlyTheReplayedState(t *testing.T) {
	dir := t.TempDir()
	o := testOptions(t, "a", dir)
	a := mustStart(t, o)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	propose := func(n *clusterNode, c meta.Command) {
		t.Helper()
		if res, err := n.ProposeCommand(ctx, c); err != nil || res.Err != nil {
			t.Fatalf("%s: %v %v", c.Op, err, res.Err)
		}
	}
	propose(a, createCmd("t", 1))
	first := a.State().Topics["t"].ID
	propose(a, meta.Command{Op: meta.OpDeleteTopic, Name: "t", ID: first})
	propose(a, createCmd("t", 2))
	second := a.State().Topics["t"].ID
	propose(a, createCmd("u", 1))
	a.stop(t)

	type call struct {
		prevNil bool
		id      string
		parts   int
	}
	var mu sync.Mutex
	var calls []call
	o.OnApply = func(prev, next *meta.State) {
		c := call{prevNil: prev == nil}
		if tp := next.Topics["t"]; tp != nil {
			c.id, c.parts = tp.ID.String(), len(tp.Partitions)
		}
		mu.Lock()
		calls = append(calls, c)
		mu.Unlock()
	}
	b := mustStart(t, o)
	waitReady(t, b)
	propose(b, createCmd("v", 1))
	mu.Lock()
	defer mu.Unlock()
	if len(calls) < 2 {
		t.Fatalf("hook calls %+v: want the replay's end, then the new commands", calls)
	}
	if c := calls[0]; !c.prevNil || c.id != second.String() || c.parts != 2 {
		t.Fatalf("first call %+v: want prev nil and t with its second id %s (the first was %s)", c, second, first)
	}
	for i, c := range calls[1:] {
		if c.id != second.String() || c.prevNil {
			t.Fatalf("call %d after the replay %+v: want t at its second id, prev set", i+1, c)
		}
	}
}
