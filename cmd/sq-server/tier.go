package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/engine"
	"github.com/seedqueue/sq/tier"
	"github.com/seedqueue/sq/tier/s3"
)

// Defaults of the tiered storage flags (docs/tiering.md).
const (
	// DefaultTierMultipartBytes is --tier-multipart-bytes: 64 MiB.
	DefaultTierMultipartBytes = 64 << 20
	// DefaultTierCacheBytes is --tier-cache-bytes: 1 GiB.
	DefaultTierCacheBytes = 1 << 30
	// DefaultTierUploadInterval is --tier-upload-interval.
	DefaultTierUploadInterval = 5 * time.Second
	// tierCacheDir is the chunk cache's directory in the data directory.
	tierCacheDir = "tier-cache"
	// bucketCheckEvery is the period of the bucket reachability check.
	bucketCheckEvery = time.Minute
)

// tiering is the running tiered storage of a node.
type tiering struct {
	archiver *tier.Archiver
	reader   *tier.RemoteReader
	cache    *tier.ChunkCache
	store    tier.ObjectStore
	cancel   context.CancelFunc
	done     chan struct{}
}

// validateTier returns the problems of the tiered storage flags.
func (c *config) validateTier() []error {
	var errs []error
	if c.S3Bucket == "" {
		return nil
	}
	if c.TierMultipartBytes < 5<<20 {
		errs = append(errs, fmt.Errorf("--tier-multipart-bytes %d must be at least 5 MiB (5242880), S3's smallest part", c.TierMultipartBytes))
	}
	if c.TierCacheBytes < 0 {
		errs = append(errs, fmt.Errorf("--tier-cache-bytes %d must not be negative", c.TierCacheBytes))
	}
	if c.TierUploadInterval <= 0 {
		errs = append(errs, fmt.Errorf("--tier-upload-interval %v must be positive", c.TierUploadInterval))
	}
	return errs
}

// startTiering turns tiered storage on when --s3-bucket is set
// (docs/tiering.md): the S3 store (credentials from the AWS chain), a
// check of the bucket (an unreachable bucket is logged as an ERROR and
// shown by sq_tier_bucket_reachable; the local log keeps working and
// /readyz does not depend on it), the chunk cache, the remote reader and
// the archiver, which the engine then uses as its remote log. It returns
// nil without --s3-bucket.
func startTiering(ctx context.Context, c *config, log *slog.Logger, cp *controlPlane, eng *engine.Engine) (*tiering, error) {
	if c.S3Bucket == "" {
		return nil, nil
	}
	store, err := s3.New(ctx, s3.Options{Bucket: c.S3Bucket, Region: c.S3Region, Endpoint: c.S3Endpoint, MultipartBytes: c.TierMultipartBytes})
	if err != nil {
		return nil, fmt.Errorf("tiered storage: %w", err)
	}
	var reachable atomic.Bool
	check := func(ctx context.Context) {
		cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		defer cancel()
		err := store.Check(cctx)
		was := reachable.Swap(err == nil)
		switch {
		case err != nil && (was || !reachable.Load()):
			log.Error("tiered storage: the bucket is not reachable; sealed segments stay local until it is", "bucket", c.S3Bucket, "endpoint", c.S3Endpoint, "err", err)
		case err == nil && !was:
			log.Info("tiered storage: the bucket is reachable", "bucket", c.S3Bucket, "endpoint", c.S3Endpoint, "region", c.S3Region)
		}
	}
	cache, err := tier.OpenChunkCache(tier.ChunkCacheOptions{Dir: filepath.Join(c.DataDir, tierCacheDir), MaxBytes: c.TierCacheBytes, Logger: log})
	if err != nil {
		return nil, fmt.Errorf("tiered storage: %w", err)
	}
	reader, err := tier.NewRemoteReader(store, cache, tier.RemoteReaderOptions{MaxBatchBytes: c.MaxBatch, Logger: log})
	if err != nil {
		cache.Close()
		return nil, fmt.Errorf("tiered storage: %w", err)
	}
	m := newTierMetrics(cp.srv.Registry(), &reachable, reader, cache)
	tracer := cp.srv.Tracer()
	a, err := tier.NewArchiver(tier.ArchiverOptions{Store: store, Storage: eng, Reader: reader, Interval: c.TierUploadInterval, Logger: log,
		Observe: func(ev tier.UploadEvent) {
			m.observe(ev)
			if tracer != nil {
				_, sp := tracer.Start(ctx, "upload "+ev.Partition.Topic, trace.WithTimestamp(ev.Start), trace.WithSpanKind(trace.SpanKindInternal),
					trace.WithAttributes(attribute.String("sq.topic", ev.Partition.Topic), attribute.Int("sq.partition", ev.Partition.Partition),
						attribute.Int64("sq.segment.base_offset", int64(ev.BaseOffset)), attribute.Int64("sq.segment.bytes", ev.Bytes)))
				if ev.Err != nil {
					sp.RecordError(ev.Err)
					sp.SetStatus(codes.Error, ev.Err.Error())
				}
				sp.End(trace.WithTimestamp(ev.Start.Add(ev.Duration)))
			}
		}})
	if err != nil {
		reader.Close()
		cache.Close()
		return nil, err
	}
	m.archiver.Store(a)
	eng.SetRemoteLog(a)

	rctx, cancel := context.WithCancel(ctx)
	t := &tiering{archiver: a, reader: reader, cache: cache, store: store, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(t.done)
		// The first check runs here, not before the server serves: a
		// bucket that does not answer must not hold the start back.
		check(rctx)
		go a.Run(rctx)
		tk := time.NewTicker(bucketCheckEvery)
		defer tk.Stop()
		for {
			select {
			case <-rctx.Done():
				return
			case <-tk.C:
				check(rctx)
			}
		}
	}()
	log.Info("tiered storage on", "bucket", c.S3Bucket, "endpoint", c.S3Endpoint, "region", c.S3Region,
		"multipart_bytes", c.TierMultipartBytes, "cache_bytes", c.TierCacheBytes, "upload_interval", c.TierUploadInterval)
	return t, nil
}

