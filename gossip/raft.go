package gossip

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/gossip/meta"
	"github.com/seedqueue/sq/internal/tlsconf"
)

// applied is one published state: the metadata and the index of the last
// log entry applied to it. Published together so that an index always
// matches its state's hash.
type applied struct {
	state *meta.State
	index uint64
}

// fsm is the Raft state machine: it applies meta commands to a clone of
// the current state and publishes the result. Raft calls Apply, Snapshot,
// Restore and StoreConfiguration from one goroutine.
type fsm struct {
	onApply func(prev, next *meta.State)
	log     *slog.Logger

	// hookMu orders the calls of onApply (Apply, Restore and release).
	hookMu sync.Mutex
	// replayTo is the last index of the log store when the node started:
	// the entries up to it are a replay of what this node applied before,
	// and onApply is held back until the replay reaches it (or release),
	// then called once with the state then (prev nil). A restarted node
	// thus never reconciles its storage with an intermediate state of
	// its history (a topic deleted and created again, say, whose local
	// copy would look unknown to the metadata for a while).
	replayTo uint64
	held     bool // onApply was skipped since the start

	mu      sync.Mutex
	cur     applied
	advance chan struct{} // closed and replaced at every new index
}

func newFSM(onApply func(prev, next *meta.State), log *slog.Logger) *fsm {
	return &fsm{onApply: onApply, log: log, cur: applied{state: meta.NewState()}, advance: make(chan struct{})}
}

// current returns the latest published state and index.
func (f *fsm) current() applied {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.cur
}

// publish makes a the current state and wakes the waiters.
func (f *fsm) publish(a applied) {
	f.mu.Lock()
	f.cur = a
	close(f.advance)
	f.advance = make(chan struct{})
	f.mu.Unlock()
}

// wait returns once the applied index reaches index, or ctx's error.
func (f *fsm) wait(ctx context.Context, index uint64) error {
	for {
		f.mu.Lock()
		at, ch := f.cur.index, f.advance
		f.mu.Unlock()
		if at >= index {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Apply implements raft.FSM: it returns the command's meta.Result. An
// entry that does not decode is refused (INVALID_REQUEST) on every node
// alike, so the states stay equal.
func (f *fsm) Apply(l *raft.Log) any {
	prev := f.current()
	cmd, err := meta.Decode(l.Data)
	if err != nil {
		f.publish(applied{state: prev.state, index: l.Index})
		return meta.Result{Err: api.NewError(api.CodeInvalidRequest, "undecodable metadata command at index %d: %v", l.Index, err)}
	}
	next := prev.state.Clone()
	res := next.Apply(cmd)
	if res.Err != nil {
		f.publish(applied{state: prev.state, index: l.Index})
		return res
	}
	f.publish(applied{state: next, index: l.Index})
	f.hook(prev.state, next, l.Index)
	return res
}

// hook calls onApply(prev, next) for the state at index, unless the
// replay has not reached replayTo: then it records that a call is held.
// The first call after held ones passes prev nil (a full pass).
func (f *fsm) hook(prev, next *meta.State, index uint64) {
	if f.onApply == nil {
		return
	}
	f.hookMu.Lock()
	defer f.hookMu.Unlock()
	if index < f.replayTo {
		f.held = true
		return
	}
	if f.held {
		f.held, f.replayTo, prev = false, 0, nil
	}
	f.onApply(prev, next)
}

// release ends the hold of onApply (the node has caught up with the
// cluster, which may have truncated the replayed tail of its log): a held
// call is made with the current state, prev nil.
func (f *fsm) release() {
	if f.onApply == nil {
		return
	}
	f.hookMu.Lock()
	defer f.hookMu.Unlock()
	f.replayTo = 0
	if f.held {
		f.held = false
		f.onApply(nil, f.current().state)
	}
}

// StoreConfiguration implements raft.ConfigurationStore: a configuration
// entry advances the applied index (the state is unchanged), so waiting
// for an index reached by a configuration change ends.
func (f *fsm) StoreConfiguration(index uint64, _ raft.Configuration) {
	cur := f.current()
	if index > cur.index {
		f.publish(applied{state: cur.state, index: index})
	}
}

// Snapshot implements raft.FSM. The state is immutable, so the snapshot
// is taken without copying.
func (f *fsm) Snapshot() (raft.FSMSnapshot, error) {
	return snapshot(f.current()), nil
}

// Restore implements raft.FSM. A snapshot is the applied index (8 bytes,
// big endian) and meta's marshalled state.
func (f *fsm) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		return fmt.Errorf("gossip: read snapshot: %w", err)
	}
	if len(b) < 8 {
		return fmt.Errorf("gossip: snapshot of %d bytes is shorter than its 8-byte header", len(b))
	}
	st, err := meta.UnmarshalState(b[8:])
	if err != nil {
		return fmt.Errorf("gossip: snapshot: %w", err)
	}
	index := binary.BigEndian.Uint64(b[:8])
	f.publish(applied{state: st, index: index})
	f.hook(nil, st, index)
	return nil
}

// snapshot is a raft.FSMSnapshot of one published state.
type snapshot applied

// Persist implements raft.FSMSnapshot.
func (s snapshot) Persist(sink raft.SnapshotSink) error {
	b, err := s.state.Marshal()
	if err == nil {
		var hdr [8]byte
		binary.BigEndian.PutUint64(hdr[:], s.index)
		_, err = sink.Write(append(hdr[:], b...))
	}
	if err != nil {
		_ = sink.Cancel()
		return fmt.Errorf("gossip: persist snapshot: %w", err)
	}
	return sink.Close()
}

// Release implements raft.FSMSnapshot.
func (snapshot) Release() {}

// streamLayer is the Raft transport's TCP layer: a listener on the bind
// address that advertises another address (hashicorp/raft's TCPStreamLayer
// cannot advertise a port picked at bind time).
type streamLayer struct {
	net.Listener
	advertise net.Addr
	// tlsClient, when set, is the configuration of dials (the listener
	// is then a TLS one).
	tlsClient *tls.Config

	mu       sync.Mutex
	accepted map[net.Conn]struct{} // closed by Close: raft leaves them blocked in reads
	closed   bool
}

// Accept implements net.Listener, recording the connection.
func (s *streamLayer) Accept() (net.Conn, error) {
	c, err := s.Listener.Accept()
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		c.Close()
		return nil, net.ErrClosed
	}
	s.accepted[c] = struct{}{}
	return &trackedConn{Conn: c, s: s}, nil
}

