package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/seedqueue/sq/api/sqv1"
)

func newClusterDrainCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "drain ID",
		Short: "Move the leadership of a node's partitions away and keep it from leading",
		Long: "Drain the node ID without stopping it (as a stopping node does on SIGTERM):\n" +
			"the controller moves the leadership of every partition it leads to an alive\n" +
			"in-sync follower, with a new leader epoch (clients follow NOT_LEADER to the new\n" +
			"leader), and no partition is given to it again (new topics, failovers) while\n" +
			"another replica can lead, until `sq cluster undrain ID`. A partition with no\n" +
			"other alive in-sync replica stays and is listed; the controller moves it as\n" +
			"soon as a follower has caught up. The node keeps replicating. Any node can be\n" +
			"asked (--control); the drain survives restarts of the node.",
		Example: "  sq cluster drain node-2\n  sq --control 10.0.0.1:6060 cluster drain node-2",
		Args:    oneNodeID,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.controlConn(cmd)
			if err != nil {
				return err
			}
			defer c.Close()
			id := args[0]
			r, err := call(cmd.Context(), c, "Cluster.DrainNode", c.cluster.DrainNode, &sqv1.DrainNodeRequest{NodeId: id})
			if err != nil {
				return fmt.Errorf("cannot drain node %s: %w", id, err)
			}
			fmt.Fprintf(g.stdout, "drained node %s; leadership of %d partition%s moved to in-sync followers\n",
				id, r.MovedPartitions, plural(int(r.MovedPartitions)))
			if rest := r.GetRemainingPartitions(); len(rest) > 0 {
				fmt.Fprintf(g.stdout, "still led by %s (no other alive, undrained in-sync replica yet): %s\n", id, strings.Join(rest, ", "))
			}
			return nil
		},
	}
}

func newClusterUndrainCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "undrain ID",
		Short: "End a node's drain: it may lead partitions again",
		Long: "End the drain of node ID (sq cluster drain): new topics and failovers may make\n" +
			"it a leader again. Leadership that moved away does not move back by itself.",
		Example: "  sq cluster undrain node-2",
		Args:    oneNodeID,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.controlConn(cmd)
			if err != nil {
				return err
			}
			defer c.Close()
			id := args[0]
			if _, err := call(cmd.Context(), c, "Cluster.UndrainNode", c.cluster.UndrainNode, &sqv1.UndrainNodeRequest{NodeId: id}); err != nil {
				return fmt.Errorf("cannot undrain node %s: %w", id, err)
			}
			fmt.Fprintf(g.stdout, "node %s is no longer drained\n", id)
			return nil
		},
	}
}
