package gossip

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/api/sqv1"
	"github.com/seedqueue/sq/gossip/meta"
)

// ProposeCommand applies cmd through the metadata log and returns its
// result once it is committed and applied on this node (so State and the
// OnApply hook already show it). On the controller it prepares the
// command first (see prepare); elsewhere it forwards it to the controller
// with the gRPC Cluster.Propose call. A command the state refuses returns
// its catalog error in Result.Err. Errors: NO_QUORUM (retriable) when no
// controller is reachable or Raft cannot commit within ProposeTimeout,
// ctx's error.
func (n *Node) ProposeCommand(ctx context.Context, cmd meta.Command) (meta.Result, error) {
	index, res, err := n.propose(ctx, cmd)
	if err != nil {
		return meta.Result{}, err
	}
	if err := n.fsm.wait(ctx, index); err != nil {
		return meta.Result{}, err
	}
	return res, nil
}

// propose applies cmd on the controller, this node or another, retrying
// while the controller changes, for at most ProposeTimeout. It returns
// the log index to wait for.
func (n *Node) propose(ctx context.Context, cmd meta.Command) (uint64, meta.Result, error) {
	pctx, cancel := context.WithTimeout(ctx, n.opts.ProposeTimeout)
	defer cancel()
	var last error
	backoff := 10 * time.Millisecond
	for {
		var (
			index uint64
			res   meta.Result
			err   error
		)
		if n.raft.State() == raft.Leader {
			index, res, err = n.applyLocal(pctx, cmd)
		} else {
			index, res, err = n.forward(pctx, cmd)
		}
		if err == nil || !retriable(err) {
			return index, res, err
		}
		last = err
		select {
		case <-pctx.Done():
			if ctx.Err() != nil {
				return 0, meta.Result{}, ctx.Err()
			}
			return 0, meta.Result{}, api.WrapError(api.CodeNoQuorum, last, "metadata change not committed within %v", n.opts.ProposeTimeout)
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 500*time.Millisecond)
	}
}

// forward sends cmd to the controller.
func (n *Node) forward(ctx context.Context, cmd meta.Command) (uint64, meta.Result, error) {
	addr, err := n.controllerAddr()
	if err != nil {
		return 0, meta.Result{}, err
	}
	b, err := meta.Encode(cmd)
	if err != nil {
		return 0, meta.Result{}, api.WrapError(api.CodeInvalidRequest, err, "encode metadata command")
	}
	c, err := n.conns.cluster(addr)
	if err != nil {
		return 0, meta.Result{}, api.WrapError(api.CodeNoQuorum, err, "controller at %s", addr)
	}
	resp, err := c.Propose(ctx, &sqv1.ProposeRequest{Command: b})
	if err != nil {
		return 0, meta.Result{}, fromStatus(err)
	}
	res, err := meta.DecodeResult(resp.Result)
	if err != nil {
		return 0, meta.Result{}, fmt.Errorf("gossip: controller's result: %w", err)
	}
	return resp.Index, res, nil
}

// Propose implements the Cluster.Propose RPC (control's ClusterBackend)
// on the controller: it prepares and applies one encoded command and
// answers with its index and encoded result once committed. A node that
// is not the controller answers NOT_LEADER (retriable; the sender reads
// the new controller and retries).
func (n *Node) Propose(ctx context.Context, cmd []byte) (*sqv1.ProposeResponse, error) {
	c, err := meta.Decode(cmd)
	if err != nil {
		return nil, api.WrapError(api.CodeInvalidRequest, err, "decode metadata command")
	}
	if n.raft.State() != raft.Leader {
		_, id := n.raft.LeaderWithID()
		e := api.NewError(api.CodeNotLeader, "node %s is not the controller", n.opts.NodeID)
		e.LeaderID = string(id)
		return nil, e
	}
	index, res, err := n.applyLocal(ctx, c)
	if err != nil {
		return nil, err
	}
	b, err := meta.EncodeResult(res)
	if err != nil {
		return nil, fmt.Errorf("gossip: encode result: %w", err)
	}
	return &sqv1.ProposeResponse{Index: index, Result: b}, nil
}

