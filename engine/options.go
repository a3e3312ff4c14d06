package engine

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/ring"
	"github.com/seedqueue/sq/segment"
)

// Default settings. Sizes in bytes, durations as named.
const (
	DefaultSegmentBytes       = 1 << 30                                      // 1 GiB
	DefaultIndexIntervalBytes = 4 << 10                                      // 4 KiB
	DefaultPreallocBytes      = 16 << 20                                     // 16 MiB fallocate step
	DefaultRetentionMs        = int64(7 * 24 * time.Hour / time.Millisecond) // 7 days
	DefaultSegmentMs          = int64(7 * 24 * time.Hour / time.Millisecond) // 7 days
	// MaxPartitions bounds the partitions of one topic.
	MaxPartitions = 10000
	// minSegmentBytes keeps a segment larger than the largest batch header
	// plus index bookkeeping; tests use small segments to exercise rolls.
	minSegmentBytes = 4 << 10
	// maxSegmentBytes keeps file positions within the index's u32.
	maxSegmentBytes = 1<<32 - 1
)

// Options configure an Engine. The zero value is valid after Defaults,
// except DataDir, which is required.
type Options struct {
	// DataDir is the root of the data directory (required).
	DataDir string
	// SyncPolicy is the default policy of topics that set none:
	// "every-batch" (default), "none", or an interval "N"/"Nms".
	SyncPolicy string
	// SegmentBytes is the default segment size (1 GiB).
	SegmentBytes int64
	// IndexIntervalBytes is the sparse index interval (4 KiB).
	IndexIntervalBytes int
	// PreallocBytes is the largest fallocate step of active segments (16
	// MiB); steps start at 1 MiB and double (segment.Options).
	PreallocBytes int64
	// DirectWrites writes the active segments' batches with O_DIRECT
	// rather than through the page cache (segment.Options.DirectWrites);
	// where the file system refuses it, a partition writes through the
	// page cache and logs it once.
	DirectWrites bool
	// MaxRecordBytes bounds key+value+headers of one record (1 MiB).
	MaxRecordBytes int
	// MaxBatchBytes bounds one batch (16 MiB).
	MaxBatchBytes int
	// RetentionMs and SegmentMs are the defaults of new topics (7 days;
	// RetentionMs -1: unlimited). RetentionMs may change while the engine
	// runs (SetTopicDefaults).
	RetentionMs int64
	SegmentMs   int64
	// RetentionBytes is the default retention.bytes of each partition of
	// new topics (0: -1, unlimited); it may change while the engine runs
	// (SetTopicDefaults).
	RetentionBytes int64
	// LocalRetentionMs and LocalRetentionBytes are the defaults of
	// local.retention.ms and local.retention.bytes of new topics
	// (TopicConfig): -2 (LocalRetentionDefault, the default: the same as
	// the topic's retention.ms / retention.bytes), -1 unlimited, or a
	// positive duration in ms / size in bytes. LocalRetentionMs may not
	// exceed RetentionMs, nor be -1 while RetentionMs is limited (a
	// topic's retention.bytes defaults to unlimited, so any
	// LocalRetentionBytes fits it). They take effect with tiered storage.
	LocalRetentionMs    int64
	LocalRetentionBytes int64
	// FS and Backend are the file-system seam and write backend
	// (default: the OS and the portable pwrite/fdatasync backend).
	FS      ring.FS
	Backend ring.Backend
	// Logger receives the engine's logs (default slog.Default()).
	Logger *slog.Logger
	// Now is the clock (default time.Now).
	Now func() time.Time
	// RetentionCheckInterval is the period of the retention goroutine
	// (EnforceRetention): roll by segment.ms, delete by retention.ms and
	// retention.bytes. Default 5s; negative: no goroutine (tests call
	// EnforceRetention themselves).
	RetentionCheckInterval time.Duration
	// Observer receives every append, fetch and fdatasync for metrics and
	// traces (default nil: none).
	Observer Observer
	// DeferOffsetClamp, when set, leaves the committed group offsets as
	// stored at Open instead of lowering those above a recovered high
	// watermark: a node of a cluster holds the log of the partitions it
	// leads only, so it clamps with ClampOffsets once it knows which it
	// leads (docs/cluster.md). Default false: Open clamps every partition.
	DeferOffsetClamp bool
	// MinFreeBytes is the free-space floor in bytes: while the file
	// system of DataDir has fewer bytes available (statfs f_bavail),
	// publishes fail with DISK_FULL (retriable) unless they fit in space
	// their partition has preallocated; fetches, commits and the control
	// plane keep working. Segment preallocation steps shrink so as not to
	// take the free space below it. MinFreeAuto (the server's default)
	// means 5% of the file system's size, at most 256 MiB
	// (AutoMinFreeBytes). 0 (the default here) disables the floor.
	MinFreeBytes int64
	// DiskFree returns the bytes available on the file system of a
	// directory (default: statfs(2) through FS.Statfs); tests substitute
	// it.
	DiskFree func(dir string) (int64, error)
	// ScrubBytesPerSec is the read rate of the background verification of
	// sealed segments after Open (default DefaultScrubBytesPerSec); a
	// negative value disables it.
	ScrubBytesPerSec int64
	// ScrubInterval, when positive, repeats the verification of sealed
	// segments every ScrubInterval after the one that follows Open (the
	// server's --scrub-interval); 0 (the default here): once after Open.
	ScrubInterval time.Duration
	// MaxOpenSegmentFiles bounds the file descriptors and memory mappings
	// that the partitions' segments hold, server-wide (segment.FileCache):
	// sealed segments are mapped when read and the least recently read
	// idle ones unmapped past the bound. Active segments (3 files and 1
	// mapping each) count; past the bound, a partition whose log is
	// synced closes its active segment's (segment.Log.ParkIfOver) and
	// reopens the .log at its next append. Default
	// segment.DefaultMaxOpenSegmentFiles (4096).
	MaxOpenSegmentFiles int
	// Replication, when set, makes the engine a replica of its partitions
	// in a cluster (docs/architecture.md §3.10): each partition keeps a
	// leader-epoch checkpoint and a high watermark checkpoint, takes
	// client appends only after BecomeLeader, and its high watermark
	// follows the in-sync replicas. Nil (the default): a single node,
	// whose high watermark is what its sync policy made durable.
	Replication *ReplicationOptions
}

