package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/seedqueue/sq/control"
	"github.com/seedqueue/sq/engine"
	"github.com/seedqueue/sq/internal/buildinfo"
	"github.com/seedqueue/sq/internal/tlsconf"
	"github.com/seedqueue/sq/net/dataplane"
	"github.com/seedqueue/sq/ring"
)

// version is the server version, set at build time with -ldflags -X
// (internal/buildinfo, the Makefile's build target).
var version = buildinfo.Version

// shutdownTimeout bounds the graceful stop: in-flight requests get this
// long to finish before connections are closed.
const shutdownTimeout = 30 * time.Second

// controlGrace bounds how long open control-plane streams may keep the
// control plane up during a stop; unary calls finish well within it.
const controlGrace = 2 * time.Second

// telemetryFlushTimeout bounds the final flush of the OpenTelemetry
// exporters.
const telemetryFlushTimeout = 3 * time.Second

func newRootCommand() *cobra.Command { return newRootFor(new(config)) }

// newRootFor is the root command, its settings resolved into c.
func newRootFor(c *config) *cobra.Command {
	root := &cobra.Command{
		Use:   "sq-server",
		Short: "SQ (SeedQueue) broker node",
		Long: "sq-server runs one SQ broker node. Every flag can also be set with its environment variable, or in the " +
			"config file (--config) under its name; a flag wins over its variable, which wins over the file.\n\n" + envTable(),
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       version,
	}
	root.SetVersionTemplate(buildinfo.String("sq-server") + "\n")
	bindFlags(root.PersistentFlags(), c)
	serve := &cobra.Command{
		Use:   "serve",
		Short: "Run the broker until SIGINT or SIGTERM",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, err := c.resolve(cmd.Root().PersistentFlags(), os.Getenv); err != nil {
				return err
			}
			if err := c.validate(); err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return run(ctx, c, c.logger())
		},
	}
	root.AddCommand(serve, newConfigCommand(c, os.Getenv), newCheckCommand(c, os.Getenv), newProbeCommand(c))
	return root
}

