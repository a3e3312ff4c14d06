package engine

import "time"

// GroupService is the consumer-group part of a broker that both planes
// serve (docs/architecture.md §6): membership (JoinGroup, Heartbeat,
// LeaveGroup), offsets (CommitOffsets, FetchOffsets) and administration
// (ListGroups, DescribeGroup, ResetOffsets, DeleteGroup). *Engine
// implements it for the groups it holds; in a cluster the cluster layer
// implements it by sending each call to the group's coordinator
// (docs/cluster.md). The methods' errors are those of *Engine's.
type GroupService interface {
	// JoinGroup adds or updates a member and returns its assignment.
	JoinGroup(group, memberID, clientID string, topics []string, sessionTimeout time.Duration) (JoinResult, error)
	// Heartbeat keeps a member alive, records the partitions it owns
	// (nil: unchanged) and returns its assignment.
	Heartbeat(group, memberID string, generation int32, owned GroupAssignment) (JoinResult, error)
	// LeaveGroup removes a member.
	LeaveGroup(group, memberID string) error
	// CommitOffsets stores a member's (or, with generation -1 and no
	// member id, a standalone consumer's) committed offsets.
	CommitOffsets(group, memberID string, generation int32, offsets []OffsetCommit) ([]OffsetCommit, error)
	// FetchOffsets returns the group's committed offsets of topic ("":
	// every topic).
	FetchOffsets(group, topic string) ([]OffsetCommit, error)
	// ListGroups returns every group, sorted by name.
	ListGroups() []GroupSummary
	// DescribeGroup returns members, assignment and per-partition lag.
	DescribeGroup(group string) (GroupDescription, error)
	// ResetOffsets sets a memberless group's committed offsets of a topic.
	ResetOffsets(group, topic string, mode ResetMode, value int64) ([]OffsetCommit, error)
	// DeleteGroup removes a memberless group and its offsets.
	DeleteGroup(group string) error
}

var _ GroupService = (*Engine)(nil)
