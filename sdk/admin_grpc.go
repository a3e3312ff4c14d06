package sdk

import (
	"context"
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/api/sqv1"
)

// AdminConfig configures an Admin. The zero value is valid.
type AdminConfig struct {
	GrpcConfig
}

// Admin administers topics, consumer groups and the cluster over the gRPC
// control plane (api/sq.proto, sq-server --grpc-host). Errors are
// *api.Error values from the catalog (errors.Is against the api
// sentinels), ErrConnection when the server cannot be reached, or a gRPC
// status (codes.Unimplemented for what the server does not offer). An
// Admin is safe for concurrent use.
type Admin struct {
	cfg     AdminConfig
	conn    *grpc.ClientConn
	topics  sqv1.TopicsClient
	groups  sqv1.GroupsClient
	cluster sqv1.ClusterClient
}

// NewAdmin returns an Admin for cfg.Addr. It does not contact the server:
// the first call connects. An address that is neither host:port nor a
// gRPC target with a resolver scheme (dns:///host:port, unix:///path) is
// refused with an *AddrError (ErrBadAddr): gRPC would otherwise dial port
// 443 for an address without a port. It fails with ErrInvalidConfig when
// Validate refuses cfg.
func NewAdmin(cfg AdminConfig) (*Admin, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.defaults()
	if err := checkControlAddr(cfg.Addr); err != nil {
		return nil, err
	}
	conn, err := dialGrpc(cfg.GrpcConfig)
	if err != nil {
		return nil, err
	}
	return newAdminConn(cfg, conn), nil
}

func newAdminConn(cfg AdminConfig, conn *grpc.ClientConn) *Admin {
	return &Admin{cfg: cfg, conn: conn, topics: sqv1.NewTopicsClient(conn),
		groups: sqv1.NewGroupsClient(conn), cluster: sqv1.NewClusterClient(conn)}
}

// Close closes the connection.
func (a *Admin) Close() error { return a.conn.Close() }

// Connect connects now, rather than on the first call, and checks that
// cfg.Addr is SQ's gRPC control plane, all within ConnectTimeout (and
// ctx): it makes one Cluster.NodeInfo call, which fails fast rather than
// wait for the server to come up. Errors:
//   - *ConnectTimeoutError (ErrConnectTimeout, also ErrConnection): no
//     answer in time, for example from a listener that accepts and never
//     answers;
//   - *WrongProtocolError (ErrNotControlPlane): another protocol answered;
//     Speaks says which (the data plane's Cap'n Proto, HTTP/1.x, TLS, or
//     gRPC without SQ's services), found by connecting again within what
//     is left of ConnectTimeout;
//   - *TLSError (ErrTLS) with TLSConfig set: the TLS handshake failed (a
//     certificate that does not verify, a client certificate refused, a
//     server without TLS);
//   - ErrConnection: nothing listens there, or the connection failed for
//     a reason the probe could not name;
//   - ctx's error when ctx ends first.
func (a *Admin) Connect(ctx context.Context) error {
	addr, timeout := a.cfg.Addr, a.cfg.ConnectTimeout
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	_, err := a.cluster.NodeInfo(cctx, &sqv1.NodeInfoRequest{})
	switch code := status.Code(err); {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return ctx.Err()
	case code == codes.Unimplemented:
		return &WrongProtocolError{Addr: addr, Plane: "control", Speaks: SpeaksGRPC}
	case code == codes.DeadlineExceeded && cctx.Err() != nil:
		return &ConnectTimeoutError{Addr: addr, Timeout: timeout, Stage: "first call"}
	case code == codes.Unavailable && a.cfg.TLSConfig != nil && strings.Contains(err.Error(), "authentication handshake failed"):
		// gRPC reports a failed TLS handshake in the status text only.
		return &TLSError{Addr: addr, Err: err,
			Plaintext: strings.Contains(err.Error(), "first record does not look like a TLS handshake")}
	case code == codes.Unavailable && a.cfg.TLSConfig != nil && strings.Contains(err.Error(), "remote error: tls:"):
		// A TLS 1.3 server refuses a client certificate (missing, or
		// of another CA) after the client finished its side of the
		// handshake: gRPC sees the alert at its first read.
		return &TLSError{Addr: addr, Refused: true, Err: err}
	case code == codes.Unavailable && a.cfg.TLSConfig != nil:
		// gRPC may have seen the refusal only as a closed connection:
		// a handshake of our own tells.
		if terr := probeTLSRefusal(cctx, a.cfg.Dialer, addr, a.cfg.TLSConfig); terr != nil {
			return terr
		}
		fallthrough
	case code == codes.Unavailable:
		speaks, dialErr := identifyAddr(cctx, a.cfg.Dialer, addr)
		if speaks != "" {
			return &WrongProtocolError{Addr: addr, Plane: "control", Speaks: speaks}
		}
		if dialErr != nil && ctx.Err() == nil && cctx.Err() == nil {
			// gRPC's own text for this is "name resolver error:
			// produced zero addresses" for a name that does not resolve.
			return fmt.Errorf("%w: %s: %w", ErrConnection, addr, dialErr)
		}
		if cctx.Err() != nil {
			return &ConnectTimeoutError{Addr: addr, Timeout: timeout, Stage: "first call"}
		}
	}
	return fromStatus(err)
}

