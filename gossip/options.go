package gossip

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/seedqueue/sq/gossip/meta"
)

// Defaults of Options (docs/cluster.md). The Raft timeouts suit a LAN:
// a dead controller is replaced within about two seconds.
const (
	DefaultHeartbeatTimeout   = time.Second
	DefaultElectionTimeout    = time.Second
	DefaultLeaderLeaseTimeout = 500 * time.Millisecond
	DefaultCommitTimeout      = 50 * time.Millisecond
	// DefaultProposeTimeout bounds a proposal: without a reachable
	// controller it fails with NO_QUORUM after this long.
	DefaultProposeTimeout = 10 * time.Second
	// DefaultControllerInterval is the period of the controller's check of
	// the partitions led by nodes that are not alive.
	DefaultControllerInterval = 3 * time.Second
	// DefaultRemovalProbeAfter is the default of Options.RemovalProbeAfter.
	DefaultRemovalProbeAfter = 10 * time.Second
	// DefaultJoinBackoffMax caps the pause between join attempts.
	DefaultJoinBackoffMax = 2 * time.Second
	// DefaultMaxVoters is the most Raft voters; later joiners are
	// non-voters.
	DefaultMaxVoters = 5
	// DefaultSnapshotsRetained is how many Raft snapshots are kept.
	DefaultSnapshotsRetained = 2
)

// Options configure a Node. Addresses are host:port; a zero Options is
// not valid (NodeID, ClusterID, DataDir and GRPCAddr are required), and
// every duration left zero takes its default (Defaults).
type Options struct {
	// NodeID is this node's id (--node-id), unique in the cluster.
	NodeID string
	// ClusterID is the cluster's id (--cluster-id): a node of another
	// cluster is refused.
	ClusterID string
	// DataDir is the server's data directory; the cluster keeps its files
	// under <DataDir>/cluster: node.json (identity), raft/raft.db (the
	// Raft log and stable store) and raft/snapshots.
	DataDir string

	// GRPCAddr, DataAddr and HTTPAddr are the advertised addresses of the
	// node's planes, recorded in the metadata. GRPCAddr is required: nodes
	// forward proposals and joins there.
	GRPCAddr string
	DataAddr string
	HTTPAddr string

	// GossipBind is memberlist's listen address (TCP and UDP); port 0
	// picks a free port. GossipAdvertise is the address others reach it
	// at; its host must be an IP address (empty: the bound address, or
	// memberlist's choice of a private IP when bound to 0.0.0.0) and its
	// port 0 means the bound port.
	GossipBind      string
	GossipAdvertise string
	// RaftBind is the Raft transport's listen address (port 0 picks a
	// free port); RaftAdvertise the address others dial (empty host: the
	// bound IP; port 0: the bound port). An unspecified advertised IP
	// (0.0.0.0) is an error at Start.
	RaftBind      string
	RaftAdvertise string

	// Seeds are gRPC addresses of nodes of the cluster to join. Empty: the
	// node bootstraps a cluster of its own (or restarts its own).
	Seeds []string

	// DefaultReplicationFactor is the replication factor of topics created
	// without one; 0 means min(3, live nodes).
	DefaultReplicationFactor int

	// Logger receives the node's logs and those of raft and memberlist
	// (nil: slog.Default()).
	Logger *slog.Logger
	// Registerer receives the sq_cluster_* metrics (nil: none).
	Registerer prometheus.Registerer
	// Dial dials the gRPC addresses of other nodes (nil: net.Dialer).
	Dial func(ctx context.Context, addr string) (net.Conn, error)

	// TLSServer, when set, is the server TLS configuration of the Raft
	// transport's listener: it then accepts TLS connections only. Set it
	// with TLSClient.
	TLSServer *tls.Config
	// TLSClient, when set, is the client TLS configuration this node dials
	// other nodes with: their gRPC planes (joins, forwarded proposals and
	// group calls, describes) and Raft transports. ServerName, when empty,
	// is the dialed address's host. Nil: plaintext.
	TLSClient *tls.Config
	// GossipKey, when set, encrypts memberlist's traffic (TCP and UDP)
	// with AES-GCM (memberlist.Config.SecretKey): 16, 24 or 32 bytes, the
	// same on every node. Nil: plaintext gossip.
	GossipKey []byte

	// OnApply is called synchronously, in log order, after each applied
	// command that changed the state and after a snapshot restore (prev
	// nil). A restarted node holds the calls back while it replays the
	// log it had, then calls it once with prev nil: when the replay
	// reaches the log's last index at start, or when the node has caught
	// up with the cluster, whichever comes first. It must not call
	// Propose (the apply loop waits for it).
	OnApply func(prev, next *meta.State)
	// LocalTopics lists the topics the data directory held before it
	// joined a cluster; called once, when this node bootstraps the
	// cluster, and imported with meta.OpImport.
	LocalTopics func() []*meta.Topic
	// OrphanedTopics lists the topics of the data directory that the
	// metadata does not know (Reconciler.Orphaned), for Info; nil: none.
	OrphanedTopics func() []string

	// Raft timing (hashicorp/raft Config fields of the same names).
	HeartbeatTimeout   time.Duration
	ElectionTimeout    time.Duration
	LeaderLeaseTimeout time.Duration
	CommitTimeout      time.Duration

	// ProposeTimeout bounds Propose when no controller is reachable or
	// Raft cannot commit (then NO_QUORUM).
	ProposeTimeout time.Duration
	// ControllerInterval is the period of the controller's liveness check.
	ControllerInterval time.Duration
	// RemovalProbeAfter is how long a node goes without a Raft leader
	// before it asks the other nodes whether it was removed from the
	// cluster, and the least time between two such probes (see
	// probeRemoval); default DefaultRemovalProbeAfter.
	RemovalProbeAfter time.Duration
	// JoinBackoffMax caps the pause between join attempts at the seeds.
	JoinBackoffMax time.Duration
	// MaxVoters is the most Raft voters (at most 5 makes sense).
	MaxVoters int

	// Memberlist, when set, adjusts memberlist's configuration (built from
	// memberlist.DefaultLANConfig) before it starts; tests shorten the
	// probe intervals with it.
	Memberlist func(*memberlist.Config)
}

