package gossip

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/api/sqv1"
	"github.com/seedqueue/sq/control"
	"github.com/seedqueue/sq/gossip/meta"
)

// refusingTopics answers every DescribeTopic with err, as control does.
type refusingTopics struct {
	sqv1.UnimplementedTopicsServer
	err error
}

func (s refusingTopics) DescribeTopic(context.Context, *sqv1.DescribeTopicRequest) (*sqv1.DescribeTopicResponse, error) {
	return nil, control.ToStatus(s.err)
}

// PeerDescribe turns a peer's gRPC status back into the catalog error it
// carries, so a describe can tell a peer that lags (UNKNOWN_TOPIC) from
// one that cannot answer.
func TestPeerDescribeKeepsTheCatalogError(t *testing.T) {
	n := mustStart(t, testOptions(t, "n1", t.TempDir()))
	waitReady(t, n)
	for _, want := range []error{api.ErrUnknownTopic, api.ErrLeaderNotAvailable} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := grpc.NewServer()
		sqv1.RegisterTopicsServer(srv, refusingTopics{err: api.NewError(api.AsError(want).Code, "refused by the peer")})
		go func() { _ = srv.Serve(ln) }()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		peer := "peer-" + api.AsError(want).Code.String()
		res, err := n.ProposeCommand(ctx, meta.Command{Op: meta.OpRegisterNode, Node: &meta.Node{ID: peer, GRPCAddr: ln.Addr().String(), DataAddr: ln.Addr().String()}})
		if err != nil || res.Err != nil {
			t.Fatalf("register %s: %v %v", peer, err, res.Err)
		}
		_, err = n.BrokerCluster().PeerDescribe(ctx, peer, "t")
		cancel()
		srv.Stop()
		if !errors.Is(err, want) {
			t.Fatalf("PeerDescribe of a peer refusing with %v: %v", want, err)
		}
	}
}
