package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/api/sqv1"
	"github.com/seedqueue/sq/sdk"
)

// controlRequestTimeout bounds one control-plane call after the connection
// is checked (the Admin's request timeout).
const controlRequestTimeout = 30 * time.Second

// errorDomain is the ErrorInfo domain of SQ's catalog errors on the gRPC
// control plane (control.ErrorDomain).
const errorDomain = "seedqueue.io"

// controlConn is the control plane at addr, checked by sdk.Admin.Connect,
// with the sq.v1 clients for the calls and fields the Admin does not carry
// (cluster membership and metadata, topic placement and replication
// factor).
type controlConn struct {
	addr    string
	admin   *sdk.Admin
	conn    *grpc.ClientConn
	cluster sqv1.ClusterClient
	topics  sqv1.TopicsClient
}

// controlConn connects to the control plane named by the flags (--control,
// SQ_CONTROL) and checks, within --timeout, that it is SQ's.
func (g *globals) controlConn(cmd *cobra.Command) (*controlConn, error) {
	a, err := g.admin(cmd)
	if err != nil {
		return nil, err
	}
	addr := g.controlAddr(cmd)
	conn := a.Conn() // with the TLS and SASL credentials of the flags
	return &controlConn{addr: addr, admin: a, conn: conn,
		cluster: sqv1.NewClusterClient(conn), topics: sqv1.NewTopicsClient(conn)}, nil
}

// Close closes the connection.
func (c *controlConn) Close() {
	c.admin.Close()
}

// call runs one unary call bounded by controlRequestTimeout and explains
// its error (callError).
func call[Req, Resp any](ctx context.Context, c *controlConn, name string, f func(context.Context, Req, ...grpc.CallOption) (Resp, error), req Req) (Resp, error) {
	ctx, cancel := context.WithTimeout(ctx, controlRequestTimeout)
	defer cancel()
	resp, err := f(ctx, req)
	if err != nil {
		return resp, c.callError(name, err)
	}
	return resp, nil
}

// callError explains a failed call of name: a catalog error ("NAME:
// message"), a server that does not offer the call or is not part of a
// cluster, or a connection failure, naming the address and flags.
func (c *controlConn) callError(name string, err error) error {
	st, ok := status.FromError(err)
	if !ok {
		return controlError(c.addr, err)
	}
	if e := catalogError(st); e != nil {
		return e
	}
	switch st.Code() {
	case codes.Unimplemented:
		return fmt.Errorf("the SQ server at %s does not offer %s (it predates clustering; upgrade it, or ask another node with --control)", c.addr, name)
	case codes.FailedPrecondition:
		return fmt.Errorf("%s: the node at %s answers: %s", name, c.addr, st.Message())
	case codes.Unavailable:
		return fmt.Errorf("cannot reach the SQ control plane at %s (set the address with --control or %s): %s", c.addr, controlEnv, st.Message())
	case codes.DeadlineExceeded:
		return fmt.Errorf("%s: no answer from %s within %v", name, c.addr, controlRequestTimeout)
	}
	return fmt.Errorf("%s at %s: %s: %s", name, c.addr, st.Code(), st.Message())
}

// catalogError returns the *api.Error carried in st's ErrorInfo details
// (control.ToStatus), or nil when st has none.
func catalogError(st *status.Status) *api.Error {
	for _, d := range st.Details() {
		ei, ok := d.(*errdetails.ErrorInfo)
		if !ok || ei.Domain != errorDomain {
			continue
		}
		code, _ := strconv.Atoi(ei.Metadata["code"])
		e := &api.Error{Code: api.Code(code), Message: strings.TrimPrefix(st.Message(), api.Code(code).String()+": "),
			LeaderID: ei.Metadata["leader_id"], LeaderAddr: ei.Metadata["leader_address"]}
		return e
	}
	return nil
}
