package dataplane

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/api/batch"
	"github.com/seedqueue/sq/engine"
)

// memBroker is an in-memory Broker for tests that need no disk (the fuzz
// target) or that must control when a request completes (appendGate).
type memBroker struct {
	lim engine.Limits

	mu     sync.Mutex
	topics map[string][]*memPartition
	// appendGate, when set, is received from before each append completes
	// (or the context ends), so a test holds appends in flight.
	appendGate chan struct{}
	// gated counts appends waiting on appendGate.
	gated atomic.Int32
	// maxGated is the most appends seen waiting on appendGate at once.
	maxGated atomic.Int32
	offsets  map[string]map[string]engine.OffsetCommit // group -> topic/partition
	// wake is closed and replaced on every append, waking long polls.
	wake chan struct{}
}

type memPartition struct {
	batches [][]byte
	next    uint64
}

func newMemBroker() *memBroker {
	return &memBroker{
		lim:     engine.Limits{MaxRecordBytes: api.DefaultMaxRecordBytes, MaxBatchBytes: api.DefaultMaxBatchBytes},
		topics:  make(map[string][]*memPartition),
		offsets: make(map[string]map[string]engine.OffsetCommit),
		wake:    make(chan struct{}),
	}
}

func (b *memBroker) Limits() engine.Limits { return b.lim }

func (b *memBroker) CreateTopic(name string, partitions int, cfg engine.TopicConfig) (engine.TopicInfo, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if name == "" {
		return engine.TopicInfo{}, api.NewError(api.CodeInvalidTopicName, "empty topic name")
	}
	if _, ok := b.topics[name]; ok {
		return engine.TopicInfo{}, api.NewError(api.CodeTopicExists, "topic %q exists", name)
	}
	if partitions <= 0 {
		partitions = 1
	}
	if partitions > 1000 {
		return engine.TopicInfo{}, api.NewError(api.CodeInvalidConfig, "%d partitions", partitions)
	}
	ps := make([]*memPartition, partitions)
	for i := range ps {
		ps[i] = &memPartition{}
	}
	b.topics[name] = ps
	return b.infoLocked(name, true), nil
}

func (b *memBroker) infoLocked(name string, withPartitions bool) engine.TopicInfo {
	ps := b.topics[name]
	info := engine.TopicInfo{Name: name, PartitionCount: len(ps), Config: engine.TopicConfig{SyncPolicy: "none"}}
	if withPartitions {
		for i, p := range ps {
			info.Partitions = append(info.Partitions, engine.PartitionInfo{
				Partition: i, HighWatermark: p.next, LogEndOffset: p.next, SegmentCount: 1,
			})
		}
	}
	return info
}

func (b *memBroker) DescribeTopic(name string) (engine.TopicInfo, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.topics[name]; !ok {
		return engine.TopicInfo{}, api.NewError(api.CodeUnknownTopic, "topic %q does not exist", name)
	}
	return b.infoLocked(name, true), nil
}

func (b *memBroker) ListTopics() []engine.TopicInfo {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []engine.TopicInfo
	for name := range b.topics {
		out = append(out, b.infoLocked(name, false))
	}
	return out
}

func (b *memBroker) partition(topic string, partition int) (*memPartition, error) {
	ps, ok := b.topics[topic]
	if !ok {
		return nil, api.NewError(api.CodeUnknownTopic, "topic %q does not exist", topic)
	}
	if partition < 0 || partition >= len(ps) {
		return nil, api.NewError(api.CodeUnknownPartition, "partition %d of %q does not exist", partition, topic)
	}
	return ps[partition], nil
}