// Close implements net.Listener: it closes the listener and every
// accepted connection.
func (s *streamLayer) Close() error {
	s.mu.Lock()
	s.closed = true
	for c := range s.accepted {
		c.Close()
	}
	clear(s.accepted)
	s.mu.Unlock()
	return s.Listener.Close()
}

// trackedConn forgets itself in its stream layer when closed.
type trackedConn struct {
	net.Conn
	s *streamLayer
}

func (c *trackedConn) Close() error {
	c.s.mu.Lock()
	delete(c.s.accepted, c.Conn)
	c.s.mu.Unlock()
	return c.Conn.Close()
}

// Dial implements raft.StreamLayer.
func (s *streamLayer) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	if s.tlsClient != nil {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		return tlsconf.Dialer(s.tlsClient, nil)(ctx, "tcp", string(addr))
	}
	return net.DialTimeout("tcp", string(addr), timeout)
}

// Addr implements net.Listener with the advertised address.
func (s *streamLayer) Addr() net.Addr { return s.advertise }

// listenRaft listens on bind and resolves the advertised address: the
// host of advertise (else the bound IP), the port of advertise (0 or
// absent: the bound port). An unspecified advertised IP is an error.
// With serverTLS (and clientTLS) it accepts and dials TLS connections.
func listenRaft(bind, advertise string, serverTLS, clientTLS *tls.Config) (*streamLayer, error) {
	ln, err := net.Listen("tcp", bind)
	if err != nil {
		return nil, fmt.Errorf("gossip: raft listen on %s: %w", bind, err)
	}
	bound := ln.Addr().(*net.TCPAddr)
	addr, err := advertised(advertise, bound.IP, bound.Port)
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("gossip: raft: %w", err)
	}
	sl := &streamLayer{Listener: ln, advertise: addr, accepted: map[net.Conn]struct{}{}}
	if serverTLS != nil {
		sl.Listener, sl.tlsClient = tls.NewListener(ln, serverTLS), clientTLS
	}
	return sl, nil
}

