package control

import (
	"context"
	"crypto/tls"
	"errors"
	"go.opentelemetry.io/otel/trace"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/api/sqv1"
	"github.com/seedqueue/sq/engine"
)

// Engine is the part of the storage engine the control plane serves.
// *engine.Engine implements it.
type Engine interface {
	CreateTopic(name string, partitions int, cfg engine.TopicConfig) (engine.TopicInfo, error)
	DescribeTopic(name string) (engine.TopicInfo, error)
	ListTopics() []engine.TopicInfo
	Append(ctx context.Context, topic string, partition int, batch []byte) (engine.AppendResult, error)
	Fetch(ctx context.Context, topic string, partition int, offset uint64, maxBytes int, maxWait time.Duration) (*engine.FetchResult, error)
	// FetchID is Fetch of the topic with id (KIP-516): a set id that is
	// not the topic's current one fails with UNKNOWN_TOPIC_ID.
	FetchID(ctx context.Context, topic string, id api.TopicID, partition int, offset uint64, maxBytes int, maxWait time.Duration) (*engine.FetchResult, error)
	CommitOffsets(group, memberID string, generation int32, offsets []engine.OffsetCommit) ([]engine.OffsetCommit, error)
	FetchOffsets(group, topic string) ([]engine.OffsetCommit, error)
	Limits() engine.Limits
	BackendName() string
	DataDir() string
	InFlight() int64
}

// grpcFramingBytes is the allowance for protobuf framing above one batch
// in a received message.
const grpcFramingBytes = 1 << 20

// Server is the control plane of one node: a gRPC server with the sq.v1
// services, health and reflection, and an HTTP handler for /healthz,
// /readyz and /metrics. Create it with New; it is not ready (503, health
// NOT_SERVING) until SetReady(true).
type Server struct {
	engine atomic.Pointer[Engine] // nil until SetEngine
	// restorer serves RestoreTopic; nil: tiered storage is off.
	restorer atomic.Pointer[TopicRestorer]
	cluster  atomic.Pointer[ClusterBackend] // nil outside a cluster (SetCluster)
	aclStore atomic.Pointer[ACLStore]       // nil: no Acls service (SetACLStore)
	users    atomic.Pointer[UserBackend]    // nil until SetUsers (users.go)
	opts     Options
	started  time.Time

	grpc    *grpc.Server
	health  *health.Server
	metrics *metrics
	http    *http.Server

	ready    atomic.Bool
	phase    atomic.Pointer[string] // what the node does before it is ready (SetPhase)
	stopping atomic.Bool
	serving  atomic.Bool   // the gRPC health status last set
	watchMu  sync.Mutex    // serializes refreshHealth
	closing  chan struct{} // closed by StartShutdown: ends Subscribe streams
	stopOnce sync.Once

	rr atomic.Uint32 // round-robin partition of keyless Publish with partition -1

	recv    *recvBudget    // bounds the request messages being received
	decoded decodedCharges // decoded request -> its charge in recv

	addrMu sync.Mutex
	addrs  map[string]string // plane -> bound listener address
}

