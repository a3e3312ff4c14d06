package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/seedqueue/sq/gossip/meta"
)

// DefaultControlledShutdownTimeout is --controlled-shutdown-timeout: how
// long a clustered node stopping on SIGTERM or SIGINT may spend handing
// the partitions it leads over before it stops anyway.
const DefaultControlledShutdownTimeout = 30 * time.Second

// controlledShutdown hands the partitions this node leads over to
// in-sync followers before the node stops (Kafka's controlled shutdown;
// docs/cluster.md "Rolling restarts"): it drains the node through the
// metadata log (gossip.Node.Drain with shutdown: new leader epochs, and
// this node leaves the in-sync sets it follows and leads nothing more)
// and waits until each new leader serves its partition, within timeout
// (0: no controlled shutdown). What could not move or was not seen
// served by then is logged, and the stop goes on. A node with no one to
// hand over to (takeOverPossible) stops at once.
func (n *clusterNode) controlledShutdown(timeout time.Duration, log *slog.Logger) {
	if timeout <= 0 || !n.takeOverPossible() {
		return
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	log.Info("controlled shutdown: handing the partitions this node leads over to in-sync followers", "timeout", timeout)
	r, err := n.node.Drain(ctx, n.node.ID(), true)
	if err != nil {
		log.Warn("controlled shutdown: the leadership of this node's partitions could not be handed over; stopping anyway (clients fail over once the cluster sees this node gone)",
			"err", err, "led_partitions", meta.LedBy(n.node.State(), n.node.ID()))
		return
	}
	if len(r.Remaining) > 0 {
		log.Warn("controlled shutdown: partitions without another alive in-sync replica stay on this node and are unavailable until it returns",
			"partitions", r.Remaining)
	}
	if left := n.repl.WaitServing(ctx, r.Moved); len(left) > 0 {
		log.Warn("controlled shutdown: the new leaders of some partitions were not seen serving them in time; stopping anyway",
			"partitions", changeNames(left), "timeout", timeout)
		return
	}
	log.Info("controlled shutdown: leadership handed over", "moved_partitions", len(r.Moved), "took", time.Since(start).Round(time.Millisecond))
}

// takeOverPossible reports whether another node could take partitions
// over from this one: a registered node other than this one that gossip
// holds alive and that is not drained. A cluster of one, or the last node
// of a cluster that stops as a whole, has no one to hand over to.
func (n *clusterNode) takeOverPossible() bool {
	st := n.node.State()
	for id := range st.Nodes {
		if id != n.node.ID() && n.node.Alive(id) && !st.Drained(id) {
			return true
		}
	}
	return false
}

// changeNames names the partitions of changes as "topic-p leader".
func changeNames(changes []meta.LeaderChange) []string {
	out := make([]string, len(changes))
	for i, c := range changes {
		out[i] = fmt.Sprintf("%s-%d to %s", c.Topic, c.Partition, c.Leader)
	}
	return out
}
