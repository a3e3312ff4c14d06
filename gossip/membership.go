package gossip

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/hashicorp/raft"

	"github.com/seedqueue/sq/api/sqv1"
)

// Membership states as Members reports them (memberlist's NodeState, and
// "unknown" for a node of the metadata that gossip has not met).
const (
	StateAlive   = "alive"
	StateSuspect = "suspect"
	StateDead    = "dead"
	StateLeft    = "left"
	StateUnknown = "unknown"
)

// deadNodeReclaimTime is how long a dead member's name stays bound to its
// address (memberlist.Config.DeadNodeReclaimTime).
const deadNodeReclaimTime = 2 * time.Second

// nodeMeta is what a node gossips about itself (memberlist's node meta,
// at most memberlist.MetaMaxSize bytes): its cluster id, so that a member
// of another cluster is refused, and its gRPC address.
type nodeMeta struct {
	ClusterID string `json:"cluster_id"`
	GRPCAddr  string `json:"grpc"`
	// RaftAddr is the node's advertised Raft address: a node restarted
	// with another one is reached there before the Raft configuration
	// records it (raft.ServerAddressProvider).
	RaftAddr string `json:"raft"`
	// Left is set by a node that is leaving gracefully, just before it
	// leaves: memberlist reports a left node to the others' event delegate
	// as a dead one (its Node.State is not updated), so the others tell a
	// leave from a failure by this flag.
	Left bool `json:"left,omitempty"`
}

// membership runs memberlist and tracks the state of each member.
type membership struct {
	ml        *memberlist.Memberlist
	clusterID string
	log       *slog.Logger

	metaMu sync.Mutex
	meta   []byte // what NodeMeta returns; changed by leave
	nm     nodeMeta

	mu sync.Mutex
	// status is each member's state as the events left it: StateAlive
	// (alive or suspect: memberlist sends no event for suspicion),
	// StateDead or StateLeft.
	status map[string]string
	// nodes holds a copy of each member as its last event gave it:
	// memberlist.Members returns pointers into memberlist's own state,
	// which its goroutines keep writing (a new meta or address).
	nodes map[string]memberlist.Node
	// events is signalled (never blocks) when a member joins, dies or
	// leaves: the controller looks at the partitions again.
	events chan struct{}
	// heard is when this node last heard from each member: its join or
	// update, or an ack of a ping (watch, and memberlist's own probes
	// through PingDelegate). memberlist keeps its suspicion to itself, so
	// a member it still lists that has answered no ping for longer than
	// suspectAfter is reported suspect (display and metrics only: it
	// still counts as alive for leadership and clients until memberlist
	// declares it dead).
	heard map[string]time.Time
	// probeInterval and probeTimeout are memberlist's, for watch and
	// suspectAfter.
	probeInterval, probeTimeout time.Duration
	now                         func() time.Time // time.Now; tests replace it
	self                        string           // this node's id
	stopWatch                   chan struct{}    // closed by stop
	watchDone                   sync.WaitGroup
	stopOnce                    sync.Once
}

// startMembership starts memberlist on o.GossipBind, advertising
// o.GossipAdvertise and, in its node meta, raftAddr.
func startMembership(o Options, raftAddr string) (*membership, error) {
	m := &membership{clusterID: o.ClusterID, log: o.Logger, status: map[string]string{}, nodes: map[string]memberlist.Node{}, events: make(chan struct{}, 1),
		heard: map[string]time.Time{}, now: time.Now, self: o.NodeID}
	m.nm = nodeMeta{ClusterID: o.ClusterID, GRPCAddr: o.GRPCAddr, RaftAddr: raftAddr}
	b, err := json.Marshal(m.nm)
	if err != nil {
		return nil, fmt.Errorf("gossip: %w", err)
	}
	if len(b) > memberlist.MetaMaxSize {
		return nil, fmt.Errorf("gossip: node meta of %d bytes exceeds memberlist's %d: shorten --cluster-id or the gRPC address", len(b), memberlist.MetaMaxSize)
	}
	m.meta = b
	c := memberlist.DefaultLANConfig()
	c.Name = o.NodeID
	host, port, err := splitHostPort(o.GossipBind)
	if err != nil {
		return nil, fmt.Errorf("gossip: gossip bind address %q: %w", o.GossipBind, err)
	}
	c.BindAddr, c.BindPort, c.AdvertisePort = host, port, port
	if o.GossipAdvertise != "" {
		ahost, aport, err := splitHostPort(o.GossipAdvertise)
		if err != nil {
			return nil, fmt.Errorf("gossip: gossip advertise address %q: %w", o.GossipAdvertise, err)
		}
		c.AdvertiseAddr = ahost
		if aport != 0 {
			c.AdvertisePort = aport
		}
	}
	// A node restarted at another address (a new container IP) takes its
	// name back once the old incarnation is dead; the join RPC already
	// refused a live node of the same name with another data directory.
	c.DeadNodeReclaimTime = deadNodeReclaimTime
	c.Delegate = m
	c.Events = m
	c.Alive = m
	c.Merge = m
	c.Ping = m
	c.Logger = log.New(newMemberlistWriter(o.Logger.With("component", "memberlist")), "", 0)
	if len(o.GossipKey) != 0 {
		c.SecretKey = o.GossipKey
	}
	if o.Memberlist != nil {
		o.Memberlist(c)
	}
	m.probeInterval, m.probeTimeout = c.ProbeInterval, c.ProbeTimeout
	ml, err := memberlist.Create(c)
	if err != nil {
		return nil, fmt.Errorf("gossip: memberlist on %s: %w", o.GossipBind, err)
	}
	m.ml = ml
	m.stopWatch = make(chan struct{})
	m.watchDone.Add(1)
	go m.watch()
	return m, nil
}

