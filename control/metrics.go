package control

import (
	"context"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	dto "github.com/prometheus/client_model/go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	grpccodes "google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/engine"
	"github.com/seedqueue/sq/internal/outcome"
	"github.com/seedqueue/sq/ring"
)

// Latency buckets in seconds: 50µs to ~3.3s, doubling.
var latencyBuckets = prometheus.ExponentialBuckets(50e-6, 2, 17)

// metrics holds the Prometheus collectors of one Server and implements
// engine.Observer (metrics, and spans when a tracer is set).
type metrics struct {
	s      *Server
	reg    *prometheus.Registry
	tracer trace.Tracer // nil: no spans

	publishedRecords, publishedBytes *prometheus.CounterVec // {topic}
	fetchedRecords, fetchedBytes     *prometheus.CounterVec // {topic}
	publishErrors, fetchErrors       *prometheus.CounterVec // {code}: server faults and refusals
	publishCanceled, fetchCanceled   *prometheus.CounterVec // {code}: the client went away
	publishLatency, fetchLatency     prometheus.Histogram
	fsyncLatency, fsyncBatches       prometheus.Histogram
	fsyncErrors                      prometheus.Counter
	connections                      *prometheus.GaugeVec // {plane}
	grpcInFlight                     prometheus.Gauge
	grpcThrottled                    prometheus.Counter
	grpcRejected                     prometheus.Counter
	grpcRejectedPerIP                prometheus.Counter
	grpcRejectedCount                atomic.Uint64 // grpcRejected, for the log line
}

