package gossip

import (
	"context"
	"sort"
	"sync"
	"time"

	"google.golang.org/grpc"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/engine"
	"github.com/seedqueue/sq/gossip/meta"
)

// GroupForwardedHeader is the gRPC request metadata key of a group call
// that a node forwards to the group's coordinator (docs/cluster.md). Its
// value is "1". The receiving node serves it from its own storage when the
// metadata makes it the group's coordinator (Broker.LocalGroups), and
// otherwise answers COORDINATOR_NOT_AVAILABLE: a forwarded call is never
// forwarded again, so two nodes whose metadata differ for a moment cannot
// send a call back and forth.
const GroupForwardedHeader = "sq-group-forwarded"

// groupTimeoutDefault bounds one group call forwarded to a coordinator.
const groupTimeoutDefault = 10 * time.Second

// Consumer groups in a cluster (docs/cluster.md): each group has one
// coordinator, a node recorded in the metadata (meta.State.Groups), which
// holds its members, assignment and committed offsets, as Kafka's group
// coordinator does. A node assigns a group on its first join, standalone
// commit or offset reset (assign-group through the metadata log, to
// meta.ChooseCoordinator's choice; the first assign wins), serves the
// calls of the groups it coordinates from its storage, and forwards the
// others to their coordinator over gRPC with GroupForwardedHeader. A
// coordinator that is not alive or not reachable makes its groups answer
// COORDINATOR_NOT_AVAILABLE (retriable) until it returns. The Broker's
// group methods below are what both planes call.

// coordinatorOf returns the coordinator of group: the one the metadata
// records or, when it has none and assign is set, the node assign-group
// makes it ("" when it has none and assign is not set). Errors:
// INVALID_REQUEST for an invalid group id, COORDINATOR_NOT_AVAILABLE when
// no node is alive to take it, NO_QUORUM from the metadata log.
func (b *Broker) coordinatorOf(group string, assign bool) (string, error) {
	if err := engine.ValidateGroupName(group); err != nil {
		return "", err
	}
	s := b.c.State()
	if s != nil {
		if owner, ok := s.Groups[group]; ok {
			return owner, nil
		}
	}
	if !assign {
		return "", nil
	}
	if s == nil {
		return "", api.NewError(api.CodeCoordinatorNotAvailable, "group %q: this node has not applied the cluster metadata yet", group)
	}
	choice := meta.ChooseCoordinator(s, group, b.c.Alive)
	if choice == "" {
		return "", api.NewError(api.CodeCoordinatorNotAvailable, "group %q: no live node to coordinate it", group)
	}
	ctx, cancel := context.WithTimeout(context.Background(), b.opts.ProposeTimeout)
	defer cancel()
	res, err := b.c.Propose(ctx, meta.Command{Op: meta.OpAssignGroup, Name: group, NodeID: choice})
	if err != nil {
		return "", err
	}
	if res.Err != nil {
		return "", res.Err
	}
	if res.Coordinator != "" && res.Coordinator != choice {
		b.log.Debug("group already assigned", "group", group, "coordinator", res.Coordinator)
	} else {
		b.log.Info("group assigned", "group", group, "coordinator", res.Coordinator)
	}
	return res.Coordinator, nil
}

// groupsAt returns the group service of node: this node's storage, or
// the node reached over gRPC. Errors: COORDINATOR_NOT_AVAILABLE when it is
// not alive or cannot be dialled.
func (b *Broker) groupsAt(group, node string) (engine.GroupService, error) {
	if node == b.self {
		return b.Storage, nil
	}
	if !b.c.Alive(node) {
		return nil, api.NewError(api.CodeCoordinatorNotAvailable, "the coordinator of group %q, node %s, is not alive", group, node)
	}
	conn, err := b.c.PeerConn(node)
	if err != nil {
		return nil, api.WrapError(api.CodeCoordinatorNotAvailable, err, "the coordinator of group %q, node %s, is not reachable", group, node)
	}
	return &remoteGroups{conn: conn, node: node, timeout: groupTimeoutDefault}, nil
}

// groupService returns the service to send group's call to, assigning
// the group first when assign is set. svc is nil (and err nil) when the
// group has no coordinator and assign is not set: it has no members and
// no offsets anywhere.
func (b *Broker) groupService(group string, assign bool) (engine.GroupService, error) {
	node, err := b.coordinatorOf(group, assign)
	if err != nil || node == "" {
		return nil, err
	}
	return b.groupsAt(group, node)
}

