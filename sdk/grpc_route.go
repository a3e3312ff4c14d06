package sdk

import (
	"context"
	"errors"
	"sync"

	"google.golang.org/grpc"

	"github.com/seedqueue/sq/api/sqv1"
)

// grpcLeaders is the gRPC side of the client core's routing
// (docs/architecture.md §4.1): GrpcProducer and GrpcConsumer talk to the
// configured node (the bootstrap connection) and, for each partition led
// by another node, to that node's gRPC address, read from Cluster.Members
// with the topic's placement (grpcMetadata) or named by a NOT_LEADER
// through the brokers list. One client connection per address, made on
// first use; the bootstrap one also carries the group and offset calls
// (that node forwards them to the group's coordinator, docs/cluster.md).
type grpcLeaders struct {
	cfg  GrpcConfig
	core *cluster
	boot *grpc.ClientConn

	mu     sync.Mutex
	conns  map[string]*grpc.ClientConn // gRPC address -> connection, besides boot
	closed bool
}

func newGrpcLeaders(cfg GrpcConfig, core *cluster, boot *grpc.ClientConn) *grpcLeaders {
	return &grpcLeaders{cfg: cfg, core: core, boot: boot, conns: map[string]*grpc.ClientConn{}}
}

// messaging returns the Messaging client of partition's leader (see
// cluster.leader: the metadata is read again first when a request about
// the topic failed). A leader connection that cannot be made (an address
// gRPC refuses) falls back to the bootstrap one, which answers for the
// partition (NOT_LEADER, say).
func (g *grpcLeaders) messaging(ctx context.Context, topic string, partition uint32) sqv1.MessagingClient {
	b := g.core.leader(ctx, topic, partition)
	return sqv1.NewMessagingClient(g.conn(b.addr))
}

// conn returns the connection to addr: the bootstrap one for "" and the
// configured address, else one per address, made on first use.
func (g *grpcLeaders) conn(addr string) *grpc.ClientConn {
	if addr == "" || addr == g.cfg.Addr {
		return g.boot
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return g.boot // closed too: the call fails as after Close
	}
	if c := g.conns[addr]; c != nil {
		return c
	}
	cfg := g.cfg
	cfg.Addr = addr
	c, err := dialGrpc(cfg)
	if err != nil {
		return g.boot
	}
	g.conns[addr] = c
	return c
}

// close closes the leader connections (not the bootstrap one, which the
// Admin owns).
func (g *grpcLeaders) close() error {
	g.mu.Lock()
	conns := g.conns
	g.conns = map[string]*grpc.ClientConn{}
	g.closed = true
	g.mu.Unlock()
	var errs []error
	for _, c := range conns {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}
