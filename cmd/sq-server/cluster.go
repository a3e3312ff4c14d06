package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seedqueue/sq/control"
	"github.com/seedqueue/sq/engine"
	"github.com/seedqueue/sq/gossip"
	"github.com/seedqueue/sq/gossip/meta"
	"github.com/seedqueue/sq/internal/tlsconf"
)

// Port offsets of the cluster listeners from the gRPC port when
// --gossip-host and --raft-host are not given, so that the seed README's
// layout (gRPC on 6060, 6070, 6080) needs no extra flags
// (docs/architecture.md §7).
const (
	gossipPortOffset = 6
	raftPortOffset   = 7
)

// seeds returns --seeds split at commas, blanks trimmed and empty items
// dropped.
func (c *config) seeds() []string {
	var out []string
	for _, s := range strings.Split(c.Seeds, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// clustered reports whether the node takes part in a cluster: it needs
// its gRPC plane, where nodes join and forward metadata changes. Without
// --grpc-host (and so without --seeds) the node runs alone, as before
// clustering.
func (c *config) clustered() bool { return c.GRPCHost != "" }

// replication returns the engine's replication options: in a cluster
// the node replicates its partitions (docs/cluster.md "Replication");
// alone (no --grpc-host) it does not (nil).
func (c *config) replication() *engine.ReplicationOptions {
	if !c.clustered() {
		return nil
	}
	return &engine.ReplicationOptions{NodeID: c.NodeID, LagTimeMax: time.Duration(c.ReplicaLagTimeMaxMs) * time.Millisecond}
}

// validateCluster returns the problems of the clustering flags.
func (c *config) validateCluster() []error {
	var errs []error
	seeds := c.seeds()
	if len(seeds) > 0 && c.GRPCHost == "" {
		errs = append(errs, errors.New("--seeds needs --grpc-host: nodes join and forward metadata changes over gRPC"))
	}
	for _, s := range seeds {
		if _, err := hostPort(s); err != nil {
			errs = append(errs, fmt.Errorf("--seeds: %q: want host:port (a node's gRPC address): %w", s, err))
		}
	}
	if c.GRPCHost != "" {
		if _, err := hostPort(c.GRPCHost); err != nil {
			errs = append(errs, fmt.Errorf("--grpc-host %q: %w", c.GRPCHost, err))
		} else {
			for _, l := range []struct{ flag, v string }{{"--gossip-host", c.GossipHost}, {"--raft-host", c.RaftHost}} {
				if _, err := c.clusterListen(l.v, 0); l.v != "" && err != nil {
					errs = append(errs, fmt.Errorf("%s %q: %w", l.flag, l.v, err))
				}
			}
			for _, off := range []int{gossipPortOffset, raftPortOffset} {
				if _, err := c.clusterListen("", off); err != nil {
					errs = append(errs, err)
				}
			}
		}
	}
	if c.AdvertiseHost != "" && net.ParseIP(c.AdvertiseHost) == nil && !validHostName(c.AdvertiseHost) {
		errs = append(errs, fmt.Errorf("--advertise-host %q: want an IP address or a host name (letters, digits, '-' and '.')", c.AdvertiseHost))
	}
	if c.DefaultReplicationFactor < 0 {
		errs = append(errs, fmt.Errorf("--default-replication-factor %d must not be negative (0: min(3, live nodes))", c.DefaultReplicationFactor))
	}
	if c.ReplicaLagTimeMaxMs < 1 {
		errs = append(errs, fmt.Errorf("--replica-lag-time-max-ms %d must be at least 1", c.ReplicaLagTimeMaxMs))
	}
	if c.ControlledShutdownTimeout < 0 {
		errs = append(errs, fmt.Errorf("--controlled-shutdown-timeout %v must not be negative (0: no controlled shutdown)", c.ControlledShutdownTimeout))
	}
	if c.ScrubInterval <= 0 {
		errs = append(errs, fmt.Errorf("--scrub-interval %v must be positive", c.ScrubInterval))
	}
	if c.OffsetsTopicPartitions < 1 || c.OffsetsTopicPartitions > engine.MaxPartitions {
		errs = append(errs, fmt.Errorf("--offsets-topic-num-partitions %d out of range [1, %d]", c.OffsetsTopicPartitions, engine.MaxPartitions))
	}
	if c.OffsetsTopicReplicationFactor < 1 {
		errs = append(errs, fmt.Errorf("--offsets-topic-replication-factor %d must be at least 1", c.OffsetsTopicReplicationFactor))
	}
	return errs
}

// hostPort splits a host:port address, checking the port.
func hostPort(addr string) (struct {
	host string
	port int
}, error) {
	var hp struct {
		host string
		port int
	}
	h, p, err := net.SplitHostPort(addr)
	if err != nil {
		return hp, err
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 0 || port > 65535 {
		return hp, fmt.Errorf("port %q: want a number from 0 to 65535", p)
	}
	hp.host, hp.port = h, port
	return hp, nil
}

// clusterListen returns the listen address given (flag), or the default:
// the gRPC host's IP with the gRPC port + off (port 0 stays 0).
func (c *config) clusterListen(flag string, off int) (string, error) {
	if flag != "" {
		_, err := hostPort(flag)
		return flag, err
	}
	g, err := hostPort(c.GRPCHost)
	if err != nil {
		return "", fmt.Errorf("--grpc-host %q: %w", c.GRPCHost, err)
	}
	port := 0
	if g.port != 0 {
		port = g.port + off
	}
	if port > 65535 {
		return "", fmt.Errorf("--grpc-host port %d + %d is above 65535: set --gossip-host and --raft-host", g.port, off)
	}
	return net.JoinHostPort(g.host, strconv.Itoa(port)), nil
}

// advertise returns the host others reach a listener on listenHost at:
// --advertise-host (a host name resolved now, at start), else the listener's IP, else (for 0.0.0.0, :: or no
// host) the first private IPv4 address of the host's interfaces (RFC
// 1918), else the first non-loopback IPv4.
func (c *config) advertise(listenHost string, addrs func() ([]net.Addr, error)) (string, error) {
	if c.AdvertiseHost != "" {
		if net.ParseIP(c.AdvertiseHost) != nil {
			return c.AdvertiseHost, nil
		}
		ip, err := resolveHost(c.AdvertiseHost)
		if err != nil {
			return "", fmt.Errorf("--advertise-host %q: %w", c.AdvertiseHost, err)
		}
		return ip, nil
	}
	if ip := net.ParseIP(listenHost); ip != nil && !ip.IsUnspecified() {
		return ip.String(), nil
	}
	if listenHost != "" && net.ParseIP(listenHost) == nil {
		ip, err := resolveHost(listenHost)
		if err != nil {
			return "", fmt.Errorf("%w to advertise it; set --advertise-host", err)
		}
		return ip, nil
	}
	as, err := addrs()
	if err != nil {
		return "", fmt.Errorf("list the host's addresses to advertise: %w; set --advertise-host", err)
	}
	var fallback string
	for _, a := range as {
		ipn, ok := a.(*net.IPNet)
		if !ok || ipn.IP.To4() == nil || ipn.IP.IsLoopback() || ipn.IP.IsLinkLocalUnicast() {
			continue
		}
		if ipn.IP.IsPrivate() {
			return ipn.IP.String(), nil
		}
		if fallback == "" {
			fallback = ipn.IP.String()
		}
	}
	if fallback == "" {
		return "", errors.New("no IPv4 address on the host's interfaces to advertise; set --advertise-host")
	}
	return fallback, nil
}

// resolveHost returns the first IPv4 address name resolves to (hosts
// file, then DNS, as the resolver is configured), else its first address.
func resolveHost(name string) (string, error) {
	ips, err := net.LookupIP(name)
	if err != nil || len(ips) == 0 {
		return "", fmt.Errorf("resolve %q: %v", name, err)
	}
	for _, ip := range ips {
		if ip.To4() != nil {
			return ip.String(), nil
		}
	}
	return ips[0].String(), nil
}

// validHostName reports whether s is a syntactically valid host name
// (RFC 1123 section 2.1: labels of letters, digits and '-', not starting
// or ending with '-', at most 63 bytes each, 253 in all).
func validHostName(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for label := range strings.SplitSeq(strings.TrimSuffix(s, "."), ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, r := range label {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-') {
				return false
			}
		}
	}
	return true
}

// listeners are the bound addresses of the node's planes (host:port, the
// port the kernel picked for port 0); HTTP may be empty.
type listeners struct {
	GRPC, Data, HTTP string
}

// gossipOptions builds the gossip.Options of the node from the flags and
// the planes' bound addresses: every address advertised with the host of
// advertise, the cluster listeners at their flag or default address.
// The caller adds Logger, Registerer, OnApply and LocalTopics.
func (c *config) gossipOptions(l listeners) (gossip.Options, error) {
	o := gossip.Options{
		NodeID: c.NodeID, ClusterID: c.ClusterID, DataDir: c.DataDir,
		Seeds: c.seeds(), DefaultReplicationFactor: c.DefaultReplicationFactor,
	}
	adv := func(bound string) (string, error) {
		if bound == "" {
			return "", nil
		}
		hp, err := hostPort(bound)
		if err != nil {
			return "", err
		}
		h, err := c.advertise(hp.host, net.InterfaceAddrs)
		if err != nil {
			return "", err
		}
		return net.JoinHostPort(h, strconv.Itoa(hp.port)), nil
	}
	var err error
	if o.GRPCAddr, err = adv(l.GRPC); err != nil {
		return o, err
	}
	if o.DataAddr, err = adv(l.Data); err != nil {
		return o, err
	}
	if o.HTTPAddr, err = adv(l.HTTP); err != nil {
		return o, err
	}
	if o.GossipBind, err = c.clusterListen(c.GossipHost, gossipPortOffset); err != nil {
		return o, err
	}
	if o.RaftBind, err = c.clusterListen(c.RaftHost, raftPortOffset); err != nil {
		return o, err
	}
	if o.GossipAdvertise, err = adv(o.GossipBind); err != nil {
		return o, err
	}
	if o.RaftAdvertise, err = adv(o.RaftBind); err != nil {
		return o, err
	}
	return o, nil
}

// clusterNode is this node's part in the cluster: the gossip runtime, the
// reconciler that keeps the storage in step with the metadata, and the
// broker the planes serve.
type clusterNode struct {
	node   *gossip.Node
	rec    *gossip.Reconciler
	repl   *gossip.Replicator
	broker *gossip.Broker
	once   sync.Once
}

// startCluster joins or forms the cluster (docs/cluster.md) with the
// planes' bound addresses l, attaches it to the control plane (which
// answers Join and Propose from then on, and is not ready until the node
// has joined and caught up), and returns the broker the planes serve.
func startCluster(ctx context.Context, c *config, log *slog.Logger, cp *controlPlane, eng *engine.Engine, l listeners, tlsr *tlsconf.Reloader) (*clusterNode, error) {
	o, err := c.gossipOptions(l)
	if err != nil {
		return nil, err
	}
	if tlsr != nil {
		o.TLSServer, o.TLSClient = tlsr.ServerConfig(), tlsr.PeerConfig()
	}
	if o.GossipKey, err = c.gossipKey(); err != nil {
		return nil, err
	}
	if o.GossipKey != nil {
		log.Info("gossip encrypted", "key_file", c.GossipKeyFile, "key_bits", 8*len(o.GossipKey))
	}
	rec := gossip.NewReconciler(eng, gossip.ReconcilerOptions{NodeID: c.NodeID, Logger: log})
	// The replicator exists once the node does; applied states before
	// that are picked up by its first pass (startReplication).
	var repl atomic.Pointer[gossip.Replicator]
	o.Logger, o.Registerer = log, cp.srv.Registry()
	o.OnApply = func(prev, next *meta.State) {
		if prev == nil || !maps.Equal(prev.Quotas, next.Quotas) {
			cp.quotas.SetTable(gossip.QuotaTable(next))
		}
		if cp.authz != nil && (prev == nil || !slices.Equal(prev.ACLs, next.ACLs)) {
			cp.authz.SetBindings(next.ACLs)
		}
		rec.OnApply(prev, next) // the local topics first: the replicator acts on them
		if r := repl.Load(); r != nil {
			r.OnApply(prev, next) // a pass, once the replicator runs
		}
	}
	o.LocalTopics, o.OrphanedTopics = rec.LocalTopics, rec.Orphaned
	node, err := gossip.Start(ctx, o)
	if err != nil {
		return nil, err
	}
	cp.srv.SetCluster(node)
	cp.srv.SetACLStore(node)
	cp.users.Set(node)
	cp.srv.SetUsers(node)
	b := gossip.NewBroker(cp.srv.Traced(eng), node.BrokerCluster(), rec, gossip.BrokerOptions{Logger: log,
		OffsetsTopicPartitions: c.OffsetsTopicPartitions, OffsetsTopicReplicationFactor: c.OffsetsTopicReplicationFactor})
	r := gossip.NewReplicator(eng, node.BrokerCluster(), gossip.ReplicatorOptions{NodeID: c.NodeID, Logger: log, Dial: replicaDialer(c.NodeID, tlsr)})
	repl.Store(r)
	rec.Start()
	return &clusterNode{node: node, rec: rec, repl: r, broker: b}, nil
}

// startReplication starts the replicator once the node has caught up
// with the metadata log: its first pass, done before it returns, makes
// the storage lead the partitions this node leads and follow the others
// (a node that has not caught up could take a leadership it lost while
// it was away for its own).
func (n *clusterNode) startReplication() { n.repl.Start() }

// clusterLeaveTimeout bounds the graceful leave of the cluster at a stop.
const clusterLeaveTimeout = 5 * time.Second

// close leaves the cluster and stops the reconciler; later calls do
// nothing.
func (n *clusterNode) close(log *slog.Logger) {
	n.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), clusterLeaveTimeout)
		defer cancel()
		if err := n.repl.Close(); err != nil {
			log.Warn("stopping replication", "err", err)
		}
		if err := n.node.Close(ctx); err != nil {
			log.Warn("leaving the cluster", "err", err)
		}
		if err := n.rec.Close(); err != nil {
			log.Warn("stopping the metadata reconciler", "err", err)
		}
	})
}

