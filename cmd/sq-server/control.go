package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.opentelemetry.io/otel"

	"github.com/seedqueue/sq/control"
	"github.com/seedqueue/sq/control/telemetry"
	"github.com/seedqueue/sq/internal/acl"
	"github.com/seedqueue/sq/internal/authn"
	"github.com/seedqueue/sq/internal/quota"
	"github.com/seedqueue/sq/internal/tlsconf"
)

// hooks let tests observe and pace the start of run; nil fields are
// skipped. They are never set outside tests.
type hooks struct {
	// beforeRecovery runs after the HTTP listener is up and before
	// engine.Open recovers the data directory.
	beforeRecovery func()
	// listening is called with each plane ("http", "grpc", "capnp") and
	// its bound address.
	listening func(plane, addr string)
	// tls is called with the TLS reloader once it is loaded (TLS on).
	tls func(*tlsconf.Reloader)
	// tlsPoll is the period of the TLS files' change check; 0: the
	// default (tlsconf.DefaultPollInterval).
	tlsPoll time.Duration
	// hostProbe, when set, replaces the host readers of the start-up
	// checks (hostcheck.go).
	hostProbe *hostProbe
}

// probe is the host probe of the start-up checks.
func (h *hooks) probe() hostProbe {
	if h != nil && h.hostProbe != nil {
		return *h.hostProbe
	}
	return defaultHostProbe()
}

func (h *hooks) tlsLoaded(r *tlsconf.Reloader) {
	if h != nil && h.tls != nil {
		h.tls(r)
	}
}

func (h *hooks) tlsPollInterval() time.Duration {
	if h == nil {
		return 0
	}
	return h.tlsPoll
}

func (h *hooks) listened(plane string, ln net.Listener) {
	if h != nil && h.listening != nil {
		h.listening(plane, ln.Addr().String())
	}
}

// controlPlane is the node's gRPC control plane, HTTP health and metrics
// endpoints and OpenTelemetry export.
type controlPlane struct {
	srv   *control.Server
	tel   *telemetry.Telemetry
	log   *slog.Logger
	errs  chan error // one per serving goroutine that stopped on its own
	grpcH string
	hooks *hooks
	// httpAddr is the bound HTTP address; empty without --http-host.
	httpAddr string
	// quotas are the client byte-rate quotas of both planes.
	quotas *quota.Manager
	// authz checks the requests of both planes; nil without
	// --authorization.
	authz *acl.Authorizer
	// users is the user store both planes authenticate against, set once
	// the cluster node runs; auth runs their SCRAM exchanges (auth.go).
	users *authn.StoreRef
	auth  *authn.Authenticator
}