// advertised resolves an advertise address "host:port" against the bound
// IP and port; the host must be an IP address.
func advertised(advertise string, ip net.IP, port int) (*net.TCPAddr, error) {
	a := &net.TCPAddr{IP: ip, Port: port}
	if advertise != "" {
		h, p, err := net.SplitHostPort(advertise)
		if err != nil {
			return nil, err
		}
		if h != "" {
			if a.IP = net.ParseIP(h); a.IP == nil {
				return nil, fmt.Errorf("advertised host %q is not an IP address", h)
			}
		}
		if pn, err := net.LookupPort("tcp", p); err == nil && pn != 0 {
			a.Port = pn
		}
	}
	if a.IP.IsUnspecified() {
		return nil, fmt.Errorf("address %s is not one others can reach: set the advertised host", a)
	}
	return a, nil
}

// raftStores are the Raft log, stable and snapshot stores under
// <cluster-dir>/raft.
type raftStores struct {
	bolt  *raftboltdb.BoltStore
	snaps *raft.FileSnapshotStore
}

func openRaftStores(dir string, log hclog.Logger) (*raftStores, error) {
	rdir := filepath.Join(dir, "raft")
	if err := os.MkdirAll(rdir, 0o755); err != nil {
		return nil, fmt.Errorf("gossip: %w", err)
	}
	bolt, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(rdir, "raft.db")})
	if err != nil {
		return nil, fmt.Errorf("gossip: open %s: %w", filepath.Join(rdir, "raft.db"), err)
	}
	snaps, err := raft.NewFileSnapshotStoreWithLogger(filepath.Join(rdir, "snapshots"), DefaultSnapshotsRetained, log)
	if err != nil {
		bolt.Close()
		return nil, fmt.Errorf("gossip: snapshots: %w", err)
	}
	return &raftStores{bolt: bolt, snaps: snaps}, nil
}

// raftConfig is hashicorp/raft's configuration from o.
func raftConfig(o Options, log hclog.Logger) *raft.Config {
	c := raft.DefaultConfig()
	c.LocalID = raft.ServerID(o.NodeID)
	c.HeartbeatTimeout = o.HeartbeatTimeout
	c.ElectionTimeout = o.ElectionTimeout
	c.LeaderLeaseTimeout = o.LeaderLeaseTimeout
	c.CommitTimeout = o.CommitTimeout
	c.Logger = log
	// A node removed from the configuration stops through noticeRemoval
	// (the metadata's remove-node is committed before the configuration
	// change), never by Raft shutting itself down: Node.stopRaft must be
	// the one call of Shutdown, the one that waits for Raft to end.
	c.ShutdownOnRemove = false
	return c
}

// loggedGossipAddrs returns the gossip addresses of the other nodes in
// the restored state and in the register-node entries of the local Raft
// log: at a restart, Raft replays its log only once it hears from a
// leader, which it may need gossip to find.
func (n *Node) loggedGossipAddrs() []string {
	var out []string
	for _, p := range n.loggedPeers() {
		if p.GossipAddr != "" {
			out = append(out, p.GossipAddr)
		}
	}
	return out
}

// loggedPeers returns the other nodes of the restored state and of the
// register-node entries of the local Raft log, the latest entry of each
// winning.
func (n *Node) loggedPeers() []meta.Node {
	seen := map[string]meta.Node{}
	for id, m := range n.State().Nodes {
		seen[id] = m
	}
	first, err := n.stores.bolt.FirstIndex()
	if err == nil {
		var last uint64
		if last, err = n.stores.bolt.LastIndex(); err == nil {
			for i := first; i <= last && i > 0; i++ {
				var l raft.Log
				if n.stores.bolt.GetLog(i, &l) != nil || l.Type != raft.LogCommand {
					continue
				}
				if c, err := meta.Decode(l.Data); err == nil && c.Op == meta.OpRegisterNode && c.Node != nil {
					seen[c.Node.ID] = *c.Node
				}
			}
		}
	}
	if err != nil {
		n.log.Warn("reading the raft log for the addresses of the other nodes", "err", err)
	}
	var out []meta.Node
	for id, m := range seen {
		if id != n.opts.NodeID {
			out = append(out, m)
		}
	}
	return out
}
