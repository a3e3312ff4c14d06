package templates

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"testing"
	"time"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"

	"github.com/seedqueue/sq/internal/clusternet"
)

// otlpSink is an OTLP/gRPC trace receiver (the collector's TraceService,
// https://opentelemetry.io/docs/specs/otlp/) standing in for Jaeger: it
// counts the spans it receives per service.instance.id resource
// attribute.
type otlpSink struct {
	collectortrace.UnimplementedTraceServiceServer

	mu    sync.Mutex
	spans map[string]int // service.instance.id -> spans received
}

// startOTLPSink serves the sink on addr inside namespace ns until t ends.
func startOTLPSink(t *testing.T, ns *clusternet.Namespace, addr string) *otlpSink {
	t.Helper()
	l, err := ns.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	s := &otlpSink{spans: map[string]int{}}
	srv := grpc.NewServer()
	collectortrace.RegisterTraceServiceServer(srv, s)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(l)
	}()
	t.Cleanup(func() {
		srv.Stop()
		<-done
	})
	return s
}

// Export implements the TraceService.
func (s *otlpSink) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		instance := "(no service.instance.id)"
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.GetKey() == "service.instance.id" {
				instance = kv.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			s.spans[instance] += len(ss.GetSpans())
		}
	}
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

// Spans returns the spans received so far per service.instance.id.
func (s *otlpSink) Spans() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]int{}
	for k, v := range s.spans {
		out[k] = v
	}
	return out
}

// promAPI asks a Prometheus server's HTTP API
// (https://prometheus.io/docs/prometheus/latest/querying/api/) from a
// namespace.
type promAPI struct {
	base   string
	client *http.Client
}

// newPromAPI returns a client of the Prometheus server at addr (an IP
// literal and port), dialing from ns.
func newPromAPI(ns *clusternet.Namespace, addr string) *promAPI {
	tr := &http.Transport{DialContext: ns.DialContext, DisableKeepAlives: true}
	return &promAPI{base: "http://" + addr, client: &http.Client{Transport: tr, Timeout: 10 * time.Second}}
}

// get calls path with the query parameters and decodes the "data" of a
// success into out.
func (p *promAPI) get(path string, params url.Values, out any) error {
	resp, err := p.client.Get(p.base + path + "?" + params.Encode())
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	var env struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(b, &env); err != nil {
		return fmt.Errorf("%s: %d %q: %w", path, resp.StatusCode, b, err)
	}
	if env.Status != "success" {
		return fmt.Errorf("%s %v: %s", path, params, env.Error)
	}
	return json.Unmarshal(env.Data, out)
}

// promTarget is one active target of /api/v1/targets.
type promTarget struct {
	ScrapeURL string            `json:"scrapeUrl"`
	Health    string            `json:"health"`
	LastError string            `json:"lastError"`
	Labels    map[string]string `json:"labels"`
}

// targets returns the active targets.
func (p *promAPI) targets() ([]promTarget, error) {
	var d struct {
		Active []promTarget `json:"activeTargets"`
	}
	err := p.get("/api/v1/targets", url.Values{"state": {"active"}}, &d)
	return d.Active, err
}

// promSeries is one series of a query's result: its labels and its
// samples as [unix seconds, "value"] pairs (one for an instant query).
type promSeries struct {
	Metric map[string]string `json:"metric"`
	Value  []any             `json:"value"`
	Values [][]any           `json:"values"`
}

// query runs an instant query and returns its series (a vector result).
func (p *promAPI) query(expr string) ([]promSeries, error) {
	var d struct {
		ResultType string       `json:"resultType"`
		Result     []promSeries `json:"result"`
	}
	if err := p.get("/api/v1/query", url.Values{"query": {expr}}, &d); err != nil {
		return nil, err
	}
	if d.ResultType != "vector" {
		return nil, fmt.Errorf("query %q: result type %s, want vector", expr, d.ResultType)
	}
	return d.Result, nil
}

// queryRange runs a range query from start to end every step.
func (p *promAPI) queryRange(expr string, start, end time.Time, step time.Duration) ([]promSeries, error) {
	var d struct {
		Result []promSeries `json:"result"`
	}
	err := p.get("/api/v1/query_range", url.Values{"query": {expr},
		"start": {fmt.Sprint(start.Unix())}, "end": {fmt.Sprint(end.Unix())}, "step": {fmt.Sprint(int(step.Seconds()))}}, &d)
	return d.Result, err
}

// hostPortOf returns the host and port of an endpoint URL or host:port.
func hostPortOf(endpoint string) (host, port string, err error) {
	if u, perr := url.Parse(endpoint); perr == nil && u.Host != "" {
		endpoint = u.Host
	}
	return net.SplitHostPort(endpoint)
}

// sortedKeys returns m's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