// JoinGroup joins group at its coordinator, assigning the group first if
// it has none.
func (b *Broker) JoinGroup(group, memberID, clientID string, topics []string, sessionTimeout time.Duration) (engine.JoinResult, error) {
	svc, err := b.groupService(group, true)
	if err != nil {
		return engine.JoinResult{}, err
	}
	return svc.JoinGroup(group, memberID, clientID, topics, sessionTimeout)
}

// Heartbeat sends a member's heartbeat to its group's coordinator; a
// group without one has no member (FENCED_GENERATION: join again).
func (b *Broker) Heartbeat(group, memberID string, generation int32, owned engine.GroupAssignment) (engine.JoinResult, error) {
	svc, err := b.groupService(group, false)
	if err != nil {
		return engine.JoinResult{}, err
	}
	if svc == nil {
		return engine.JoinResult{}, api.NewError(api.CodeFencedGeneration, "group %q has no member %q; join again", group, memberID)
	}
	return svc.Heartbeat(group, memberID, generation, owned)
}

// LeaveGroup removes a member at its group's coordinator; leaving a group
// without one is not an error.
func (b *Broker) LeaveGroup(group, memberID string) error {
	svc, err := b.groupService(group, false)
	if err != nil || svc == nil {
		return err
	}
	return svc.LeaveGroup(group, memberID)
}

// CommitOffsets commits at the group's coordinator. A standalone commit
// (no member id) assigns a group that has no coordinator; a member's
// commit to such a group is fenced, as the engine fences a member it does
// not know.
func (b *Broker) CommitOffsets(group, memberID string, generation int32, offsets []engine.OffsetCommit) ([]engine.OffsetCommit, error) {
	svc, err := b.groupService(group, memberID == "")
	if err != nil {
		return nil, err
	}
	if svc == nil {
		return nil, api.NewError(api.CodeFencedGeneration, "group %q has no member %q", group, memberID)
	}
	return svc.CommitOffsets(group, memberID, generation, offsets)
}

// FetchOffsets returns the group's committed offsets from its coordinator
// (none for a group without one).
func (b *Broker) FetchOffsets(group, topic string) ([]engine.OffsetCommit, error) {
	svc, err := b.groupService(group, false)
	if err != nil {
		return nil, err
	}
	if svc == nil {
		return nil, nil
	}
	return svc.FetchOffsets(group, topic)
}

// DescribeGroup describes group at its coordinator: UNKNOWN_GROUP for a
// group without one. Lags are computed from each partition's leader
// (Storage.SetTopicStats); a partition whose leader is not available has
// lag engine.LagUnknown.
func (b *Broker) DescribeGroup(group string) (engine.GroupDescription, error) {
	svc, err := b.groupService(group, false)
	if err != nil {
		return engine.GroupDescription{}, err
	}
	if svc == nil {
		return engine.GroupDescription{}, api.NewError(api.CodeUnknownGroup, "group %q has no members and no committed offsets", group)
	}
	return svc.DescribeGroup(group)
}

// ResetOffsets resets the group's offsets of topic at its coordinator,
// assigning the group first if it has none.
func (b *Broker) ResetOffsets(group, topic string, mode engine.ResetMode, value int64) ([]engine.OffsetCommit, error) {
	svc, err := b.groupService(group, true)
	if err != nil {
		return nil, err
	}
	return svc.ResetOffsets(group, topic, mode, value)
}

// DeleteGroup deletes group at its coordinator, then removes the
// assignment from the metadata (unassign-group), so that the metadata
// does not keep every group ever used and a group used again is assigned
// anew. UNKNOWN_GROUP for a group without a coordinator. A delete whose
// unassign fails (NO_QUORUM, say) has still deleted the group: the
// failure is logged and the group keeps its coordinator.
func (b *Broker) DeleteGroup(group string) error {
	node, err := b.coordinatorOf(group, false)
	if err != nil {
		return err
	}
	if node == "" {
		return api.NewError(api.CodeUnknownGroup, "group %q has no members and no committed offsets", group)
	}
	svc, err := b.groupsAt(group, node)
	if err != nil {
		return err
	}
	if err := svc.DeleteGroup(group); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), b.opts.ProposeTimeout)
	defer cancel()
	res, err := b.c.Propose(ctx, meta.Command{Op: meta.OpUnassignGroup, Name: group, NodeID: node})
	if err == nil && res.Err != nil {
		err = res.Err
	}
	if err != nil {
		b.log.Warn("group deleted; its coordinator stays recorded in the metadata", "group", group, "coordinator", node, "err", err)
	}
	return nil
}

