package gossip

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/api/sqv1"
	"github.com/seedqueue/sq/gossip/meta"
)

// connPool holds one gRPC client connection per peer address, closed by
// close.
type connPool struct {
	dial func(ctx context.Context, addr string) (net.Conn, error)

	mu     sync.Mutex
	conns  map[string]*grpc.ClientConn
	closed bool
}

func newConnPool(dial func(ctx context.Context, addr string) (net.Conn, error)) *connPool {
	return &connPool{dial: dial, conns: map[string]*grpc.ClientConn{}}
}

// cluster returns a Cluster client of addr.
func (p *connPool) cluster(addr string) (sqv1.ClusterClient, error) {
	c, err := p.conn(addr)
	if err != nil {
		return nil, err
	}
	return sqv1.NewClusterClient(c), nil
}

// conn returns the pool's connection to addr, made on first use.
func (p *connPool) conn(addr string) (*grpc.ClientConn, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, errors.New("gossip: node closed")
	}
	if c, ok := p.conns[addr]; ok {
		return c, nil
	}
	opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	if p.dial != nil {
		opts = append(opts, grpc.WithContextDialer(p.dial))
	}
	c, err := grpc.NewClient(addr, opts...)
	if err != nil {
		return nil, fmt.Errorf("gossip: dial %s: %w", addr, err)
	}
	p.conns[addr] = c
	return c, nil
}

func (p *connPool) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for _, c := range p.conns {
		c.Close()
	}
	clear(p.conns)
}

// fromStatus turns a gRPC error of a peer back into the catalog error it
// carries (google.rpc.ErrorInfo metadata "code", as control.ToStatus
// writes it), or returns err unchanged.
func fromStatus(err error) error {
	st, ok := status.FromError(err)
	if !ok || err == nil {
		return err
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			if c, cerr := strconv.Atoi(info.Metadata["code"]); cerr == nil {
				e := api.NewError(api.Code(c), "%s", st.Message())
				e.LeaderID, e.LeaderAddr = info.Metadata["leader_id"], info.Metadata["leader_address"]
				return e
			}
		}
	}
	return err
}

// retriable reports whether a failed call to a peer may succeed later:
// a retriable catalog error, or a transport failure.
func retriable(err error) bool {
	var e *api.Error
	if errors.As(err, &e) {
		return e.Retriable()
	}
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled, codes.Unknown, codes.Aborted, codes.ResourceExhausted:
		return true
	}
	return false
}

// joinRequest describes this node to the cluster.
func (n *Node) joinRequest() *sqv1.JoinRequest {
	return &sqv1.JoinRequest{
		ClusterId: n.opts.ClusterID, NodeId: n.opts.NodeID, DataDirId: n.ident.DataDirID,
		GrpcAddress: n.opts.GRPCAddr, CapnpAddress: n.opts.DataAddr, HttpAddress: n.opts.HTTPAddr,
		GossipAddress: n.gossipAddr, RaftAddress: n.raftAddr,
	}
}

// joinSeeds asks each seed in turn to join, with a growing pause between
// rounds, until one accepts, one refuses for good (the error), or ctx
// ends. Then it joins gossip through the addresses the seed returned.
func (n *Node) joinSeeds(ctx context.Context) error {
	req := n.joinRequest()
	backoff := 50 * time.Millisecond
	for {
		var last error
		for _, seed := range n.opts.Seeds {
			if seed == n.opts.GRPCAddr {
				continue
			}
			resp, err := n.joinSeed(ctx, seed, req)
			if err == nil {
				n.joinGossip(resp.GossipAddresses)
				n.log.Info("joined the cluster", "seed", seed, "controller", resp.ControllerId)
				return nil
			}
			if !retriable(err) {
				return fmt.Errorf("gossip: join through seed %s refused: %w", seed, err)
			}
			last = fmt.Errorf("seed %s: %w", seed, err)
		}
		if last == nil {
			return errors.New("gossip: --seeds lists only this node")
		}
		n.log.Info("join failed; retrying", "err", last, "in", backoff)
		select {
		case <-ctx.Done():
			return fmt.Errorf("gossip: join: %w (last: %v)", ctx.Err(), last)
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, n.opts.JoinBackoffMax)
	}
}

