package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/control"
	"github.com/seedqueue/sq/engine"
	"github.com/seedqueue/sq/gossip"
	"github.com/seedqueue/sq/internal/ratelog"
	"github.com/seedqueue/sq/net/dataplane"
	"github.com/seedqueue/sq/ring"
	"github.com/seedqueue/sq/segment"
)

// config is the server configuration assembled from flags and SQ_*
// environment variables.
type config struct {
	GRPCHost  string
	CapnpHost string
	HTTPHost  string
	NodeID    string
	DataDir   string
	Seeds     string
	ClusterID string

	// GossipHost and RaftHost are the listen addresses of memberlist and
	// of the Raft transport; empty: the gRPC host's IP with its port + 6
	// and + 7 (gRPC port 0: port 0). AdvertiseHost is the host others
	// reach this node at (empty: the listener's IP, or the first private
	// IPv4 of the host when it listens on 0.0.0.0 or ::).
	GossipHost    string
	RaftHost      string
	AdvertiseHost string
	// DefaultReplicationFactor is the replication factor of topics
	// created without one; 0: min(3, live nodes).
	DefaultReplicationFactor int
	// ReplicaLagTimeMaxMs is replica.lag.time.max.ms: a follower that has
	// not caught up with its leader for this long leaves the in-sync set
	// (docs/cluster.md).
	ReplicaLagTimeMaxMs int64
	// ScrubInterval is the period of the verification of sealed segments.
	ScrubInterval time.Duration
	// ControlledShutdownTimeout bounds the hand-over of the partitions a
	// clustered node leads when it stops (0: none; drain.go).
	ControlledShutdownTimeout time.Duration
	// OffsetsTopicPartitions and OffsetsTopicReplicationFactor shape the
	// offsets topic __sq_offsets when this node creates it
	// (docs/cluster.md "Consumer groups").
	OffsetsTopicPartitions        int
	OffsetsTopicReplicationFactor int

	SyncPolicy string
	S3Bucket   string
	S3Endpoint string
	S3Region   string
	// TierMultipartBytes, TierCacheBytes and TierUploadInterval tune
	// tiered storage (docs/tiering.md).
	TierMultipartBytes int64
	TierCacheBytes     int64
	TierUploadInterval time.Duration
	MaxRecord          int
	MaxBatch           int
	MaxFrame           int
	SegmentBytes       int64
	IOBackend          string
	DirectWrites       bool
	MinFreeBytes       int64
	MaxSegFiles        int
	LogLevel           string
	LogFormat          string

	// LocalRetentionMs and LocalRetentionBytes are the local.retention.ms
	// and local.retention.bytes of topics created without them
	// (engine.Options of the same names): -2 the same as the topic's
	// retention.ms / retention.bytes, -1 unlimited, else positive.
	LocalRetentionMs    int64
	LocalRetentionBytes int64
	// RetentionMs and RetentionBytes are the retention.ms and
	// retention.bytes of topics created without them (engine.Options of
	// the same names): -1 unlimited, else positive. They, the local
	// retentions and LogLevel change live on SIGHUP (reload.go).
	RetentionMs    int64
	RetentionBytes int64

	// RequireDurableFS makes serve refuse a data directory on a file
	// system whose fsync does not make data durable on this host
	// (tmpfs, ramfs, overlayfs, NFS; hostcheck.go).
	RequireDurableFS bool

	// ConfigFile is --config: the TOML or YAML file of settings below
	// the flags and SQ_* variables (configfile.go); empty: none.
	ConfigFile string
	// flags is the flag set the settings were resolved from, and level
	// the live log level of logger(); both set by serve (nil in tests
	// that call run directly), for the SIGHUP reload.
	flags *pflag.FlagSet
	level *slog.LevelVar

	// MaxInflightRequestBytes, FrameReadTimeout and MaxConnections bound
	// the data plane's memory (dataplane.Options of the same names).
	MaxInflightRequestBytes int64
	FrameReadTimeout        time.Duration
	MaxConnections          int
	// MaxConnectionsPerIP bounds the open connections of one client IP
	// address on the data plane and, apart, on the gRPC control plane
	// (0: no bound).
	MaxConnectionsPerIP int

	// TLSCert and TLSKey are the PEM certificate chain and key all three
	// planes serve TLS with (empty: plaintext); TLSClientCA the PEM CA
	// bundle client certificates must chain to (empty: none asked for).
	// GossipKeyFile holds memberlist's encryption key (empty: none).
	TLSCert       string
	TLSKey        string
	TLSClientCA   string
	GossipKeyFile string
	// Authorization turns ACL checks on for every request of both planes
	// (default deny); SuperUsers lists principals allowed everything
	// (authz.go).
	Authorization bool
	SuperUsers    string

	// AuthRequired refuses unauthenticated requests on the data plane
	// and gRPC; MetricsAuth protects /metrics (auth.go).
	AuthRequired bool
	MetricsAuth  bool

	hooks *hooks // tests only
}