// ListGroups lists the groups of the whole cluster, sorted by name: the
// groups the metadata assigns, each as its coordinator lists it (this
// node's storage, or the node over gRPC, in parallel). The groups of a
// coordinator that is not alive or does not answer are listed with state
// engine.GroupUnknown. Every node lists alike.
func (b *Broker) ListGroups() []engine.GroupSummary {
	s := b.c.State()
	if s == nil || len(s.Groups) == 0 {
		return []engine.GroupSummary{}
	}
	byNode := map[string][]string{}
	for g, n := range s.Groups {
		byNode[n] = append(byNode[n], g)
	}
	var (
		mu  sync.Mutex
		out []engine.GroupSummary
		wg  sync.WaitGroup
	)
	for node, groups := range byNode {
		wg.Go(func() {
			listed := b.listAt(node, groups)
			mu.Lock()
			out = append(out, listed...)
			mu.Unlock()
		})
	}
	wg.Wait()
	sort.Slice(out, func(i, j int) bool { return out[i].Group < out[j].Group })
	return out
}

// listAt returns the summaries of groups (all coordinated by node) as
// node lists them; when node cannot answer, each with state
// engine.GroupUnknown.
func (b *Broker) listAt(node string, groups []string) []engine.GroupSummary {
	var listed []engine.GroupSummary
	var err error
	if node == b.self {
		listed = b.Storage.ListGroups()
	} else if svc, gerr := b.groupsAt(groups[0], node); gerr != nil {
		err = gerr
	} else {
		listed, err = svc.(*remoteGroups).listGroups()
	}
	want := make(map[string]bool, len(groups))
	for _, g := range groups {
		want[g] = true
	}
	var out []engine.GroupSummary
	if err != nil {
		b.log.Debug("list groups: a coordinator does not answer", "node", node, "err", err)
		for _, g := range groups {
			out = append(out, engine.GroupSummary{Group: g, State: engine.GroupUnknown})
		}
		return out
	}
	for _, gs := range listed {
		if want[gs.Group] {
			out = append(out, gs)
		}
	}
	return out
}

// coordinates reports whether the metadata makes this node group's
// coordinator.
func (b *Broker) coordinates(group string) bool {
	s := b.c.State()
	return s != nil && s.Groups[group] == b.self
}

// LocalGroups returns the group service of the groups this node
// coordinates, served from its own storage and never forwarded: what a
// call forwarded from another node (GroupForwardedHeader) reaches, and
// what the group lag metric reads (only the coordinator exports a group's
// lag). A call for a group this node does not coordinate answers
// COORDINATOR_NOT_AVAILABLE; ListGroups lists only the groups it
// coordinates.
func (b *Broker) LocalGroups() engine.GroupService { return localGroups{b} }

// localGroups is Broker.LocalGroups.
type localGroups struct{ b *Broker }

func (l localGroups) check(group string) error {
	if err := engine.ValidateGroupName(group); err != nil {
		return err
	}
	if l.b.coordinates(group) || l.awaitAssign(group) {
		return nil
	}
	owner := "none"
	if s := l.b.c.State(); s != nil && s.Groups[group] != "" {
		owner = "node " + s.Groups[group]
	}
	return api.NewError(api.CodeCoordinatorNotAvailable, "node %s is not the coordinator of group %q (%s is, in its metadata); a forwarded group call is not forwarded again", l.b.self, group, owner)
}

// assignWait bounds how long a node that receives a forwarded call for a
// group it does not know as assigned waits for the assignment to reach
// it: the forwarding node returned from the assign once it had applied
// it, and this node may apply it a moment later.
const assignWait = 2 * time.Second

// awaitAssign waits, at most assignWait, while group has no coordinator
// in this node's metadata, and reports whether this node coordinates it
// then.
func (l localGroups) awaitAssign(group string) bool {
	deadline := time.Now().Add(assignWait)
	for time.Now().Before(deadline) {
		s := l.b.c.State()
		if s != nil && s.Groups[group] != "" {
			return s.Groups[group] == l.b.self
		}
		time.Sleep(10 * time.Millisecond)
	}
	return false
}

// JoinGroup implements engine.GroupService for a coordinated group.
func (l localGroups) JoinGroup(group, memberID, clientID string, topics []string, sessionTimeout time.Duration) (engine.JoinResult, error) {
	if err := l.check(group); err != nil {
		return engine.JoinResult{}, err
	}
	return l.b.Storage.JoinGroup(group, memberID, clientID, topics, sessionTimeout)
}

// Heartbeat implements engine.GroupService for a coordinated group.
func (l localGroups) Heartbeat(group, memberID string, generation int32, owned engine.GroupAssignment) (engine.JoinResult, error) {
	if err := l.check(group); err != nil {
		return engine.JoinResult{}, err
	}
	return l.b.Storage.Heartbeat(group, memberID, generation, owned)
}

