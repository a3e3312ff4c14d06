package main

import (
	"io"

	"github.com/seedqueue/sq/api/sqv1"
	"github.com/seedqueue/sq/sdk"
)

// clusterJSON is `cluster info --format json`: the node's own information
// (Cluster.NodeInfo), the cluster's metadata state as this node applied it
// (Cluster.Info; field names as in api/sq.proto; absent from a server that
// predates clustering) and the members.
type clusterJSON struct {
	NodeID            string `json:"node_id"`
	ClusterID         string `json:"cluster_id"`
	Version           string `json:"version"`
	UptimeMs          int64  `json:"uptime_ms"`
	IOBackend         string `json:"io_backend"` // portable or uring
	DataDir           string `json:"data_dir"`
	DataDirTotalBytes uint64 `json:"data_dir_total_bytes"`
	DataDirFreeBytes  uint64 `json:"data_dir_free_bytes"`
	DataBytes         int64  `json:"data_bytes"`
	TopicCount        int    `json:"topic_count"` // topics stored on this node
	GrpcAddress       string `json:"grpc_address"`
	CapnpAddress      string `json:"capnp_address"`
	HTTPAddress       string `json:"http_address"`
	*clusterStateJSON
	Members []clusterMemberJSON `json:"members"`
}

// clusterStateJSON is the metadata state of Cluster.Info.
type clusterStateJSON struct {
	ControllerID         string `json:"controller_id"` // "" while none is known
	RaftState            string `json:"raft_state"`    // leader, follower, candidate or shutdown
	RaftTerm             uint64 `json:"raft_term"`
	AppliedIndex         uint64 `json:"applied_index"`
	CommitIndex          uint64 `json:"commit_index"`
	LastLogIndex         uint64 `json:"last_log_index"`
	MetadataHash         string `json:"metadata_hash"` // hex SHA-256; equal on nodes that applied the same log
	MemberCount          int32  `json:"member_count"`
	VoterCount           int32  `json:"voter_count"`
	PartitionCount       int32  `json:"partition_count"` // of every topic of the metadata
	LeaderlessPartitions int32  `json:"leaderless_partitions"`
	Ready                bool   `json:"ready"`
	// OrphanedTopics are the topics of this node's data directory that the
	// metadata does not know, sorted; [] when none.
	OrphanedTopics []string `json:"orphaned_topics"`
	// DrainedNodes are the drained nodes (sq cluster drain, or a
	// controlled shutdown in progress), sorted; [] when none.
	DrainedNodes []string `json:"drained_nodes"`
}

// clusterMemberJSON is one node of the cluster; self marks the node that
// answered, controller the Raft leader.
type clusterMemberJSON struct {
	NodeID        string `json:"node_id"`
	State         string `json:"state"` // alive, suspect, dead, left or unknown
	Voter         bool   `json:"voter"`
	Controller    bool   `json:"controller"`
	GrpcAddress   string `json:"grpc_address"`
	CapnpAddress  string `json:"capnp_address"`
	GossipAddress string `json:"gossip_address"`
	RaftAddress   string `json:"raft_address"`
	HTTPAddress   string `json:"http_address"`
	Self          bool   `json:"self"`
	Drained       bool   `json:"drained"` // leads no partition another replica can lead
}

// membersJSON is `cluster members --format json`.
type membersJSON struct {
	ClusterID string              `json:"cluster_id"`
	Members   []clusterMemberJSON `json:"members"` // sorted by node_id
}

func toMemberListJSON(r *sqv1.MembersResponse) []clusterMemberJSON {
	out := []clusterMemberJSON{}
	for _, m := range sortedMembers(r) {
		out = append(out, clusterMemberJSON{NodeID: m.NodeId, State: m.State, Voter: m.Voter, Controller: m.Controller,
			GrpcAddress: m.GrpcAddress, CapnpAddress: m.CapnpAddress, GossipAddress: m.GossipAddress,
			RaftAddress: m.RaftAddress, HTTPAddress: m.HttpAddress, Self: m.Self, Drained: m.Drained})
	}
	return out
}

func toMembersJSON(r *sqv1.MembersResponse) membersJSON {
	return membersJSON{ClusterID: r.GetClusterId(), Members: toMemberListJSON(r)}
}

func printClusterInfoJSON(out io.Writer, n sdk.NodeInfo, ci *sqv1.ClusterInfoResponse, members *sqv1.MembersResponse) error {
	doc := clusterJSON{NodeID: n.NodeID, ClusterID: n.ClusterID, Version: n.Version, UptimeMs: n.Uptime.Milliseconds(),
		IOBackend: n.IOBackend, DataDir: n.DataDir, DataDirTotalBytes: n.DataDirTotalBytes, DataDirFreeBytes: n.DataDirFreeBytes,
		DataBytes: n.DataBytes, TopicCount: n.Topics, GrpcAddress: n.GrpcAddr, CapnpAddress: n.CapnpAddr, HTTPAddress: n.HTTPAddr,
		Members: toMemberListJSON(members)}
	if ci != nil {
		doc.clusterStateJSON = &clusterStateJSON{ControllerID: ci.ControllerId, RaftState: ci.RaftState, RaftTerm: ci.RaftTerm,
			AppliedIndex: ci.AppliedIndex, CommitIndex: ci.CommitIndex, LastLogIndex: ci.LastLogIndex, MetadataHash: ci.MetadataHash,
			MemberCount: ci.MemberCount, VoterCount: ci.VoterCount, PartitionCount: ci.PartitionCount,
			LeaderlessPartitions: ci.LeaderlessPartitions, Ready: ci.Ready, OrphanedTopics: append([]string{}, ci.GetOrphanedTopics()...),
			DrainedNodes: append([]string{}, ci.GetDrainedNodes()...)}
	}
	return writeJSON(out, doc)
}