// New returns a Server without an engine: /healthz, /metrics, health and
// reflection serve at once, the sq.v1 services answer Unavailable until
// SetEngine. It applies opts.Defaults and fails with the errors of
// opts.Validate.
func New(opts Options) (*Server, error) {
	opts.Defaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	s := &Server{opts: opts, started: opts.Now(), closing: make(chan struct{})}
	s.recv = &recvBudget{max: opts.MaxInflightRequestBytes,
		charge: recvCharge(opts.MaxBatchBytes), timeout: opts.RecvTimeout}
	s.metrics = newMetrics(s)
	var creds []grpc.ServerOption
	if opts.TLS != nil {
		creds = append(creds, grpc.Creds(credentials.NewTLS(opts.TLS)))
	}
	s.grpc = grpc.NewServer(append(creds,
		// A publish carries up to one batch of records plus their framing.
		grpc.MaxRecvMsgSize(opts.MaxBatchBytes+grpcFramingBytes),
		grpc.MaxConcurrentStreams(opts.MaxConcurrentStreams),
		// Each call is charged that much before its message is read.
		grpc.InTapHandle(s.tap),
		// Fixed windows: what a call that waits for its charge can be
		// sent meanwhile.
		grpc.InitialWindowSize(streamWindowBytes),
		grpc.InitialConnWindowSize(streamWindowBytes),
		grpc.StatsHandler(recvStats{s}),
		grpc.ForceServerCodecV2(budgetCodec{s: s, base: encoding.GetCodecV2("proto")}),
		grpc.ChainUnaryInterceptor(s.authUnary, s.decodeUnary, s.metrics.unaryInterceptor, s.auditUnary, s.authorizeUnary),
		grpc.ChainStreamInterceptor(s.authStream, s.decodeStream, s.metrics.streamInterceptor, s.authorizeStream),
	)...)
	s.health = health.NewServer()
	s.setHealth(healthpb.HealthCheckResponse_NOT_SERVING)
	healthpb.RegisterHealthServer(s.grpc, s.health)
	sqv1.RegisterTopicsServer(s.grpc, &topicsService{s: s})
	sqv1.RegisterGroupsServer(s.grpc, &groupsService{s: s})
	sqv1.RegisterClusterServer(s.grpc, &clusterService{s: s})
	sqv1.RegisterMessagingServer(s.grpc, &messagingService{s: s})
	sqv1.RegisterQuotasServer(s.grpc, &quotasService{s: s})
	sqv1.RegisterAclsServer(s.grpc, &aclsService{s: s})
	sqv1.RegisterUsersServer(s.grpc, &usersService{s: s})
	reflection.Register(s.grpc)
	s.http = &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second,
		// Failed TLS handshakes and the like go to the server's log, at
		// DEBUG: any client can cause them.
		ErrorLog: slog.NewLogLogger(opts.Logger.Handler(), slog.LevelDebug)}
	return s, nil
}

// SetEngine attaches the recovered engine; the sq.v1 services serve from
// now on. Call it once, after engine.Open.
func (s *Server) SetEngine(eng Engine) { s.engine.Store(&eng) }

// eng returns the engine; the interceptors guarantee that handlers run
// only once it is set.
func (s *Server) eng() Engine { return *s.engine.Load() }

// hasEngine reports whether SetEngine was called.
func (s *Server) hasEngine() bool { return s.engine.Load() != nil }

// Observer returns the engine observer that feeds the metrics (and the
// traces when Options.Tracer is set). Install it in engine.Options.Observer
// before engine.Open.
func (s *Server) Observer() engine.Observer { return s.metrics }

// Registry returns the Prometheus registry behind /metrics, for extra
// collectors.
func (s *Server) Registry() *prometheus.Registry { return s.metrics.reg }

// Tracer returns the tracer of Options.Tracer, nil when spans are off.
func (s *Server) Tracer() trace.Tracer { return s.opts.Tracer }

// GRPCServer returns the underlying gRPC server (for tests and extra
// services).
func (s *Server) GRPCServer() *grpc.Server { return s.grpc }

// serviceNames are the services whose health status follows readiness;
// "" is the whole server.
var serviceNames = []string{"", "sq.v1.Topics", "sq.v1.Groups", "sq.v1.Cluster", "sq.v1.Messaging"}

func (s *Server) setHealth(st healthpb.HealthCheckResponse_ServingStatus) {
	for _, n := range serviceNames {
		s.health.SetServingStatus(n, st)
	}
}

// SetReady marks the node ready (recovery done, listeners up: /readyz 200,
// health SERVING) or not. It has no effect once StartShutdown was called.
func (s *Server) SetReady(ready bool) {
	if s.stopping.Load() {
		return
	}
	s.ready.Store(ready)
	s.refreshHealth()
}

// SetPhase sets what the node is doing before it is ready, as /readyz
// says it in its 503 body ("joining the cluster through --seeds ...");
// "" goes back to the default: the cluster's reason once SetCluster was
// called and it is not ready, else "recovering".
func (s *Server) SetPhase(phase string) {
	s.phase.Store(&phase)
}