// watch pings every other live member once each probeInterval, all at
// once, and records the answers in heard, until stop: memberlist probes
// one member per interval, too seldom in a larger cluster to show a
// member suspect before memberlist declares it dead. A cluster has few
// nodes (up to 5 voters), so this is a few small UDP packets a second.
func (m *membership) watch() {
	defer m.watchDone.Done()
	t := time.NewTicker(m.probeInterval)
	defer t.Stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		select {
		case <-m.stopWatch:
			return
		case <-t.C:
		}
		m.mu.Lock()
		var targets []memberlist.Node
		for id, n := range m.nodes {
			if id != m.self && m.status[id] == StateAlive {
				targets = append(targets, n)
			}
		}
		m.mu.Unlock()
		for _, n := range targets {
			wg.Add(1)
			go func() {
				defer wg.Done()
				addr, err := net.ResolveUDPAddr("udp", n.Address())
				if err != nil {
					return
				}
				if _, err := m.ml.Ping(n.Name, addr); err == nil {
					m.mu.Lock()
					m.heard[n.Name] = m.now()
					m.mu.Unlock()
				}
			}()
		}
		wg.Wait()
	}
}

// stop ends watch and waits for it; idempotent. Call it before
// memberlist shuts down.
func (m *membership) stop() {
	m.stopOnce.Do(func() {
		if m.stopWatch != nil {
			close(m.stopWatch)
		}
	})
	m.watchDone.Wait()
}

func splitHostPort(hp string) (string, int, error) {
	h, p, err := net.SplitHostPort(hp)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("port %q is not a number from 0 to 65535", p)
	}
	if h == "" {
		h = "0.0.0.0"
	}
	return h, port, nil
}

// addr is the advertised gossip address, with the bound port.
func (m *membership) addr() string { return m.ml.LocalNode().Address() }

// signal wakes the controller without blocking.
func (m *membership) signal() {
	select {
	case m.events <- struct{}{}:
	default:
	}
}

// alive reports whether node id is alive or suspect, without scanning
// the member list (the leadership gate asks at every request).
func (m *membership) alive(id string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.status[id] == StateAlive
}

// state returns the membership state of node id: StateSuspect for a
// member memberlist still lists whose direct probes by this node have
// gone unanswered for longer than suspectAfter.
func (m *membership) state(id string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.status[id]
	switch {
	case !ok:
		return StateUnknown
	case s != StateAlive:
		return s
	case m.now().Sub(m.heard[id]) > m.suspectAfter():
		return StateSuspect
	}
	return StateAlive
}

// suspectAfter is how long a live member may go unheard before state
// reports it suspect: three rounds of watch's pings unanswered, plus the
// timeout of the ping in flight, and at least a second, so that a loaded
// machine's late answer is not taken for a failure.
func (m *membership) suspectAfter() time.Duration {
	return max(3*m.probeInterval+m.probeTimeout, time.Second)
}

// AckPayload implements memberlist.PingDelegate; SQ adds nothing to acks.
func (m *membership) AckPayload() []byte { return nil }

