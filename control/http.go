package control

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Handler returns the HTTP handler of the node:
//
//	GET /healthz  200 "ok" while the process runs (liveness)
//	GET /readyz   200 "ready" once SetReady(true), 503 before, from
//	              StartShutdown on, and while the engine's group offsets
//	              log is failed (readiness)
//	GET /metrics  the Prometheus text exposition format
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		switch {
		case s.stopping.Load():
			w.WriteHeader(http.StatusServiceUnavailable)
			w.Write([]byte("shutting down\n"))
		case !s.ready.Load():
			w.WriteHeader(http.StatusServiceUnavailable)
			w.Write([]byte("recovering\n"))
		case s.offsetsErr() != nil:
			w.WriteHeader(http.StatusServiceUnavailable)
			w.Write([]byte("group offsets log failed: " + s.offsetsErr().Error() + "\n"))
		default:
			w.Write([]byte("ready\n"))
		}
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.metrics.reg, promhttp.HandlerOpts{}))
	return mux
}

// offsetsFailer is implemented by engines that report a failed group
// offsets log (*engine.Engine.GroupOffsetsErr).
type offsetsFailer interface{ GroupOffsetsErr() error }

// offsetsErr returns the engine's group offsets log failure, or nil.
func (s *Server) offsetsErr() error {
	if !s.hasEngine() {
		return nil
	}
	if f, ok := s.eng().(offsetsFailer); ok {
		return f.GroupOffsetsErr()
	}
	return nil
}
