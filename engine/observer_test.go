package engine

import (
	"context"
	"sync"
	"testing"
)

// recObserver records every event.
type recObserver struct {
	mu      sync.Mutex
	appends []AppendEvent
	fetches []FetchEvent
	syncs   []SyncEvent
}

func (r *recObserver) AppendDone(_ context.Context, ev AppendEvent) {
	r.mu.Lock()
	r.appends = append(r.appends, ev)
	r.mu.Unlock()
}

func (r *recObserver) FetchDone(_ context.Context, ev FetchEvent) {
	r.mu.Lock()
	r.fetches = append(r.fetches, ev)
	r.mu.Unlock()
}

func (r *recObserver) SyncDone(ev SyncEvent) {
	r.mu.Lock()
	r.syncs = append(r.syncs, ev)
	r.mu.Unlock()
}

func TestObserverSeesAppendFetchSync(t *testing.T) {
	obs := &recObserver{}
	opts := testOptions(t.TempDir())
	opts.Observer = obs
	e := openTest(t, opts)
	if _, err := e.CreateTopic("obs", 1, TopicConfig{SyncPolicy: "every-batch"}); err != nil {
		t.Fatal(err)
	}
	b := mkBatch(t, "a", "b", "c")
	size := len(b)
	if _, err := e.Append(context.Background(), "obs", 0, b); err != nil {
		t.Fatal(err)
	}
	r, err := e.Fetch(context.Background(), "obs", 0, 0, 1<<20, 0)
	if err != nil {
		t.Fatal(err)
	}
	r.Release()
	if _, err := e.Append(context.Background(), "missing", 0, mkBatch(t, "x")); err == nil {
		t.Fatal("append to a missing topic succeeded")
	}
	obs.mu.Lock()
	defer obs.mu.Unlock()
	tests := []struct {
		name      string
		got, want int
	}{
		{"appends", len(obs.appends), 2},
		{"records appended", obs.appends[0].Records, 3},
		{"bytes appended", obs.appends[0].Bytes, size},
		{"fetches", len(obs.fetches), 1},
		{"records fetched", obs.fetches[0].Records, 3},
		{"bytes fetched", obs.fetches[0].Bytes, size},
		{"syncs", len(obs.syncs), 1},
		{"batches per sync", obs.syncs[0].Batches, 1},
	}
	for _, tc := range tests {
		if tc.got != tc.want {
			t.Errorf("%s = %d, want %d", tc.name, tc.got, tc.want)
		}
	}
	if obs.appends[1].Err == nil {
		t.Error("failed append reported without its error")
	}
	if e.InFlight() != 0 {
		t.Errorf("InFlight = %d after every call returned", e.InFlight())
	}
}
