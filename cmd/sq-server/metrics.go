package main

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/seedqueue/sq/net/dataplane"
)

// registerDataPlaneMetrics adds the data plane's connection and budget
// gauges to the control plane's /metrics. They are read from
// dataplane.Server.Stats at each scrape and carry no labels.
func registerDataPlaneMetrics(reg *prometheus.Registry, srv *dataplane.Server) {
	stat := func(f func(dataplane.Stats) float64) func() float64 {
		return func() float64 { return f(srv.Stats()) }
	}
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sq_dataplane_inflight_request_bytes",
			Help: "Bytes of the data plane's request budget (--max-inflight-request-bytes) held by requests now."},
			stat(func(s dataplane.Stats) float64 { return float64(s.InFlightRequestBytes) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sq_dataplane_max_inflight_request_bytes",
			Help: "The data plane's request budget in bytes (--max-inflight-request-bytes)."},
			stat(func(s dataplane.Stats) float64 { return float64(s.MaxInFlightRequestBytes) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sq_dataplane_budget_waiting_connections",
			Help: "Data-plane connections not being read because the request budget is spent."},
			stat(func(s dataplane.Stats) float64 { return float64(s.BudgetWaiters) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sq_dataplane_max_connections",
			Help: "The most open data-plane connections (--max-connections)."},
			stat(func(s dataplane.Stats) float64 { return float64(s.MaxConnections) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sq_dataplane_rejected_connections_total",
			Help: "Data-plane connections closed at accept because --max-connections were open (or --max-connections-per-ip of their address)."},
			stat(func(s dataplane.Stats) float64 { return float64(s.RejectedConnections) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sq_dataplane_rejected_connections_per_ip_total",
			Help: "Data-plane connections closed at accept because --max-connections-per-ip of their client IP address were open."},
			stat(func(s dataplane.Stats) float64 { return float64(s.RejectedConnectionsPerIP) })),
	)
}