func newMetrics(s *Server) *metrics {
	m := &metrics{s: s, reg: prometheus.NewRegistry(), tracer: s.opts.Tracer}
	topic := []string{"topic"}
	m.publishedRecords = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sq_published_records_total", Help: "Records appended (acknowledged), per topic."}, topic)
	m.publishedBytes = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sq_published_bytes_total", Help: "Batch bytes appended (acknowledged), per topic."}, topic)
	m.fetchedRecords = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sq_fetched_records_total", Help: "Records returned by fetches, per topic."}, topic)
	m.fetchedBytes = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sq_fetched_bytes_total", Help: "Batch bytes returned by fetches, per topic."}, topic)
	m.publishErrors = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sq_publish_errors_total", Help: "Appends refused or failed by the server, per catalog error code (clients that cancel or disconnect are in sq_publish_canceled_total)."}, []string{"code"})
	m.fetchErrors = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sq_fetch_errors_total", Help: "Fetches refused or failed by the server, per catalog error code (clients that cancel or disconnect are in sq_fetch_canceled_total)."}, []string{"code"})
	m.publishCanceled = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sq_publish_canceled_total", Help: "Appends whose client cancelled, disconnected or passed its deadline before the acknowledgement: code CANCELED or DEADLINE_EXCEEDED (the batch may still be appended)."}, []string{"code"})
	m.fetchCanceled = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sq_fetch_canceled_total", Help: "Fetches ended because the client cancelled, disconnected or passed its deadline (or the server stopped a long poll at shutdown): code CANCELED or DEADLINE_EXCEEDED."}, []string{"code"})
	m.publishLatency = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "sq_publish_latency_seconds", Help: "Time from an append's arrival at the engine to its acknowledgement (sync policy included).", Buckets: latencyBuckets})
	m.fetchLatency = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "sq_fetch_latency_seconds", Help: "Time of one fetch, long-poll wait included.", Buckets: latencyBuckets})
	m.fsyncLatency = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "sq_fsync_latency_seconds", Help: "Duration of one fdatasync of a partition log.", Buckets: latencyBuckets})
	m.fsyncBatches = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "sq_fsync_batches", Help: "Batches made durable by one fdatasync (group commit size).", Buckets: prometheus.ExponentialBuckets(1, 2, 11)})
	m.fsyncErrors = prometheus.NewCounter(prometheus.CounterOpts{Name: "sq_fsync_errors_total", Help: "Failed fdatasyncs (each fails its partition)."})
	m.connections = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "sq_connections", Help: "Open client connections, per plane (capnp, grpc)."}, []string{"plane"})
	m.grpcInFlight = prometheus.NewGauge(prometheus.GaugeOpts{Name: "sq_grpc_inflight_requests", Help: "gRPC calls in progress (streams included)."})
	m.grpcThrottled = prometheus.NewCounter(prometheus.CounterOpts{Name: "sq_grpc_throttled_calls_total", Help: "gRPC calls refused with THROTTLED because the request budget was spent."})
	m.grpcRejected = prometheus.NewCounter(prometheus.CounterOpts{Name: "sq_grpc_rejected_connections_total", Help: "gRPC connections closed at accept because --max-connections were open (or --max-connections-per-ip of their address)."})
	m.grpcRejectedPerIP = prometheus.NewCounter(prometheus.CounterOpts{Name: "sq_grpc_rejected_connections_per_ip_total", Help: "gRPC connections closed at accept because --max-connections-per-ip of their client IP address were open."})
	m.reg.MustRegister(&topicCounters{s: s, vecs: []*prometheus.CounterVec{m.publishedRecords, m.publishedBytes, m.fetchedRecords, m.fetchedBytes}},
		m.publishErrors, m.fetchErrors, m.publishCanceled, m.fetchCanceled, m.publishLatency, m.fetchLatency, m.fsyncLatency, m.fsyncBatches,
		m.fsyncErrors, m.connections, m.grpcInFlight, m.grpcRejected, m.grpcRejectedPerIP, m.grpcThrottled,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sq_grpc_request_budget_used_bytes", Help: "Bytes of the gRPC request budget (--max-inflight-request-bytes) held by requests being received and Subscribe responses being sent."},
			func() float64 { all, _ := s.recv.inUse(); return float64(all) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sq_grpc_subscribe_response_bytes", Help: "Bytes of the gRPC request budget held by Subscribe responses being sent (at most half the budget)."},
			func() float64 { _, resp := s.recv.inUse(); return float64(resp) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sq_inflight_requests", Help: "Engine appends and fetches in progress, every plane."},
			func() float64 {
				if !s.hasEngine() {
					return 0
				}
				return float64(s.eng().InFlight())
			}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sq_uptime_seconds", Help: "Seconds since the server started."},
			func() float64 { return s.opts.Now().Sub(s.started).Seconds() }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sq_ready", Help: "1 when the node is ready (/readyz 200), else 0."},
			func() float64 { return boolFloat(s.Ready()) }),
		&segmentFilesCollector{s: s},
		&stateCollector{s: s},
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	for _, p := range []string{"capnp", "grpc"} {
		m.connections.WithLabelValues(p)
	}
	return m
}

func boolFloat(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// errCode is the catalog NAME of err, the label of the error counters.
func errCode(err error) string { return api.AsError(err).Code.String() }

// clientGone returns outcome.Canceled or outcome.DeadlineExceeded when
// err says the client went away (a context error, a closed or reset
// connection, a gRPC status CANCELLED or DEADLINE_EXCEEDED), else "": the
// one classification of both planes' metrics and spans.
func clientGone(err error) string {
	if st, ok := status.FromError(err); ok && err != nil {
		switch st.Code() {
		case grpccodes.Canceled:
			return outcome.Canceled
		case grpccodes.DeadlineExceeded:
			return outcome.DeadlineExceeded
		}
	}
	return outcome.ClientGone(err)
}

// countErr counts a request that did not succeed: in canceled when the
// client went away, else in errs by catalog NAME.
func countErr(errs, canceled *prometheus.CounterVec, err error) {
	if gone := clientGone(err); gone != "" {
		canceled.WithLabelValues(gone).Inc()
		return
	}
	errs.WithLabelValues(errCode(err)).Inc()
}

// endSpan records err on sp: a server fault or refusal sets the error
// status and error.type (the catalog NAME); a client that went away is no
// error of the server's and only sets sq.outcome (CANCELED or
// DEADLINE_EXCEEDED).
func endSpan(sp trace.Span, err error) {
	if err == nil {
		return
	}
	if gone := clientGone(err); gone != "" {
		sp.SetAttributes(attribute.String("sq.outcome", gone))
		return
	}
	sp.SetAttributes(semconv.ErrorTypeKey.String(errCode(err)))
	sp.RecordError(err)
	sp.SetStatus(codes.Error, err.Error())
}

// AppendDone implements engine.Observer.
func (m *metrics) AppendDone(ctx context.Context, ev engine.AppendEvent) {
	if ev.Err != nil {
		countErr(m.publishErrors, m.publishCanceled, ev.Err)
	} else {
		m.publishedRecords.WithLabelValues(ev.Topic).Add(float64(ev.Records))
		m.publishedBytes.WithLabelValues(ev.Topic).Add(float64(ev.Bytes))
		m.publishLatency.Observe(ev.Duration.Seconds())
	}
	if m.tracer != nil {
		m.span(ctx, "publish", ev.Topic, ev.Partition, ev.Start, ev.Duration, ev.Err, ev.Records, ev.BaseOffset, ev.Bytes)
	}
}

// FetchDone implements engine.Observer.
func (m *metrics) FetchDone(ctx context.Context, ev engine.FetchEvent) {
	if ev.Err != nil {
		countErr(m.fetchErrors, m.fetchCanceled, ev.Err)
	} else {
		m.fetchedRecords.WithLabelValues(ev.Topic).Add(float64(ev.Records))
		m.fetchedBytes.WithLabelValues(ev.Topic).Add(float64(ev.Bytes))
		m.fetchLatency.Observe(ev.Duration.Seconds())
	}
	if m.tracer != nil {
		m.span(ctx, "fetch", ev.Topic, ev.Partition, ev.Start, ev.Duration, ev.Err, ev.Records, ev.Offset, ev.Bytes)
	}
}

// SyncDone implements engine.Observer.
func (m *metrics) SyncDone(ev engine.SyncEvent) {
	if ev.Err != nil {
		m.fsyncErrors.Inc()
		return
	}
	m.fsyncLatency.Observe(ev.Duration.Seconds())
	m.fsyncBatches.Observe(float64(ev.Batches))
}

// span records a finished messaging span (OTel messaging semantic
// conventions, semconv v1.43.0) that started at start: "publish <topic>"
// (producer, operation type send) or "fetch <topic>" (consumer, receive).
// Attributes are built only for a recording span.
func (m *metrics) span(ctx context.Context, op, topic string, partition int, start time.Time, d time.Duration, err error,
	records int, offset uint64, bytes int) {
	kind, opType := trace.SpanKindProducer, semconv.MessagingOperationTypeSend
	if op != "publish" {
		kind, opType = trace.SpanKindConsumer, semconv.MessagingOperationTypeReceive
	}
	_, sp := m.tracer.Start(ctx, op+" "+topic, trace.WithTimestamp(start), trace.WithSpanKind(kind))
	if sp.IsRecording() {
		sp.SetAttributes(
			semconv.MessagingSystemKey.String("sq"),
			semconv.MessagingOperationName(op), opType,
			semconv.MessagingDestinationName(topic),
			semconv.MessagingDestinationPartitionID(strconv.Itoa(partition)),
			semconv.MessagingBatchMessageCount(records),
			semconv.MessagingKafkaOffset(int(offset)),
			attribute.Int("sq.batch.bytes", bytes),
		)
		endSpan(sp, err)
	}
	sp.End(trace.WithTimestamp(start.Add(d)))
}

// needsEngine reports whether method is one of the sq.v1 services, which
// answer Unavailable until the engine is recovered.
func needsEngine(method string) bool { return strings.HasPrefix(method, "/sq.v1.") }

// servedWithoutEngine reports whether method is served before SetEngine:
// the Cluster calls other than NodeInfo once a ClusterBackend is set,
// which answers them itself (a peer may join while this node recovers).
func (s *Server) servedWithoutEngine(method string) bool {
	return s.clusterBackend() != nil && strings.HasPrefix(method, "/sq.v1.Cluster/") && method != "/sq.v1.Cluster/NodeInfo"
}

func errRecovering() error {
	return status.Error(grpccodes.Unavailable, "storage recovery in progress; retry when /readyz answers 200")
}

func (m *metrics) unaryInterceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if needsEngine(info.FullMethod) && !m.s.hasEngine() && !m.s.servedWithoutEngine(info.FullMethod) {
		return nil, errRecovering()
	}
	m.grpcInFlight.Inc()
	defer m.grpcInFlight.Dec()
	resp, err := h(ctx, req)
	return resp, ToStatus(err)
}

func (m *metrics) streamInterceptor(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	if needsEngine(info.FullMethod) && !m.s.hasEngine() {
		return errRecovering()
	}
	m.grpcInFlight.Inc()
	defer m.grpcInFlight.Dec()
	return ToStatus(h(srv, ss))
}

// countConns wraps ln so its accepted connections are counted in
// sq_connections{plane} until closed.
func (m *metrics) countConns(ln net.Listener, plane string) net.Listener {
	return &countingListener{Listener: ln, g: m.connections.WithLabelValues(plane)}
}

type countingListener struct {
	net.Listener
	g prometheus.Gauge
}

// Accept counts the accepted connection until it is closed.
func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.g.Inc()
	return &countingConn{Conn: c, g: l.g}, nil
}