// errRemoved is run's error when this node learns that it was removed
// from the cluster: sq-server exits with status 1, and the node's log says
// what to do.
var errRemoved = errors.New("this node was removed from the cluster (sq cluster remove-node); its data directory cannot rejoin: to add the machine again, start sq-server with an empty --data-dir")

// readyPoll is the interval of the checks of the node's readiness at
// start.
const readyPoll = 20 * time.Millisecond

// waitReady waits until the node has joined the cluster and caught up with
// the metadata log (gossip.Node.Ready), logging why it waits every 10 s;
// it fails when ctx ends first (a stop during the start), or with
// errRemoved when the node learns it was removed.
func (n *clusterNode) waitReady(ctx context.Context, log *slog.Logger) error {
	t := time.NewTicker(readyPoll)
	defer t.Stop()
	started := time.Now()
	lastLog := started
	for {
		err := n.node.Ready()
		if err == nil {
			return nil
		}
		if time.Since(lastLog) >= 10*time.Second {
			lastLog = time.Now()
			log.Warn("waiting to catch up with the cluster metadata before serving the data plane", "reason", err, "waited", time.Since(started).Round(time.Second))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("stopped before the node caught up with the cluster metadata (%v): %w", err, ctx.Err())
		case <-n.node.Removed():
			return errRemoved
		case <-t.C:
		}
	}
}

// adoptGroups runs once the node has caught up with the metadata: it
// clamps the committed offsets of the partitions it leads to their high
// watermarks (the engine was opened with DeferOffsetClamp), and imports,
// in the background, the group offsets its single-node log kept before
// it formed or joined a cluster into the offsets topic, once
// (Broker.ImportGroupOffsets; docs/cluster.md). A failed import is logged
// and tried again at the next start.
func (n *clusterNode) adoptGroups(ctx context.Context, log *slog.Logger) {
	if k := n.broker.ClampLedOffsets(); k > 0 {
		log.Warn("committed offsets beyond the high watermark of partitions this node leads were clamped", "offsets", k)
	}
	go func() {
		tctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
		defer cancel()
		imported, err := n.broker.ImportGroupOffsets(tctx)
		if err != nil {
			log.Warn("importing the group offsets of this node's single-node log; tried again at the next start", "err", err, "imported", imported)
			return
		}
		if len(imported) > 0 {
			log.Info("group offsets of this node's single-node log imported into the cluster", "groups", imported)
		}
	}()
}

// The cluster node stores the quotas the Quotas service manages.
var _ control.QuotaBackend = (*gossip.Node)(nil)