// CreateTopic creates a topic of partitions partitions; zero fields of cfg
// take the server defaults (cfg.ReplicationFactor 0: the server's default
// replication factor).
func (a *Admin) CreateTopic(ctx context.Context, name string, partitions uint32, cfg TopicConfig) (TopicInfo, error) {
	r, err := unary(ctx, a.cfg.RequestTimeout, a.topics.CreateTopic, &sqv1.CreateTopicRequest{
		Name: name, Partitions: int32(min(partitions, 1<<31-1)), Config: topicConfigToProto(cfg),
		ReplicationFactor: int32(min(cfg.ReplicationFactor, 1<<31-1))})
	if err != nil {
		return TopicInfo{}, err
	}
	return topicFromProto(r.Topic), nil
}

// TopicConfigChange lists the config fields AlterTopicConfig changes; nil
// fields keep their value.
type TopicConfigChange struct {
	SyncPolicy     *string
	SegmentBytes   *int64
	RetentionBytes *int64 // -1 unlimited
	RetentionMs    *int64 // -1 unlimited
	MaxRecordBytes *int32
	SegmentMs      *int64
	// MinInsyncReplicas: 1 to the topic's replication factor.
	MinInsyncReplicas     *int32
	UncleanLeaderElection *bool
	// LocalRetentionMs and LocalRetentionBytes: -2 the same as the whole
	// log's retention, -1 unlimited, or a positive value at most the whole
	// log's (TopicConfig); 0 the server's default.
	LocalRetentionMs    *int64
	LocalRetentionBytes *int64
}

// AlterTopicConfig changes the set fields of a topic's config and returns
// the topic with its new effective config.
func (a *Admin) AlterTopicConfig(ctx context.Context, name string, ch TopicConfigChange) (TopicInfo, error) {
	r, err := unary(ctx, a.cfg.RequestTimeout, a.topics.AlterTopicConfig, &sqv1.AlterTopicConfigRequest{
		Name: name, SyncPolicy: ch.SyncPolicy, SegmentBytes: ch.SegmentBytes, RetentionBytes: ch.RetentionBytes,
		RetentionMs: ch.RetentionMs, MaxRecordBytes: ch.MaxRecordBytes, SegmentMs: ch.SegmentMs,
		MinInsyncReplicas: ch.MinInsyncReplicas, UncleanLeaderElection: ch.UncleanLeaderElection,
		LocalRetentionMs: ch.LocalRetentionMs, LocalRetentionBytes: ch.LocalRetentionBytes})
	if err != nil {
		return TopicInfo{}, err
	}
	return topicFromProto(r.Topic), nil
}

// CreatePartitions grows topic name to total partitions (the new total,
// as Kafka's CreatePartitions, KIP-195) and returns the topic with every
// partition. Existing partitions keep their records and committed
// offsets; producers and consumers see the new partitions at their next
// metadata refresh, consumer groups at their next heartbeat. It fails
// with api.ErrInvalidConfig when total is not above the current count or
// is above the server's maximum (10000), api.ErrUnknownTopic,
// api.ErrInvalidTopicName (test with errors.Is), or ErrConnection.
func (a *Admin) CreatePartitions(ctx context.Context, name string, total uint32) (TopicInfo, error) {
	r, err := unary(ctx, a.cfg.RequestTimeout, a.topics.CreatePartitions, &sqv1.CreatePartitionsRequest{
		Name: name, TotalCount: int32(min(total, 1<<31-1))})
	if err != nil {
		return TopicInfo{}, err
	}
	return topicFromProto(r.Topic), nil
}