type countingConn struct {
	net.Conn
	g    prometheus.Gauge
	once sync.Once
}

// Close closes the connection and uncounts it once.
func (c *countingConn) Close() error {
	c.once.Do(c.g.Dec)
	return c.Conn.Close()
}

// topicCounters collects the per-topic counter vectors after removing
// the series of topics that no longer exist, so deleted topics (a bench
// run's, say) do not leave series behind. A deleted topic's series
// re-created by an operation in flight at the deletion are removed at the
// next scrape.
type topicCounters struct {
	s    *Server
	vecs []*prometheus.CounterVec // each labelled {topic} only
}

// Describe implements prometheus.Collector.
func (c *topicCounters) Describe(ch chan<- *prometheus.Desc) {
	for _, v := range c.vecs {
		v.Describe(ch)
	}
}

// Collect implements prometheus.Collector: prune, then collect.
func (c *topicCounters) Collect(ch chan<- prometheus.Metric) {
	c.prune()
	for _, v := range c.vecs {
		v.Collect(ch)
	}
}

// prune deletes the series of every topic the engine does not list
// (nothing before the engine is recovered).
func (c *topicCounters) prune() {
	if !c.s.hasEngine() {
		return
	}
	live := map[string]bool{}
	for _, t := range c.s.eng().ListTopics() {
		live[t.Name] = true
	}
	for _, v := range c.vecs {
		for _, topic := range topicLabels(v) {
			if !live[topic] {
				v.DeletePartialMatch(prometheus.Labels{"topic": topic})
			}
		}
	}
}

