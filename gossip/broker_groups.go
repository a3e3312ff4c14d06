package gossip

import (
	"context"
	"errors"
	"fmt"
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

// Consumer groups in a cluster (docs/cluster.md "Consumer groups"): the
// coordinator of a group is the leader of partition
// engine.OffsetsPartition(group) of the replicated internal topic
// engine.OffsetsTopic, which holds the group's committed offsets as
// records (the engine's offsets_topic.go), as Kafka's __consumer_offsets
// does. A node serves the calls of the groups it coordinates from its
// storage and forwards the others to their coordinator over gRPC with
// GroupForwardedHeader. The topic is created on the first group call
// that needs it (a join, a standalone commit, an offset reset), with
// BrokerOptions.OffsetsTopicPartitions partitions. When a coordinator
// fails, the controller elects a new leader of its partition from the
// in-sync replicas, which loads the committed offsets; the members join
// it again. A partition without a leader, or a leader still loading,
// makes its groups answer COORDINATOR_NOT_AVAILABLE (retriable). The
// Broker's group methods below are what both planes call.

// Defaults of BrokerOptions for the offsets topic (Kafka's
// offsets.topic.num.partitions is 50; SQ's partitions each hold a
// replica fetcher per follower, so fewer).
const (
	DefaultOffsetsTopicPartitions        = 16
	DefaultOffsetsTopicReplicationFactor = 3
)

// coordinatorOf returns the coordinator of group: the leader of its
// partition of the offsets topic. Without the topic it returns "" (no
// group has members or offsets anywhere) unless create is set, which
// creates the topic first. Errors: INVALID_REQUEST for an invalid group
// id, COORDINATOR_NOT_AVAILABLE when the metadata is not applied yet or
// the partition has no leader, NO_QUORUM from the metadata log.
func (b *Broker) coordinatorOf(group string, create bool) (string, error) {
	if err := engine.ValidateGroupName(group); err != nil {
		return "", err
	}
	s := b.c.State()
	if s == nil {
		return "", api.NewError(api.CodeCoordinatorNotAvailable, "group %q: this node has not applied the cluster metadata yet", group)
	}
	t := s.Topics[engine.OffsetsTopic]
	if t == nil {
		if !create {
			return "", nil
		}
		var err error
		if t, err = b.ensureOffsetsTopic(); err != nil {
			return "", err
		}
	}
	p := engine.OffsetsPartition(group, len(t.Partitions))
	leader := t.Partitions[p].Leader
	if leader == "" {
		return "", api.NewError(api.CodeCoordinatorNotAvailable, "group %q: partition %d of %s, which holds it, has no leader", group, p, engine.OffsetsTopic)
	}
	return leader, nil
}

// ensureOffsetsTopic creates the offsets topic unless the metadata has
// it, and returns it. Its replication factor is
// BrokerOptions.OffsetsTopicReplicationFactor, or the live nodes when
// fewer (logged); its sync policy every-batch; no retention (snapshots
// bound it). Two nodes creating it at once is harmless: the first
// create-topic wins.
func (b *Broker) ensureOffsetsTopic() (*meta.Topic, error) {
	b.offsetsMu.Lock()
	defer b.offsetsMu.Unlock()
	s := b.c.State()
	if t := s.Topics[engine.OffsetsTopic]; t != nil {
		return t, nil
	}
	live := 0
	for id := range s.Nodes {
		if b.c.Alive(id) {
			live++
		}
	}
	rf := min(b.opts.OffsetsTopicReplicationFactor, max(live, 1))
	if rf < b.opts.OffsetsTopicReplicationFactor {
		b.log.Warn("creating the offsets topic with fewer replicas than configured: not enough live nodes", "topic", engine.OffsetsTopic,
			"replication_factor", rf, "configured", b.opts.OffsetsTopicReplicationFactor, "live_nodes", live)
	}
	cfg, err := b.Storage.ResolveConfig(engine.TopicConfig{SyncPolicy: "every-batch", RetentionMs: -1, RetentionBytes: -1, ReplicationFactor: int32(rf)})
	if err != nil {
		return nil, err
	}
	t := &meta.Topic{Name: engine.OffsetsTopic, Config: cfg, Partitions: make([]meta.Partition, b.opts.OffsetsTopicPartitions)}
	if _, err := b.propose(meta.Command{Op: meta.OpCreateTopic, Topic: t}); err != nil && !errors.Is(err, api.ErrTopicExists) {
		return nil, api.WrapError(api.CodeCoordinatorNotAvailable, err, "create the offsets topic %s", engine.OffsetsTopic)
	}
	if t = b.c.State().Topics[engine.OffsetsTopic]; t == nil {
		return nil, api.NewError(api.CodeCoordinatorNotAvailable, "the offsets topic %s is not in this node's metadata yet", engine.OffsetsTopic)
	}
	b.log.Info("offsets topic ready", "topic", engine.OffsetsTopic, "partitions", len(t.Partitions), "replication_factor", t.Config.ReplicationFactor)
	return t, nil
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

// DeleteGroup deletes group at its coordinator (a delete record in the
// offsets topic). UNKNOWN_GROUP when no group has ever been used.
func (b *Broker) DeleteGroup(group string) error {
	svc, err := b.groupService(group, false)
	if err != nil {
		return err
	}
	if svc == nil {
		return api.NewError(api.CodeUnknownGroup, "group %q has no members and no committed offsets", group)
	}
	return svc.DeleteGroup(group)
}

// ListGroups lists the groups of the whole cluster, sorted by name: each
// coordinator (leader of a partition of the offsets topic) lists its own,
// this node's storage or the node over gRPC, in parallel. The groups of
// a coordinator that does not answer, or of a partition without a
// leader, are missing from the list until it answers again (logged).
// Every node lists alike.
func (b *Broker) ListGroups() []engine.GroupSummary {
	s := b.c.State()
	if s == nil || s.Topics[engine.OffsetsTopic] == nil {
		return []engine.GroupSummary{}
	}
	leaders := map[string]bool{}
	for i, p := range s.Topics[engine.OffsetsTopic].Partitions {
		if p.Leader == "" {
			b.log.Debug("list groups: an offsets partition has no leader; its groups are not listed", "partition", i)
			continue
		}
		leaders[p.Leader] = true
	}
	var (
		mu  sync.Mutex
		out = []engine.GroupSummary{}
		wg  sync.WaitGroup
	)
	for node := range leaders {
		wg.Go(func() {
			listed, err := b.listAt(node)
			if err != nil {
				b.log.Debug("list groups: a coordinator does not answer; its groups are not listed", "node", node, "err", err)
				return
			}
			mu.Lock()
			out = append(out, listed...)
			mu.Unlock()
		})
	}
	wg.Wait()
	sort.Slice(out, func(i, j int) bool { return out[i].Group < out[j].Group })
	return out
}

// listAt returns the groups node coordinates, as node lists them.
func (b *Broker) listAt(node string) ([]engine.GroupSummary, error) {
	if node == b.self {
		return b.LocalGroups().ListGroups(), nil
	}
	svc, err := b.groupsAt("", node)
	if err != nil {
		return nil, err
	}
	return svc.(*remoteGroups).listGroups()
}

// coordinates reports whether the metadata makes this node group's
// coordinator.
func (b *Broker) coordinates(group string) bool {
	s := b.c.State()
	if s == nil || s.Topics[engine.OffsetsTopic] == nil {
		return false
	}
	t := s.Topics[engine.OffsetsTopic]
	return t.Partitions[engine.OffsetsPartition(group, len(t.Partitions))].Leader == b.self
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
	if l.b.coordinates(group) || l.awaitLeadership(group) {
		return nil
	}
	owner := "no node"
	if s := l.b.c.State(); s != nil && s.Topics[engine.OffsetsTopic] != nil {
		t := s.Topics[engine.OffsetsTopic]
		if leader := t.Partitions[engine.OffsetsPartition(group, len(t.Partitions))].Leader; leader != "" {
			owner = "node " + leader
		}
	}
	return api.NewError(api.CodeCoordinatorNotAvailable, "node %s is not the coordinator of group %q (%s is, in its metadata); a forwarded group call is not forwarded again", l.b.self, group, owner)
}

// leadershipWait bounds how long a node that receives a forwarded call
// for a group it does not coordinate in its metadata waits for the
// metadata to make it coordinator: the forwarding node may have applied
// the offsets topic's creation or a change of its leaders a moment
// earlier.
const leadershipWait = 2 * time.Second

// awaitLeadership waits, at most leadershipWait, for this node's metadata
// to make it group's coordinator, and reports whether it did.
func (l localGroups) awaitLeadership(group string) bool {
	deadline := time.Now().Add(leadershipWait)
	for time.Now().Before(deadline) {
		if l.b.coordinates(group) {
			return true
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

// legacyOffsets is the part of an engine opened for a cluster that holds
// the group offsets of its single-node log (engine.Engine).
type legacyOffsets interface {
	LegacyGroupOffsets() map[string][]engine.OffsetCommit
	RetireLegacyGroupOffsets() error
}

// ImportGroupOffsets imports, once, the committed offsets that this
// node's storage kept in its single-node groups log before it formed or
// joined a cluster (docs/cluster.md): each is committed, as a standalone
// commit at the group's coordinator, unless the group already has an
// offset for that partition in the cluster; a group with members keeps
// what it has (logged). Once every group is done, the log is retired
// (renamed), so the import never runs again. It retries what is
// retriable (the offsets topic being created or loaded, say) until ctx
// ends, and returns the groups it imported.
func (b *Broker) ImportGroupOffsets(ctx context.Context) ([]string, error) {
	ls, ok := b.Storage.(legacyOffsets)
	if !ok {
		return nil, nil
	}
	legacy := ls.LegacyGroupOffsets()
	if len(legacy) == 0 {
		return nil, nil
	}
	groups := make([]string, 0, len(legacy))
	for g := range legacy {
		groups = append(groups, g)
	}
	sort.Strings(groups)
	var imported []string
	for _, g := range groups {
		n, err := b.importGroup(ctx, g, legacy[g])
		if err != nil {
			return imported, err
		}
		if n > 0 {
			imported = append(imported, g)
		}
	}
	return imported, ls.RetireLegacyGroupOffsets()
}

// importGroup commits offs for group where the cluster has no offset of
// the partition, retrying retriable errors until ctx ends, and returns
// how many it committed.
func (b *Broker) importGroup(ctx context.Context, group string, offs []engine.OffsetCommit) (int, error) {
	for attempt := 1; ; attempt++ {
		n, err := b.importOnce(group, offs)
		if err == nil {
			return n, nil
		}
		if errors.Is(err, api.ErrFencedGeneration) {
			// The group has members in the cluster: what it commits wins.
			b.log.Warn("group offsets of the single-node log not imported: the group has members in the cluster", "group", group, "err", err)
			return 0, nil
		}
		if e := api.AsError(err); e == nil || !e.Retriable() {
			return 0, fmt.Errorf("import the offsets of group %q: %w", group, err)
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("import the offsets of group %q: %w (last: %v)", group, ctx.Err(), err)
		case <-time.After(min(time.Duration(attempt)*100*time.Millisecond, 2*time.Second)):
		}
	}
}

func (b *Broker) importOnce(group string, offs []engine.OffsetCommit) (int, error) {
	if _, err := b.coordinatorOf(group, true); err != nil {
		return 0, err
	}
	have, err := b.FetchOffsets(group, "")
	if err != nil {
		return 0, err
	}
	held := map[string]bool{}
	for _, o := range have {
		held[fmt.Sprintf("%s/%d", o.Topic, o.Partition)] = true
	}
	var missing []engine.OffsetCommit
	for _, o := range offs {
		if !held[fmt.Sprintf("%s/%d", o.Topic, o.Partition)] {
			missing = append(missing, o)
		}
	}
	if len(missing) == 0 {
		return 0, nil
	}
	out, err := b.CommitOffsets(group, "", -1, missing)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, o := range out {
		if o.Err != nil {
			b.log.Warn("a group offset of the single-node log not imported", "group", group, "topic", o.Topic, "partition", o.Partition, "offset", o.Offset, "err", o.Err)
			continue
		}
		n++
	}
	b.log.Info("group offsets of the single-node log imported", "group", group, "offsets", n)
	return n, nil
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
