package main

import (
	"context"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/engine"
	"github.com/seedqueue/sq/gossip"
	"github.com/seedqueue/sq/internal/tlsconf"
	"github.com/seedqueue/sq/net/dataplane"
)

// replicaConn is a gossip.ReplicaConn over a data-plane replica
// connection (dataplane.ReplicaClient) to a partition leader.
type replicaConn struct{ c *dataplane.ReplicaClient }

// FetchReplica implements gossip.ReplicaConn.
func (r replicaConn) FetchReplica(ctx context.Context, f engine.ReplicaFetch) (gossip.ReplicaFetched, error) {
	res, err := r.c.FetchReplica(ctx, f)
	if err != nil {
		return gossip.ReplicaFetched{}, err
	}
	return gossip.ReplicaFetched{HighWatermark: res.HighWatermark, LogStartOffset: res.LogStartOffset, LeaderEpoch: res.LeaderEpoch, Batches: res.Batches}, nil
}

// EndOffsetForEpoch implements gossip.ReplicaConn.
func (r replicaConn) EndOffsetForEpoch(ctx context.Context, topic string, id api.TopicID, partition int, epoch uint32) (uint32, uint64, error) {
	return r.c.EndOffsetForEpoch(ctx, topic, id, partition, epoch)
}

// Close implements gossip.ReplicaConn.
func (r replicaConn) Close() error { return r.c.Close() }

// replicaDialer returns the Replicator's dialer of leaders' data planes:
// a dataplane.ReplicaClient that introduces itself as node nodeID, over
// TLS with tlsr's peer configuration when tlsr is not nil (the node's
// certificate as client certificate).
func replicaDialer(nodeID string, tlsr *tlsconf.Reloader) func(ctx context.Context, addr string) (gossip.ReplicaConn, error) {
	var ro dataplane.ReplicaClientOptions
	if tlsr != nil {
		ro.Dialer = tlsconf.Dialer(tlsr.PeerConfig(), nil)
	}
	return func(ctx context.Context, addr string) (gossip.ReplicaConn, error) {
		c, err := dataplane.Dial(ctx, addr, nodeID, ro)
		if err != nil {
			return nil, err
		}
		return replicaConn{c}, nil
	}
}