func (n *Node) joinSeed(ctx context.Context, seed string, req *sqv1.JoinRequest) (*sqv1.JoinResponse, error) {
	c, err := n.conns.cluster(seed)
	if err != nil {
		return nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, n.opts.ProposeTimeout)
	defer cancel()
	resp, err := c.Join(cctx, req)
	if err != nil {
		return nil, fromStatus(err)
	}
	if resp.ClusterId != n.opts.ClusterID {
		return nil, api.NewError(api.CodeInvalidRequest, "seed %s belongs to cluster %q, this node to %q", seed, resp.ClusterId, n.opts.ClusterID)
	}
	return resp, nil
}

// joinGossip joins memberlist through addrs (this node's own left out).
func (n *Node) joinGossip(addrs []string) {
	addrs = slices.DeleteFunc(slices.Clone(addrs), func(a string) bool { return a == n.gossipAddr || a == "" })
	if len(addrs) == 0 {
		return
	}
	if _, err := n.mem.ml.Join(addrs); err != nil {
		n.log.Info("gossip join", "addrs", addrs, "err", err)
	}
}

// rejoinGossip joins memberlist through the gossip addresses of the other
// nodes of the applied metadata, when this node has no live peer.
func (n *Node) rejoinGossip() {
	if n.mem.ml.NumMembers() > 1 {
		return
	}
	var addrs []string
	for _, m := range n.State().Nodes {
		if m.ID != n.opts.NodeID {
			addrs = append(addrs, m.GossipAddr)
		}
	}
	n.joinGossip(addrs)
}

// Join implements the Cluster.Join RPC (control's ClusterBackend) on a
// seed: it refuses a node of another cluster and a node id alive with
// another data directory, and otherwise has the controller register the
// node and add it to Raft (a voter while there are fewer than MaxVoters,
// else a non-voter); a node that is not the controller forwards the join
// to it. The answer lists the gossip addresses of the live members.
func (n *Node) Join(ctx context.Context, req *sqv1.JoinRequest) (*sqv1.JoinResponse, error) {
	if req.ClusterId != n.opts.ClusterID {
		err := api.NewError(api.CodeInvalidRequest, "node %q of cluster %q cannot join cluster %q: the cluster ids differ (--cluster-id)", req.NodeId, req.ClusterId, n.opts.ClusterID)
		n.log.Warn("join refused", "node_id", req.NodeId, "err", err)
		return nil, err
	}
	if req.NodeId == "" || req.RaftAddress == "" || req.GossipAddress == "" || req.GrpcAddress == "" {
		return nil, api.NewError(api.CodeInvalidRequest, "join of node %q: node id, gRPC, gossip and raft addresses are required", req.NodeId)
	}
	if err := n.checkIdentity(req); err != nil {
		n.log.Warn("join refused", "node_id", req.NodeId, "err", err)
		return nil, err
	}
	if n.raft.State() != raft.Leader {
		return n.forwardJoin(ctx, req)
	}
	if err := n.admit(ctx, req); err != nil {
		return nil, err
	}
	return &sqv1.JoinResponse{ClusterId: n.opts.ClusterID, GossipAddresses: n.gossipAddrs(), ControllerId: n.opts.NodeID}, nil
}

// checkIdentity refuses a node id that is alive with another data
// directory.
func (n *Node) checkIdentity(req *sqv1.JoinRequest) error {
	old, ok := n.State().Nodes[req.NodeId]
	if ok && old.DataDirID != req.DataDirId && n.Alive(req.NodeId) {
		return api.NewError(api.CodeInvalidRequest, "node id %q is alive in cluster %q with another data directory (id %s, this one %s): give the new node another --node-id", req.NodeId, n.opts.ClusterID, old.DataDirID, req.DataDirId)
	}
	return nil
}