// Defaults of the replication flags (docs/cluster.md).
const (
	// DefaultReplicaLagTimeMaxMs is --replica-lag-time-max-ms: 30 s, as
	// Kafka's replica.lag.time.max.ms since 2.5.
	DefaultReplicaLagTimeMaxMs = 30000
	// DefaultScrubInterval is --scrub-interval.
	DefaultScrubInterval = 24 * time.Hour
)

// minFreeFlag is the value of --min-free-bytes: "auto" (stored as
// engine.MinFreeAuto: 5% of the data directory's file system, at most
// 256 MiB, computed at start) or an absolute byte count (0 disables the
// floor), in the syntax of the other byte flags (decimal, or 0x... hex).
type minFreeFlag struct{ v *int64 }

// String implements pflag.Value.
func (f minFreeFlag) String() string {
	if *f.v == engine.MinFreeAuto {
		return "auto"
	}
	return strconv.FormatInt(*f.v, 10)
}

// Set implements pflag.Value.
func (f minFreeFlag) Set(s string) error {
	if strings.EqualFold(strings.TrimSpace(s), "auto") {
		*f.v = engine.MinFreeAuto
		return nil
	}
	n, err := strconv.ParseInt(s, 0, 64)
	if err != nil || n < 0 {
		return fmt.Errorf("want auto (5%% of the data directory's file system, at most 256 MiB) or a byte count >= 0 (0 disables the floor)")
	}
	*f.v = n
	return nil
}

// Type implements pflag.Value.
func (minFreeFlag) Type() string { return "auto|bytes" }

// flagSpec ties one flag to its environment variable.
type flagSpec struct {
	name, env, usage string
}

