package engine

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/internal/faultfs"
	"github.com/seedqueue/sq/ring"
)

// Seeded crash tests of the engine's own files: topic metadata, topic
// directories (create and delete) and the group offsets log. Each seed
// runs a random sequence of operations through faultfs, crashes at a
// random counted call, restores the synced (odd seeds) or a torn (even
// seeds) state and checks the outcome against a model of what was
// acknowledged. Rerun one seed with SQ_CRASH_SEED=<n> and -run.
// TestCrashAtEveryPoint sweeps every crash point of single operations.

// metaCrashSeeds is the number of seeds each test runs by default.
const metaCrashSeeds = 15

// topicFate is what the model knows of a topic name at the crash.
type topicFate int

const (
	fateNone     topicFate = iota // never created
	fateExists                    // create acknowledged, no delete tried since
	fateGone                      // delete acknowledged, no create tried since
	fateCreating                  // create tried, not acknowledged
	fateDeleting                  // delete tried, not acknowledged
)

// offsetKey names one committed offset.
type offsetKey struct {
	group, topic string
	partition    int
}

// crashModel is what the test acknowledged before the crash.
type crashModel struct {
	fate  map[string]topicFate
	parts map[string]int                 // partitions of the latest create
	acked map[string][]map[uint64]string // per topic, per partition: offset -> value
	sent  map[string]bool                // every value ever published
	// offsets: per key, the values a restart may show: the last
	// acknowledged one (first) and every one tried after it. A key
	// absent from the map must not be shown.
	offsets map[offsetKey][]uint64
	// ackedOffset reports whether the first value of offsets[k] was
	// acknowledged (false: the key may also be absent).
	ackedOffset map[offsetKey]bool
}

func newCrashModel() *crashModel {
	return &crashModel{fate: map[string]topicFate{}, parts: map[string]int{}, acked: map[string][]map[uint64]string{},
		sent: map[string]bool{}, offsets: map[offsetKey][]uint64{}, ackedOffset: map[offsetKey]bool{}}
}

// forgetOffsets drops the model's offsets of topic: a create drops them.
func (m *crashModel) forgetOffsets(topic string) {
	for k := range m.offsets {
		if k.topic == topic {
			delete(m.offsets, k)
			delete(m.ackedOffset, k)
		}
	}
}

// crashRig is one engine over faultfs.
type crashRig struct {
	t    *testing.T
	seed uint64
	fs   *faultfs.FS
	opts Options
	e    *Engine
	rng  *rand.Rand
	m    *crashModel
}

func newCrashRig(t *testing.T, be ring.Backend, seed uint64) *crashRig {
	dir := t.TempDir()
	fs := faultfs.New(dir, be)
	opts := testOptions(dir)
	opts.FS, opts.Backend, opts.ScrubBytesPerSec, opts.RetentionCheckInterval = fs, fs.Backend(), -1, -1
	opts.SegmentBytes, opts.MaxBatchBytes, opts.PreallocBytes = 8<<10, 2<<10, 4<<10
	e, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	e.offsets.compactAt = 512 // compact (replace the file) every few commits
	return &crashRig{t: t, seed: seed, fs: fs, opts: opts, e: e, rng: rand.New(rand.NewPCG(seed, 0x5eed)), m: newCrashModel()}
}

func (r *crashRig) create(name string) {
	if r.m.fate[name] == fateExists {
		return // TOPIC_EXISTS changes nothing
	}
	parts := 1 + r.rng.IntN(2)
	r.m.forgetOffsets(name)
	r.m.fate[name] = fateCreating
	if _, err := r.e.CreateTopic(name, parts, TopicConfig{}); err != nil {
		return
	}
	r.m.fate[name], r.m.parts[name] = fateExists, parts
	r.m.acked[name] = make([]map[uint64]string, parts)
	for i := range parts {
		r.m.acked[name][i] = map[uint64]string{}
	}
}

func (r *crashRig) delete(name string) {
	before := r.m.fate[name]
	if before != fateExists {
		return // deletes of unknown names change nothing
	}
	r.m.fate[name] = fateDeleting
	if err := r.e.DeleteTopic(name); err == nil {
		r.m.fate[name] = fateGone
	}
}

func (r *crashRig) publish(name string, i int) {
	if r.m.fate[name] != fateExists {
		return
	}
	p := r.rng.IntN(r.m.parts[name])
	v := fmt.Sprintf("s%d-i%d-%s", r.seed, i, strings.Repeat("x", r.rng.IntN(100)))
	r.m.sent[v] = true
	res, err := r.e.Append(context.Background(), name, p, mkBatch(r.t, v))
	if err == nil {
		r.m.acked[name][p][res.BaseOffset] = v
	}
}

