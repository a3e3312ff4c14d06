package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/seedqueue/sq/api/sqv1"
	"github.com/seedqueue/sq/sdk"
)

func newClusterCommand(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cluster",
		Short: "Node and cluster information, members, node drain and removal (control plane)",
		Args:  noArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newClusterInfoCommand(g), newClusterMembersCommand(g), newClusterRemoveNodeCommand(g),
		newClusterDrainCommand(g), newClusterUndrainCommand(g))
	return cmd
}

func newClusterInfoCommand(g *globals) *cobra.Command {
	var format *adminFormat
	info := &cobra.Command{
		Use:   "info",
		Short: "Show the node's identity, version, storage, and the cluster's metadata state and members",
		Long: "Show what the node at --control reports about itself and its cluster: node and\n" +
			"cluster ids, version, uptime, I/O backend, data directory usage; the controller\n" +
			"(the Raft leader), this node's Raft state and term, the metadata log's applied\n" +
			"and commit indexes, the metadata hash (equal on nodes that applied the same\n" +
			"log), partitions whose leader is not alive, the orphaned topics (in this\n" +
			"node's data directory, unknown to the metadata), and the members.",
		Example: "  sq cluster info\n  sq --control 10.0.0.1:6060 cluster info -f json",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			asJSON, err := format.json()
			if err != nil {
				return err
			}
			c, err := g.controlConn(cmd)
			if err != nil {
				return err
			}
			defer c.Close()
			n, err := c.admin.NodeInfo(cmd.Context())
			if err != nil {
				return controlError(c.addr, err)
			}
			members, err := call(cmd.Context(), c, "Cluster.Members", c.cluster.Members, &sqv1.MembersRequest{})
			if err != nil {
				return err
			}
			ci, err := c.cluster.Info(cmd.Context(), &sqv1.ClusterInfoRequest{})
			if status.Code(err) == codes.Unimplemented {
				ci = nil // a server from before clustering: no metadata state
			} else if err != nil {
				return c.callError("Cluster.Info", err)
			}
			if asJSON {
				return printClusterInfoJSON(g.stdout, n, ci, members)
			}
			return printClusterInfo(g.stdout, n, ci, members)
		},
	}
	format = addAdminFormatFlag(info)
	return info
}

func printClusterInfo(out io.Writer, n sdk.NodeInfo, ci *sqv1.ClusterInfoResponse, members *sqv1.MembersResponse) error {
	w := tabwriter.NewWriter(out, 0, 8, 2, ' ', 0)
	fmt.Fprintf(w, "Node:\t%s\n", n.NodeID)
	fmt.Fprintf(w, "Cluster:\t%s\n", n.ClusterID)
	fmt.Fprintf(w, "Version:\t%s\n", n.Version)
	fmt.Fprintf(w, "Uptime:\t%s\n", n.Uptime.Round(time.Second))
	fmt.Fprintf(w, "I/O backend:\t%s\n", n.IOBackend)
	fmt.Fprintf(w, "Data dir:\t%s\n", n.DataDir)
	fmt.Fprintf(w, "Data bytes:\t%s in %d topic%s\n", formatBytes(n.DataBytes), n.Topics, plural(n.Topics))
	fmt.Fprintf(w, "Disk:\t%s free of %s\n", formatBytes(int64(n.DataDirFreeBytes)), formatBytes(int64(n.DataDirTotalBytes)))
	fmt.Fprintf(w, "Listeners:\tgrpc %s, capnp %s, http %s\n", orDash(n.GrpcAddr), orDash(n.CapnpAddr), orDash(n.HTTPAddr))
	if ci != nil {
		fmt.Fprintf(w, "Controller:\t%s\n", orDash(ci.ControllerId))
		fmt.Fprintf(w, "Raft:\t%s, term %d\n", orDash(ci.RaftState), ci.RaftTerm)
		fmt.Fprintf(w, "Metadata log:\tapplied %d, committed %d, last %d\n", ci.AppliedIndex, ci.CommitIndex, ci.LastLogIndex)
		fmt.Fprintf(w, "Metadata hash:\t%s\n", orDash(ci.MetadataHash))
		fmt.Fprintf(w, "Members:\t%d (%d voter%s)\n", ci.MemberCount, ci.VoterCount, plural(int(ci.VoterCount)))
		fmt.Fprintf(w, "Partitions:\t%d in %d topic%s, %d leaderless\n", ci.PartitionCount, ci.TopicCount, plural(int(ci.TopicCount)), ci.LeaderlessPartitions)
		fmt.Fprintf(w, "Ready:\t%s\n", yesNo(ci.Ready))
		if d := ci.GetDrainedNodes(); len(d) > 0 {
			fmt.Fprintf(w, "Drained nodes:\t%s (lead no partition another replica can lead; sq cluster undrain ID ends it)\n", strings.Join(d, ", "))
		}
		if o := ci.GetOrphanedTopics(); len(o) > 0 {
			fmt.Fprintf(w, "Orphaned topics:\t%s (in this node's data directory, unknown to the cluster metadata: kept, not served; see docs/cluster.md, \"Orphaned topics\")\n", strings.Join(o, ", "))
		}
	}
	if err := w.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(out)
	return printMembers(out, members)
}