// The flags of the server, in the order of the README's table. Each flag
// may also be set by its environment variable; the flag wins.
var flagSpecs = []flagSpec{
	{"config", "SQ_CONFIG", "TOML (.toml) or YAML (.yaml, .yml) file holding settings under their flag names; a flag or variable wins over it (sq-server config print shows the effective values and their sources)"},
	{"grpc-host", "SQ_GRPC_HOST", "gRPC control-plane listen address: topics, groups, cluster, publish/subscribe, health, reflection (empty: not served)"},
	{"capnp-host", "SQ_CAPNP_HOST", "Cap'n Proto data-plane listen address (port 0 picks a free port)"},
	{"http-host", "SQ_HTTP_HOST", "HTTP listen address of /healthz, /readyz and /metrics (empty: not served)"},
	{"node-id", "SQ_NODE_ID", "unique node identifier"},
	{"data-dir", "SQ_DATA_DIR", "data directory (created if missing; locked while served)"},
	{"seeds", "SQ_SEEDS", "comma-separated gRPC addresses (host:port) of nodes of the cluster to join; empty: this node starts (or restarts) a cluster of its own; needs --grpc-host"},
	{"cluster-id", "SQ_CLUSTER_ID", "cluster identifier: nodes of another cluster are refused; a data directory keeps the one it first started with"},
	{"gossip-host", "SQ_GOSSIP_HOST", "gossip (memberlist, TCP and UDP) listen address (empty: the gRPC host's IP, port = gRPC port + 6; gRPC port 0: port 0)"},
	{"raft-host", "SQ_RAFT_HOST", "Raft (cluster metadata) listen address (empty: the gRPC host's IP, port = gRPC port + 7; gRPC port 0: port 0)"},
	{"advertise-host", "SQ_ADVERTISE_HOST", "host other nodes and clients use to reach this node: an IP address, or a host name resolved at start (a compose service name, say) (empty: the listen address's IP; for 0.0.0.0 or ::, the host's first private IPv4)"},
	{"default-replication-factor", "SQ_DEFAULT_REPLICATION_FACTOR", "replication factor of topics created without one (0: min(3, live nodes))"},
	{"replica-lag-time-max-ms", "SQ_REPLICA_LAG_TIME_MAX_MS", "replica.lag.time.max.ms: a follower that has not caught up with its partition's leader for this long (ms) leaves the in-sync set, through the metadata log"},
	{"scrub-interval", "SQ_SCRUB_INTERVAL", "period of the verification of sealed segments' CRCs (a Go duration, e.g. 24h); a replica whose segment fails it is not eligible as leader"},
	{"controlled-shutdown-timeout", "SQ_CONTROLLED_SHUTDOWN_TIMEOUT", "in a cluster, how long a stopping node (SIGTERM, SIGINT) may spend handing the partitions it leads over to in-sync followers before it stops anyway (a Go duration, e.g. 30s; 0 stops at once)"},
	{"offsets-topic-num-partitions", "SQ_OFFSETS_TOPIC_NUM_PARTITIONS", "offsets.topic.num.partitions: partitions of the internal topic __sq_offsets that holds consumer groups' committed offsets in a cluster (fixed once the topic exists: it decides each group's coordinator)"},
	{"offsets-topic-replication-factor", "SQ_OFFSETS_TOPIC_REPLICATION_FACTOR", "offsets.topic.replication.factor: replicas of each partition of __sq_offsets (lowered to the live nodes when fewer at its creation)"},
	{"sync-policy", "SQ_SYNC_POLICY", "default sync policy of topics: every-batch, none, or an interval in ms (N or Nms)"},
	{"s3-bucket", "SQ_S3_BUCKET", "S3 bucket for tiered storage: sealed segments are uploaded to it and read back below the local log start (empty: tiered storage off); credentials from the AWS chain (AWS_ACCESS_KEY_ID..., shared files, IMDS)"},
	{"s3-endpoint", "SQ_S3_ENDPOINT", "S3 endpoint URL for S3-compatible stores such as MinIO (path-style addressing; empty: AWS)"},
	{"s3-region", "SQ_S3_REGION", "S3 region (empty: the AWS configuration's, or us-east-1 with --s3-endpoint)"},
	{"tier-multipart-bytes", "SQ_TIER_MULTIPART_BYTES", "segment objects larger than this are uploaded in parts of this size (at least 5 MiB)"},
	{"tier-cache-bytes", "SQ_TIER_CACHE_BYTES", "bound of the on-disk cache of chunks read back from the object store, in <data-dir>/tier-cache"},
	{"tier-upload-interval", "SQ_TIER_UPLOAD_INTERVAL", "period of the upload pass over the partitions (a Go duration)"},
	{"max-record-bytes", "SQ_MAX_RECORD_BYTES", "largest record (key+value+headers) in bytes"},
	{"max-batch-bytes", "SQ_MAX_BATCH_BYTES", "largest batch in bytes"},
	{"max-frame-bytes", "SQ_MAX_FRAME_BYTES", "largest Cap'n Proto frame (without records) in bytes"},
	{"segment-bytes", "SQ_SEGMENT_BYTES", "default segment size of topics in bytes"},
	{"retention-ms", "SQ_RETENTION_MS", "default retention.ms of topics: how long records are kept (ms; -1 unlimited); reloaded on SIGHUP, for topics created afterwards"},
	{"retention-bytes", "SQ_RETENTION_BYTES", "default retention.bytes of topics: the size bound of each partition's log in bytes (-1 unlimited); reloaded on SIGHUP, for topics created afterwards"},
	{"local-retention-ms", "SQ_LOCAL_RETENTION_MS", "default local.retention.ms of topics: with tiered storage, how long records stay on local disk (ms), at most the topic's retention.ms (--retention-ms by default); -2 the same as retention.ms; -1 unlimited (refused while --retention-ms is limited); takes effect with tiered storage"},
	{"local-retention-bytes", "SQ_LOCAL_RETENTION_BYTES", "default local.retention.bytes of topics: with tiered storage, the local disk bound of each partition in bytes, at most the topic's retention.bytes; -2 the same as retention.bytes; -1 unlimited; takes effect with tiered storage"},
	{"io-backend", "SQ_IO_BACKEND", "write-path I/O backend: auto, uring (io_uring; fails if the kernel refuses it) or portable (pwritev + fdatasync)"},
	{"direct-writes", "SQ_DIRECT_WRITES", "write partitions' records to disk with O_DIRECT (whole 4 KiB blocks from an aligned copy) instead of through the page cache; consumers then read new records from the disk; where the file system refuses O_DIRECT (tmpfs) a partition writes through the page cache and logs a WARN; see docs/storage.md"},
	{"require-durable-fs", "SQ_REQUIRE_DURABLE_FS", "refuse to start when the data directory is on tmpfs, ramfs, overlayfs or NFS (without it: a WARN at start); sq-server check reports it"},
	{"min-free-bytes", "SQ_MIN_FREE_BYTES", "free-space floor of the data directory's file system: publishes get DISK_FULL below it; auto = 5% of the file system's size, at most 256 MiB (computed at start), or a byte count (0 disables)"},
	{"max-open-segment-files", "SQ_MAX_OPEN_SEGMENT_FILES", "bound of the file descriptors and memory mappings held by segments, server-wide: idle sealed segments are closed past it, least recently read first; active segments (4 each, 5 with --direct-writes) count, and past it a partition whose log is synced closes its own until its next append"},
	{"max-inflight-request-bytes", "SQ_MAX_INFLIGHT_REQUEST_BYTES", "request bytes all data-plane connections together may hold in memory (frames being read or served, publish batches until appended); when spent, connections stop being read until requests are answered"},
	{"frame-read-timeout", "SQ_FRAME_READ_TIMEOUT", "longest read of one data-plane frame and its records, from its first byte (e.g. 30s); a slower connection is closed"},
	{"max-connections", "SQ_MAX_CONNECTIONS", "most open connections of the data plane, and of the gRPC control plane; one more is accepted and closed at once"},
	{"max-connections-per-ip", "SQ_MAX_CONNECTIONS_PER_IP", "most open connections of one client IP address on the data plane, and apart on the gRPC control plane; one more from it is accepted and closed at once (0: no bound)"},
	{"tls-cert", "SQ_TLS_CERT", "PEM certificate chain (leaf first) of the node: with --tls-key, the data plane, the gRPC control plane and HTTP serve TLS (1.2 or later), and nodes dial each other with TLS; reloaded on SIGHUP and when the file changes"},
	{"tls-key", "SQ_TLS_KEY", "PEM private key of --tls-cert"},
	{"tls-client-ca", "SQ_TLS_CLIENT_CA", "PEM CA bundle for mutual TLS: every client of every plane must present a certificate it signed, and nodes verify each other against it (empty: no client certificate asked for); needs --tls-cert"},
	{"gossip-key-file", "SQ_GOSSIP_KEY_FILE", "file holding the AES key (16, 24 or 32 bytes, raw or base64) that encrypts gossip (memberlist) traffic; every node of the cluster needs the same key (empty: gossip in plaintext)"},
	{"authorization", "SQ_AUTHORIZATION", "check every request of the data plane and the gRPC control plane against the ACLs (sq acl): without an ACL that allows it, a request is refused with AUTHORIZATION_FAILED (default off: everything allowed)"},
	{"super-users", "SQ_SUPER_USERS", "comma-separated principals allowed everything when --authorization is on (User:NAME; a certificate subject keeps its own commas: User:CN=ops,O=shop,User:admin); the node's own certificate subject is one automatically"},
	{"auth-required", "SQ_AUTH_REQUIRED", "refuse every request of the data plane and gRPC that is not authenticated (SCRAM-SHA-256 user or verified client certificate) with AUTHENTICATION_FAILED; health checks stay anonymous. In a cluster it needs --tls-client-ca: nodes authenticate to each other by certificate"},
	{"metrics-auth", "SQ_METRICS_AUTH", "/metrics requires HTTP Basic credentials of a user or a verified client certificate (/healthz and /readyz stay anonymous)"},
	{"log-level", "SQ_LOG_LEVEL", "log level: debug, info, warn, error"},
	{"log-format", "SQ_LOG_FORMAT", "log format: text or json"},
}