func (b *memBroker) Append(ctx context.Context, topic string, partition int, buf []byte) (engine.AppendResult, error) {
	h, err := batch.Validate(buf, batch.Limits{MaxRecordBytes: b.lim.MaxRecordBytes, MaxBatchBytes: b.lim.MaxBatchBytes})
	switch {
	case errors.Is(err, batch.ErrTooLarge):
		return engine.AppendResult{}, api.NewError(api.CodeMessageTooLarge, "%v", err)
	case err != nil:
		return engine.AppendResult{}, api.NewError(api.CodeCorruptBatch, "%v", err)
	}
	b.mu.Lock()
	gate := b.appendGate
	b.mu.Unlock()
	if gate != nil {
		n := b.gated.Add(1)
		defer b.gated.Add(-1)
		for m := b.maxGated.Load(); n > m && !b.maxGated.CompareAndSwap(m, n); m = b.maxGated.Load() {
		}
		select {
		case <-gate:
		case <-ctx.Done():
			return engine.AppendResult{}, ctx.Err()
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	p, err := b.partition(topic, partition)
	if err != nil {
		return engine.AppendResult{}, err
	}
	base := p.next
	batch.SetBaseOffset(buf, base)
	p.batches = append(p.batches, buf)
	p.next += uint64(h.RecordCount)
	close(b.wake)
	b.wake = make(chan struct{})
	return engine.AppendResult{BaseOffset: base, RecordCount: h.RecordCount, LogAppendTime: time.Now().UnixMilli(), Durability: engine.DurabilityWritten}, nil
}

// FetchID is Fetch; the fake's topics have no ids, so any set id is
// UNKNOWN_TOPIC_ID.
func (b *memBroker) FetchID(ctx context.Context, topic string, id api.TopicID, partition int, offset uint64, maxBytes int, maxWait time.Duration) (*engine.FetchResult, error) {
	if !id.IsZero() {
		return nil, api.NewError(api.CodeUnknownTopicID, "topic id %s unknown", id)
	}
	return b.Fetch(ctx, topic, partition, offset, maxBytes, maxWait)
}

func (b *memBroker) Fetch(ctx context.Context, topic string, partition int, offset uint64, maxBytes int, maxWait time.Duration) (*engine.FetchResult, error) {
	var timer <-chan time.Time
	for {
		b.mu.Lock()
		p, err := b.partition(topic, partition)
		if err != nil {
			b.mu.Unlock()
			return nil, err
		}
		if offset > p.next {
			b.mu.Unlock()
			return nil, api.NewRangeError(api.CodeOffsetOutOfRange, 0, p.next, "offset %d beyond the log end %d", offset, p.next)
		}
		res := &engine.FetchResult{HighWatermark: p.next}
		n := 0
		for _, bb := range p.batches {
			h, _ := batch.ParseHeader(bb)
			if h.NextOffset() <= offset {
				continue
			}
			if len(res.Bufs) > 0 && n+len(bb) > maxBytes {
				break
			}
			res.Bufs = append(res.Bufs, bb)
			n += len(bb)
		}
		wake := b.wake
		b.mu.Unlock()
		if len(res.Bufs) > 0 || maxWait <= 0 {
			return res, nil
		}
		if timer == nil {
			timer = time.After(maxWait)
		}
		select {
		case <-wake:
		case <-timer:
			return res, nil
		case <-ctx.Done():
			return res, nil
		}
	}
}

func (b *memBroker) CommitOffsets(group, memberID string, generation int32, offsets []engine.OffsetCommit) ([]engine.OffsetCommit, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	g := b.offsets[group]
	if g == nil {
		g = make(map[string]engine.OffsetCommit)
		b.offsets[group] = g
	}
	out := make([]engine.OffsetCommit, len(offsets))
	for i, o := range offsets {
		out[i] = o
		if _, err := b.partition(o.Topic, o.Partition); err != nil {
			out[i].Err = err
			continue
		}
		g[fmt.Sprintf("%s/%d", o.Topic, o.Partition)] = o
	}
	return out, nil
}

func (b *memBroker) FetchOffsets(group, topic string) ([]engine.OffsetCommit, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []engine.OffsetCommit
	for _, o := range b.offsets[group] {
		if topic == "" || o.Topic == topic {
			out = append(out, o)
		}
	}
	return out, nil
}