// restorer creates a topic whose partitions start at the given offsets:
// the engine's RestoreTopic on a single node, the Broker's in a cluster.
type restorer interface {
	RestoreTopic(spec engine.TopicSpec, starts []uint64) (engine.TopicInfo, error)
	DescribeTopic(name string) (engine.TopicInfo, error)
}

// enableRestore makes the control plane's RestoreTopic serve topics from
// the bucket through r (sq topic restore; docs/tiering.md).
func (t *tiering) enableRestore(cp *controlPlane, log *slog.Logger, r restorer) {
	if t == nil {
		return
	}
	cp.srv.SetTopicRestorer(func(ctx context.Context, name string, id api.TopicID) (engine.TopicInfo, error) {
		return restoreTopic(ctx, log, t.store, t.archiver, r, name, id)
	})
}

// restoreTopic serves topic name's history from the bucket on this node
// (sq topic restore; docs/tiering.md): the topic is created with the id
// and partitions the bucket holds, each partition's local log starting
// at its remote log's end, and the archiver reads the manifests at once.
func restoreTopic(ctx context.Context, log *slog.Logger, store tier.ObjectStore, a *tier.Archiver, eng restorer, name string, id api.TopicID) (engine.TopicInfo, error) {
	if _, err := eng.DescribeTopic(name); err == nil {
		return engine.TopicInfo{}, api.NewError(api.CodeTopicExists, "topic %q exists on this node; restore serves a topic's history on a node without it", name)
	}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	plan, err := tier.Discover(cctx, store, name, id)
	switch {
	case errors.Is(err, tier.ErrNoRemoteTopic):
		return engine.TopicInfo{}, api.NewError(api.CodeUnknownTopic, "%v", err)
	case errors.Is(err, tier.ErrAmbiguousTopic):
		return engine.TopicInfo{}, api.NewError(api.CodeInvalidRequest, "%v (sq topic restore --topic-id)", err)
	case err != nil:
		return engine.TopicInfo{}, api.WrapError(api.CodeStorageError, err, "read the bucket's manifests of topic %q", name)
	}
	// The topic's own config, as its topic object in the bucket has it
	// (replication settings left to this node's defaults); without one,
	// unlimited retention: the bucket may hold history older than any
	// default, and sq topic alter sets retention afterwards.
	cfg := engine.TopicConfig{RetentionMs: -1, RetentionBytes: -1}
	if plan.HasConfig {
		cfg = plan.Config
		cfg.ReplicationFactor, cfg.MinInsyncReplicas = 0, 0
	}
	if _, err := eng.RestoreTopic(engine.TopicSpec{Name: name, ID: plan.TopicID, Partitions: plan.Partitions, Config: cfg}, plan.Ends); err != nil {
		return engine.TopicInfo{}, err
	}
	for i := range plan.Partitions {
		if err := a.Refresh(cctx, tier.Partition{Topic: name, TopicID: plan.TopicID, Partition: i}); err != nil {
			log.Warn("tiered storage: reading a restored partition's manifest failed; the next pass reads it", "topic", name, "partition", i, "err", err)
		}
	}
	log.Info("topic restored from the bucket", "topic", name, "topic_id", plan.TopicID, "partitions", plan.Partitions, "remote_ends", plan.Ends)
	return eng.DescribeTopic(name)
}