func bindFlags(fs *pflag.FlagSet, c *config) {
	fs.StringVar(&c.ConfigFile, "config", "", "")
	fs.StringVar(&c.GRPCHost, "grpc-host", "127.0.0.1:6060", "")
	fs.StringVar(&c.CapnpHost, "capnp-host", "127.0.0.1:6064", "")
	fs.StringVar(&c.HTTPHost, "http-host", "127.0.0.1:6062", "")
	fs.StringVar(&c.NodeID, "node-id", "node-1", "")
	fs.StringVar(&c.DataDir, "data-dir", "./data", "")
	fs.StringVar(&c.Seeds, "seeds", "", "")
	fs.StringVar(&c.ClusterID, "cluster-id", "default", "")
	fs.StringVar(&c.GossipHost, "gossip-host", "", "")
	fs.StringVar(&c.RaftHost, "raft-host", "", "")
	fs.StringVar(&c.AdvertiseHost, "advertise-host", "", "")
	fs.IntVar(&c.DefaultReplicationFactor, "default-replication-factor", 0, "")
	fs.Int64Var(&c.ReplicaLagTimeMaxMs, "replica-lag-time-max-ms", DefaultReplicaLagTimeMaxMs, "")
	fs.DurationVar(&c.ScrubInterval, "scrub-interval", DefaultScrubInterval, "")
	fs.DurationVar(&c.ControlledShutdownTimeout, "controlled-shutdown-timeout", DefaultControlledShutdownTimeout, "")
	fs.IntVar(&c.OffsetsTopicPartitions, "offsets-topic-num-partitions", gossip.DefaultOffsetsTopicPartitions, "")
	fs.IntVar(&c.OffsetsTopicReplicationFactor, "offsets-topic-replication-factor", gossip.DefaultOffsetsTopicReplicationFactor, "")
	fs.StringVar(&c.SyncPolicy, "sync-policy", "every-batch", "")
	fs.StringVar(&c.S3Bucket, "s3-bucket", "", "")
	fs.StringVar(&c.S3Endpoint, "s3-endpoint", "", "")
	fs.StringVar(&c.S3Region, "s3-region", "", "")
	fs.Int64Var(&c.TierMultipartBytes, "tier-multipart-bytes", DefaultTierMultipartBytes, "")
	fs.Int64Var(&c.TierCacheBytes, "tier-cache-bytes", DefaultTierCacheBytes, "")
	fs.DurationVar(&c.TierUploadInterval, "tier-upload-interval", DefaultTierUploadInterval, "")
	fs.IntVar(&c.MaxRecord, "max-record-bytes", api.DefaultMaxRecordBytes, "")
	fs.IntVar(&c.MaxBatch, "max-batch-bytes", api.DefaultMaxBatchBytes, "")
	fs.IntVar(&c.MaxFrame, "max-frame-bytes", api.DefaultMaxFrameBytes, "")
	fs.Int64Var(&c.SegmentBytes, "segment-bytes", engine.DefaultSegmentBytes, "")
	fs.Int64Var(&c.RetentionMs, "retention-ms", engine.DefaultRetentionMs, "")
	fs.Int64Var(&c.RetentionBytes, "retention-bytes", -1, "")
	fs.Int64Var(&c.LocalRetentionMs, "local-retention-ms", engine.LocalRetentionDefault, "")
	fs.Int64Var(&c.LocalRetentionBytes, "local-retention-bytes", engine.LocalRetentionDefault, "")
	fs.StringVar(&c.IOBackend, "io-backend", ring.ModeAuto, "")
	fs.BoolVar(&c.DirectWrites, "direct-writes", false, "")
	fs.BoolVar(&c.RequireDurableFS, "require-durable-fs", false, "")
	c.MinFreeBytes = engine.MinFreeAuto
	fs.Var(minFreeFlag{&c.MinFreeBytes}, "min-free-bytes", "")
	fs.IntVar(&c.MaxSegFiles, "max-open-segment-files", segment.DefaultMaxOpenSegmentFiles, "")
	fs.Int64Var(&c.MaxInflightRequestBytes, "max-inflight-request-bytes", dataplane.DefaultMaxInFlightRequestBytes, "")
	fs.DurationVar(&c.FrameReadTimeout, "frame-read-timeout", dataplane.DefaultFrameReadTimeout, "")
	fs.IntVar(&c.MaxConnections, "max-connections", dataplane.DefaultMaxConnections, "")
	fs.IntVar(&c.MaxConnectionsPerIP, "max-connections-per-ip", 0, "")
	fs.StringVar(&c.TLSCert, "tls-cert", "", "")
	fs.StringVar(&c.TLSKey, "tls-key", "", "")
	fs.StringVar(&c.TLSClientCA, "tls-client-ca", "", "")
	fs.StringVar(&c.GossipKeyFile, "gossip-key-file", "", "")
	fs.BoolVar(&c.Authorization, "authorization", false, "")
	fs.StringVar(&c.SuperUsers, "super-users", "", "")
	fs.BoolVar(&c.AuthRequired, "auth-required", false, "")
	fs.BoolVar(&c.MetricsAuth, "metrics-auth", false, "")
	fs.StringVar(&c.LogLevel, "log-level", "info", "")
	fs.StringVar(&c.LogFormat, "log-format", "text", "")
	for _, s := range flagSpecs {
		f := fs.Lookup(s.name)
		f.Usage = s.usage + " (env " + s.env + ")"
	}
}

