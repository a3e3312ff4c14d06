package sdk

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/seedqueue/sq/api"
)

// DefaultControlAddr is the gRPC control-plane address used when a gRPC
// config leaves Addr empty (sq-server --grpc-host).
const DefaultControlAddr = "127.0.0.1:6060"

// grpcMaxRecvBytes bounds one received gRPC message: a Subscribe
// response holds at least one whole batch, up to the server's batch limit
// (16 MiB by default), plus framing.
const grpcMaxRecvBytes = 64 << 20

// errorDomain is the google.rpc.ErrorInfo domain of catalog errors.
const errorDomain = "seedqueue.io"

// GrpcConfig is the connection part of AdminConfig, GrpcProducerConfig
// and GrpcConsumerConfig. The zero value is valid.
type GrpcConfig struct {
	// Addr is the server's gRPC control-plane address. Default
	// DefaultControlAddr ("127.0.0.1:6060").
	Addr string
	// RequestTimeout bounds each unary call. Default 30s.
	RequestTimeout time.Duration
	// ConnectTimeout bounds Admin.Connect: connecting plus its first
	// call. Default 10s (as ClientConfig.DialTimeout).
	ConnectTimeout time.Duration
	// DialOptions replace the default options (plaintext transport, 64 MiB
	// received-message bound), for example to add TLS credentials.
	DialOptions []grpc.DialOption
	// Dialer opens the TCP connections (DialFunc), to the configured node
	// and to partition leaders, through grpc.WithContextDialer, added
	// after DialOptions. Default: gRPC's own dialer.
	Dialer DialFunc
	// TLSConfig, when set, makes every connection TLS (gRPC transport
	// credentials from credentials.NewTLS, TLS 1.2 at least), to the
	// configured node and to partition leaders, in place of the default
	// plaintext transport; DialOptions that set their own transport
	// credentials conflict with it. ServerName, when empty, is the host
	// of the address dialed; RootCAs nil: the system roots; Certificates
	// for a server with --tls-client-ca. Nil: plaintext.
	TLSConfig *tls.Config
	// SASL, when set, authenticates the calls (SCRAM{User, Password}):
	// the first call to a node runs Users.Authenticate and every call
	// carries its session token, renewed before it expires. A refusal
	// fails the call with an error matching api.ErrAuthenticationFailed.
	// Nil: anonymous calls (or authenticated by the client certificate).
	SASL SASLMechanism
}

func (c *GrpcConfig) defaults() {
	if c.Addr == "" {
		c.Addr = DefaultControlAddr
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = 30 * time.Second
	}
	if c.ConnectTimeout <= 0 {
		c.ConnectTimeout = DefaultDialTimeout
	}
}

// dialGrpc creates the client connection; it does not block (gRPC
// connects on the first call).
func dialGrpc(c GrpcConfig) (*grpc.ClientConn, error) {
	opts := c.DialOptions
	creds := insecure.NewCredentials()
	if c.TLSConfig != nil {
		creds = credentials.NewTLS(withMinTLS(c.TLSConfig))
	}
	if len(opts) == 0 {
		opts = []grpc.DialOption{grpc.WithTransportCredentials(creds),
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(grpcMaxRecvBytes))}
	} else if c.TLSConfig != nil {
		opts = append(slices.Clip(opts), grpc.WithTransportCredentials(creds))
	}
	if c.Dialer != nil {
		dial := c.Dialer
		opts = append(slices.Clip(opts), grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return dial(ctx, "tcp", addr)
		}))
	}
	var sc *scramCreds
	if c.SASL != nil {
		sc = &scramCreds{mech: c.SASL}
		opts = append(slices.Clip(opts), grpc.WithPerRPCCredentials(sc), grpc.WithChainUnaryInterceptor(sc.retryUnary))
	}
	conn, err := grpc.NewClient(c.Addr, opts...)
	if err != nil {
		return nil, fmt.Errorf("%w: gRPC client for %s: %w", ErrConnection, c.Addr, err)
	}
	if sc != nil {
		sc.conn = conn // before the first call: NewClient does not connect
	}
	return conn, nil
}

// fromStatus turns a gRPC error into the SDK's errors: a status with a
// catalog ErrorInfo becomes the *api.Error it carries (so errors.Is
// against the api sentinels works), Unavailable without one wraps
// ErrConnection, context errors stay themselves, anything else keeps the
// gRPC status (test it with status.Code).
func fromStatus(err error) error {
	if err == nil {
		return nil
	}
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	for _, d := range st.Details() {
		ei, ok := d.(*errdetails.ErrorInfo)
		if !ok || ei.Domain != errorDomain {
			continue
		}
		code, _ := strconv.Atoi(ei.Metadata["code"])
		e := &api.Error{Code: api.Code(code), Message: st.Message()}
		if name := api.Code(code).String() + ": "; len(e.Message) > len(name) && e.Message[:len(name)] == name {
			e.Message = e.Message[len(name):]
		}
		if s, ok := ei.Metadata["range_start"]; ok {
			e.RangeStart, _ = strconv.ParseUint(s, 10, 64)
			e.RangeEnd, _ = strconv.ParseUint(ei.Metadata["range_end"], 10, 64)
			e.HasRange = true
		}
		e.LeaderID, e.LeaderAddr = ei.Metadata["leader_id"], ei.Metadata["leader_address"]
		return e
	}
	switch st.Code() {
	case codes.Unavailable:
		return fmt.Errorf("%w: %v", ErrConnection, st.Message())
	case codes.Canceled:
		return errors.Join(context.Canceled, err)
	case codes.DeadlineExceeded:
		return errors.Join(context.DeadlineExceeded, err)
	}
	return err
}

// unary runs one call with the request timeout and converts its error.
func unary[Req, Resp any](ctx context.Context, timeout time.Duration, call func(context.Context, Req, ...grpc.CallOption) (Resp, error), req Req) (Resp, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	resp, err := call(ctx, req)
	return resp, fromStatus(err)
}
