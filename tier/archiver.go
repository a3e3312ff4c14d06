package tier

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/engine"
)

// Storage is what an Archiver needs of the node's storage: its partitions
// and their sealed segments (*engine.Engine).
type Storage interface {
	TieredPartitions() []engine.TieredPartition
}

// ArchiverOptions configure an Archiver.
type ArchiverOptions struct {
	// Store is the object store (required).
	Store ObjectStore
	// Storage lists the partitions (required).
	Storage Storage
	// Reader serves the fetches of the remote log (Fetch); required for
	// Fetch to serve anything.
	Reader *RemoteReader
	// Interval is the period of the upload pass (default 5 s; the server's
	// segments roll far less often).
	Interval time.Duration
	// FollowerRefresh is how often a partition this node does not lead
	// reads its manifest again (default 30 s): its local retention waits
	// for what the leader uploaded.
	FollowerRefresh time.Duration
	// RetryBase and RetryMax bound the capped, jittered exponential
	// backoff of a partition whose upload failed (defaults 1 s and 5 min).
	RetryBase, RetryMax time.Duration
	// Timeout bounds one object store call (default 5 min: a multipart
	// upload of a large segment).
	Timeout time.Duration
	// Logger receives the log lines (default slog.Default()).
	Logger *slog.Logger
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Observe, when set, receives each upload's outcome (metrics, spans).
	Observe func(UploadEvent)
}

// UploadEvent is one segment upload, for metrics and traces.
type UploadEvent struct {
	Partition Partition
	// BaseOffset and Bytes describe the segment.
	BaseOffset uint64
	Bytes      int64
	// Start and Duration time the upload: objects, verification and the
	// manifest write.
	Start    time.Time
	Duration time.Duration
	// Err is nil when the segment is in the manifest.
	Err error
}