// DefaultReplicaLagTimeMax is ReplicationOptions.LagTimeMax when zero
// (Kafka's replica.lag.time.max.ms since 2.5).
const DefaultReplicaLagTimeMax = 30 * time.Second

// ReplicationOptions configure an engine that replicates its partitions.
type ReplicationOptions struct {
	// NodeID is this node's id, as it appears in the replica and in-sync
	// sets given to BecomeLeader and UpdateISR (required).
	NodeID string
	// LagTimeMax is how long a follower may go without catching up with
	// the leader's log end before the leader proposes to drop it from
	// the in-sync set (replica.lag.time.max.ms; default
	// DefaultReplicaLagTimeMax).
	LagTimeMax time.Duration
}

// Defaults fills every zero field with its default.
func (o *Options) Defaults() {
	if o.SyncPolicy == "" {
		o.SyncPolicy = "every-batch"
	}
	if o.SegmentBytes == 0 {
		o.SegmentBytes = DefaultSegmentBytes
	}
	if o.IndexIntervalBytes == 0 {
		o.IndexIntervalBytes = DefaultIndexIntervalBytes
	}
	if o.PreallocBytes == 0 {
		o.PreallocBytes = DefaultPreallocBytes
	}
	if o.MaxRecordBytes == 0 {
		o.MaxRecordBytes = api.DefaultMaxRecordBytes
	}
	if o.MaxBatchBytes == 0 {
		o.MaxBatchBytes = api.DefaultMaxBatchBytes
	}
	if o.RetentionMs == 0 {
		o.RetentionMs = DefaultRetentionMs
	}
	if o.RetentionBytes == 0 {
		o.RetentionBytes = -1
	}
	if o.SegmentMs == 0 {
		o.SegmentMs = DefaultSegmentMs
	}
	if o.LocalRetentionMs == 0 {
		o.LocalRetentionMs = LocalRetentionDefault
	}
	if o.LocalRetentionBytes == 0 {
		o.LocalRetentionBytes = LocalRetentionDefault
	}
	if o.FS == nil {
		o.FS = ring.OS
	}
	if o.Backend == nil {
		o.Backend = ring.NewPortable()
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.RetentionCheckInterval == 0 {
		o.RetentionCheckInterval = DefaultRetentionCheckInterval
	}
	if o.DiskFree == nil {
		o.DiskFree = statfsFree(o.FS)
	}
	if o.ScrubBytesPerSec == 0 {
		o.ScrubBytesPerSec = DefaultScrubBytesPerSec
	}
	if o.MaxOpenSegmentFiles == 0 {
		o.MaxOpenSegmentFiles = segment.DefaultMaxOpenSegmentFiles
	}
	if o.Replication != nil && o.Replication.LagTimeMax == 0 {
		rep := *o.Replication
		rep.LagTimeMax = DefaultReplicaLagTimeMax
		o.Replication = &rep
	}
}

// Validate reports every invalid field at once (errors.Join).
func (o *Options) Validate() error {
	var errs []error
	if o.DataDir == "" {
		errs = append(errs, errors.New("data directory is required"))
	}
	if _, err := ParseSyncPolicy(o.SyncPolicy); err != nil {
		errs = append(errs, err)
	}
	if o.SegmentBytes < minSegmentBytes || o.SegmentBytes > maxSegmentBytes {
		errs = append(errs, fmt.Errorf("segment size %d out of range [%d, %d]", o.SegmentBytes, minSegmentBytes, int64(maxSegmentBytes)))
	}
	if o.MaxRecordBytes < 1 || o.MaxBatchBytes < 1 {
		errs = append(errs, fmt.Errorf("record and batch limits must be positive (record %d, batch %d)", o.MaxRecordBytes, o.MaxBatchBytes))
	}
	if o.MaxBatchBytes > 1<<30 {
		errs = append(errs, fmt.Errorf("batch limit %d over 1 GiB", o.MaxBatchBytes))
	}
	if int64(o.MaxBatchBytes) > o.SegmentBytes {
		errs = append(errs, fmt.Errorf("batch limit %d larger than the segment size %d", o.MaxBatchBytes, o.SegmentBytes))
	}
	if o.IndexIntervalBytes < 1 || o.PreallocBytes < 0 {
		errs = append(errs, fmt.Errorf("index interval %d and prealloc %d must be positive", o.IndexIntervalBytes, o.PreallocBytes))
	}
	if o.MinFreeBytes < 0 && o.MinFreeBytes != MinFreeAuto {
		errs = append(errs, fmt.Errorf("free-space floor %d must not be negative (or MinFreeAuto)", o.MinFreeBytes))
	}
	if r := o.Replication; r != nil && (r.NodeID == "" || r.LagTimeMax < 0) {
		errs = append(errs, fmt.Errorf("replication needs a node id (got %q) and a lag time max >= 0 (got %v)", r.NodeID, r.LagTimeMax))
	}
	if o.ScrubInterval < 0 {
		errs = append(errs, fmt.Errorf("scrub interval %v must not be negative", o.ScrubInterval))
	}
	if o.MaxOpenSegmentFiles < 1 {
		errs = append(errs, fmt.Errorf("max open segment files %d must be positive", o.MaxOpenSegmentFiles))
	}
	if err := o.topicDefaults().validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
