package sdk

import (
	"context"
	"net"
)

// DialFunc opens a connection to addr on network ("tcp"), as
// net.Dialer.DialContext does; ctx carries the dial's deadline (the
// config's DialTimeout or ConnectTimeout, or the caller's). Every client
// type takes one (ClientConfig.Dialer, ProducerConfig.Dialer,
// ConsumerConfig.Dialer, GrpcConfig.Dialer for Admin, GrpcProducer and
// GrpcConsumer) and opens every connection through it: the bootstrap
// one, those to partition leaders, and the probes that tell what answers
// at an address. Tests use it to reach nodes in other network
// namespaces or to count and fail dials. nil dials with net.Dialer.
type DialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// dialContext dials addr over TCP with d, or with net.Dialer when d is nil.
func (d DialFunc) dialContext(ctx context.Context, addr string) (net.Conn, error) {
	if d == nil {
		var nd net.Dialer
		return nd.DialContext(ctx, "tcp", addr)
	}
	return d(ctx, "tcp", addr)
}
