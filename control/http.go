package control

import (
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Handler returns the HTTP handler of the node:
//
//	GET /healthz  200 "ok" while the process runs (liveness)
//	GET /readyz   200 "ready" once SetReady(true), 503 before (the body
//	              says why: SetPhase's text, the cluster's reason, or
//	              "recovering") and from
//	              StartShutdown on, and while the engine reports a problem
//	              (a failed group offsets log, or segment files that
//	              cannot be opened or mapped), and in a cluster until the
//	              ClusterBackend's Ready is nil (joined, caught up with the
//	              metadata log), with the reason in the body (readiness). Failed partitions leave the node ready: the
//	              body lists them after "degraded:"
//	GET /metrics  the Prometheus text exposition format; with
//	              Options.MetricsAuth only for a verified client
//	              certificate or HTTP Basic credentials of a user (401
//	              otherwise)
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		switch {
		case s.stopping.Load():
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte("shutting down\n"))
		case !s.ready.Load():
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(s.notReadyText() + "\n"))
		default:
			if err := s.engineHealth(); err != nil {
				w.WriteHeader(http.StatusServiceUnavailable)
				fmt.Fprintf(w, "not ready:\n%v\n", err)
				return
			}
			if err := s.clusterReady(); err != nil {
				w.WriteHeader(http.StatusServiceUnavailable)
				fmt.Fprintf(w, "not ready: cluster: %v\n", err)
				return
			}
			_, _ = w.Write([]byte("ready\n"))
			if err := s.failedPartitions(); err != nil {
				fmt.Fprintf(w, "degraded:\n%v\n", err)
			}
		}
	})
	mux.Handle("GET /metrics", s.metricsAuth(promhttp.HandlerFor(s.metrics.reg, promhttp.HandlerOpts{})))
	return mux
}

// healthReporter is implemented by engines that report why they cannot
// serve (*engine.Engine: segment files that cannot be opened, a failed
// group offsets log) and which partitions failed.
type healthReporter interface {
	Health() error
	FailedPartitions() error
}

// engineHealth returns the engine's Health error, or nil when there is no
// engine yet or it does not report its health.
func (s *Server) engineHealth() error {
	if !s.hasEngine() {
		return nil
	}
	if h, ok := s.eng().(healthReporter); ok {
		return h.Health()
	}
	return nil
}

// failedPartitions returns the engine's FailedPartitions error, or nil.
// Failed partitions leave the node ready (its other partitions serve) and
// are listed in the /readyz body and the sq_partition_failed metric.
func (s *Server) failedPartitions() error {
	if !s.hasEngine() {
		return nil
	}
	if h, ok := s.eng().(healthReporter); ok {
		return h.FailedPartitions()
	}
	return nil
}