// NotifyPingComplete implements memberlist.PingDelegate: other answered
// this node's direct probe.
func (m *membership) NotifyPingComplete(other *memberlist.Node, rtt time.Duration, payload []byte) {
	m.mu.Lock()
	m.heard[other.Name] = m.now()
	m.mu.Unlock()
}

// raftAddr returns the Raft address node id gossips, or "" when it is
// not alive or gossips none.
func (m *membership) raftAddr(id string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.status[id] != StateAlive {
		return ""
	}
	var nm nodeMeta
	if json.Unmarshal(m.nodes[id].Meta, &nm) == nil {
		return nm.RaftAddr
	}
	return ""
}

// members returns copies of the live members (alive or suspect), this
// node included, by node id.
func (m *membership) members() map[string]memberlist.Node {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]memberlist.Node{}
	for id, n := range m.nodes {
		if m.status[id] == StateAlive {
			out[id] = n
		}
	}
	return out
}

// check returns an error when n's meta names another cluster.
func (m *membership) check(n *memberlist.Node) error {
	var nm nodeMeta
	if err := json.Unmarshal(n.Meta, &nm); err != nil {
		return fmt.Errorf("gossip: member %s at %s sends no SQ node meta: refused", n.Name, n.Address())
	}
	if nm.ClusterID != m.clusterID {
		return fmt.Errorf("gossip: member %s at %s belongs to cluster %q, this node to %q: refused", n.Name, n.Address(), nm.ClusterID, m.clusterID)
	}
	return nil
}

// NotifyAlive implements memberlist.AliveDelegate: a member of another
// cluster is refused.
func (m *membership) NotifyAlive(n *memberlist.Node) error {
	err := m.check(n)
	if err != nil {
		m.log.Warn("gossip member refused", "err", err)
	}
	return err
}

// NotifyMerge implements memberlist.MergeDelegate: a push/pull with a
// node of another cluster is refused.
func (m *membership) NotifyMerge(peers []*memberlist.Node) error {
	for _, n := range peers {
		if err := m.check(n); err != nil {
			m.log.Warn("gossip merge refused", "err", err)
			return err
		}
	}
	return nil
}

// NotifyJoin implements memberlist.EventDelegate.
func (m *membership) NotifyJoin(n *memberlist.Node) {
	m.mu.Lock()
	m.status[n.Name] = StateAlive
	m.nodes[n.Name] = *n
	m.heard[n.Name] = m.now()
	m.mu.Unlock()
	m.log.Info("gossip member alive", "node_id", n.Name, "addr", n.Address())
	m.signal()
}

// NotifyLeave implements memberlist.EventDelegate: the member is dead,
// or has left when its last node meta says so (nodeMeta.Left).
func (m *membership) NotifyLeave(n *memberlist.Node) {
	s := StateDead
	var nm nodeMeta
	if n.State == memberlist.StateLeft || (json.Unmarshal(n.Meta, &nm) == nil && nm.Left) {
		s = StateLeft
	}
	m.mu.Lock()
	m.status[n.Name] = s
	m.nodes[n.Name] = *n
	m.mu.Unlock()
	m.log.Info("gossip member "+s, "node_id", n.Name, "addr", n.Address())
	m.signal()
}

// NotifyUpdate implements memberlist.EventDelegate: the member's meta or
// address changed.
func (m *membership) NotifyUpdate(n *memberlist.Node) {
	m.mu.Lock()
	m.nodes[n.Name] = *n
	m.heard[n.Name] = m.now()
	m.mu.Unlock()
	m.signal()
}

// NodeMeta implements memberlist.Delegate.
func (m *membership) NodeMeta(limit int) []byte {
	m.metaMu.Lock()
	defer m.metaMu.Unlock()
	if len(m.meta) > limit {
		return nil
	}
	return m.meta
}

// leave leaves gossip gracefully: it first gossips its node meta with
// Left set, so that the others record this node as left rather than dead
// (sq cluster members), then leaves, each step bounded by timeout.
func (m *membership) leave(timeout time.Duration) error {
	m.metaMu.Lock()
	m.nm.Left = true
	b, err := json.Marshal(m.nm)
	if err == nil && len(b) <= memberlist.MetaMaxSize {
		m.meta = b
	}
	m.metaMu.Unlock()
	if err := m.ml.UpdateNode(timeout); err != nil {
		m.log.Debug("gossip: announcing the leave", "err", err)
	}
	return m.ml.Leave(timeout)
}

// NotifyMsg implements memberlist.Delegate; SQ sends no user messages.
func (m *membership) NotifyMsg([]byte) {}

