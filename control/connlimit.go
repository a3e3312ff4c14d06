package control

import (
	"context"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seedqueue/sq/internal/connlimit"
	"github.com/seedqueue/sq/internal/ratelog"
)

// rejectLogInterval is the least time between two WARN lines about gRPC
// connections refused by Options.MaxConnections.
const rejectLogInterval = time.Second

// limitConns wraps ln so that at most Options.MaxConnections accepted
// connections are open at once, and at most Options.MaxConnectionsPerIP
// of one client IP address: one more is closed as soon as it is accepted
// (the client sees the connection reset or closed before the HTTP/2
// preface), counted, and logged at most once per rejectLogInterval.
// Accept never blocks on the limit, so the kernel's backlog never fills.
func (s *Server) limitConns(ln net.Listener) net.Listener {
	return &limitListener{Listener: ln, s: s, perIP: connlimit.NewPerIP(s.opts.MaxConnectionsPerIP)}
}

type limitListener struct {
	net.Listener
	s        *Server
	open     atomic.Int64
	perIP    *connlimit.PerIP
	lastLog  atomic.Int64 // Unix nano of the last WARN
	loggedAt atomic.Uint64
}

// Accept returns the next connection within the limit.
func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.open.Add(1) <= int64(l.s.opts.MaxConnections) {
			release, ok := l.perIP.Acquire(c.RemoteAddr())
			if ok {
				return &limitConn{Conn: c, l: l, releaseIP: release}, nil
			}
			l.open.Add(-1)
			l.reject(c, true)
			continue
		}
		l.open.Add(-1)
		l.reject(c, false)
	}
}

func (l *limitListener) reject(c net.Conn, perIP bool) {
	defer c.Close()
	m := l.s.metrics
	m.grpcRejected.Inc()
	if perIP {
		m.grpcRejectedPerIP.Inc()
	}
	total := m.grpcRejectedCount.Add(1)
	now := time.Now().UnixNano()
	last := l.lastLog.Load()
	if now-last < int64(rejectLogInterval) || !l.lastLog.CompareAndSwap(last, now) {
		return
	}
	since := total - l.loggedAt.Swap(total)
	// Limited here, once a second with the count since the last line: the
	// server's log limiter must not drop lines in between.
	if perIP {
		l.s.opts.Logger.Log(ratelog.Unlimited(context.Background()), slog.LevelWarn, "control: gRPC connection refused: too many connections from one IP address",
			"remote", c.RemoteAddr().String(), "max_connections_per_ip", l.s.opts.MaxConnectionsPerIP,
			"refused_since_last_log", since, "refused_total", total)
		return
	}
	l.s.opts.Logger.Log(ratelog.Unlimited(context.Background()), slog.LevelWarn, "control: gRPC connection refused: too many connections",
		"remote", c.RemoteAddr().String(), "max_connections", l.s.opts.MaxConnections,
		"refused_since_last_log", since, "refused_total", total)
}

type limitConn struct {
	net.Conn
	l         *limitListener
	releaseIP func()
	once      sync.Once
}

// Close closes the connection and frees its places once.
func (c *limitConn) Close() error {
	c.once.Do(func() {
		c.l.open.Add(-1)
		c.releaseIP()
	})
	return c.Conn.Close()
}