// DeleteTopic deletes a topic and its data.
func (a *Admin) DeleteTopic(ctx context.Context, name string) error {
	_, err := unary(ctx, a.cfg.RequestTimeout, a.topics.DeleteTopic, &sqv1.DeleteTopicRequest{Name: name})
	return err
}

// RestoreTopic serves topic name's history from the server's tiered
// storage bucket on a server that does not hold the topic
// (docs/tiering.md): the server creates it with the id and partitions
// the bucket holds, each partition continuing after its remote log.
// topicID ("" for the only one) picks among several topics of that name
// in the bucket. Errors: api.ErrUnknownTopic when the bucket holds none,
// api.ErrTopicExists, api.ErrInvalidRequest (several topics of the name,
// or a server in a cluster), or a FailedPrecondition status when tiered
// storage is off.
func (a *Admin) RestoreTopic(ctx context.Context, name, topicID string) (TopicInfo, error) {
	r, err := unary(ctx, a.cfg.RequestTimeout, a.topics.RestoreTopic, &sqv1.RestoreTopicRequest{Name: name, TopicId: topicID})
	if err != nil {
		return TopicInfo{}, err
	}
	return topicFromProto(r.Topic), nil
}

// ListTopics returns every topic, sorted by name, without partition
// details.
func (a *Admin) ListTopics(ctx context.Context) ([]TopicInfo, error) {
	r, err := unary(ctx, a.cfg.RequestTimeout, a.topics.ListTopics, &sqv1.ListTopicsRequest{})
	if err != nil {
		return nil, err
	}
	out := make([]TopicInfo, len(r.Topics))
	for i, t := range r.Topics {
		out[i] = topicFromProto(t)
	}
	return out, nil
}

// DescribeTopic returns a topic with its partitions' offsets and sizes.
func (a *Admin) DescribeTopic(ctx context.Context, name string) (TopicInfo, error) {
	r, err := unary(ctx, a.cfg.RequestTimeout, a.topics.DescribeTopic, &sqv1.DescribeTopicRequest{Name: name})
	if err != nil {
		return TopicInfo{}, err
	}
	return topicFromProto(r.Topic), nil
}

// NodeInfo describes the node the Admin is connected to.
type NodeInfo struct {
	NodeID, ClusterID, Version string
	Uptime                     time.Duration
	IOBackend                  string // "portable" or "uring"
	DataDir                    string
	DataDirTotalBytes          uint64 // file system of the data directory
	DataDirFreeBytes           uint64
	DataBytes                  int64 // held by the partitions' segments
	Topics                     int
	GrpcAddr, CapnpAddr        string
	HTTPAddr                   string
	// GrpcMaxMessageBytes bounds every Subscribe response of the gRPC
	// plane, bytes (below gRPC's default 4 MiB receive limit); a record
	// larger than it is read only over Cap'n Proto. 0 from older servers.
	GrpcMaxMessageBytes int64
}

// NodeInfo returns the node's identity, version, uptime and storage.
func (a *Admin) NodeInfo(ctx context.Context) (NodeInfo, error) {
	r, err := unary(ctx, a.cfg.RequestTimeout, a.cluster.NodeInfo, &sqv1.NodeInfoRequest{})
	if err != nil {
		return NodeInfo{}, err
	}
	return NodeInfo{NodeID: r.NodeId, ClusterID: r.ClusterId, Version: r.Version,
		Uptime: time.Duration(r.UptimeMs) * time.Millisecond, IOBackend: r.IoBackend, DataDir: r.DataDir,
		DataDirTotalBytes: r.DataDirTotalBytes, DataDirFreeBytes: r.DataDirFreeBytes, DataBytes: r.DataBytes,
		Topics: int(r.TopicCount), GrpcAddr: r.GrpcAddress, CapnpAddr: r.CapnpAddress, HTTPAddr: r.HttpAddress,
		GrpcMaxMessageBytes: r.GrpcMaxMessageBytes}, nil
}