// topicLabels returns the topic label values of v's series.
func topicLabels(v *prometheus.CounterVec) []string {
	ch := make(chan prometheus.Metric)
	go func() {
		v.Collect(ch)
		close(ch)
	}()
	var out []string
	for m := range ch {
		var pb dto.Metric
		if m.Write(&pb) != nil {
			continue
		}
		for _, l := range pb.GetLabel() {
			if l.GetName() == "topic" {
				out = append(out, l.GetValue())
			}
		}
	}
	return out
}

// stateCollector exports the per-partition offsets and sizes, consumer
// group lag, disk space and build info, read from the engine at scrape
// time.
type stateCollector struct{ s *Server }

var (
	descLEO       = prometheus.NewDesc("sq_partition_log_end_offset", "Next offset to be written.", []string{"topic", "partition"}, nil)
	descHW        = prometheus.NewDesc("sq_partition_high_watermark", "Offsets below it are readable.", []string{"topic", "partition"}, nil)
	descLogStart  = prometheus.NewDesc("sq_partition_log_start_offset", "Oldest offset still stored.", []string{"topic", "partition"}, nil)
	descSize      = prometheus.NewDesc("sq_partition_size_bytes", "Bytes of the partition's segments on disk.", []string{"topic", "partition"}, nil)
	descSegments  = prometheus.NewDesc("sq_partition_segments", "Segment files of the partition.", []string{"topic", "partition"}, nil)
	descFailed    = prometheus.NewDesc("sq_partition_failed", "1 when the partition is failed (read-only until restart).", []string{"topic", "partition"}, nil)
	descLag       = prometheus.NewDesc("sq_consumer_group_lag_records", "Records the group has left to read: high watermark minus max(committed offset, log start offset).", []string{"group", "topic", "partition"}, nil)
	descDiskFree  = prometheus.NewDesc("sq_disk_free_bytes", "Free bytes of the data directory's file system (statfs f_bavail).", nil, nil)
	descDiskTotal = prometheus.NewDesc("sq_disk_total_bytes", "Size of the data directory's file system.", nil, nil)
	descDiskFloor = prometheus.NewDesc("sq_disk_min_free_bytes", "Free-space floor in force (--min-free-bytes; auto: 5% of the file system, at most 256 MiB); 0 when disabled.", nil, nil)
	descInfo      = prometheus.NewDesc("sq_build_info", "Always 1; labels give the version, I/O backend and node.", []string{"version", "io_backend", "node_id", "cluster_id"}, nil)
)