// Defaults returns o with every zero duration and count set to its
// default.
func (o Options) Defaults() Options {
	set := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	set(&o.HeartbeatTimeout, DefaultHeartbeatTimeout)
	set(&o.ElectionTimeout, DefaultElectionTimeout)
	set(&o.LeaderLeaseTimeout, DefaultLeaderLeaseTimeout)
	set(&o.CommitTimeout, DefaultCommitTimeout)
	set(&o.ProposeTimeout, DefaultProposeTimeout)
	set(&o.ControllerInterval, DefaultControllerInterval)
	set(&o.JoinBackoffMax, DefaultJoinBackoffMax)
	set(&o.RemovalProbeAfter, DefaultRemovalProbeAfter)
	if o.MaxVoters == 0 {
		o.MaxVoters = DefaultMaxVoters
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.GossipBind == "" {
		o.GossipBind = "127.0.0.1:0"
	}
	if o.RaftBind == "" {
		o.RaftBind = "127.0.0.1:0"
	}
	return o
}

// Validate returns every problem of o at once (after Defaults).
func (o Options) Validate() error {
	var errs []error
	if o.NodeID == "" {
		errs = append(errs, errors.New("gossip: node id must not be empty"))
	}
	if o.ClusterID == "" {
		errs = append(errs, errors.New("gossip: cluster id must not be empty"))
	}
	if o.DataDir == "" {
		errs = append(errs, errors.New("gossip: data dir must not be empty"))
	}
	if o.GRPCAddr == "" {
		errs = append(errs, errors.New("gossip: the gRPC address must be set: nodes forward proposals and joins to it"))
	}
	for _, a := range []struct{ name, v string }{
		{"gossip bind", o.GossipBind}, {"raft bind", o.RaftBind},
		{"gossip advertise", o.GossipAdvertise}, {"raft advertise", o.RaftAdvertise},
	} {
		if a.v == "" && (a.name == "gossip advertise" || a.name == "raft advertise") {
			continue
		}
		if _, _, err := net.SplitHostPort(a.v); err != nil {
			errs = append(errs, fmt.Errorf("gossip: %s address %q: %w", a.name, a.v, err))
		}
	}
	for _, s := range o.Seeds {
		if _, _, err := net.SplitHostPort(s); err != nil {
			errs = append(errs, fmt.Errorf("gossip: seed %q: want host:port: %w", s, err))
		}
	}
	if o.DefaultReplicationFactor < 0 {
		errs = append(errs, fmt.Errorf("gossip: default replication factor %d must not be negative", o.DefaultReplicationFactor))
	}
	if o.LeaderLeaseTimeout > o.HeartbeatTimeout {
		errs = append(errs, fmt.Errorf("gossip: leader lease timeout %v must not exceed the heartbeat timeout %v", o.LeaderLeaseTimeout, o.HeartbeatTimeout))
	}
	if k := len(o.GossipKey); k != 0 && k != 16 && k != 24 && k != 32 {
		errs = append(errs, fmt.Errorf("gossip: gossip key of %d bytes: want 16, 24 or 32 (AES-128, -192 or -256)", k))
	}
	if (o.TLSServer == nil) != (o.TLSClient == nil) {
		errs = append(errs, errors.New("gossip: TLSServer and TLSClient must be set together"))
	}
	if o.MaxVoters < 1 {
		errs = append(errs, fmt.Errorf("gossip: max voters %d must be at least 1", o.MaxVoters))
	}
	return errors.Join(errs...)
}