// forwardJoin sends a join to the controller.
func (n *Node) forwardJoin(ctx context.Context, req *sqv1.JoinRequest) (*sqv1.JoinResponse, error) {
	addr, err := n.controllerAddr()
	if err != nil {
		return nil, err
	}
	c, err := n.conns.cluster(addr)
	if err != nil {
		return nil, err
	}
	resp, err := c.Join(ctx, req)
	if err != nil {
		return nil, fromStatus(err)
	}
	return resp, nil
}

// controllerAddr returns the gRPC address of the Raft leader (from the
// metadata, else from its gossip meta), or a
// retriable NO_QUORUM error while none is known.
func (n *Node) controllerAddr() (string, error) {
	_, id := n.raft.LeaderWithID()
	if id == "" {
		return "", api.NewError(api.CodeNoQuorum, "no controller (Raft leader) known")
	}
	if m, ok := n.State().Nodes[string(id)]; ok && m.GRPCAddr != "" {
		return m.GRPCAddr, nil
	}
	// A node that has not caught up yet finds it in gossip.
	if ml, ok := n.mem.members()[string(id)]; ok {
		var nm nodeMeta
		if json.Unmarshal(ml.Meta, &nm) == nil && nm.GRPCAddr != "" {
			return nm.GRPCAddr, nil
		}
	}
	return "", api.NewError(api.CodeNoQuorum, "controller %s has no gRPC address in the applied metadata or gossip yet", id)
}

// admit registers a joining node and adds it to the Raft configuration
// (on the controller).
func (n *Node) admit(ctx context.Context, req *sqv1.JoinRequest) error {
	node := &meta.Node{
		ID: req.NodeId, DataDirID: req.DataDirId, GRPCAddr: req.GrpcAddress, DataAddr: req.CapnpAddress,
		HTTPAddr: req.HttpAddress, GossipAddr: req.GossipAddress, RaftAddr: req.RaftAddress,
	}
	res, err := n.ProposeCommand(ctx, meta.Command{Op: meta.OpRegisterNode, Node: node})
	if err != nil {
		return err
	}
	if res.Err != nil {
		return res.Err
	}
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return api.WrapError(api.CodeNoQuorum, err, "raft configuration")
	}
	voters := 0
	for _, s := range f.Configuration().Servers {
		if s.ID == raft.ServerID(req.NodeId) && s.Address == raft.ServerAddress(req.RaftAddress) {
			return nil // a restart at the same address
		}
		if s.Suffrage == raft.Voter && s.ID != raft.ServerID(req.NodeId) {
			voters++
		}
	}
	var fut raft.IndexFuture
	if voters < n.opts.MaxVoters {
		fut = n.raft.AddVoter(raft.ServerID(req.NodeId), raft.ServerAddress(req.RaftAddress), 0, n.opts.ProposeTimeout)
	} else {
		fut = n.raft.AddNonvoter(raft.ServerID(req.NodeId), raft.ServerAddress(req.RaftAddress), 0, n.opts.ProposeTimeout)
	}
	if err := fut.Error(); err != nil {
		return api.WrapError(api.CodeNoQuorum, err, "add %s to the raft configuration", req.NodeId)
	}
	n.log.Info("node joined", "node_id", req.NodeId, "voter", voters < n.opts.MaxVoters, "raft_addr", req.RaftAddress)
	return nil
}

// gossipAddrs returns the gossip addresses of the live members, this
// node's first.
func (n *Node) gossipAddrs() []string {
	out := []string{n.gossipAddr}
	for _, m := range n.mem.ml.Members() {
		if a := m.Address(); a != n.gossipAddr {
			out = append(out, a)
		}
	}
	return out
}
