package engine

// Tiered storage, the engine's side (docs/tiering.md): the engine lists
// the sealed segments a remote log may upload (TieredPartitions), keeps
// every local segment that its remote log has not confirmed (local
// retention deletes only below RemoteLog.Bounds' end), and serves a fetch
// below the local log start from the remote log. The remote log itself
// (uploads, manifests, remote retention, reads) is package tier's; the
// engine declares what it needs here and cmd wires it in (SetRemoteLog).

import (
	"context"
	"errors"
	"path/filepath"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/segment"
)

// RemoteLog is a partition's log in object storage, as the engine uses
// it. Implementations are safe for concurrent use.
type RemoteLog interface {
	// Bounds returns the offsets the remote log of the partition holds:
	// [start, end), end being the offset after the last uploaded,
	// confirmed segment; ok is false while it has none (or has not loaded
	// its manifest yet).
	Bounds(topic string, id api.TopicID, partition int) (start, end uint64, ok bool)
	// Fetch returns whole batches of the remote log, starting with the
	// batch that holds offset or, when offset falls in a gap, the first
	// batch after it, up to maxBytes but at least one batch, all below
	// the remote log's end. Errors: OFFSET_OUT_OF_RANGE when offset is
	// outside Bounds, or the store's errors.
	Fetch(ctx context.Context, topic string, id api.TopicID, partition int, offset uint64, maxBytes int) ([][]byte, error)
	// Stats returns what DescribeTopic shows of the partition's remote
	// log and its upload lag; ok is false while the remote log knows
	// nothing of the partition yet (before its first upload pass). It
	// must not wait for an upload in progress.
	Stats(topic string, id api.TopicID, partition int) (s RemoteStats, ok bool)
}

// RemoteStats describes a partition's remote log and its upload lag, as
// its remote log knows them (on a cluster node, the partition's leader
// is the one that uploads; a follower's lag counts its own sealed
// segments against the leader's manifest).
type RemoteStats struct {
	// LogStartOffset and EndOffset bound the remote log: [start, end),
	// end being the offset after the last uploaded, confirmed segment.
	// Both are 0 while Segments is 0.
	LogStartOffset, EndOffset uint64
	// Segments is the number of uploaded segments the manifest lists, and
	// Bytes their size in bytes (their batches, the .log objects; the
	// indexes are not counted).
	Segments int
	Bytes    int64
	// LagSegments is the number of sealed local segments below the high
	// watermark not uploaded yet, and LagBytes their size in bytes, as of
	// the last upload pass.
	LagSegments int
	LagBytes    int64
}

// SetRemoteLog makes r the engine's remote log (nil: none, the default):
// from then on local retention keeps what r has not confirmed, and
// fetches below the local log start are served from r.
func (e *Engine) SetRemoteLog(r RemoteLog) {
	if r == nil {
		e.remoteLog.Store(nil)
		return
	}
	e.remoteLog.Store(&r)
}

// remote returns the remote log, nil when none.
func (e *Engine) remote() RemoteLog {
	if r := e.remoteLog.Load(); r != nil {
		return *r
	}
	return nil
}

// fillRemoteStats sets ti's partitions' Remote from the remote log: left
// nil without one and for the internal topics (never tiered); zero stats
// for a partition the remote log has not seen yet.
func (e *Engine) fillRemoteStats(ti *TopicInfo) {
	r := e.remote()
	if r == nil || IsInternalTopic(ti.Name) {
		return
	}
	for i := range ti.Partitions {
		p := &ti.Partitions[i]
		s, _ := r.Stats(ti.Name, ti.ID, p.Partition)
		p.Remote = &s
	}
}

// TieredPartition is one local partition as a remote log sees it: what
// it may upload and whether this node uploads it.
type TieredPartition struct {
	Topic     string
	TopicID   api.TopicID
	Partition int
	// Leader is true when this node uploads the partition: always on a
	// single node; in a cluster, while it leads it. LeaderEpoch is the
	// partition's leader epoch (0 on a single node).
	Leader      bool
	LeaderEpoch uint32
	// LogStartOffset and HighWatermark bound the local log; only records
	// below the high watermark are uploaded.
	LogStartOffset, HighWatermark uint64
	// Config is the topic's config (retention of the whole log, local
	// retention).
	Config TopicConfig
	// Sealed are the sealed segments wholly below the high watermark,
	// oldest first.
	Sealed []SealedSegment
	// LocalBytes is the size of every local segment, the active one
	// included, in bytes.
	LocalBytes int64
}

// SealedSegment is one sealed local segment and its files. The files
// stay in place while the segment is not confirmed by the remote log
// (local retention waits for it); retention of the whole log may still
// delete them.
type SealedSegment struct {
	BaseOffset, NextOffset uint64
	// Bytes is the length of its batches in the .log file (the file may
	// be longer: preallocated space past it).
	Bytes int64
	// MaxAppendTime is the broker time of its last append, Unix ms.
	MaxAppendTime int64
	// LogPath, IndexPath and TimeIndexPath are the segment's files.
	LogPath, IndexPath, TimeIndexPath string
}