// ClusterMember is one node of the cluster.
type ClusterMember struct {
	NodeID, GrpcAddr, CapnpAddr string
	// State is the membership state as the answering node's gossip sees
	// it: "alive", "suspect", "dead" or "left"; "unknown" for a node in
	// the metadata that gossip has not met.
	State string
	Self  bool // the node answering
	// GossipAddr, RaftAddr and HTTPAddr are the node's other listeners
	// (empty from a server that predates clustering).
	GossipAddr, RaftAddr, HTTPAddr string
	// Voter is true for a Raft voter, false for a non-voter; Controller
	// for the Raft leader.
	Voter, Controller bool
}

// Members lists the cluster's nodes (the answering node alone when it is
// not clustered).
func (a *Admin) Members(ctx context.Context) ([]ClusterMember, error) {
	r, err := unary(ctx, a.cfg.RequestTimeout, a.cluster.Members, &sqv1.MembersRequest{})
	if err != nil {
		return nil, err
	}
	out := make([]ClusterMember, len(r.Members))
	for i, m := range r.Members {
		out[i] = ClusterMember{NodeID: m.NodeId, GrpcAddr: m.GrpcAddress, CapnpAddr: m.CapnpAddress, State: m.State, Self: m.Self,
			GossipAddr: m.GossipAddress, RaftAddr: m.RaftAddress, HTTPAddr: m.HttpAddress, Voter: m.Voter, Controller: m.Controller}
	}
	return out, nil
}

func topicConfigToProto(c TopicConfig) *sqv1.TopicConfig {
	return &sqv1.TopicConfig{SyncPolicy: c.SyncPolicy, SegmentBytes: c.SegmentBytes, RetentionBytes: c.RetentionBytes,
		RetentionMs: c.RetentionMs, MaxRecordBytes: c.MaxRecordBytes, SegmentMs: c.SegmentMs,
		MinInsyncReplicas: c.MinInsyncReplicas, UncleanLeaderElection: c.UncleanLeaderElection,
		LocalRetentionMs: c.LocalRetentionMs, LocalRetentionBytes: c.LocalRetentionBytes}
}

func topicFromProto(t *sqv1.TopicInfo) TopicInfo {
	if t == nil {
		return TopicInfo{}
	}
	out := TopicInfo{Name: t.Name, Partitions: uint32(t.PartitionCount), ReplicationFactor: uint32(max(t.ReplicationFactor, 0))}
	out.ID, _ = api.TopicIDFromBytes(t.TopicId)
	if c := t.Config; c != nil {
		out.Config = TopicConfig{SyncPolicy: c.SyncPolicy, SegmentBytes: c.SegmentBytes, RetentionBytes: c.RetentionBytes,
			RetentionMs: c.RetentionMs, MaxRecordBytes: c.MaxRecordBytes, SegmentMs: c.SegmentMs,
			MinInsyncReplicas: c.MinInsyncReplicas, UncleanLeaderElection: c.UncleanLeaderElection,
			LocalRetentionMs: c.LocalRetentionMs, LocalRetentionBytes: c.LocalRetentionBytes}
	}
	out.Config.ReplicationFactor = out.ReplicationFactor
	for _, p := range t.Partitions {
		pi := PartitionInfo{Partition: uint32(p.Partition), LogStartOffset: p.LogStartOffset, HighWatermark: p.HighWatermark,
			LogEndOffset: p.LogEndOffset, SizeBytes: p.SizeBytes, SegmentCount: uint32(p.SegmentCount),
			Leader: p.Leader, LeaderEpoch: p.LeaderEpoch, Replicas: p.Replicas, ISR: p.Isr}
		if r := p.Remote; r != nil {
			pi.Remote = &RemoteStats{LogStartOffset: r.LogStartOffset, EndOffset: r.EndOffset, Segments: uint32(max(r.Segments, 0)),
				Bytes: r.Bytes, LagSegments: uint32(max(r.LagSegments, 0)), LagBytes: r.LagBytes}
		}
		if p.Error != "" {
			pi.Err = textError(p.Error, api.CodePartitionFailed)
		}
		out.PartitionInfos = append(out.PartitionInfos, pi)
	}
	return out
}