// Describe implements prometheus.Collector.
func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descLEO, descHW, descLogStart, descSize, descSegments, descFailed, descLag, descDiskFree, descDiskTotal, descDiskFloor, descInfo} {
		ch <- d
	}
}

// Collect implements prometheus.Collector: it reads the engine's topics,
// partitions and group offsets at scrape time.
func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.s
	if !s.hasEngine() {
		return
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	gauge(descInfo, 1, s.opts.Version, s.eng().BackendName(), s.opts.NodeID, s.opts.ClusterID)
	if total, free, err := diskSpace(s.eng()); err == nil {
		gauge(descDiskFree, float64(free))
		gauge(descDiskTotal, float64(total))
	}
	if f, ok := s.eng().(minFreeReporter); ok {
		gauge(descDiskFloor, float64(f.MinFreeBytes()))
	}
	hw := map[string][]engine.PartitionInfo{}
	for _, t := range s.eng().ListTopics() {
		ti, err := s.eng().DescribeTopic(t.Name)
		if err != nil {
			continue
		}
		hw[t.Name] = ti.Partitions
		for _, p := range ti.Partitions {
			l := []string{t.Name, strconv.Itoa(p.Partition)}
			gauge(descLEO, float64(p.LogEndOffset), l...)
			gauge(descHW, float64(p.HighWatermark), l...)
			gauge(descLogStart, float64(p.LogStartOffset), l...)
			gauge(descSize, float64(p.SizeBytes), l...)
			gauge(descSegments, float64(p.SegmentCount), l...)
			gauge(descFailed, boolFloat(p.Err != nil), l...)
		}
	}
	c.collectLag(gauge, hw)
}