// GetBroadcasts implements memberlist.Delegate; SQ broadcasts nothing.
func (m *membership) GetBroadcasts(overhead, limit int) [][]byte { return nil }

// LocalState implements memberlist.Delegate; the metadata travels through
// Raft, not gossip.
func (m *membership) LocalState(join bool) []byte { return nil }

// MergeRemoteState implements memberlist.Delegate.
func (m *membership) MergeRemoteState(buf []byte, join bool) {}

// memberState is node id's membership state; this node is alive.
func (n *Node) memberState(id string) string {
	if id == n.opts.NodeID {
		return StateAlive
	}
	return n.mem.state(id)
}

// Members implements the Cluster.Members RPC (control's ClusterBackend):
// the nodes of the applied metadata, sorted by id, with their addresses,
// membership state, Raft suffrage and the controller, then the live
// gossip members the metadata does not list yet (joining).
func (n *Node) Members(ctx context.Context) (*sqv1.MembersResponse, error) {
	_, leader := n.raft.LeaderWithID()
	suffrage := map[string]raft.ServerSuffrage{}
	if f := n.raft.GetConfiguration(); f.Error() == nil {
		for _, s := range f.Configuration().Servers {
			suffrage[string(s.ID)] = s.Suffrage
		}
	}
	st := n.State()
	resp := &sqv1.MembersResponse{ClusterId: n.opts.ClusterID}
	for _, m := range st.Nodes {
		s, inRaft := suffrage[m.ID]
		resp.Members = append(resp.Members, &sqv1.Member{
			NodeId: m.ID, GrpcAddress: m.GRPCAddr, CapnpAddress: m.DataAddr, HttpAddress: m.HTTPAddr,
			GossipAddress: m.GossipAddr, RaftAddress: m.RaftAddr, State: n.memberState(m.ID),
			Self: m.ID == n.opts.NodeID, Voter: inRaft && s == raft.Voter, Controller: m.ID == string(leader),
			Drained: st.Drained(m.ID),
		})
	}
	for id, ml := range n.mem.members() {
		if _, ok := st.Nodes[id]; ok {
			continue
		}
		var nm nodeMeta
		_ = json.Unmarshal(ml.Meta, &nm) // members of another cluster are refused before they get here
		s, inRaft := suffrage[id]
		resp.Members = append(resp.Members, &sqv1.Member{
			NodeId: id, GrpcAddress: nm.GRPCAddr, GossipAddress: ml.Address(), State: n.memberState(id),
			Self: id == n.opts.NodeID, Voter: inRaft && s == raft.Voter, Controller: id == string(leader),
		})
	}
	slices.SortFunc(resp.Members, func(a, b *sqv1.Member) int { return cmpString(a.NodeId, b.NodeId) })
	return resp, ctx.Err()
}

// Info implements the Cluster.Info RPC (control's ClusterBackend): the
// metadata as this node has applied it, with its Raft state and indexes
// and the state's hash (equal on nodes at the same applied index), and
// this node's orphaned topics (Options.OrphanedTopics).
func (n *Node) Info(ctx context.Context) (*sqv1.ClusterInfoResponse, error) {
	cur := n.fsm.current()
	_, leader := n.raft.LeaderWithID()
	parts := 0
	for _, t := range cur.state.Topics {
		parts += len(t.Partitions)
	}
	return &sqv1.ClusterInfoResponse{
		ClusterId: n.opts.ClusterID, NodeId: n.opts.NodeID, ControllerId: string(leader),
		RaftState: strings.ToLower(n.raft.State().String()), RaftTerm: n.raft.CurrentTerm(),
		AppliedIndex: cur.index, CommitIndex: n.raft.CommitIndex(), LastLogIndex: n.raft.LastIndex(),
		MetadataHash: cur.state.Hash(), MemberCount: int32(len(cur.state.Nodes)), VoterCount: int32(n.voters()),
		TopicCount: int32(len(cur.state.Topics)), PartitionCount: int32(parts),
		LeaderlessPartitions: int32(cur.state.Leaderless(n.Alive)), Ready: n.Ready() == nil,
		OrphanedTopics: n.orphanedTopics(), DrainedNodes: drainedIDs(cur.state),
	}, ctx.Err()
}

// orphanedTopics returns Options.OrphanedTopics' list, nil without one.
func (n *Node) orphanedTopics() []string {
	if n.opts.OrphanedTopics == nil {
		return nil
	}
	return n.opts.OrphanedTopics()
}
