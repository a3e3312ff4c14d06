package gossip

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/gossip/meta"
)

// Node is one member of the cluster: its memberlist membership, its Raft
// replica of the metadata log, and, while it is the Raft leader, the
// controller (docs/cluster.md). Start makes one; Close stops it.
type Node struct {
	opts  Options
	ident identity
	log   *slog.Logger
	// raftLog is hashicorp/raft's logger; shutdown flushes its counts.
	raftLog *hclogAdapter

	fsm    *fsm
	raft   *raft.Raft
	trans  *raft.NetworkTransport
	stores *raftStores
	mem    *membership
	conns  *connPool
	met    *metrics

	started    time.Time // when memberlist started
	raftAddr   string    // advertised
	gossipAddr string    // advertised

	// propMu serializes the controller's prepare-and-apply, so that each
	// command is prepared against the state its predecessors made.
	propMu      sync.Mutex
	barrierTerm uint64 // the Raft term of the last barrier, under propMu

	ready     atomic.Bool // joined and caught up
	removed   atomic.Bool // removed from the cluster (noticeRemoval)
	removedCh chan struct{}
	closing   atomic.Bool

	// leaderlessSince is when this node last saw Raft without a leader
	// begin (zero while it has one); probing is set while a removal probe
	// runs (probeRemoval). Both belong to the controller loop.
	leaderlessSince time.Time
	lastProbe       time.Time
	probing         atomic.Bool

	raftStop    sync.Once // stopRaft
	raftStopErr error
	loopStop    context.CancelFunc
	loopDone    sync.WaitGroup
	closeOnce   sync.Once
	closeErr    error
}

// Start starts a node: it checks or writes the data directory's identity
// (<DataDir>/cluster/node.json), opens the Raft stores, starts Raft and
// memberlist, and then joins: without seeds and Raft state it bootstraps
// a one-voter cluster, registers itself and imports LocalTopics once;
// with seeds it asks them to join (retrying until ctx ends); with Raft
// state it restarts its replica and rejoins. Start returns once the
// join was accepted (or the bootstrap applied); Ready reports when the
// node has caught up. Errors: invalid options, an identity of another
// node or cluster, a join refused by the cluster (another cluster id, the
// node id alive with another data directory), listen failures, ctx.
func Start(ctx context.Context, o Options) (*Node, error) {
	o = o.Defaults()
	if err := o.Validate(); err != nil {
		return nil, err
	}
	dir := filepath.Join(o.DataDir, "cluster")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("gossip: %w", err)
	}
	id, err := loadIdentity(dir, o.NodeID, o.ClusterID)
	if err != nil {
		return nil, err
	}
	n := &Node{opts: o, ident: id, log: o.Logger.With("component", "cluster"), conns: newConnPool(o.Dial, o.TLSClient), removedCh: make(chan struct{})}
	hasState, err := n.startRaft(dir)
	if err != nil {
		_ = n.shutdown(ctx, false)
		return nil, err
	}
	if n.mem, err = startMembership(o, n.raftAddr); err != nil {
		_ = n.shutdown(ctx, false)
		return nil, err
	}
	n.gossipAddr = n.mem.addr()
	n.started = time.Now()
	n.met = newMetrics(n)
	if err := n.met.register(o.Registerer); err != nil {
		_ = n.shutdown(ctx, false)
		return nil, err
	}
	n.log.Info("cluster node started", "node_id", o.NodeID, "cluster_id", o.ClusterID,
		"gossip_addr", n.gossipAddr, "raft_addr", n.raftAddr, "raft_state", hasState, "seeds", o.Seeds)
	if err := n.join(ctx, hasState); err != nil {
		if IsRemoved(err) {
			if merr := markRemoved(dir, n.ident, time.Now()); merr != nil {
				n.log.Error("recording the removal in node.json", "err", merr)
			}
		}
		_ = n.shutdown(ctx, false)
		return nil, err
	}
	lctx, cancel := context.WithCancel(context.Background())
	n.loopStop = cancel
	n.goLoop(func() { n.controllerLoop(lctx) })
	if targets := n.rejoinTargets(); hasState && len(targets) > 0 {
		// A restarted node's cluster may need it for a quorum: Raft runs
		// already, and the join (which records changed addresses, and
		// tells a node removed while it was stopped that it was) is
		// retried in the background, through the seeds or else the
		// other nodes its Raft state lists.
		n.goLoop(func() {
			err := n.joinSeeds(lctx, targets)
			switch {
			case err == nil || lctx.Err() != nil:
			case IsRemoved(err):
				n.noticeRemoval("a node refused its rejoin: " + err.Error())
			default:
				n.log.Error("rejoining the cluster was refused", "err", err)
			}
		})
	}
	if !n.ready.Load() {
		n.goLoop(func() { n.catchUp(lctx) })
	}
	return n, nil
}