// applyEnv sets every flag of fs not given on the command line from its
// SQ_* variable, so a flag wins over its variable (resolveSettings
// without a config file).
func applyEnv(fs *pflag.FlagSet, getenv func(string) string) error {
	_, err := resolveSettings(fs, "", getenv)
	return err
}

func (c *config) validate() error {
	var errs []error
	if _, err := engine.ParseSyncPolicy(c.SyncPolicy); err != nil {
		errs = append(errs, fmt.Errorf("--sync-policy: %w", err))
	}
	if c.MinFreeBytes < 0 && c.MinFreeBytes != engine.MinFreeAuto {
		errs = append(errs, fmt.Errorf("--min-free-bytes %d must not be negative", c.MinFreeBytes))
	}
	if c.MaxSegFiles < 1 {
		errs = append(errs, fmt.Errorf("--max-open-segment-files %d must be positive", c.MaxSegFiles))
	}
	errs = append(errs, c.validateLocalRetention()...)
	errs = append(errs, c.validateAuth()...)
	if c.NodeID == "" {
		errs = append(errs, errors.New("--node-id must not be empty"))
	}
	if c.DataDir == "" {
		errs = append(errs, errors.New("--data-dir must not be empty"))
	}
	if c.MaxRecord < 1 || c.MaxBatch < 1 || c.MaxFrame < 1024 {
		errs = append(errs, fmt.Errorf("--max-record-bytes (%d) and --max-batch-bytes (%d) must be positive, --max-frame-bytes (%d) at least 1024", c.MaxRecord, c.MaxBatch, c.MaxFrame))
	}
	if c.MaxRecord > c.MaxBatch {
		errs = append(errs, fmt.Errorf("--max-record-bytes %d is larger than --max-batch-bytes %d", c.MaxRecord, c.MaxBatch))
	}
	// The budget must hold a largest frame and batch (dataplane.New checks
	// the same), and one gRPC request's charge (control.New checks it).
	if c.MaxFrame > 0 && c.MaxBatch > 0 {
		if need := dataplane.MinInFlightRequestBytes(uint32(min(c.MaxFrame, math.MaxUint32)), uint32(min(c.MaxBatch, math.MaxUint32))); c.MaxInflightRequestBytes < need {
			errs = append(errs, fmt.Errorf("--max-inflight-request-bytes %d must hold one largest frame and batch: at least %d (8 x --max-frame-bytes + --max-batch-bytes + 16 KiB)",
				c.MaxInflightRequestBytes, need))
		} else if need := control.MinInflightRequestBytes(c.MaxBatch); c.MaxInflightRequestBytes < need {
			errs = append(errs, fmt.Errorf("--max-inflight-request-bytes %d must hold one gRPC request's charge: at least %d (2 x (--max-batch-bytes + 1 MiB))",
				c.MaxInflightRequestBytes, need))
		}
	}
	if c.FrameReadTimeout <= 0 {
		errs = append(errs, fmt.Errorf("--frame-read-timeout %v must be positive", c.FrameReadTimeout))
	}
	if c.MaxConnections < 1 {
		errs = append(errs, fmt.Errorf("--max-connections %d must be at least 1", c.MaxConnections))
	}
	if c.MaxConnectionsPerIP < 0 {
		errs = append(errs, fmt.Errorf("--max-connections-per-ip %d must be 0 (no bound) or more", c.MaxConnectionsPerIP))
	}
	errs = append(errs, c.validateNames()...)
	errs = append(errs, c.validateCluster()...)
	errs = append(errs, c.validateTier()...)
	errs = append(errs, c.validateTLS()...)
	errs = append(errs, c.validateAuthz()...)
	switch c.IOBackend {
	case ring.ModeAuto, ring.ModeUring, ring.ModePortable:
	default:
		errs = append(errs, fmt.Errorf("--io-backend %q: want auto, uring or portable", c.IOBackend))
	}
	if _, err := parseLevel(c.LogLevel); err != nil {
		errs = append(errs, err)
	}
	if c.LogFormat != "text" && c.LogFormat != "json" {
		errs = append(errs, fmt.Errorf("--log-format %q: want text or json", c.LogFormat))
	}
	return errors.Join(errs...)
}