// commit commits, for a random group, an offset at most the acknowledged
// end of a partition of an existing topic.
func (r *crashRig) commit(name string) {
	if r.m.fate[name] != fateExists {
		return
	}
	p := r.rng.IntN(r.m.parts[name])
	k := offsetKey{fmt.Sprintf("g%d", r.rng.IntN(3)), name, p}
	off := uint64(r.rng.IntN(len(r.m.acked[name][p]) + 1))
	r.m.offsets[k] = append(r.m.offsets[k], off)
	out, err := r.e.CommitOffsets(k.group, "", -1, []OffsetCommit{{Topic: name, Partition: p, Offset: off}})
	if err == nil && out[0].Err == nil {
		r.m.offsets[k], r.m.ackedOffset[k] = []uint64{off}, true
	}
}

// crashAndReopen crashes the file system, restores it and reopens the
// engine, which must start.
func (r *crashRig) crashAndReopen() {
	r.fs.Crash()
	r.e.Close() // fails: the process is dead
	var torn *rand.Rand
	if r.seed%2 == 0 {
		torn = r.rng
	}
	if err := r.fs.Restore(torn); err != nil {
		r.t.Fatal(err)
	}
	e, err := Open(r.opts)
	if err != nil {
		r.t.Fatalf("seed %d: the engine does not start after the crash: %v", r.seed, err)
	}
	r.e = e
	r.t.Cleanup(func() { e.Close() })
}

// checkTopic checks name against its fate and reports whether it exists.
func (r *crashRig) checkTopic(name string) bool {
	t, seed, fate := r.t, r.seed, r.m.fate[name]
	ti, err := r.e.DescribeTopic(name)
	exists := err == nil
	switch {
	case err != nil && codeOf(err) != api.CodeUnknownTopic:
		t.Fatalf("seed %d: topic %s: %v", seed, name, err)
	case fate == fateExists && !exists:
		t.Fatalf("seed %d: topic %s: acknowledged create lost", seed, name)
	case fate == fateGone && exists:
		t.Fatalf("seed %d: topic %s: acknowledged delete undone", seed, name)
	case fate == fateNone && exists:
		t.Fatalf("seed %d: topic %s: never created, yet present", seed, name)
	}
	if !exists {
		return false
	}
	for _, p := range ti.Partitions {
		if p.Err != nil {
			t.Fatalf("seed %d: topic %s partition %d failed after recovery: %v", seed, name, p.Partition, p.Err)
		}
		got := readAll(t, r.e, name, p.Partition)
		for off, v := range got {
			if !r.m.sent[v] {
				t.Fatalf("seed %d: %s/%d offset %d holds %q, never published", seed, name, p.Partition, off, v)
			}
		}
		if fate == fateCreating {
			continue // a create that was not acknowledged: nothing acknowledged to keep
		}
		if len(ti.Partitions) != r.m.parts[name] {
			t.Fatalf("seed %d: topic %s has %d partitions, created with %d", seed, name, len(ti.Partitions), r.m.parts[name])
		}
		for off, v := range r.m.acked[name][p.Partition] {
			if off >= uint64(len(got)) || got[off] != v {
				t.Fatalf("seed %d: %s/%d: acknowledged record %d lost (%d recovered)", seed, name, p.Partition, off, len(got))
			}
		}
	}
	return true
}

// checkOffsets checks the committed offsets of the topics that exist.
func (r *crashRig) checkOffsets(exists map[string]bool) {
	t, seed := r.t, r.seed
	got := map[offsetKey]uint64{}
	for g := range 3 {
		group := fmt.Sprintf("g%d", g)
		offs, err := r.e.FetchOffsets(group, "")
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range offs {
			got[offsetKey{group, o.Topic, o.Partition}] = o.Offset
		}
	}
	for k, v := range got {
		if !exists[k.topic] {
			continue
		}
		if !slices.Contains(r.m.offsets[k], v) {
			t.Fatalf("seed %d: committed offset %+v = %d, want one of %v", seed, k, v, r.m.offsets[k])
		}
	}
	for k, vs := range r.m.offsets {
		if _, ok := got[k]; !ok && exists[k.topic] && r.m.ackedOffset[k] {
			t.Fatalf("seed %d: acknowledged commit %+v = %d lost", seed, k, vs[0])
		}
	}
}