// goLoop runs f in a goroutine that Close waits for.
func (n *Node) goLoop(f func()) {
	n.loopDone.Add(1)
	go func() {
		defer n.loopDone.Done()
		f()
	}()
}

// startRaft opens the stores and the transport and starts Raft; it
// reports whether the stores held Raft state.
func (n *Node) startRaft(dir string) (bool, error) {
	hl := raftLogger(n.log)
	n.raftLog = hl
	stores, err := openRaftStores(dir, hl)
	if err != nil {
		return false, err
	}
	n.stores = stores
	sl, err := listenRaft(n.opts.RaftBind, n.opts.RaftAdvertise, n.opts.TLSServer, n.opts.TLSClient)
	if err != nil {
		return false, err
	}
	n.raftAddr = sl.Addr().String()
	n.trans = raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream: sl, MaxPool: 3, Timeout: 10 * time.Second, Logger: hl.Named("transport"),
		ServerAddressProvider: gossipRaftAddrs{n},
		MaxRPCsInFlight:       raftMaxRPCsInFlight,
	})
	hasState, err := raft.HasExistingState(stores.bolt, stores.bolt, stores.snaps)
	if err != nil {
		return false, fmt.Errorf("gossip: raft state: %w", err)
	}
	n.fsm = newFSM(n.opts.OnApply, n.log)
	if hasState {
		if n.fsm.replayTo, err = stores.bolt.LastIndex(); err != nil {
			return false, fmt.Errorf("gossip: raft log: %w", err)
		}
	}
	n.raft, err = raft.NewRaft(raftConfig(n.opts, hl), n.fsm, stores.bolt, stores.bolt, stores.snaps, n.trans)
	if err != nil {
		return false, fmt.Errorf("gossip: raft: %w", err)
	}
	return hasState, nil
}

// raftMaxRPCsInFlight is 1: the Raft leader sends a follower one
// AppendEntries at a time, without hashicorp/raft's pipelining. Its
// pipeline can deadlock (raft v1.8.0 replication.go and net_transport.go):
// when a follower answers Success=false, pipelineDecode returns and
// nobody reads the pipeline's responses any more, while the send loop may
// start one more send that then waits forever for room. That follower
// gets heartbeats but never another log entry (so it never calls an
// election that would heal it), and Raft's Shutdown waits for the stuck
// goroutine: sq-server did not stop after SIGTERM. The metadata log is
// small and low-rate, so pipelining gains nothing here.
const raftMaxRPCsInFlight = 1

// gossipRaftAddrs is the Raft transport's raft.ServerAddressProvider: the
// Raft address a live member gossips wins over the one of the Raft
// configuration, which a node restarted with a new address has not
// updated yet.
type gossipRaftAddrs struct{ n *Node }

// ServerAddr implements raft.ServerAddressProvider; an error makes the
// transport use the configuration's address.
func (g gossipRaftAddrs) ServerAddr(id raft.ServerID) (raft.ServerAddress, error) {
	if g.n.mem != nil {
		if a := g.n.mem.raftAddr(string(id)); a != "" {
			return raft.ServerAddress(a), nil
		}
	}
	return "", errors.New("gossip: no raft address gossiped")
}

// electNow makes a follower that is the only voter of its configuration
// stand for election at once rather than after a heartbeat timeout:
// lowering the heartbeat timeout makes hashicorp/raft re-arm its
// follower timer (Raft.ReloadConfig).
func (n *Node) electNow() {
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return
	}
	servers := f.Configuration().Servers
	if len(servers) != 1 || servers[0].ID != raft.ServerID(n.opts.NodeID) || servers[0].Suffrage != raft.Voter {
		return
	}
	rc := n.raft.ReloadableConfig()
	rc.HeartbeatTimeout = n.opts.HeartbeatTimeout - time.Millisecond
	if err := n.raft.ReloadConfig(rc); err != nil {
		n.log.Debug("raft reload", "err", err)
	}
}