// close stops the archiver and closes the reader and the cache.
func (t *tiering) close() {
	if t == nil {
		return
	}
	t.cancel()
	<-t.done
	t.reader.Close()
	t.cache.Close()
}

// tierMetrics are the tiered storage's Prometheus metrics.
type tierMetrics struct {
	archiver atomic.Pointer[tier.Archiver]
	failures prometheus.Counter
	duration prometheus.Histogram
}

func newTierMetrics(reg *prometheus.Registry, reachable *atomic.Bool, reader *tier.RemoteReader, cache *tier.ChunkCache) *tierMetrics {
	m := &tierMetrics{
		failures: prometheus.NewCounter(prometheus.CounterOpts{Name: "sq_tier_upload_failures_total", Help: "Segment uploads that failed (retried after a backoff)."}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "sq_tier_upload_duration_seconds",
			Help: "Time to upload one sealed segment with its indexes and write the manifest.", Buckets: prometheus.ExponentialBuckets(0.01, 2, 16)}),
	}
	reg.MustRegister(m.failures, m.duration,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sq_tier_bucket_reachable", Help: "1 when the last check of the S3 bucket succeeded, else 0."},
			func() float64 {
				if reachable.Load() {
					return 1
				}
				return 0
			}),
		&lagCollector{m: m},
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sq_tier_remote_reads_total", Help: "Fetches served from the remote log."},
			func() float64 { return float64(reader.Stats().Reads) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sq_tier_remote_read_errors_total", Help: "Fetches from the remote log that failed."},
			func() float64 { return float64(reader.Stats().ReadErrors) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sq_tier_remote_get_bytes_total", Help: "Bytes read from the object store."},
			func() float64 { return float64(reader.Stats().RemoteBytes) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sq_tier_cache_hits_total", Help: "Chunk reads served by the on-disk cache."},
			func() float64 { return float64(cache.Stats().Hits) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sq_tier_cache_misses_total", Help: "Chunk reads that went to the object store."},
			func() float64 { return float64(cache.Stats().Misses) }),
	)
	return m
}

func (m *tierMetrics) observe(ev tier.UploadEvent) {
	if ev.Err != nil {
		m.failures.Inc()
		return
	}
	m.duration.Observe(ev.Duration.Seconds())
}

// lagCollector exports the upload lag of every partition:
// sq_tier_upload_lag_bytes and sq_tier_upload_lag_segments {topic,
// partition}.
type lagCollector struct{ m *tierMetrics }

var (
	lagBytesDesc = prometheus.NewDesc("sq_tier_upload_lag_bytes", "Bytes of sealed segments below the high watermark not yet uploaded, per partition.", []string{"topic", "partition"}, nil)
	lagSegsDesc  = prometheus.NewDesc("sq_tier_upload_lag_segments", "Sealed segments below the high watermark not yet uploaded, per partition.", []string{"topic", "partition"}, nil)
)

func (l *lagCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- lagBytesDesc
	ch <- lagSegsDesc
}

func (l *lagCollector) Collect(ch chan<- prometheus.Metric) {
	a := l.m.archiver.Load()
	if a == nil {
		return
	}
	for _, lag := range a.Lags() {
		p := strconv.Itoa(lag.Partition.Partition)
		ch <- prometheus.MustNewConstMetric(lagBytesDesc, prometheus.GaugeValue, float64(lag.Bytes), lag.Partition.Topic, p)
		ch <- prometheus.MustNewConstMetric(lagSegsDesc, prometheus.GaugeValue, float64(lag.Segments), lag.Partition.Topic, p)
	}
}
