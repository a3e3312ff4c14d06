package gossip

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/api/sqv1"
	"github.com/seedqueue/sq/gossip/meta"
	"github.com/seedqueue/sq/internal/ratelog"
)

// connPool holds one gRPC client connection per peer address, closed by
// close.
type connPool struct {
	dial func(ctx context.Context, addr string) (net.Conn, error)
	tls  *tls.Config // nil: plaintext

	mu     sync.Mutex
	conns  map[string]*grpc.ClientConn
	closed bool
}

func newConnPool(dial func(ctx context.Context, addr string) (net.Conn, error), tlsCfg *tls.Config) *connPool {
	return &connPool{dial: dial, tls: tlsCfg, conns: map[string]*grpc.ClientConn{}}
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
	if p.tls != nil {
		// ServerName defaults to the host of addr (gRPC's authority).
		opts = []grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(p.tls))}
	}
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
// writes it), or returns err unchanged. The status message already starts
// with the code's name ("NO_QUORUM: ..."), which the catalog error's text
// adds again: it is cut, so that the code is named once.
func fromStatus(err error) error {
	st, ok := status.FromError(err)
	if !ok || err == nil {
		return err
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			if c, cerr := strconv.Atoi(info.Metadata["code"]); cerr == nil {
				code := api.Code(c)
				e := api.NewError(code, "%s", strings.TrimPrefix(st.Message(), code.String()+": "))
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
// rounds, until one accepts, one refuses for good (the error; IsRemoved
// holds when the cluster removed this data directory's node), or ctx
// ends. Then it joins gossip through the addresses the seed returned. A
// seed that cannot be reached or does not answer as an SQ node is logged
// once, as a WARN with a hint, and tried again at every round.
func (n *Node) joinSeeds(ctx context.Context, seeds []string) error {
	req := n.joinRequest()
	backoff := 50 * time.Millisecond
	warned := map[string]bool{}
	for {
		var last error
		for _, seed := range seeds {
			if seed == n.opts.GRPCAddr {
				continue
			}
			resp, err := n.joinSeed(ctx, seed, req)
			if err == nil {
				n.joinGossip(resp.GossipAddresses)
				n.log.Info("joined the cluster", "seed", seed, "controller", resp.ControllerId)
				return nil
			}
			if ctx.Err() != nil {
				return fmt.Errorf("gossip: join through --seeds %s: %w", strings.Join(seeds, ","), ctx.Err())
			}
			if isRemovedStatus(err) {
				return removedError(seed, err)
			}
			hint, notNode := seedHint(err)
			if !retriable(err) && !notNode {
				return fmt.Errorf("gossip: seed %s refused the join: %w", seed, err)
			}
			if !warned[seed] {
				warned[seed] = true
				// Once per seed: past the server's limiter, which would
				// take the lines about several seeds for repeats.
				n.log.Log(ratelog.Unlimited(ctx), slog.LevelWarn, "cannot join the cluster through this seed yet; retrying",
					"seed", seed, "err", statusText(err), "hint", hint)
			}
			last = fmt.Errorf("seed %s: %w", seed, err)
		}
		if last == nil {
			return errors.New("gossip: --seeds lists only this node's own gRPC address: name a running node, or start without --seeds to form a new cluster")
		}
		n.log.Debug("join failed; retrying", "err", last, "in", backoff)
		select {
		case <-ctx.Done():
			return fmt.Errorf("gossip: join through --seeds %s: %w (last: %v)", strings.Join(seeds, ","), ctx.Err(), last)
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, n.opts.JoinBackoffMax)
	}
}

// statusText is the text of a gRPC error without grpc-go's "rpc error:
// code = ... desc =" framing: the code's name, then the message.
func statusText(err error) string {
	if st, ok := status.FromError(err); ok {
		return st.Code().String() + ": " + st.Message()
	}
	return err.Error()
}

// seedHint explains a failed join through a seed to an operator, and
// reports whether the seed answered but is not an SQ cluster node (which
// is not retriable as such, but another seed may be fine and the node
// may be restarted with clustering).
func seedHint(err error) (hint string, notNode bool) {
	text := err.Error()
	switch code := status.Code(err); {
	case code == codes.Unimplemented:
		return "the address answers gRPC but is not an SQ node that runs in a cluster: --seeds takes the gRPC address (--grpc-host) of a running SQ node", true
	case strings.Contains(text, "connection refused"):
		return "nothing listens at this address: is the node up, and is this its gRPC port (--grpc-host, 6060 by default)?", false
	case strings.Contains(text, "preface") || strings.Contains(text, "http2") || strings.Contains(text, "EOF") || strings.Contains(text, "connection reset") || code == codes.Internal:
		return "something listens at this address but does not speak gRPC: is this the node's gRPC port (--grpc-host), not its data (6064), HTTP (6062), gossip or Raft port?", code != codes.Unavailable
	case code == codes.DeadlineExceeded:
		return "no answer in time: is the address reachable (routes, firewall), and is it the node's gRPC port (--grpc-host)?", false
	case code == codes.Unavailable:
		return "the seed cannot be reached or cannot admit this node now: is the node up, is this its gRPC port (--grpc-host), and does the cluster have a controller?", false
	}
	return "is the seed an SQ node of this cluster, and is this its gRPC address (--grpc-host)?", false
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
		return nil, api.NewError(api.CodeInvalidRequest, "seed %s belongs to cluster %q, this node to %q: give --seeds nodes of cluster %q, or start with --cluster-id %s to join theirs", seed, resp.ClusterId, n.opts.ClusterID, n.opts.ClusterID, resp.ClusterId)
	}
	return resp, nil
}

// rejoinTargets are the gRPC addresses a restarted node rejoins through:
// its seeds, else those of the other nodes its Raft state lists (less
// those it knows were removed).
func (n *Node) rejoinTargets() []string {
	if len(n.opts.Seeds) > 0 {
		return n.opts.Seeds
	}
	st := n.State()
	var out []string
	for _, p := range n.loggedPeers() {
		if _, registered := st.Nodes[p.ID]; !registered && slices.ContainsFunc(st.Removed, func(r meta.RemovedNode) bool { return r.ID == p.ID }) {
			continue // removed since its register-node entry
		}
		if p.GRPCAddr != "" {
			out = append(out, p.GRPCAddr)
		}
	}
	slices.Sort(out)
	return out
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
		err := api.NewError(api.CodeInvalidRequest, "node %q of cluster %q cannot join cluster %q: the cluster ids differ; start it with --cluster-id %s, or give it --seeds of cluster %q", req.NodeId, req.ClusterId, n.opts.ClusterID, n.opts.ClusterID, req.ClusterId)
		n.log.Warn("join refused", "node_id", req.NodeId, "err", err)
		return nil, err
	}
	if req.NodeId == "" || req.RaftAddress == "" || req.GossipAddress == "" || req.GrpcAddress == "" {
		return nil, api.NewError(api.CodeInvalidRequest, "join of node %q: node id, gRPC, gossip and raft addresses are required", req.NodeId)
	}
	if err := n.checkRemoved(req.NodeId, req.DataDirId); err != nil {
		n.log.Warn("join refused: the node was removed from the cluster", "node_id", req.NodeId, "data_dir_id", req.DataDirId)
		return nil, err
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

// checkIdentity refuses a node id that the metadata registers with
// another data directory, alive or not: the partitions it leads hold
// their records in that directory, and a process on another one (an
// empty directory, say) would serve them empty and take new records at
// offsets already used (meta.State.Apply refuses the registration too).
func (n *Node) checkIdentity(req *sqv1.JoinRequest) error {
	old, ok := n.State().Nodes[req.NodeId]
	if !ok || old.DataDirID == "" || old.DataDirID == req.DataDirId {
		return nil
	}
	if n.Alive(req.NodeId) {
		return api.NewError(api.CodeInvalidRequest, "node id %q is alive in cluster %q with another data directory (id %s, the joining one %s): give the new node another --node-id, or stop the running node %q first (a restart on its own data directory keeps its id)", req.NodeId, n.opts.ClusterID, old.DataDirID, req.DataDirId, req.NodeId)
	}
	return api.NewError(api.CodeInvalidRequest, "node id %q is registered in cluster %q with another data directory (id %s, the joining one %s), which holds its partitions' records: restart node %q on its own data directory; to add a new machine give it another --node-id (sq cluster remove-node %s frees the id once its partitions hold no records)", req.NodeId, n.opts.ClusterID, old.DataDirID, req.DataDirId, req.NodeId, req.NodeId)
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
	for _, m := range n.mem.members() {
		if a := m.Address(); a != n.gossipAddr {
			out = append(out, a)
		}
	}
	return out
}