// join bootstraps, joins through the seeds or restarts, as Start says (a
// restart with seeds joins through them in the background, see Start).
func (n *Node) join(ctx context.Context, hasState bool) error {
	switch {
	case hasState:
		n.electNow()
		n.joinGossip(n.loggedGossipAddrs())
		return nil
	case len(n.opts.Seeds) > 0:
		return n.joinSeeds(ctx, n.opts.Seeds)
	default:
		return n.bootstrap(ctx)
	}
}

// bootstrap makes this node a one-voter cluster, registers it and imports
// the data directory's topics (meta.OpImport, once per cluster).
func (n *Node) bootstrap(ctx context.Context) error {
	cfg := raft.Configuration{Servers: []raft.Server{{ID: raft.ServerID(n.opts.NodeID), Address: raft.ServerAddress(n.raftAddr), Suffrage: raft.Voter}}}
	if err := n.raft.BootstrapCluster(cfg).Error(); err != nil {
		return fmt.Errorf("gossip: bootstrap: %w", err)
	}
	n.electNow()
	if _, err := n.ProposeCommand(ctx, meta.Command{Op: meta.OpRegisterNode, Node: n.self()}); err != nil {
		return fmt.Errorf("gossip: bootstrap: register %s: %w", n.opts.NodeID, err)
	}
	if err := n.importLocal(ctx); err != nil {
		return fmt.Errorf("gossip: bootstrap: %w", err)
	}
	n.log.Info("bootstrapped a cluster of one node")
	n.ready.Store(true)
	return nil
}

// importLocal imports the data directory's topics (LocalTopics) into the
// metadata with meta.OpImport, which the state accepts once per cluster.
func (n *Node) importLocal(ctx context.Context) error {
	var topics []*meta.Topic
	if n.opts.LocalTopics != nil {
		topics = n.opts.LocalTopics()
	}
	res, err := n.ProposeCommand(ctx, meta.Command{Op: meta.OpImport, Topics: topics})
	if err == nil && res.Err != nil {
		err = res.Err
	}
	if err != nil {
		return fmt.Errorf("import the data directory's topics: %w", err)
	}
	n.log.Info("imported the data directory's topics into the cluster metadata", "topics", len(topics))
	return nil
}

// self is this node as the metadata records it.
func (n *Node) self() *meta.Node {
	return &meta.Node{
		ID: n.opts.NodeID, DataDirID: n.ident.DataDirID,
		GRPCAddr: n.opts.GRPCAddr, DataAddr: n.opts.DataAddr, HTTPAddr: n.opts.HTTPAddr,
		GossipAddr: n.gossipAddr, RaftAddr: n.raftAddr,
	}
}

// catchUp makes the node ready: it proposes its own registration (which
// also records changed addresses) until it is committed, and waits until
// this node has applied it: the node has then caught up with the log as
// it stood when it joined. A node without seeds whose cluster has not
// imported its first node's topics yet (a bootstrap cut short) imports
// its own.
func (n *Node) catchUp(ctx context.Context) {
	var refused string // the last refusal logged
	backoff := 50 * time.Millisecond
	for {
		res, err := n.ProposeCommand(ctx, meta.Command{Op: meta.OpRegisterNode, Node: n.self()})
		if err == nil && res.Err == nil && len(n.opts.Seeds) == 0 && !n.State().Imported {
			// The first start bootstrapped the cluster but stopped
			// before its import was committed.
			err = n.importLocal(ctx)
		}
		if err == nil && res.Err == nil {
			n.fsm.release()
			n.ready.Store(true)
			n.log.Info("joined the cluster and caught up with the metadata log", "applied_index", n.AppliedIndex())
			return
		}
		if err == nil {
			err = res.Err
			// A refusal of the metadata (this node id registered with
			// another data directory, say) stays until an operator acts:
			// say so once, not at every retry.
			if msg := err.Error(); msg != refused {
				refused = msg
				n.log.Warn("the cluster metadata refuses this node's registration; the node stays not ready", "err", err)
			}
		}
		n.log.Debug("not caught up yet", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, n.opts.JoinBackoffMax)
	}
}

// Ready returns nil once the node has joined the cluster (Raft has a
// leader and this node is in its configuration) and has caught up with
// the metadata log; until then, and after the node was removed or
// closed, an error saying why (readiness, docs/architecture.md §10).
func (n *Node) Ready() error {
	switch {
	case n.closing.Load():
		return errors.New("gossip: node closing")
	case n.removed.Load():
		return errors.New("gossip: this node was removed from the cluster")
	case !n.ready.Load():
		if _, id := n.raft.LeaderWithID(); id == "" {
			return errors.New("gossip: no Raft leader known yet")
		}
		return errors.New("gossip: joining, catching up with the metadata log")
	}
	return nil
}