// notReadyText is the /readyz body before SetReady(true).
func (s *Server) notReadyText() string {
	if p := s.phase.Load(); p != nil && *p != "" {
		return *p
	}
	if err := s.clusterReady(); err != nil {
		return "not ready: cluster: " + err.Error()
	}
	return "recovering"
}

// refreshHealth sets the gRPC health status: SERVING once SetReady(true)
// and, in a cluster, once the backend is ready; NOT_SERVING otherwise. It
// changes the status only when it differs from the last one set, so
// health watchers see transitions only.
func (s *Server) refreshHealth() {
	s.watchMu.Lock()
	defer s.watchMu.Unlock()
	if s.stopping.Load() {
		return
	}
	serving := s.ready.Load() && s.clusterReady() == nil
	if serving == s.serving.Load() {
		return
	}
	s.serving.Store(serving)
	if serving {
		s.setHealth(healthpb.HealthCheckResponse_SERVING)
	} else {
		s.setHealth(healthpb.HealthCheckResponse_NOT_SERVING)
	}
}

// Ready reports whether the node is ready: SetReady(true), not stopping,
// the engine reports no node-wide problem (segment files it cannot open, a
// failed group offsets log) and, in a cluster, the backend's Ready is nil
// (joined, caught up with the metadata log): /readyz 200. Failed
// partitions do not make the node unready.
func (s *Server) Ready() bool {
	return s.ready.Load() && !s.stopping.Load() && s.engineHealth() == nil && s.clusterReady() == nil
}

// ServeGRPC serves gRPC on ln until Shutdown. It returns nil after
// Shutdown, or the accept error.
func (s *Server) ServeGRPC(ln net.Listener) error {
	s.setAddr("grpc", ln)
	return s.grpc.Serve(s.limitConns(s.metrics.countConns(ln, "grpc")))
}

// ServeHTTP serves /healthz, /readyz and /metrics on ln until Shutdown,
// over TLS when Options.TLS is set (HTTP/1.1). It returns nil after
// Shutdown, or the accept error.
func (s *Server) ServeHTTP(ln net.Listener) error {
	s.setAddr("http", ln)
	if s.opts.TLS != nil {
		ln = tls.NewListener(ln, s.opts.TLS)
	}
	err := s.http.Serve(ln)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// StartShutdown marks the node as stopping: /readyz answers 503, health
// NOT_SERVING, and Subscribe streams end. Requests are still served until
// Shutdown. It is idempotent.
func (s *Server) StartShutdown() {
	s.stopOnce.Do(func() {
		s.stopping.Store(true)
		s.ready.Store(false)
		s.health.Shutdown()
		close(s.closing)
	})
}

// Shutdown calls StartShutdown, then stops the gRPC server gracefully
// (in-flight RPCs finish) and the HTTP server. When ctx ends first the
// remaining RPCs are cancelled and ctx's error is returned.
func (s *Server) Shutdown(ctx context.Context) error {
	s.StartShutdown()
	done := make(chan struct{})
	go func() {
		s.grpc.GracefulStop()
		close(done)
	}()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		s.grpc.Stop()
		<-done
		err = ctx.Err()
	}
	if herr := s.http.Shutdown(ctx); herr != nil && err == nil {
		err = herr
	}
	return err
}

// CountConns wraps ln so that its open connections are counted in
// sq_connections{plane}, and reports ln's address as the plane's in
// Cluster.NodeInfo. Use it for listeners served elsewhere (plane "capnp"
// for the Cap'n Proto data plane).
func (s *Server) CountConns(ln net.Listener, plane string) net.Listener {
	s.setAddr(plane, ln)
	return s.metrics.countConns(ln, plane)
}

// setAddr records the bound address of plane's listener.
func (s *Server) setAddr(plane string, ln net.Listener) {
	s.addrMu.Lock()
	defer s.addrMu.Unlock()
	if s.addrs == nil {
		s.addrs = map[string]string{}
	}
	s.addrs[plane] = ln.Addr().String()
}

// addr returns the bound address of plane, else def (the configured one).
func (s *Server) addr(plane, def string) string {
	s.addrMu.Lock()
	defer s.addrMu.Unlock()
	if a, ok := s.addrs[plane]; ok {
		return a
	}
	return def
}
