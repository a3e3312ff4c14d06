package main

import (
	"context"
	"crypto/tls"
	"errors"
	"time"

	"github.com/spf13/cobra"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/sdk"
)

// Routing of the requests sq sends on an sdk.Client itself: the publish
// of prebuilt batches (sq produce), fetches (sq bench's consumers) and
// ListOffsets (--from-time). In a cluster each partition is served by its
// leader, and the other nodes answer NOT_LEADER naming it (docs/cluster.md);
// these requests go through an sdk.Producer's client core, which knows
// each partition's leader from the metadata, holds one connection per
// leader and follows NOT_LEADER (sdk Producer.LeaderClient, NoteError).
// Requests about a whole topic (describe, create) go to the bootstrap
// node, Producer.Client, which answers them for the cluster.

// followLimit is how many times onLeader sends a request again after a
// NOT_LEADER answer, each time to the leader that answer named (or the
// metadata names): enough to follow a leadership change made while the
// request was on its way, bounded against two nodes naming each other.
const followLimit = 3

// onLeader runs req on the connection to partition p's leader as r knows
// it (reading the topic's metadata first when it is stale, within ctx)
// and reports a failure to r, so that the next call goes to the leader a
// NOT_LEADER named, or reads the metadata again. A NOT_LEADER is followed
// at once, up to followLimit times (a refused request was not applied);
// other failures are the caller's to retry. It returns req's answer.
func onLeader[T any](ctx context.Context, r *sdk.Producer, topic string, p uint32, req func(*sdk.Client) (T, error)) (T, error) {
	for attempt := 0; ; attempt++ {
		res, err := req(r.LeaderClient(ctx, topic, p))
		if err == nil {
			return res, nil
		}
		r.NoteError(topic, p, err)
		if !errors.Is(err, api.ErrNotLeader) || attempt >= followLimit || ctx.Err() != nil {
			return res, err
		}
	}
}

// dialRouter connects to addr within timeout and returns the routing
// core for requests sent on a Client: an sdk.Producer through which no
// record is sent (onLeader). clientID names it to the server; tc, when
// not nil, makes its connections TLS; sasl, when not nil, authenticates
// them.
func dialRouter(ctx context.Context, addr, clientID string, timeout time.Duration, tc *tls.Config, sasl sdk.SASLMechanism) (*sdk.Producer, error) {
	return sdk.NewProducer(ctx, sdk.ProducerConfig{Addr: addr, ClientID: clientID, DialTimeout: timeout, TLSConfig: tc, SASL: sasl})
}

// dialRouter is g.dial for commands that send partition requests on a
// Client themselves: the routing core of the server the flags name, within
// --timeout. Errors name the address and flags as g.dial's do.
func (g *globals) dialRouter(cmd *cobra.Command) (*sdk.Producer, error) {
	addr := g.addr(cmd)
	timeout, err := g.connectTimeout(cmd)
	if err != nil {
		return nil, err
	}
	r, err := dialRouter(cmd.Context(), addr, "sq-cli", timeout, g.tlsConf, g.sasl)
	if err != nil {
		return nil, connectError(addr, err)
	}
	return r, nil
}