// The bounds of --segment-bytes, the engine's (engine.Options.Validate):
// 4 KiB to 4 GiB - 1, a segment's offsets being 32-bit positions.
const (
	minSegmentBytes = 4 << 10
	maxSegmentBytes = 1<<32 - 1
)

// validateNames checks what serve would otherwise refuse only once it
// opens the engine or a listener, with a message that does not name the
// setting: the data plane's address (it cannot be turned off: an empty
// one would listen on every interface), the HTTP address when set, the
// cluster id, and --segment-bytes (0: the engine's default) within the
// engine's bounds and above --max-batch-bytes.
func (c *config) validateNames() []error {
	var errs []error
	if c.CapnpHost == "" {
		errs = append(errs, errors.New("--capnp-host must not be empty: the data plane is always served (127.0.0.1:6064 by default; port 0 picks a free port)"))
	} else if _, err := hostPort(c.CapnpHost); err != nil {
		errs = append(errs, fmt.Errorf("--capnp-host %q: %w", c.CapnpHost, err))
	}
	if c.HTTPHost != "" {
		if _, err := hostPort(c.HTTPHost); err != nil {
			errs = append(errs, fmt.Errorf("--http-host %q: %w", c.HTTPHost, err))
		}
	}
	if c.ClusterID == "" {
		errs = append(errs, errors.New("--cluster-id must not be empty"))
	}
	switch {
	case c.SegmentBytes == 0:
	case c.SegmentBytes < minSegmentBytes || c.SegmentBytes > maxSegmentBytes:
		errs = append(errs, fmt.Errorf("--segment-bytes %d out of range [%d, %d]", c.SegmentBytes, minSegmentBytes, int64(maxSegmentBytes)))
	case c.SegmentBytes < int64(c.MaxBatch):
		errs = append(errs, fmt.Errorf("--segment-bytes %d is smaller than --max-batch-bytes %d: a batch must fit in a segment", c.SegmentBytes, c.MaxBatch))
	}
	return errs
}

