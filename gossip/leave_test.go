package gossip

import (
	"context"
	"testing"
	"time"
)

// A node that stops gracefully is shown as left by the others, a node
// that crashes as dead.
func TestGracefulLeaveShowsLeft(t *testing.T) {
	nodes := startCluster(t, 3)
	a, leaver, crasher := nodes[0], nodes[1], nodes[2]
	leaver.stop(t)
	crasher.crash(t)
	state := func(id string) string {
		r, err := a.Members(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range r.Members {
			if m.NodeId == id {
				return m.State
			}
		}
		return "absent"
	}
	eventually(t, 20*time.Second, "the stopped node left and the crashed one dead", func() bool {
		return state(leaver.ID()) == StateLeft && state(crasher.ID()) == StateDead
	})
}