// run opens the engine, serves the data plane until ctx ends, then stops
// gracefully: refuse new work, finish in-flight requests, sync, trim, close.
func run(ctx context.Context, c *config, log *slog.Logger) error {
	if f, ok := log.Handler().(interface{ Flush() }); ok {
		defer f.Flush() // the counts of repeated lines still pending (internal/ratelog)
	}
	log.Info("starting sq-server", "version", version, "build", buildinfo.String("sq-server"), "node_id", c.NodeID, "cluster_id", c.ClusterID, "data_dir", c.DataDir)
	logIgnored(c, log)
	if err := c.logHostChecks(c.hostChecks(c.hooks.probe()), log); err != nil {
		return err
	}
	backend, _, err := ring.Select(c.IOBackend, log) // logs the backend and why, once
	if err != nil {
		return err
	}
	tlsr, err := c.loadTLS(log)
	if err != nil {
		backend.Close()
		return err
	}
	// SIGHUP is handled with TLS or without: its default action would
	// end the process.
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	watchTLS(wctx, tlsr, c.hooks.tlsPollInterval(), log)
	hup := notifyHUP() // the other settings reload once the engine is open
	defer signal.Stop(hup)
	startWatchdog(wctx, log)
	if tlsr != nil {
		c.hooks.tlsLoaded(tlsr)
	}
	c.warnAuth(log)
	cp, err := startControl(ctx, c, log, tlsr)
	if err != nil {
		backend.Close()
		return err
	}
	defer func() { _ = cp.shutdown(context.Background()) }() // after a failed start; idempotent
	if c.hooks != nil && c.hooks.beforeRecovery != nil {
		c.hooks.beforeRecovery()
	}
	eng, err := engine.Open(engine.Options{
		DataDir:             c.DataDir,
		SyncPolicy:          c.SyncPolicy,
		SegmentBytes:        c.SegmentBytes,
		RetentionMs:         c.RetentionMs,
		RetentionBytes:      c.RetentionBytes,
		LocalRetentionMs:    c.LocalRetentionMs,
		LocalRetentionBytes: c.LocalRetentionBytes,
		MaxRecordBytes:      c.MaxRecord,
		MaxBatchBytes:       c.MaxBatch,
		Backend:             backend,
		DirectWrites:        c.DirectWrites,
		MinFreeBytes:        c.MinFreeBytes,
		Logger:              log,
		MaxOpenSegmentFiles: c.MaxSegFiles,
		Observer:            cp.srv.Observer(),
		// A cluster node holds the logs of the partitions it leads only:
		// it clamps their committed offsets once it has caught up.
		DeferOffsetClamp: c.clustered(),
		Replication:      c.replication(),
		ScrubInterval:    c.ScrubInterval,
	})
	if err != nil {
		backend.Close()
		return err
	}
	c.watchReload(wctx, hup, eng, os.Getenv, log)
	defer func() {
		if err := backend.Close(); err != nil {
			log.Warn("closing the I/O backend", "err", err)
		}
	}()
	tiered, err := startTiering(ctx, c, log, cp, eng)
	if err != nil {
		eng.Close()
		return err
	}
	defer tiered.close()
	ln, err := net.Listen("tcp", c.CapnpHost)
	if err != nil {
		eng.Close()
		return listenError("data plane", "--capnp-host", "SQ_CAPNP_HOST", c.CapnpHost, err)
	}
	grpcLn, err := cp.listenGRPC()
	if err != nil {
		ln.Close()
		eng.Close()
		return err
	}
	// Outside a cluster the planes serve the engine itself; in one, the
	// cluster layer's broker (docs/cluster.md).
	var storage interface {
		dataplane.Broker
		control.Engine
	} = cp.srv.Traced(eng)
	var cl *clusterNode
	if c.clustered() {
		if seeds := c.seeds(); len(seeds) > 0 {
			cp.srv.SetPhase("joining the cluster through --seeds " + strings.Join(seeds, ","))
		} else {
			cp.srv.SetPhase("starting the cluster node")
		}
		cl, err = startCluster(ctx, c, log, cp, eng, listeners{GRPC: grpcLn.Addr().String(), Data: ln.Addr().String(), HTTP: cp.httpAddr}, tlsr)
		cp.srv.SetPhase("")
		if err != nil {
			grpcLn.Close()
			ln.Close()
			eng.Close()
			if ctx.Err() != nil {
				// SIGINT or SIGTERM while joining: a requested stop.
				log.Info("stopped while joining the cluster", "seeds", c.Seeds, "reason", err)
				return nil
			}
			return err
		}
		defer cl.close(log)
		storage = cl.broker
	}
	srv, err := dataplane.New(storage, dataplane.Options{
		Addr:          c.CapnpHost,
		NodeID:        c.NodeID,
		ClusterID:     c.ClusterID,
		ServerVersion: version,
		MaxFrameBytes: uint32(c.MaxFrame),
		Logger:        log,

		MaxInFlightRequestBytes: c.MaxInflightRequestBytes,
		FrameReadTimeout:        c.FrameReadTimeout,
		MaxConnections:          c.MaxConnections,
		MaxConnectionsPerIP:     c.MaxConnectionsPerIP,
		Quotas:                  cp.quotas,
		Authorizer:              cp.authz,
		Authenticator:           cp.auth,
		AuthRequired:            c.AuthRequired,
	})
	if err != nil {
		if grpcLn != nil {
			grpcLn.Close()
		}
		ln.Close()
		eng.Close()
		return err
	}
	registerDataPlaneMetrics(cp.srv.Registry(), srv)
	if cl != nil {
		tiered.enableRestore(cp, log, cl.broker)
	} else {
		tiered.enableRestore(cp, log, eng)
	}
	// gRPC serves first: peers join and forward metadata changes through
	// it. The data plane serves once the node has caught up with the
	// metadata log, so that no client is told a topic is unknown by a node
	// that has not yet applied its creation (a broker fenced until it has
	// caught up, as in Kafka's KRaft).
	cp.serveGRPC(storage, grpcLn)
	var removed <-chan struct{} // closed when this node is removed from the cluster
	if cl != nil {
		removed = cl.node.Removed()
		if err := cl.waitReady(ctx, log); err != nil {
			srv.Close()
			ln.Close()
			eng.Close()
			if ctx.Err() != nil && !errors.Is(err, errRemoved) {
				log.Info("stopped before the node caught up with the cluster metadata")
				return nil
			}
			return err
		}
		cl.startReplication()
		cl.adoptGroups(ctx, log)
	}
	log.Info("data plane listening", "addr", ln.Addr().String(), "tls", tlsr != nil)
	c.hooks.listened("capnp", ln)
	dataLn := cp.srv.CountConns(ln, "capnp")
	if tlsr != nil {
		// Each connection's handshake runs on its first read, on the
		// connection's own goroutine, never in the accept loop, and
		// within --frame-read-timeout.
		dataLn = tlsconf.NewListener(dataLn, c.clientPlaneTLS(tlsr.ServerConfig()), c.FrameReadTimeout)
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(dataLn) }()
	cp.srv.SetReady(true)
	sdNotify(log, sdReady) // the condition of /readyz: storage recovered, metadata caught up

	select {
	case <-ctx.Done():
		log.Info("shutting down: refusing new work, finishing requests in flight")
	case err = <-serveErr:
		log.Error("data plane stopped", "err", err)
	case err = <-cp.errs:
		log.Error("control plane stopped", "err", err)
	case <-removed:
		err = errRemoved
	}
	// STOPPING=1 as the stop begins: the controlled shutdown below can
	// take up to --controlled-shutdown-timeout.
	sdNotify(log, sdStopping)
	if cl != nil && err == nil {
		// Both planes still serve: clients are told NOT_LEADER with the
		// new leaders, and followers fetch from them.
		cl.controlledShutdown(c.ControlledShutdownTimeout, log)
	}
	cp.srv.StartShutdown() // /readyz 503 and health NOT_SERVING from now on
	sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	// Both planes drain at once. Long-lived control-plane streams (health
	// Watch, Subscribe) get controlGrace, not the whole timeout, so they
	// cannot hold the engine's final sync back.
	var wg sync.WaitGroup
	wg.Go(func() {
		if serr := srv.Shutdown(sctx); serr != nil && !errors.Is(serr, context.Canceled) {
			log.Warn("data plane shutdown", "err", serr)
		}
	})
	wg.Go(func() {
		cctx, ccancel := context.WithTimeout(sctx, controlGrace)
		defer ccancel()
		if serr := cp.srv.Shutdown(cctx); serr != nil {
			log.Info("control plane streams closed at the end of the grace period", "grace", controlGrace, "err", serr)
		}
	})
	wg.Wait()
	if cl != nil {
		cl.close(log) // leaves gossip before the storage closes; idempotent
	}
	if cerr := eng.Close(); cerr != nil {
		err = errors.Join(err, cerr)
	}
	// The exporters flush last and briefly: an unreachable collector must
	// not delay the stop.
	tctx, tcancel := context.WithTimeout(context.Background(), telemetryFlushTimeout)
	defer tcancel()
	if terr := cp.tel.Shutdown(tctx); terr != nil {
		log.Warn("OpenTelemetry shutdown", "err", terr)
	}
	if err == nil {
		log.Info("stopped cleanly")
	}
	return err
}

// listenError is the error of a listener (what) that could not listen on
// addr. An address in use (most often by another sq-server, or a second
// `make run`) names the flag and variable that move the listener;
// errors.Is(err, syscall.EADDRINUSE) holds for it.
func listenError(what, flag, env, addr string, err error) error {
	if errors.Is(err, syscall.EADDRINUSE) {
		return fmt.Errorf("%s: listen on %s: %w (by another program, another sq-server say); give it another address with %s or %s", what, addr, syscall.EADDRINUSE, flag, env)
	}
	return fmt.Errorf("%s: listen on %s: %w", what, addr, err)
}