// validateLocalRetention checks --retention-ms and --retention-bytes
// (-1 or positive) and --local-retention-ms and --local-retention-bytes:
// -2, -1 or positive (0 is refused: in a topic request it means "the
// server's default", which these flags set), and each local one within
// its whole-log default, as Kafka checks log.local.retention.ms against
// log.retention.ms.
func (c *config) validateLocalRetention() []error {
	var errs []error
	for _, f := range []struct {
		flag string
		v    int64
	}{{"--retention-ms", c.RetentionMs}, {"--retention-bytes", c.RetentionBytes}} {
		if f.v == 0 || f.v < -1 {
			errs = append(errs, fmt.Errorf("%s %d: want -1 (unlimited) or a positive value", f.flag, f.v))
		}
	}
	for _, f := range []struct {
		flag, total, totalFlag string
		v, bound               int64
	}{
		{"--local-retention-ms", "retention.ms", "--retention-ms", c.LocalRetentionMs, c.RetentionMs},
		{"--local-retention-bytes", "retention.bytes", "--retention-bytes", c.LocalRetentionBytes, c.RetentionBytes},
	} {
		switch {
		case f.v < engine.LocalRetentionDefault || f.v == 0:
			errs = append(errs, fmt.Errorf("%s %d: want -2 (the same as the topic's %s), -1 (unlimited) or a positive value", f.flag, f.v, f.total))
		case f.bound > 0 && (f.v == -1 || f.v > f.bound):
			errs = append(errs, fmt.Errorf("%s %d: the default %s of topics is %d (%s), and the local part of a log cannot outlast the whole log: want -2 (the same as %s) or at most %d",
				f.flag, f.v, f.total, f.bound, f.totalFlag, f.total, f.bound))
		}
	}
	return errs
}

