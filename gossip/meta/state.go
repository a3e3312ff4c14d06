package meta

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
)

// NewState returns an empty State: no nodes, no topics, nothing imported.
func NewState() *State {
	return &State{Nodes: map[string]Node{}, Topics: map[string]*Topic{}}
}

// Clone returns a deep copy of s that shares no map, slice or pointer with
// it. Empty slices are copied as nil and nil maps as empty ones, so a
// clone's Hash never depends on how a State was built. A nil s clones to
// NewState().
func (s *State) Clone() *State {
	c := NewState()
	if s == nil {
		return c
	}
	for id, n := range s.Nodes {
		c.Nodes[id] = n
	}
	for name, t := range s.Topics {
		c.Topics[name] = t.Clone()
	}
	c.DeletedIDs = cloneSlice(s.DeletedIDs)
	c.Imported = s.Imported
	if len(s.Groups) > 0 {
		c.Groups = make(map[string]string, len(s.Groups))
		for g, n := range s.Groups {
			c.Groups[g] = n
		}
	}
	c.Removed = cloneSlice(s.Removed)
	c.NextProducerID = s.NextProducerID
	if len(s.DrainedNodes) > 0 {
		c.DrainedNodes = make(map[string]Drain, len(s.DrainedNodes))
		for id, d := range s.DrainedNodes {
			c.DrainedNodes[id] = d
		}
	}
	c.Quotas = cloneQuotas(s.Quotas)
	c.ACLs = cloneSlice(s.ACLs)
	c.Users = cloneUsers(s.Users)
	return c
}

// RemovedDataDir returns the removed node whose data directory id is
// dataDirID, if the state lists it (State.Removed). An empty id is never
// listed.
func (s *State) RemovedDataDir(dataDirID string) (RemovedNode, bool) {
	if dataDirID == "" {
		return RemovedNode{}, false
	}
	for _, r := range s.Removed {
		if r.DataDirID == dataDirID {
			return r, true
		}
	}
	return RemovedNode{}, false
}

// Clone returns a deep copy of t (nil for a nil t).
func (t *Topic) Clone() *Topic {
	if t == nil {
		return nil
	}
	c := *t
	c.Partitions = nil
	if len(t.Partitions) > 0 {
		c.Partitions = make([]Partition, len(t.Partitions))
		for i, p := range t.Partitions {
			c.Partitions[i] = p.Clone()
		}
	}
	return &c
}

// Clone returns a deep copy of p; empty slices become nil.
func (p Partition) Clone() Partition {
	p.Replicas = cloneSlice(p.Replicas)
	p.ISR = cloneSlice(p.ISR)
	return p
}

// cloneSlice copies s; an empty s gives nil, the one canonical form of
// "none" in the encoding that Hash reads.
func cloneSlice[T any](s []T) []T {
	if len(s) == 0 {
		return nil
	}
	return slices.Clone(s)
}

// Hash returns the hex SHA-256 (64 lowercase digits) of the canonical
// encoding of s: the JSON of its Clone. encoding/json writes map keys in
// sorted order and slices in their order, and Clone turns empty slices
// into nil and nil maps into empty ones, so two States that Apply built
// from the same commands in the same order have the same Hash on every
// node, whatever their map iteration order or history of snapshots.
func (s *State) Hash() string {
	b, err := json.Marshal(s.Clone())
	if err != nil {
		// A State holds only strings, integers, booleans and TopicIDs,
		// whose encoding cannot fail.
		panic(fmt.Sprintf("meta: encoding a state: %v", err))
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// stateVersion is the first byte of a snapshot written by Marshal.
const stateVersion byte = 1

// Marshal encodes s for a Raft snapshot: the byte stateVersion (1), then
// the canonical JSON that Hash reads. UnmarshalState reads it back.
func (s *State) Marshal() ([]byte, error) {
	b, err := json.Marshal(s.Clone())
	if err != nil {
		return nil, fmt.Errorf("meta: encoding a state: %w", err)
	}
	return append([]byte{stateVersion}, b...), nil
}

// UnmarshalState decodes a snapshot written by Marshal. It refuses an
// empty input, a version other than 1, unknown fields, trailing data and
// a topic stored under a name other than its own, with an error naming
// the problem. The State returned has the same Hash as the one encoded.
func UnmarshalState(b []byte) (*State, error) {
	if len(b) == 0 {
		return nil, fmt.Errorf("meta: empty state snapshot")
	}
	if b[0] != stateVersion {
		return nil, fmt.Errorf("meta: state snapshot version %d, want %d", b[0], stateVersion)
	}
	var s State
	if err := decodeStrict(b[1:], &s); err != nil {
		return nil, fmt.Errorf("meta: decoding a state snapshot: %w", err)
	}
	for name, t := range s.Topics {
		if t == nil || t.Name != name {
			return nil, fmt.Errorf("meta: state snapshot holds topic key %q with another name", name)
		}
	}
	for id, n := range s.Nodes {
		if n.ID != id {
			return nil, fmt.Errorf("meta: state snapshot holds node key %q with id %q", id, n.ID)
		}
	}
	return s.Clone(), nil
}

// decodeStrict decodes one JSON value from b into v, refusing unknown
// fields and trailing data: a replicated state machine must not ignore a
// field another node acted on.
func decodeStrict(b []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		return err
	}
	if len(bytes.TrimSpace(b[d.InputOffset():])) > 0 {
		return fmt.Errorf("trailing data after the JSON value")
	}
	return nil
}

// LeaderCounts returns how many partitions each node leads, with an entry
// (possibly 0) for every registered node and for any leader that is not
// registered. Partitions without a leader are not counted.
func (s *State) LeaderCounts() map[string]int {
	counts := make(map[string]int, len(s.Nodes))
	for id := range s.Nodes {
		counts[id] = 0
	}
	for _, t := range s.Topics {
		for _, p := range t.Partitions {
			if p.Leader != "" {
				counts[p.Leader]++
			}
		}
	}
	return counts
}

// leaderCounts returns how many of t's partitions each node leads
// (nodes that lead none are absent).
func (t *Topic) leaderCounts() map[string]int {
	counts := make(map[string]int)
	for _, p := range t.Partitions {
		if p.Leader != "" {
			counts[p.Leader]++
		}
	}
	return counts
}

// Leaderless counts the partitions (of every topic) that have no leader
// or whose leader is not alive: the partitions that answer
// LEADER_NOT_AVAILABLE (metric sq_cluster_leaderless_partitions).
func (s *State) Leaderless(alive func(nodeID string) bool) int {
	n := 0
	for _, t := range s.Topics {
		for _, p := range t.Partitions {
			if p.Leader == "" || !alive(p.Leader) {
				n++
			}
		}
	}
	return n
}

// sortedTopics returns the topics of s in name order, so that decisions
// taken over them do not depend on map iteration order.
func (s *State) sortedTopics() []*Topic {
	names := make([]string, 0, len(s.Topics))
	for name := range s.Topics {
		names = append(names, name)
	}
	slices.Sort(names)
	out := make([]*Topic, len(names))
	for i, name := range names {
		out[i] = s.Topics[name]
	}
	return out
}