// LeaveGroup implements engine.GroupService for a coordinated group.
func (l localGroups) LeaveGroup(group, memberID string) error {
	if err := l.check(group); err != nil {
		return err
	}
	return l.b.Storage.LeaveGroup(group, memberID)
}

// CommitOffsets implements engine.GroupService for a coordinated group.
func (l localGroups) CommitOffsets(group, memberID string, generation int32, offsets []engine.OffsetCommit) ([]engine.OffsetCommit, error) {
	if err := l.check(group); err != nil {
		return nil, err
	}
	return l.b.Storage.CommitOffsets(group, memberID, generation, offsets)
}

// FetchOffsets implements engine.GroupService for a coordinated group.
func (l localGroups) FetchOffsets(group, topic string) ([]engine.OffsetCommit, error) {
	if err := l.check(group); err != nil {
		return nil, err
	}
	return l.b.Storage.FetchOffsets(group, topic)
}

// ListGroups lists the groups this node holds and coordinates.
func (l localGroups) ListGroups() []engine.GroupSummary {
	all := l.b.Storage.ListGroups()
	out := make([]engine.GroupSummary, 0, len(all))
	for _, gs := range all {
		if l.b.coordinates(gs.Group) {
			out = append(out, gs)
		}
	}
	return out
}

// DescribeGroup implements engine.GroupService for a coordinated group.
func (l localGroups) DescribeGroup(group string) (engine.GroupDescription, error) {
	if err := l.check(group); err != nil {
		return engine.GroupDescription{}, err
	}
	return l.b.Storage.DescribeGroup(group)
}

// ResetOffsets implements engine.GroupService for a coordinated group.
func (l localGroups) ResetOffsets(group, topic string, mode engine.ResetMode, value int64) ([]engine.OffsetCommit, error) {
	if err := l.check(group); err != nil {
		return nil, err
	}
	return l.b.Storage.ResetOffsets(group, topic, mode, value)
}

// DeleteGroup implements engine.GroupService for a coordinated group.
func (l localGroups) DeleteGroup(group string) error {
	if err := l.check(group); err != nil {
		return err
	}
	return l.b.Storage.DeleteGroup(group)
}

// TakeOverGroups assigns to this node every group that holds committed
// offsets in its storage and has no coordinator in the metadata, so that
// a node that ran alone before it formed or joined a cluster keeps
// serving its groups' offsets (docs/cluster.md). A group already assigned
// elsewhere keeps its coordinator; its offsets here are no longer read,
// and a warning names it. It returns the groups now coordinated here.
func (b *Broker) TakeOverGroups(ctx context.Context) ([]string, error) {
	var taken []string
	for _, gs := range b.Storage.ListGroups() {
		offs, err := b.Storage.FetchOffsets(gs.Group, "")
		if err != nil || len(offs) == 0 {
			continue
		}
		if s := b.c.State(); s != nil {
			if owner, ok := s.Groups[gs.Group]; ok {
				if owner != b.self {
					b.log.Warn("group has offsets on this node but another coordinator; they are not served", "group", gs.Group, "coordinator", owner)
				}
				continue
			}
		}
		res, err := b.c.Propose(ctx, meta.Command{Op: meta.OpAssignGroup, Name: gs.Group, NodeID: b.self})
		if err != nil {
			return taken, err
		}
		if res.Err != nil {
			return taken, res.Err
		}
		if res.Coordinator == b.self {
			taken = append(taken, gs.Group)
			b.log.Info("group with local offsets assigned to this node", "group", gs.Group)
		} else {
			b.log.Warn("group has offsets on this node but another coordinator; they are not served", "group", gs.Group, "coordinator", res.Coordinator)
		}
	}
	return taken, nil
}

// PeerConn implements Cluster: a connection, from n's pool, to the gRPC
// address node nodeID registered. Errors: when the node is not
// registered or has no gRPC address, or the address cannot be dialled.
func (c nodeCluster) PeerConn(nodeID string) (grpc.ClientConnInterface, error) {
	s := c.State()
	var addr string
	if s != nil {
		addr = s.Nodes[nodeID].GRPCAddr
	}
	if addr == "" {
		return nil, api.NewError(api.CodeCoordinatorNotAvailable, "node %s has no known gRPC address", nodeID)
	}
	return c.conns.conn(addr)
}

// ClampLedOffsets lowers the committed offsets above the high watermark
// of the partitions this node leads (and of local topics the metadata
// does not know) to it, and returns how many it lowered
// (Storage.ClampOffsets). A node of a cluster opens its storage with
// engine.Options.DeferOffsetClamp, since it holds the logs of the
// partitions it leads only, and calls this once it has caught up with the
// metadata.
func (b *Broker) ClampLedOffsets() int { return b.Storage.ClampOffsets(b.leads) }