// checkNamesReusable deletes and creates every name again: no remains
// of an interrupted create or delete may block a name.
func (r *crashRig) checkNamesReusable(names []string, exists map[string]bool) {
	for _, name := range names {
		if exists[name] {
			if err := r.e.DeleteTopic(name); err != nil {
				r.t.Fatalf("seed %d: delete %s after recovery: %v", r.seed, name, err)
			}
		}
		if _, err := r.e.CreateTopic(name, 1, TopicConfig{}); err != nil {
			r.t.Fatalf("seed %d: create %s after recovery: %v", r.seed, name, err)
		}
		if got := readAll(r.t, r.e, name, 0); len(got) != 0 {
			r.t.Fatalf("seed %d: recreated %s holds %d old records", r.seed, name, len(got))
		}
		if offs, _ := r.e.FetchOffsets("g0", name); len(offs) != 0 {
			r.t.Fatalf("seed %d: recreated %s inherits offsets %v", r.seed, name, offs)
		}
	}
}

// TestTopicCrashSeeds creates, deletes and recreates topics, publishes
// and commits offsets through faultfs, crashes at a random counted call,
// and checks after the restart that the engine starts, that every topic
// is either there with every acknowledged record or gone (an acknowledged
// create is there, an acknowledged delete is gone), that every
// acknowledged commit of a topic still there is kept, and that every name
// can be created again. Rerun one seed with
// SQ_CRASH_SEED=<n> go test -run TestTopicCrashSeeds ./engine.
func TestTopicCrashSeeds(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be ring.Backend) {
		for _, seed := range engineSeedsN(t, metaCrashSeeds) {
			if !t.Run(fmt.Sprint(seed), func(t *testing.T) { topicCrashOnce(t, be, seed) }) {
				t.Logf("seed %d failed; rerun it with SQ_CRASH_SEED=%d go test -run TestTopicCrashSeeds ./engine", seed, seed)
			}
		}
	})
}

func topicCrashOnce(t *testing.T, be ring.Backend, seed uint64) {
	r := newCrashRig(t, be, seed)
	// A 240-byte name: the trash and temporary names must stay within
	// NAME_MAX whatever the topic name.
	names := []string{"a", "b", strings.Repeat("n", 240)}
	r.create("base")
	for i := range 3 {
		r.publish("base", i)
		r.commit("base")
	}
	r.fs.CrashAfter(1 + r.rng.Int64N(250))
	for i := 0; i < 40 && !r.fs.Crashed(); i++ {
		name := names[r.rng.IntN(len(names))]
		switch op := r.rng.IntN(10); {
		case op < 2:
			r.create(name)
		case op < 4:
			r.delete(name)
		case op < 7:
			r.publish(name, i)
		default:
			r.commit(name)
		}
	}
	r.crashAndReopen()
	exists := map[string]bool{"base": r.checkTopic("base")}
	for _, name := range names {
		exists[name] = r.checkTopic(name)
	}
	r.checkOffsets(exists)
	r.checkNamesReusable(names, exists)
}

// TestOffsetsCrashSeeds commits offsets of several groups and deletes
// groups, with the compaction threshold lowered so that the file is
// replaced every few commits, crashes at a random counted call, and
// checks after the restart that every acknowledged commit and group
// delete is kept and nothing never committed appears. Rerun one seed with
// SQ_CRASH_SEED=<n> go test -run TestOffsetsCrashSeeds ./engine.
func TestOffsetsCrashSeeds(t *testing.T) {
	for _, seed := range engineSeedsN(t, 2*metaCrashSeeds) {
		if !t.Run(fmt.Sprint(seed), func(t *testing.T) { offsetsCrashOnce(t, seed) }) {
			t.Logf("seed %d failed; rerun it with SQ_CRASH_SEED=%d go test -run TestOffsetsCrashSeeds ./engine", seed, seed)
		}
	}
}

func offsetsCrashOnce(t *testing.T, seed uint64) {
	r := newCrashRig(t, nil, seed)
	for _, name := range []string{"x", "y"} {
		r.create(name)
		for i := range 20 {
			r.publish(name, i)
		}
	}
	r.fs.CrashAfter(1 + r.rng.Int64N(150))
	for i := 0; i < 80 && !r.fs.Crashed(); i++ {
		if r.rng.IntN(12) == 0 {
			group := fmt.Sprintf("g%d", r.rng.IntN(3))
			var keys []offsetKey
			for k := range r.m.offsets {
				if k.group == group {
					keys = append(keys, k)
				}
			}
			if len(keys) == 0 {
				continue
			}
			// Until acknowledged, each key may show its values or none.
			for _, k := range keys {
				r.m.ackedOffset[k] = false
			}
			if err := r.e.DeleteGroup(group); err == nil {
				for _, k := range keys {
					delete(r.m.offsets, k)
					delete(r.m.ackedOffset, k)
				}
			}
			continue
		}
		r.commit([]string{"x", "y"}[r.rng.IntN(2)])
	}
	r.crashAndReopen()
	r.checkOffsets(map[string]bool{"x": r.checkTopic("x"), "y": r.checkTopic("y")})
}
