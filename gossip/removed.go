package gossip

import (
	"fmt"
	"path/filepath"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// removedReason is the google.rpc.ErrorInfo reason of a Cluster.Join
// refused because the joining data directory belongs to a removed node:
// the joining node stops instead of retrying.
const removedReason = "NODE_REMOVED"

// errorInfoDomain is the google.rpc.ErrorInfo domain of the cluster's own
// refusals (the catalog's errors carry control.ErrorDomain).
const errorInfoDomain = "cluster.sq"

// removedStatus is the gRPC error of a join refused for a removed data
// directory (FailedPrecondition, ErrorInfo reason NODE_REMOVED).
func removedStatus(format string, args ...any) error {
	st := status.New(codes.FailedPrecondition, fmt.Sprintf(format, args...))
	if d, err := st.WithDetails(&errdetails.ErrorInfo{Reason: removedReason, Domain: errorInfoDomain}); err == nil {
		st = d
	}
	return st.Err()
}

// isRemovedStatus reports whether err is removedStatus's error, as a
// peer sent it.
func isRemovedStatus(err error) bool {
	st, ok := status.FromError(err)
	if !ok || err == nil {
		return false
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.Reason == removedReason && info.Domain == errorInfoDomain {
			return true
		}
	}
	return false
}

// Removed returns a channel closed once this node has learned that it
// was removed from the cluster (sq cluster remove-node): it has recorded
// the removal in its node.json, stopped its Raft replica and left gossip.
// The server should then stop (sq-server exits with status 1).
func (n *Node) Removed() <-chan struct{} { return n.removedCh }

// checkRemoved refuses the join of a data directory whose node was
// removed (State.Removed): the node must start on an empty data
// directory.
func (n *Node) checkRemoved(nodeID, dataDirID string) error {
	r, ok := n.State().RemovedDataDir(dataDirID)
	if !ok {
		return nil
	}
	return removedStatus("node %q cannot join cluster %q: its data directory (id %s) belongs to node %q, which was removed from the cluster (sq cluster remove-node); to add the machine again, start it with an empty --data-dir",
		nodeID, n.opts.ClusterID, dataDirID, r.ID)
}

// noticeRemoval stops this node's part in the cluster after it was
// removed (sq cluster remove-node): the metadata no longer lists it or
// lists its data directory as removed, Raft shut down on its removal from
// the configuration, or a seed refused its rejoin (how says which). It
// logs an ERROR saying what to do, writes removed_at into node.json (a
// restart on this data directory is refused), stops Raft, leaves gossip
// and closes Removed.
func (n *Node) noticeRemoval(how string) {
	if n.closing.Load() || n.removed.Swap(true) {
		return
	}
	n.log.Error("this node was removed from the cluster (sq cluster remove-node) and stops; it cannot rejoin with this data directory: to add the machine again, start sq-server with an empty --data-dir",
		"node_id", n.opts.NodeID, "cluster_id", n.opts.ClusterID, "data_dir", n.opts.DataDir, "noticed", how)
	if err := markRemoved(filepath.Join(n.opts.DataDir, "cluster"), n.ident, time.Now()); err != nil {
		n.log.Error("recording the removal in node.json", "err", err)
	}
	if err := n.stopRaft(); err != nil {
		n.log.Warn("raft shutdown after removal", "err", err)
	}
	if err := n.mem.leave(time.Second); err != nil {
		n.log.Debug("gossip leave", "err", err)
	}
	close(n.removedCh)
}

// removedError is Start's error for a data directory that a seed refused
// as removed: IsRemoved holds for it.
func removedError(seed string, err error) error {
	msg := err.Error()
	if st, ok := status.FromError(err); ok {
		msg = st.Message()
	}
	return fmt.Errorf("gossip: %w: seed %s refused the join: %s", errRemovedDataDir, seed, msg)
}