func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, fmt.Errorf("--log-level %q: want debug, info, warn or error", s)
	}
	return l, nil
}

// logger returns the server's logger: text or JSON on stderr at the
// configured level, with repeated WARN and ERROR lines limited to one per
// kind (message, topic, partition, ...) every 10 s, each later line
// carrying suppressed=N (internal/ratelog; README "Logs").
func (c *config) logger() *slog.Logger {
	if c.level == nil {
		c.level = new(slog.LevelVar)
	}
	return slog.New(ratelog.New(c.logHandler(os.Stderr), ratelog.Options{}))
}

// logHandler is the handler of the configured format and level writing
// to w.
func (c *config) logHandler(w io.Writer) slog.Handler {
	level, _ := parseLevel(c.LogLevel)
	var lv slog.Leveler = level
	if c.level != nil {
		c.level.Set(level)
		lv = c.level
	}
	ho := &slog.HandlerOptions{Level: lv}
	if c.LogFormat == "json" {
		return slog.NewJSONHandler(w, ho)
	}
	return slog.NewTextHandler(w, ho)
}

// envTable lists each flag with its environment variable, in columns as
// wide as the longest flag name needs.
func envTable() string {
	width := 0
	for _, s := range flagSpecs {
		width = max(width, len(s.name)+2)
	}
	var b strings.Builder
	for _, s := range flagSpecs {
		b.WriteString("  --" + s.name + strings.Repeat(" ", width-len(s.name)) + s.env + "\n")
	}
	return b.String()
}