// applyLocal prepares cmd against the current state and applies it
// through Raft on this node, the leader. Commands are prepared and
// applied one at a time, each against the state its predecessor made.
// Raft's refusals (not the leader, leadership lost) are NO_QUORUM.
func (n *Node) applyLocal(ctx context.Context, cmd meta.Command) (uint64, meta.Result, error) {
	n.propMu.Lock()
	defer n.propMu.Unlock()
	// Once per term, wait until everything committed by earlier leaders is
	// applied: the state prepared against must be the latest. Within a
	// term, Apply returns after this node applied the entry.
	if term := n.raft.CurrentTerm(); term != n.barrierTerm {
		if err := n.raft.Barrier(n.opts.ProposeTimeout).Error(); err != nil {
			return 0, meta.Result{}, api.WrapError(api.CodeNoQuorum, err, "controller barrier")
		}
		n.barrierTerm = term
	}
	cur := n.fsm.current()
	prepared, err := n.prepare(cur.state, cmd)
	if err != nil {
		return cur.index, meta.Result{Err: api.AsError(err)}, nil
	}
	b, err := meta.Encode(prepared)
	if err != nil {
		return 0, meta.Result{}, api.WrapError(api.CodeInvalidRequest, err, "encode metadata command")
	}
	timeout := n.opts.ProposeTimeout
	if d, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(d))
	}
	f := n.raft.Apply(b, timeout)
	if err := f.Error(); err != nil {
		return 0, meta.Result{}, api.WrapError(api.CodeNoQuorum, err, "metadata log")
	}
	res, ok := f.Response().(meta.Result)
	if !ok {
		return 0, meta.Result{}, fmt.Errorf("gossip: apply returned %T", f.Response())
	}
	return f.Index(), res, nil
}

// prepare completes a command on the controller against state s:
//   - create-topic with a zero topic id or partitions without replicas:
//     a new id (unless given), the creation time and the placement over
//     the live nodes (meta.PrepareCreate), the replication factor 0
//     resolved to DefaultReplicationFactor (0: min(3, live nodes)), and
//     min.insync.replicas 0 to its default (meta.ResolveMinInsync);
//   - create-partitions whose NewPartitions have no replicas: as many
//     partitions placed (meta.PrepareCreatePartitions);
//   - alter-topic with a min.insync.replicas of 0: the default of the
//     topic's replication factor (meta.DefaultMinInsync);
//   - remove-node without leaders: meta.LeadersForRemoval;
//   - drain-node without leaders: meta.LeadersForDrain.
//
// Other commands are applied as given.
func (n *Node) prepare(s *meta.State, cmd meta.Command) (meta.Command, error) {
	switch cmd.Op {
	case meta.OpCreateTopic:
		if cmd.Topic == nil || (!cmd.Topic.ID.IsZero() && allPlaced(cmd.Topic.Partitions)) {
			return cmd, nil
		}
		t := cmd.Topic
		id := t.ID
		if id.IsZero() {
			id = api.NewTopicID()
		}
		nodes := n.liveNodes(s)
		cfg := t.Config
		if cfg.ReplicationFactor == 0 {
			cfg.ReplicationFactor = int32(n.defaultReplicationFactor(len(nodes)))
		}
		return meta.PrepareCreate(s, t.Name, id, len(t.Partitions), cfg, nodes, time.Now().UnixMilli())
	case meta.OpCreatePartitions:
		if len(cmd.NewPartitions) == 0 || allPlaced(cmd.NewPartitions) {
			return cmd, nil
		}
		t, ok := s.Topics[cmd.Name]
		if !ok {
			return cmd, api.NewError(api.CodeUnknownTopic, "topic %q does not exist", cmd.Name)
		}
		return meta.PrepareCreatePartitions(s, cmd.Name, len(t.Partitions)+len(cmd.NewPartitions), n.liveNodes(s))
	case meta.OpAlterTopic:
		t, ok := s.Topics[cmd.Name]
		if cmd.Config == nil || cmd.Config.MinInsyncReplicas != 0 || !ok || t.ID != cmd.ID {
			return cmd, nil // Apply refuses what is wrong
		}
		cfg := *cmd.Config
		if cfg.ReplicationFactor == 0 {
			cfg.ReplicationFactor = t.Config.ReplicationFactor
		}
		cfg.MinInsyncReplicas = meta.DefaultMinInsync(cfg.ReplicationFactor)
		cmd.Config = &cfg
		return cmd, nil
	case meta.OpRemoveNode:
		if cmd.Leaders != nil {
			return cmd, nil
		}
		leaders, err := meta.LeadersForRemoval(s, cmd.NodeID, n.Alive)
		if err != nil {
			return cmd, err
		}
		cmd.Leaders = leaders
		return cmd, nil
	case meta.OpDrainNode:
		if cmd.Leaders == nil {
			cmd.Leaders = meta.LeadersForDrain(s, cmd.NodeID, n.Alive)
		}
		return cmd, nil
	}
	return cmd, nil
}