// startControl creates the control server, starts OpenTelemetry export
// when OTEL_EXPORTER_OTLP_ENDPOINT is set, and serves HTTP at once, so
// /healthz answers and /readyz says 503 during recovery. An empty
// --http-host serves no HTTP.
//
// With tlsr (--tls-cert) both gRPC and HTTP serve TLS only.
func startControl(ctx context.Context, c *config, log *slog.Logger, tlsr *tlsconf.Reloader) (*controlPlane, error) {
	cp := &controlPlane{log: log, errs: make(chan error, 2), grpcH: c.GRPCHost, hooks: c.hooks, users: &authn.StoreRef{}}
	cp.auth = authn.NewAuthenticator(cp.users, nil)
	opts := control.Options{NodeID: c.NodeID, ClusterID: c.ClusterID, Version: version,
		GRPCAddr: c.GRPCHost, CapnpAddr: c.CapnpHost, HTTPAddr: c.HTTPHost, MaxBatchBytes: c.MaxBatch, Logger: log,
		MaxConnections: c.MaxConnections, MaxConnectionsPerIP: c.MaxConnectionsPerIP, MaxInflightRequestBytes: c.MaxInflightRequestBytes, RecvTimeout: c.FrameReadTimeout}
	// The exporter reads the registry of the server it is built before.
	var registry atomic.Pointer[prometheus.Registry]
	gather := prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		if r := registry.Load(); r != nil {
			return r.Gather()
		}
		return nil, nil
	})
	tel, err := telemetry.Setup(ctx, telemetry.Options{Version: version, Gatherer: gather, Getenv: os.Getenv})
	if err != nil {
		return nil, err
	}
	if tel.Enabled() {
		// Export errors (an unreachable collector, say) go to the server's
		// log, in its format, not to the standard logger.
		otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
			log.Warn("OpenTelemetry export failed", "err", err)
		}))
		log.Info("OpenTelemetry export on", "service_name", tel.ServiceName)
	}
	opts.Tracer = tel.Tracer
	opts.Authenticator, opts.AuthRequired, opts.MetricsAuth = cp.auth, c.AuthRequired, c.MetricsAuth
	if tlsr != nil {
		opts.TLS = c.clientPlaneTLS(tlsr.ServerConfig())
	}
	// The byte-rate quotas both planes enforce; the cluster metadata
	// fills them (startCluster).
	opts.Quotas = quota.New(quota.Options{})
	authz, denied, err := c.newAuthorizer(tlsr, log)
	if err != nil {
		_ = tel.Shutdown(ctx)
		return nil, err
	}
	opts.Authorizer, cp.authz = authz, authz
	srv, err := control.New(opts)
	if err != nil {
		_ = tel.Shutdown(ctx)
		return nil, err
	}
	srv.Registry().MustRegister(opts.Quotas.Collectors()...)
	if denied != nil {
		srv.Registry().MustRegister(denied)
	}
	registry.Store(srv.Registry())
	cp.srv, cp.tel, cp.quotas = srv, tel, opts.Quotas
	if c.HTTPHost == "" {
		return cp, nil
	}
	ln, err := net.Listen("tcp", c.HTTPHost)
	if err != nil {
		_ = tel.Shutdown(ctx)
		return nil, listenError("http", "--http-host", "SQ_HTTP_HOST", c.HTTPHost, err)
	}
	cp.httpAddr = ln.Addr().String()
	log.Info("HTTP listening", "addr", ln.Addr().String(), "endpoints", "/healthz /readyz /metrics", "tls", tlsr != nil)
	cp.hooks.listened("http", ln)
	go func() { cp.errs <- fmt.Errorf("http server stopped: %w", errOrClosed(srv.ServeHTTP(ln))) }()
	return cp, nil
}

// listenGRPC listens on --grpc-host; nil when it is empty (no gRPC plane).
func (cp *controlPlane) listenGRPC() (net.Listener, error) {
	if cp.grpcH == "" {
		return nil, nil
	}
	ln, err := net.Listen("tcp", cp.grpcH)
	if err != nil {
		return nil, listenError("control plane", "--grpc-host", "SQ_GRPC_HOST", cp.grpcH, err)
	}
	return ln, nil
}

// serveGRPC attaches the recovered storage and serves gRPC on ln (none
// when ln is nil).
func (cp *controlPlane) serveGRPC(eng control.Engine, ln net.Listener) {
	cp.srv.SetEngine(eng)
	if ln == nil {
		return
	}
	cp.log.Info("control plane listening", "addr", ln.Addr().String())
	cp.hooks.listened("grpc", ln)
	go func() { cp.errs <- fmt.Errorf("gRPC server stopped: %w", errOrClosed(cp.srv.ServeGRPC(ln))) }()
}

// errOrClosed turns the nil of a server stopped by Shutdown into an error
// naming it, so that an early stop is reported.
func errOrClosed(err error) error {
	if err == nil {
		return errors.New("closed")
	}
	return err
}

// shutdown stops gRPC (in-flight calls finish) and HTTP, then flushes the
// OpenTelemetry exporters.
func (cp *controlPlane) shutdown(ctx context.Context) error {
	err := cp.srv.Shutdown(ctx)
	if terr := cp.tel.Shutdown(ctx); terr != nil {
		cp.log.Warn("OpenTelemetry shutdown", "err", terr)
	}
	return err
}