// collectLag exports the lag of every committed offset of every group the
// engine lists.
func (c *stateCollector) collectLag(gauge func(*prometheus.Desc, float64, ...string), parts map[string][]engine.PartitionInfo) {
	offsets, ok := c.s.metricsGroups().(groupOffsets)
	if !ok {
		return
	}
	for _, g := range c.s.groupNames() {
		offs, err := offsets.FetchOffsets(g, "")
		if err != nil {
			continue
		}
		for _, o := range offs {
			ps := parts[o.Topic]
			if o.Partition < 0 || o.Partition >= len(ps) {
				continue
			}
			pi := ps[o.Partition]
			if engine.StatsUnavailable(pi.Err) {
				continue // the partition's leader is not available: no value
			}
			lag := engine.ConsumerLag(o.Offset, true, pi.LogStartOffset, pi.HighWatermark)
			gauge(descLag, float64(lag), g, o.Topic, strconv.Itoa(o.Partition))
		}
	}
}

// diskSpacer is implemented by engines that report the space of their
// data directory's file system through their disk seam
// (*engine.Engine.DiskSpace).
type diskSpacer interface {
	DiskSpace() (ring.DiskSpace, error)
}

// diskSpace returns the total and available bytes of the file system of
// eng's data directory (statfs(2)): through the engine's file system seam
// when it offers it, else directly.
func diskSpace(eng Engine) (total, free uint64, err error) {
	if d, ok := eng.(diskSpacer); ok {
		sp, err := d.DiskSpace()
		if err != nil {
			return 0, 0, err
		}
		return uint64(sp.Total), uint64(sp.Avail), nil
	}
	var st unix.Statfs_t
	if err := unix.Statfs(eng.DataDir(), &st); err != nil {
		return 0, 0, err
	}
	return st.Blocks * uint64(st.Bsize), st.Bavail * uint64(st.Bsize), nil
}

// minFreeReporter is implemented by engines with a free-space floor
// (*engine.Engine.MinFreeBytes).
type minFreeReporter interface {
	MinFreeBytes() int64
}

// segmentFilesReporter is implemented by engines that count their segment
// files and mappings (*engine.Engine).
type segmentFilesReporter interface {
	SegmentFiles() engine.SegmentFileStats
}

// segmentFilesCollector exports engine.SegmentFileStats at scrape time.
type segmentFilesCollector struct{ s *Server }

var (
	descSegFiles     = prometheus.NewDesc("sq_segment_open_files", "File descriptors held by segments (3 per active segment).", nil, nil)
	descSegMappings  = prometheus.NewDesc("sq_segment_mappings", "Live memory mappings of segment files.", nil, nil)
	descSegCached    = prometheus.NewDesc("sq_segment_cached", "Sealed segments kept mapped for later reads.", nil, nil)
	descSegMax       = prometheus.NewDesc("sq_segment_open_files_max", "Bound of open segment files plus mappings (--max-open-segment-files).", nil, nil)
	descSegEvictions = prometheus.NewDesc("sq_segment_evictions_total", "Sealed segments unmapped to stay within the bound.", nil, nil)
	descSegErr       = prometheus.NewDesc("sq_segment_open_error", "1 while segment files cannot be opened or mapped (EMFILE, ENFILE, ENOMEM), else 0.", nil, nil)
)

// Describe implements prometheus.Collector.
func (c *segmentFilesCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descSegFiles, descSegMappings, descSegCached, descSegMax, descSegEvictions, descSegErr} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *segmentFilesCollector) Collect(ch chan<- prometheus.Metric) {
	if !c.s.hasEngine() {
		return
	}
	r, ok := c.s.eng().(segmentFilesReporter)
	if !ok {
		return
	}
	st := r.SegmentFiles()
	for d, v := range map[*prometheus.Desc]float64{descSegFiles: float64(st.Files), descSegMappings: float64(st.Mappings),
		descSegCached: float64(st.Cached), descSegMax: float64(st.Max), descSegErr: boolFloat(st.Err != nil)} {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v)
	}
	ch <- prometheus.MustNewConstMetric(descSegEvictions, prometheus.CounterValue, float64(st.Evictions))
}
