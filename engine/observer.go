package engine

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/api/batch"
)

// Observer receives the outcome of every Append, Fetch and fdatasync so
// that the server can export metrics and traces without the engine
// importing either. Set it in Options.Observer; nil (the default) costs one
// nil check per call. Methods are called on the request's goroutine (Append,
// Fetch) or the partition's append goroutine (SyncDone), so they must be
// fast and must not call back into the Engine.
type Observer interface {
	// AppendDone reports one Append: ctx is the caller's.
	AppendDone(ctx context.Context, ev AppendEvent)
	// FetchDone reports one Fetch: ctx is the caller's.
	FetchDone(ctx context.Context, ev FetchEvent)
	// SyncDone reports one fdatasync of a partition log.
	SyncDone(ev SyncEvent)
}

// AppendEvent describes one Append call.
type AppendEvent struct {
	Topic     string
	Partition int
	// Records and Bytes of the batch; Records is 0 when the batch was
	// refused before validation.
	Records int
	Bytes   int
	// Start is when Append was called; Duration is the wait until the
	// acknowledgement (sync policy included) or the error.
	Start    time.Time
	Duration time.Duration
	// BaseOffset is the offset of the first record when Err is nil.
	BaseOffset uint64
	Err        error
}

// FetchEvent describes one Fetch call.
type FetchEvent struct {
	Topic     string
	Partition int
	Offset    uint64
	// Records and Bytes returned (whole batches).
	Records  int
	Bytes    int
	Start    time.Time
	Duration time.Duration // long-poll wait included
	Err      error
}

// SyncEvent describes one fdatasync of a partition log.
type SyncEvent struct {
	Topic     string
	Partition int
	// Duration runs from the hand-off of the log's file to the engine's
	// syncer to its result: a wait for a sync slot (docs/architecture.md
	// §3.3) is included.
	Duration time.Duration
	// Batches is the number of batches the sync made durable (the group
	// commit size under every-batch).
	Batches int
	Err     error
}

// observing is the Engine's observer state.
type observing struct {
	inFlight atomic.Int64
}

// InFlight returns the number of Append and Fetch calls in progress
// (long-poll fetches included).
func (e *Engine) InFlight() int64 { return e.obs.inFlight.Load() }

// Append validates the batch b (docs/architecture.md §3.2), appends it to the partition
// and returns once the topic's sync policy is satisfied. The engine takes
// ownership of b (it patches the base offset in place). Errors:
// UNKNOWN_TOPIC, UNKNOWN_PARTITION, MESSAGE_TOO_LARGE, CORRUPT_BATCH,
// DISK_FULL, STORAGE_ERROR, PARTITION_FAILED, SHUTTING_DOWN, or ctx's
// error (the batch may still be appended after a cancelled wait).
func (e *Engine) Append(ctx context.Context, topicName string, partition int, b []byte) (AppendResult, error) {
	pd, err := e.AppendAsync(ctx, topicName, partition, b, nil)
	if err != nil {
		return AppendResult{}, err
	}
	return pd.Wait(ctx)
}

// Fetch returns whole batches of the partition starting with the batch
// that holds offset, up to maxBytes but at least one batch (KIP-74), all
// below the high watermark. When offset equals the high watermark it waits
// up to maxWait (capped at 30 s) for new records and then returns an empty
// result. The caller must Release the result. Errors: UNKNOWN_TOPIC,
// UNKNOWN_PARTITION, OFFSET_OUT_OF_RANGE (with the valid range),
// PARTITION_FAILED, SHUTTING_DOWN, or ctx's error.
func (e *Engine) Fetch(ctx context.Context, topicName string, partition int, offset uint64, maxBytes int, maxWait time.Duration) (*FetchResult, error) {
	return e.FetchID(ctx, topicName, api.TopicID{}, partition, offset, maxBytes, maxWait)
}

// FetchID is Fetch of the topic with id (KIP-516): when id is set and is
// not the current id of the topic named topicName (the topic was deleted,
// or deleted and created again) it fails with UNKNOWN_TOPIC_ID; the zero
// id finds the topic by name. A long poll that the topic's deletion
// wakes gets UNKNOWN_TOPIC. The result carries the topic's id.
func (e *Engine) FetchID(ctx context.Context, topicName string, id api.TopicID, partition int, offset uint64, maxBytes int, maxWait time.Duration) (*FetchResult, error) {
	e.obs.inFlight.Add(1)
	defer e.obs.inFlight.Add(-1)
	o := e.opts.Observer
	if o == nil {
		return e.fetch(ctx, topicName, id, partition, offset, maxBytes, maxWait)
	}
	start := time.Now()
	r, err := e.fetch(ctx, topicName, id, partition, offset, maxBytes, maxWait)
	ev := FetchEvent{Topic: topicName, Partition: partition, Offset: offset, Start: start, Duration: time.Since(start), Err: err}
	if r != nil {
		ev.Records, ev.Bytes = countRecords(r.Bufs, e.opts.MaxBatchBytes)
	}
	o.FetchDone(ctx, ev)
	return r, err
}

// countRecords sums the record counts of the whole batches in bufs.
func countRecords(bufs [][]byte, maxBatchBytes int) (records, bytes int) {
	for _, b := range bufs {
		bytes += len(b)
		for len(b) > 0 {
			_, rest, h, err := batch.Split(b, maxBatchBytes)
			if err != nil {
				break
			}
			records += int(h.RecordCount)
			b = rest
		}
	}
	return records, bytes
}

// observeSync reports one fdatasync of p to the observer, if any.
func (p *partition) observeSync(start time.Time, batches int, err error) {
	if p.obs == nil {
		return
	}
	p.obs.SyncDone(SyncEvent{Topic: p.topic, Partition: p.id, Duration: time.Since(start), Batches: batches, Err: err})
}