func newClusterMembersCommand(g *globals) *cobra.Command {
	var format *adminFormat
	cmd := &cobra.Command{
		Use:   "members",
		Short: "List the cluster's nodes: state, Raft role and addresses",
		Long: "List the nodes of the cluster as the node at --control sees them: the\n" +
			"membership state from gossip (alive, suspect, dead, left; unknown for a node\n" +
			"of the metadata that gossip has not met), whether the node is a Raft voter,\n" +
			"which node is the controller (the Raft leader), and each node's gRPC, data\n" +
			"(Cap'n Proto), gossip and Raft addresses.",
		Example: "  sq cluster members\n  sq --control 10.0.0.2:6060 cluster members -f json",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			asJSON, err := format.json()
			if err != nil {
				return err
			}
			c, err := g.controlConn(cmd)
			if err != nil {
				return err
			}
			defer c.Close()
			members, err := call(cmd.Context(), c, "Cluster.Members", c.cluster.Members, &sqv1.MembersRequest{})
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(g.stdout, toMembersJSON(members))
			}
			return printMembers(g.stdout, members)
		},
	}
	format = addAdminFormatFlag(cmd)
	return cmd
}

// sortedMembers returns the members sorted by node id.
func sortedMembers(r *sqv1.MembersResponse) []*sqv1.Member {
	ms := slices.Clone(r.GetMembers())
	slices.SortFunc(ms, func(a, b *sqv1.Member) int { return strings.Compare(a.NodeId, b.NodeId) })
	return ms
}

// printMembers prints the members table; "(this node)" marks the node
// that answered.
func printMembers(out io.Writer, r *sqv1.MembersResponse) error {
	w := tabwriter.NewWriter(out, 0, 8, 2, ' ', 0)
	fmt.Fprintln(w, "ID\tSTATE\tVOTER\tCONTROLLER\tGRPC\tDATA\tGOSSIP\tRAFT\t")
	for _, m := range sortedMembers(r) {
		self := ""
		if m.Self {
			self = " (this node)"
		}
		fmt.Fprintf(w, "%s%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", m.NodeId, self, m.State, yesNo(m.Voter), yesNo(m.Controller),
			orDash(m.GrpcAddress), orDash(m.CapnpAddress), orDash(m.GossipAddress), orDash(m.RaftAddress))
	}
	return w.Flush()
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func newClusterRemoveNodeCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "remove-node ID",
		Short: "Remove a node from the cluster, moving the partitions it leads",
		Long: "Remove the node ID from the cluster: from the Raft voters, the metadata and the\n" +
			"replica sets. The controller moves the leadership of the partitions the node\n" +
			"leads to other replicas first; it refuses (INVALID_REQUEST, naming them) when\n" +
			"the node leads partitions that hold data no other replica has. A side of the\n" +
			"cluster without a Raft majority answers NO_QUORUM. Any node can be asked\n" +
			"(--control); it forwards the change to the controller. There is no prompt.",
		Example: "  sq cluster remove-node node-3\n  sq --control 10.0.0.1:6060 cluster remove-node node-3",
		Args:    oneNodeID,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.controlConn(cmd)
			if err != nil {
				return err
			}
			defer c.Close()
			id := args[0]
			r, err := call(cmd.Context(), c, "Cluster.RemoveNode", c.cluster.RemoveNode, &sqv1.RemoveNodeRequest{NodeId: id})
			if err != nil {
				return fmt.Errorf("cannot remove node %s: %w", id, err)
			}
			fmt.Fprintf(g.stdout, "removed node %s from the cluster; leadership of %d partition%s moved to other replicas\n",
				id, r.MovedPartitions, plural(int(r.MovedPartitions)))
			return nil
		},
	}
}