func (o *ArchiverOptions) defaults() {
	if o.Interval <= 0 {
		o.Interval = 5 * time.Second
	}
	if o.FollowerRefresh <= 0 {
		o.FollowerRefresh = 30 * time.Second
	}
	if o.RetryBase <= 0 {
		o.RetryBase = time.Second
	}
	if o.RetryMax <= 0 {
		o.RetryMax = 5 * time.Minute
	}
	if o.Timeout <= 0 {
		o.Timeout = 5 * time.Minute
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
}

// Archiver uploads the sealed segments of the partitions this node leads
// to the object store, records them in each partition's manifest, applies
// the whole log's retention to the remote log, and serves the engine's
// reads of the remote log (engine.RemoteLog; docs/tiering.md):
//
//   - a pass every Interval takes, for each partition this node leads,
//     each sealed segment wholly below the high watermark and at or after
//     the end of the manifest, in offset order; uploads its .log (its
//     batches only), .index and .timeindex, each verified by size and
//     CRC-32C (ObjectStore.Put); then writes the next manifest version
//     (PutManifest: never overwritten). Only then does the segment count
//     as uploaded, and local retention may delete it;
//   - a failed upload is retried at the next pass after a capped,
//     jittered exponential backoff; its objects, orphaned, are overwritten
//     by the retry (same keys) and are never in a manifest;
//   - a manifest version taken by another writer (ErrExists) makes it
//     read the latest again: one of a newer leader epoch means this node
//     no longer leads;
//   - remote retention: retention.ms deletes a segment whose last append
//     is older; retention.bytes deletes the oldest segments while the
//     whole log (remote segments plus local bytes not uploaded) stays at
//     or above it without them. The manifest without them is written
//     first, then their objects deleted; only manifest entries (confirmed
//     uploads) count;
//   - a partition this node does not lead reads its manifest every
//     FollowerRefresh, so that its local retention follows the leader's
//     uploads.
type Archiver struct {
	o ArchiverOptions

	mu    sync.Mutex
	parts map[Partition]*archived
	// topics are the topic objects written or read (syncTopicObjects).
	topics map[api.TopicID]TopicObject
}

// archived is the archiver's state of one partition. mu is held by the
// partition's pass (uploads included); readers of the remote log use the
// atomic fields only, so a fetch never waits for an upload.
type archived struct {
	mu       sync.Mutex
	next     uint64 // the version the next write uses
	loaded   bool   // manifest read from the store
	loadedAt time.Time
	// leading and epoch are tp.Leader and tp.LeaderEpoch at the last
	// pass: a node that takes the lead (or a new epoch of it) reads the
	// manifest again before it uploads.
	leading bool
	epoch   uint32
	// failures counts consecutive failed passes; retryAt is when the next
	// may run.
	failures int
	retryAt  time.Time

	// manifest is the latest valid manifest; nil before the first.
	manifest atomic.Pointer[Manifest]
	// lagSegments and lagBytes are the sealed segments below the high
	// watermark not uploaded yet, at the last pass.
	lagSegments atomic.Int64
	lagBytes    atomic.Int64
}

// NewArchiver returns an Archiver; Run starts it.
func NewArchiver(o ArchiverOptions) (*Archiver, error) {
	o.defaults()
	if o.Store == nil || o.Storage == nil {
		return nil, errors.New("tier: an archiver needs a store and a storage")
	}
	return &Archiver{o: o, parts: map[Partition]*archived{}, topics: map[api.TopicID]TopicObject{}}, nil
}

// Run runs upload passes every Interval until ctx ends.
func (a *Archiver) Run(ctx context.Context) {
	t := time.NewTicker(a.o.Interval)
	defer t.Stop()
	for {
		a.Pass(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Pass runs one upload pass over every partition (Run calls it; tests call
// it directly).
func (a *Archiver) Pass(ctx context.Context) {
	now := a.o.Now()
	parts := a.o.Storage.TieredPartitions()
	var led []engine.TieredPartition
	for _, tp := range parts {
		if tp.Leader {
			led = append(led, tp)
		}
	}
	a.syncTopicObjects(ctx, led)
	for _, tp := range parts {
		if ctx.Err() != nil {
			return
		}
		p := Partition{Topic: tp.Topic, TopicID: tp.TopicID, Partition: tp.Partition}
		st := a.state(p)
		st.mu.Lock()
		if now.Before(st.retryAt) {
			st.mu.Unlock()
			continue
		}
		err := a.partitionPass(ctx, p, st, tp, now)
		if err != nil {
			st.failures++
			backoff := min(a.o.RetryBase<<min(st.failures-1, 20), a.o.RetryMax)
			backoff = backoff/2 + rand.N(backoff/2+1)
			st.retryAt = now.Add(backoff)
			a.o.Logger.Warn("tiered storage: partition pass failed; retrying after a backoff", "topic", p.Topic, "partition", p.Partition,
				"failures", st.failures, "retry_in", backoff.Round(time.Millisecond), "err", err)
		} else {
			st.failures, st.retryAt = 0, time.Time{}
		}
		st.mu.Unlock()
	}
}

// state returns p's state, made on first use.
func (a *Archiver) state(p Partition) *archived {
	a.mu.Lock()
	defer a.mu.Unlock()
	st := a.parts[p]
	if st == nil {
		st = &archived{next: 1}
		a.parts[p] = st
	}
	return st
}

// lookup returns p's state, nil when there is none.
func (a *Archiver) lookup(p Partition) *archived {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.parts[p]
}

// load reads p's latest manifest into st; st.mu is held.
func (a *Archiver) load(ctx context.Context, p Partition, st *archived, now time.Time) error {
	cctx, cancel := context.WithTimeout(ctx, a.o.Timeout)
	defer cancel()
	scan, err := LatestManifest(cctx, a.o.Store, p)
	for _, s := range scan.Skipped {
		a.o.Logger.Error("tiered storage: a manifest version is damaged and not trusted; the previous valid one is used", "topic", p.Topic, "partition", p.Partition, "err", s)
	}
	if err != nil {
		return err
	}
	st.manifest.Store(scan.Manifest)
	st.next, st.loaded, st.loadedAt = scan.NextVersion, true, now
	return nil
}

// partitionPass is one partition's part of a pass; st.mu is held.
func (a *Archiver) partitionPass(ctx context.Context, p Partition, st *archived, tp engine.TieredPartition, now time.Time) error {
	// A follower's manifest is up to FollowerRefresh old. A node that
	// has just taken the lead must not upload from it: it would upload
	// again segments the previous leader uploaded since, under its own
	// epoch's keys (orphans), and write manifest versions that the old
	// leader's cleanup had deleted, a stale chain beside the real one,
	// until a taken version sent it back to the latest.
	takeOver := tp.Leader && (!st.leading || st.epoch != tp.LeaderEpoch)
	if !st.loaded || takeOver || !tp.Leader && now.Sub(st.loadedAt) >= a.o.FollowerRefresh {
		if err := a.load(ctx, p, st, now); err != nil {
			return err
		}
	}
	st.leading, st.epoch = tp.Leader, tp.LeaderEpoch
	m := st.manifest.Load()
	end := manifestEnd(m)
	var lagSegs, lagBytes int64
	for _, s := range tp.Sealed {
		if s.BaseOffset >= end {
			lagSegs++
			lagBytes += s.Bytes
		}
	}
	st.lagSegments.Store(lagSegs)
	st.lagBytes.Store(lagBytes)
	if !tp.Leader {
		return nil
	}
	if m != nil && m.LeaderEpoch > tp.LeaderEpoch {
		// A newer leader wrote the manifest: this node's epoch is stale
		// until the metadata says otherwise.
		return nil
	}
	for _, s := range tp.Sealed {
		if s.NextOffset <= end {
			continue
		}
		// Segment boundaries differ between replicas: after a change of
		// leader a sealed segment can hold both records the manifest has
		// and records it lacks. It is uploaded whole and served from the
		// remote log's end on (upload: SegmentEntry.FileBaseOffset).
		if err := a.upload(ctx, p, st, tp, s, max(s.BaseOffset, end)); err != nil {
			return err
		}
		end = s.NextOffset
		st.lagSegments.Add(-1)
		st.lagBytes.Add(-s.Bytes)
	}
	return a.retain(ctx, p, st, tp, now)
}

// manifestEnd returns the offset after the last segment of m (0 for nil
// or none).
func manifestEnd(m *Manifest) uint64 {
	if m == nil || len(m.Segments) == 0 {
		return 0
	}
	return m.Segments[len(m.Segments)-1].LastOffset + 1
}

// upload uploads segment s and writes the manifest that adds it, serving
// it from offset from (s.BaseOffset, or the remote log's end when s holds
// records before it); st.mu is held.
func (a *Archiver) upload(ctx context.Context, p Partition, st *archived, tp engine.TieredPartition, s engine.SealedSegment, from uint64) (err error) {
	start := a.o.Now()
	defer func() {
		if a.o.Observe != nil {
			a.o.Observe(UploadEvent{Partition: p, BaseOffset: s.BaseOffset, Bytes: s.Bytes, Start: start, Duration: a.o.Now().Sub(start), Err: err})
		}
	}()
	// Keyed by the offset it is served from: unique in the manifest.
	keys := p.SegmentKeys(from, tp.LeaderEpoch)
	entry := SegmentEntry{BaseOffset: from, LastOffset: s.NextOffset - 1, MaxTimestampMs: s.MaxAppendTime, LeaderEpoch: tp.LeaderEpoch}
	if from != s.BaseOffset {
		fb := s.BaseOffset
		entry.FileBaseOffset = &fb
	}
	for _, f := range []struct {
		path, key string
		size      int64 // -1: the whole file
		ref       *ObjectRef
	}{{s.LogPath, keys.Log, s.Bytes, &entry.Log}, {s.IndexPath, keys.Index, -1, &entry.Index}, {s.TimeIndexPath, keys.TimeIndex, -1, &entry.TimeIndex}} {
		ref, err := a.put(ctx, f.path, f.key, f.size)
		if err != nil {
			return fmt.Errorf("upload segment %d of %s: %w", s.BaseOffset, p, err)
		}
		*f.ref = ref
	}
	next := Manifest{Topic: p.Topic, TopicID: p.TopicID, Partition: p.Partition, Version: st.next, LeaderEpoch: tp.LeaderEpoch}
	if cur := st.manifest.Load(); cur != nil {
		next.LogStartOffset = cur.LogStartOffset
		next.Segments = append(next.Segments, cur.Segments...)
	} else {
		next.LogStartOffset = s.BaseOffset
	}
	next.Segments = append(next.Segments, entry)
	if err := a.writeManifest(ctx, p, st, &next); err != nil {
		return err
	}
	a.o.Logger.Info("tiered storage: segment uploaded", "topic", p.Topic, "partition", p.Partition, "segment", s.BaseOffset,
		"next_offset", s.NextOffset, "bytes", s.Bytes, "manifest_version", next.Version, "duration", a.o.Now().Sub(start).Round(time.Millisecond))
	return nil
}

// put uploads size bytes (-1: all) of the file at path under key and
// returns its reference.
func (a *Archiver) put(ctx context.Context, path, key string, size int64) (ObjectRef, error) {
	f, err := os.Open(path)
	if err != nil {
		return ObjectRef{}, err
	}
	defer f.Close()
	if size < 0 {
		fi, err := f.Stat()
		if err != nil {
			return ObjectRef{}, err
		}
		size = fi.Size()
	}
	cctx, cancel := context.WithTimeout(ctx, a.o.Timeout)
	defer cancel()
	info, err := a.o.Store.Put(cctx, key, f, size, PutOptions{})
	if err != nil {
		return ObjectRef{}, err
	}
	return ObjectRef{Key: key, Size: info.Size, CRC32C: info.CRC32C}, nil
}

// writeManifest writes m (version st.next) and makes it st's manifest; a
// version taken meanwhile makes it read the latest again and fail (the
// next pass goes on from there). The versions older than the one m was
// made from (st's manifest) are deleted. st.mu is held.
func (a *Archiver) writeManifest(ctx context.Context, p Partition, st *archived, m *Manifest) error {
	cctx, cancel := context.WithTimeout(ctx, a.o.Timeout)
	defer cancel()
	if _, err := PutManifest(cctx, a.o.Store, m); err != nil {
		if errors.Is(err, ErrExists) {
			if lerr := a.load(ctx, p, st, a.o.Now()); lerr != nil {
				return errors.Join(err, lerr)
			}
		}
		return err
	}
	// The fallback kept is the version m was made from, the previous
	// valid one: not m.Version-1, which is a damaged version when the load
	// passed over one, and deleting below it would leave no valid version
	// behind m.
	var prev uint64
	if base := st.manifest.Load(); base != nil {
		prev = base.Version
	}
	st.manifest.Store(m)
	st.next = m.Version + 1
	if prev > 1 {
		// Versions before the previous one are no longer read.
		for v := prev - 1; v >= 1; v-- {
			key := p.ManifestKey(v)
			if _, err := a.o.Store.Head(cctx, key); errors.Is(err, ErrNotFound) {
				break
			}
			if err := a.o.Store.Delete(cctx, key); err != nil {
				a.o.Logger.Warn("tiered storage: deleting an old manifest version failed", "key", key, "err", err)
				break
			}
		}
	}
	return nil
}

// retain applies the whole log's retention to the remote log; st.mu is
// held.
func (a *Archiver) retain(ctx context.Context, p Partition, st *archived, tp engine.TieredPartition, now time.Time) error {
	m := st.manifest.Load()
	if m == nil || len(m.Segments) == 0 {
		return nil
	}
	cfg := tp.Config
	var total int64
	for _, s := range m.Segments {
		total += s.Log.Size
	}
	end := manifestEnd(m)
	for _, s := range tp.Sealed {
		if s.BaseOffset >= end {
			total += s.Bytes
		}
	}
	if tp.LocalBytes > 0 {
		// The active segment and other local bytes past the remote log.
		var sealed int64
		for _, s := range tp.Sealed {
			sealed += s.Bytes
		}
		total += max(tp.LocalBytes-sealed, 0)
	}
	n := 0
	for n < len(m.Segments) {
		s := m.Segments[n]
		byTime := cfg.RetentionMs >= 0 && now.UnixMilli()-s.MaxTimestampMs > cfg.RetentionMs
		bySize := cfg.RetentionBytes >= 0 && total-s.Log.Size >= cfg.RetentionBytes
		if !byTime && !bySize {
			break
		}
		total -= s.Log.Size
		n++
	}
	if n == 0 {
		return nil
	}
	gone := m.Segments[:n]
	next := Manifest{Topic: p.Topic, TopicID: p.TopicID, Partition: p.Partition, Version: st.next, LeaderEpoch: max(m.LeaderEpoch, tp.LeaderEpoch),
		Segments: append([]SegmentEntry(nil), m.Segments[n:]...)}
	next.LogStartOffset = gone[n-1].LastOffset + 1
	if err := a.writeManifest(ctx, p, st, &next); err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, a.o.Timeout)
	defer cancel()
	for _, s := range gone {
		for _, key := range []string{s.Log.Key, s.Index.Key, s.TimeIndex.Key} {
			if err := a.o.Store.Delete(cctx, key); err != nil {
				a.o.Logger.Warn("tiered storage: deleting an expired remote object failed; it is no longer in the manifest", "key", key, "err", err)
			}
		}
	}
	a.o.Logger.Info("tiered storage: remote retention deleted segments", "topic", p.Topic, "partition", p.Partition, "segments", n,
		"remote_log_start", next.LogStartOffset)
	return nil
}

// Bounds implements engine.RemoteLog: the remote log of the partition as
// its latest manifest has it.
func (a *Archiver) Bounds(topic string, id api.TopicID, partition int) (start, end uint64, ok bool) {
	st := a.lookup(Partition{Topic: topic, TopicID: id, Partition: partition})
	if st == nil {
		return 0, 0, false
	}
	m := st.manifest.Load()
	if m == nil || len(m.Segments) == 0 {
		return 0, 0, false
	}
	return max(m.LogStartOffset, m.Segments[0].BaseOffset), manifestEnd(m), true
}

// Manifest returns the partition's latest manifest as this node knows it
// (nil when none).
func (a *Archiver) Manifest(topic string, id api.TopicID, partition int) *Manifest {
	st := a.lookup(Partition{Topic: topic, TopicID: id, Partition: partition})
	if st == nil {
		return nil
	}
	return st.manifest.Load()
}

// Lag is the upload lag of a partition: its sealed segments below the
// high watermark that are not in the manifest yet, at the last pass.
type Lag struct {
	Partition Partition
	Segments  int
	Bytes     int64
}

// Lags returns the upload lag of every partition the archiver has seen.
func (a *Archiver) Lags() []Lag {
	a.mu.Lock()
	parts := make(map[Partition]*archived, len(a.parts))
	for p, st := range a.parts {
		parts[p] = st
	}
	a.mu.Unlock()
	out := make([]Lag, 0, len(parts))
	for p, st := range parts {
		out = append(out, Lag{Partition: p, Segments: int(st.lagSegments.Load()), Bytes: st.lagBytes.Load()})
	}
	return out
}

// Stats implements engine.RemoteLog: the partition's remote log from its
// latest manifest and its upload lag at the last pass. ok is false before
// the archiver's first pass over the partition. Like Bounds it reads the
// atomics only, never waiting for a pass.
func (a *Archiver) Stats(topic string, id api.TopicID, partition int) (s engine.RemoteStats, ok bool) {
	st := a.lookup(Partition{Topic: topic, TopicID: id, Partition: partition})
	if st == nil {
		return engine.RemoteStats{}, false
	}
	s.LagSegments, s.LagBytes = int(st.lagSegments.Load()), st.lagBytes.Load()
	if m := st.manifest.Load(); m != nil && len(m.Segments) > 0 {
		s.LogStartOffset, s.EndOffset = max(m.LogStartOffset, m.Segments[0].BaseOffset), manifestEnd(m)
		s.Segments = len(m.Segments)
		for _, e := range m.Segments {
			s.Bytes += e.Log.Size
		}
	}
	return s, true
}