// TieredPartitions returns every partition of the engine's topics except
// the internal ones, with its sealed segments: what package tier uploads
// from. Failed and deleted partitions are left out.
func (e *Engine) TieredPartitions() []TieredPartition {
	e.mu.RLock()
	topics := make([]*topic, 0, len(e.topics))
	for _, t := range e.topics {
		topics = append(topics, t)
	}
	e.mu.RUnlock()
	var out []TieredPartition
	for _, t := range topics {
		m := t.meta()
		if IsInternalTopic(m.Name) {
			continue
		}
		for _, p := range t.parts() {
			if p.log == nil || p.failed.Load() != nil || p.deleted.Load() {
				continue
			}
			tp := TieredPartition{Topic: m.Name, TopicID: m.ID, Partition: p.id, Leader: true, Config: m.Config,
				LogStartOffset: p.log.LogStartOffset(), HighWatermark: p.hw.Load()}
			if r := p.repl; r != nil {
				r.mu.Lock()
				tp.Leader, tp.LeaderEpoch = r.role == roleLeader, r.epoch
				r.mu.Unlock()
			}
			for _, s := range p.log.Segments() {
				tp.LocalBytes += s.Bytes
				if s.Active || s.NextOffset > tp.HighWatermark || s.NextOffset == s.BaseOffset {
					continue
				}
				logName, indexName, timeName := segment.FileNames(s.BaseOffset)
				tp.Sealed = append(tp.Sealed, SealedSegment{BaseOffset: s.BaseOffset, NextOffset: s.NextOffset, Bytes: s.Bytes,
					MaxAppendTime: s.MaxAppendTime, LogPath: filepath.Join(p.dir, logName), IndexPath: filepath.Join(p.dir, indexName),
					TimeIndexPath: filepath.Join(p.dir, timeName)})
			}
			out = append(out, tp)
		}
	}
	return out
}

// remoteEnd returns the end of the remote log of p (0, false without a
// remote log or remote data).
func (e *Engine) remoteEnd(topic string, id api.TopicID, partition int) (uint64, bool) {
	r := e.remote()
	if r == nil {
		return 0, false
	}
	_, end, ok := r.Bounds(topic, id, partition)
	return end, ok
}

// fetchRemote serves a fetch of offset below p's local log start from
// the remote log; ok is false when there is none to serve it (the caller
// answers as without one).
func (e *Engine) fetchRemote(ctx context.Context, t *topic, p *partition, offset uint64, maxBytes int) (res *FetchResult, ok bool, err error) {
	r := e.remote()
	if r == nil || IsInternalTopic(p.topic) || p.log == nil {
		return nil, false, nil
	}
	if offset >= p.log.LogStartOffset() {
		return nil, false, nil
	}
	m := t.meta()
	start, end, has := r.Bounds(m.Name, m.ID, p.id)
	if !has {
		return nil, false, nil
	}
	hw := p.hw.Load()
	if offset < start {
		return nil, true, api.NewRangeError(api.CodeOffsetOutOfRange, start, hw,
			"offset %d below the log start %d of %s/%d (remote log included)", offset, start, p.topic, p.id)
	}
	if offset >= end {
		// Between the remote log's end and the local log start: what
		// retention removed before it was uploaded. The local log's first
		// batch is the next data.
		return nil, false, nil
	}
	bufs, err := r.Fetch(ctx, m.Name, m.ID, p.id, offset, maxBytes)
	if err != nil {
		var ae *api.Error
		if !errors.As(err, &ae) {
			err = api.WrapError(api.CodeStorageError, err, "read %s/%d at offset %d from the remote log", p.topic, p.id, offset)
		}
		return nil, true, err
	}
	return &FetchResult{TopicID: m.ID, HighWatermark: hw, LogStartOffset: start, Bufs: bufs}, true, nil
}

// localRetentionCut returns, with tiered storage, the offset below which
// p's sealed segments are deleted: those that local retention
// (local.retention.ms / local.retention.bytes, each defaulting to the
// whole log's setting) or the whole log's retention (cut total) lets go,
// but only those the remote log confirmed, as Kafka deletes a local
// segment only once it is copied to remote storage (KIP-405): a bucket
// that is down makes the local log grow, never lose records. ok is false
// without a remote log (total applies alone).
func (e *Engine) localRetentionCut(p *partition, cfg TopicConfig, segs []segment.SegmentInfo, total uint64, now int64) (cut uint64, ok bool) {
	if IsInternalTopic(p.topic) || e.remote() == nil {
		return 0, false
	}
	t, err := e.topic(p.topic)
	if err != nil {
		return 0, false
	}
	end, has := e.remoteEnd(p.topic, t.meta().ID, p.id)
	if !has {
		return segs[0].BaseOffset, true
	}
	local := cfg
	local.RetentionMs, local.RetentionBytes = cfg.localRetention()
	_, n := retainFrom(segs, local, now)
	for n < len(segs)-1 && segs[n].NextOffset <= total {
		n++ // expired for the whole log
	}
	// Only whole segments confirmed remote: the last one cut must end at
	// or below the remote log's end.
	for n > 0 && segs[n-1].NextOffset > end {
		n--
	}
	return segs[n].BaseOffset, true
}

// localRetention returns the retention of the local log: local.retention.ms
// and local.retention.bytes, each the whole log's value when not set
// (LocalRetentionDefault, or 0 from a config that predates them).
func (c TopicConfig) localRetention() (ms, bytes int64) {
	ms, bytes = c.LocalRetentionMs, c.LocalRetentionBytes
	if ms == LocalRetentionDefault || ms == 0 {
		ms = c.RetentionMs
	}
	if bytes == LocalRetentionDefault || bytes == 0 {
		bytes = c.RetentionBytes
	}
	return ms, bytes
}