// allPlaced reports whether every partition has replicas.
func allPlaced(ps []meta.Partition) bool {
	for _, p := range ps {
		if len(p.Replicas) == 0 {
			return false
		}
	}
	return true
}

// liveNodes returns the ids of the live nodes of s, sorted.
func (n *Node) liveNodes(s *meta.State) []string {
	var out []string
	for id := range s.Nodes {
		if n.Alive(id) {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// defaultReplicationFactor is the replication factor of a topic created
// without one when live nodes are alive.
func (n *Node) defaultReplicationFactor(live int) int {
	if n.opts.DefaultReplicationFactor > 0 {
		return n.opts.DefaultReplicationFactor
	}
	return max(1, min(3, live))
}

// RemoveNode implements the Cluster.RemoveNode RPC (control's
// ClusterBackend): on the controller it moves the leadership of the
// partitions the node leads (meta.LeadersForRemoval), removes it from the
// metadata (meta.OpRemoveNode) and from the Raft configuration; elsewhere
// it forwards the call to the controller. Errors: NotFound (unknown
// node), FailedPrecondition (it leads partitions that hold data),
// NO_QUORUM.
func (n *Node) RemoveNode(ctx context.Context, nodeID string) (*sqv1.RemoveNodeResponse, error) {
	if n.raft.State() != raft.Leader {
		addr, err := n.controllerAddr()
		if err != nil {
			return nil, err
		}
		c, err := n.conns.cluster(addr)
		if err != nil {
			return nil, err
		}
		resp, err := c.RemoveNode(ctx, &sqv1.RemoveNodeRequest{NodeId: nodeID})
		if err != nil {
			if _, ok := status.FromError(err); ok && status.Code(err) != codes.Unavailable {
				return nil, err // NotFound, FailedPrecondition as the controller said
			}
			return nil, fromStatus(err)
		}
		return resp, nil
	}
	inRaft := n.raftServer(nodeID)
	if _, ok := n.State().Nodes[nodeID]; !ok && !inRaft {
		return nil, status.Errorf(codes.NotFound, "node %q is not a member of cluster %q", nodeID, n.opts.ClusterID)
	}
	res, err := n.ProposeCommand(ctx, meta.Command{Op: meta.OpRemoveNode, NodeID: nodeID})
	if err != nil {
		return nil, err
	}
	if res.Err != nil {
		return nil, status.Error(codes.FailedPrecondition, res.Err.WireText())
	}
	if inRaft {
		if err := n.raft.RemoveServer(raft.ServerID(nodeID), 0, n.opts.ProposeTimeout).Error(); err != nil {
			return nil, api.WrapError(api.CodeNoQuorum, err, "remove %s from the raft configuration", nodeID)
		}
	}
	n.log.Info("node removed", "node_id", nodeID, "moved_partitions", res.Moved)
	return &sqv1.RemoveNodeResponse{MovedPartitions: int32(res.Moved)}, nil
}

// raftServer reports whether id is in the Raft configuration.
func (n *Node) raftServer(id string) bool {
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return false
	}
	return slices.ContainsFunc(f.Configuration().Servers, func(s raft.Server) bool { return s.ID == raft.ServerID(id) })
}

// controllerLoop runs until ctx ends: at every membership event, every
// change of Raft leadership and every ControllerInterval it runs tick.
func (n *Node) controllerLoop(ctx context.Context) {
	t := time.NewTicker(n.opts.ControllerInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-n.mem.events:
		case <-n.raft.LeaderCh():
		}
		n.tick(ctx)
	}
}

// tick notices this node's removal, rejoins gossip when it has no peer,
// and on the controller commits the leadership of partitions whose
// leader is not alive (meta.LeadersAfterDeath) and of those a drained
// node still leads that an in-sync follower can take now
// (meta.LeadersAwayFromDrained): gossip reports, the controller decides.
func (n *Node) tick(ctx context.Context) {
	if n.removed.Load() {
		return
	}
	st := n.State()
	self, ok := st.Nodes[n.opts.NodeID]
	switch _, listed := st.RemovedDataDir(n.ident.DataDirID); {
	case listed:
		n.noticeRemoval("the metadata lists this data directory as removed")
		return
	case n.raft.State() == raft.Shutdown:
		n.noticeRemoval("Raft stopped: this node is no longer in the Raft configuration")
		return
	case n.ready.Load() && (!ok || self.DataDirID != n.ident.DataDirID):
		n.noticeRemoval("the metadata no longer lists this node")
		return
	}
	n.rejoinGossip()
	n.probeRemoval(ctx)
	if n.raft.State() != raft.Leader {
		return
	}
	st = n.State()
	changes := meta.LeadersAfterDeath(st, n.aliveForController)
	changes = append(changes, meta.LeadersAwayFromDrained(st, n.Alive)...)
	if len(changes) == 0 {
		return
	}
	res, err := n.ProposeCommand(ctx, meta.Command{Op: meta.OpSetLeaders, Leaders: changes})
	if err == nil && res.Err != nil {
		err = res.Err
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		n.log.Warn("moving the leadership of partitions whose leader is not alive or is drained", "partitions", len(changes), "err", err)
		return
	}
	n.log.Info("moved the leadership of partitions whose leader is not alive or is drained", "moved", res.Moved)
}

// aliveForController is the liveness the controller moves leaders by: a
// node gossip has not met yet counts as alive for the first
// 5 x ControllerInterval of this node's membership, so that a controller
// that has just started does not move leaders away from nodes it has not
// heard of yet; gossip reports a node dead within that time.
func (n *Node) aliveForController(id string) bool {
	if n.Alive(id) {
		return true
	}
	return n.mem.state(id) == StateUnknown && time.Since(n.started) < 5*n.opts.ControllerInterval
}

// probeRemoval covers a removal this node could not see in its own log:
// Raft stops replicating to a removed server as soon as the change is
// appended, so a node removed while its replication lagged may never
// apply the remove-node entry, and Raft does not shut a removed follower
// down; it stays a candidate without a leader. After RemovalProbeAfter
// without a leader it joins again through its seeds or the peers its Raft
// state lists (what a restarted node does): a node that was removed is
// refused (checkRemoved) and notices its removal; one cut off by the
// network gets no answer, and one that is still a member is registered
// as it was. One probe at a time, each bounded by RemovalProbeAfter.
func (n *Node) probeRemoval(ctx context.Context) {
	now, after := time.Now(), n.opts.RemovalProbeAfter
	if leader, _ := n.raft.LeaderWithID(); leader != "" || n.raft.State() == raft.Shutdown {
		n.leaderlessSince = time.Time{}
		return
	}
	if n.leaderlessSince.IsZero() {
		n.leaderlessSince = now
	}
	if now.Sub(n.leaderlessSince) < after || now.Sub(n.lastProbe) < after {
		return
	}
	targets := n.rejoinTargets()
	if len(targets) == 0 || !n.probing.CompareAndSwap(false, true) {
		return
	}
	n.lastProbe = now
	n.goLoop(func() {
		defer n.probing.Store(false)
		pctx, cancel := context.WithTimeout(ctx, after)
		defer cancel()
		if err := n.joinSeeds(pctx, targets); IsRemoved(err) {
			n.noticeRemoval("a node refused its rejoin after " + after.String() + " without a Raft leader: " + err.Error())
		}
	})
}