// ID returns this node's id.
func (n *Node) ID() string { return n.opts.NodeID }

// ClusterID returns the cluster's id.
func (n *Node) ClusterID() string { return n.opts.ClusterID }

// State returns the latest applied metadata; it must not be modified.
func (n *Node) State() *meta.State { return n.fsm.current().state }

// AppliedIndex returns the index of the last metadata log entry applied
// to State.
func (n *Node) AppliedIndex() uint64 { return n.fsm.current().index }

// Alive reports whether node id is a live member as gossip sees it:
// alive or suspect (a suspect still serves); this node is always alive.
func (n *Node) Alive(id string) bool {
	if id == n.opts.NodeID {
		return true
	}
	return n.mem.alive(id)
}

// Nodes returns the nodes of the metadata, sorted by id, with the
// addresses clients use; Alive is false while gossip holds a node dead,
// left or unknown (a suspect node is still alive: memberlist has not
// declared it dead).
func (n *Node) Nodes() []api.Node {
	st := n.State()
	out := make([]api.Node, 0, len(st.Nodes))
	for _, m := range st.Nodes {
		alive := m.ID == n.opts.NodeID || n.mem.alive(m.ID)
		out = append(out, api.Node{ID: m.ID, DataAddr: m.DataAddr, GRPCAddr: m.GRPCAddr, Alive: alive})
	}
	slices.SortFunc(out, func(a, b api.Node) int { return cmpString(a.ID, b.ID) })
	return out
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Close stops the node: a controller hands leadership to another voter,
// the node leaves gossip gracefully (bounded by ctx), and Raft, its
// transport and stores are closed. Idempotent.
func (n *Node) Close(ctx context.Context) error {
	n.closeOnce.Do(func() {
		n.closing.Store(true)
		if n.loopStop != nil {
			n.loopStop()
			n.loopDone.Wait()
		}
		if n.raft != nil && n.raft.State() == raft.Leader && n.voters() > 1 {
			if err := n.raft.LeadershipTransfer().Error(); err != nil {
				n.log.Info("leadership transfer before close", "err", err)
			}
		}
		n.closeErr = n.shutdown(ctx, true)
	})
	return n.closeErr
}

// shutdown releases whatever Start made, in reverse order; with leave,
// the node first leaves gossip gracefully.
func (n *Node) shutdown(ctx context.Context, leave bool) error {
	var errs []error
	if n.met != nil {
		n.met.unregister(n.opts.Registerer)
	}
	if n.mem != nil {
		n.mem.stop()
		timeout := time.Second
		if d, ok := ctx.Deadline(); ok {
			timeout = min(timeout, time.Until(d))
		}
		if leave && !n.removed.Load() {
			if err := n.mem.leave(timeout); err != nil {
				n.log.Debug("gossip leave", "err", err)
			}
		}
		if err := n.mem.ml.Shutdown(); err != nil {
			errs = append(errs, fmt.Errorf("gossip: memberlist shutdown: %w", err))
		}
	}
	if n.raft != nil {
		if err := n.stopRaft(); err != nil {
			errs = append(errs, fmt.Errorf("gossip: raft shutdown: %w", err))
		}
	}
	if n.trans != nil {
		n.trans.CloseStreams()
		if err := n.trans.Close(); err != nil {
			errs = append(errs, fmt.Errorf("gossip: raft transport: %w", err))
		}
	}
	if n.stores != nil {
		if err := n.stores.bolt.Close(); err != nil {
			errs = append(errs, fmt.Errorf("gossip: raft store: %w", err))
		}
	}
	n.conns.close()
	if n.raftLog != nil {
		n.raftLog.flush()
	}
	return errors.Join(errs...)
}

// stopRaft shuts Raft down once and returns when its goroutines have
// ended, to every caller. hashicorp/raft's Shutdown waits only for its
// first caller: a second one (Close while noticeRemoval stops Raft) would
// go on to close the log store under a running Raft, which panics
// ("failed to save current term: database not open").
func (n *Node) stopRaft() error {
	n.raftStop.Do(func() { n.raftStopErr = n.raft.Shutdown().Error() })
	return n.raftStopErr
}

// voters counts the voters of the Raft configuration (0 when unknown).
func (n *Node) voters() int {
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return 0
	}
	c := 0
	for _, s := range f.Configuration().Servers {
		if s.Suffrage == raft.Voter {
			c++
		}
	}
	return c
}
