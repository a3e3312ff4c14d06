package replica

import (
	"errors"
	"slices"
	"testing"
)

func cache(entries ...EpochEntry) *EpochCache {
	c := &EpochCache{}
	for _, e := range entries {
		if !c.Assign(e.Epoch, e.StartOffset) {
			panic("bad fixture")
		}
	}
	return c
}

func TestEpochCacheAssign(t *testing.T) {
	for _, tc := range []struct {
		name   string
		start  []EpochEntry
		epoch  uint32
		offset uint64
		ok     bool
		want   []EpochEntry
	}{
		{"empty", nil, 3, 10, true, []EpochEntry{{3, 10}}},
		{"newer epoch later offset", []EpochEntry{{1, 0}}, 2, 5, true, []EpochEntry{{1, 0}, {2, 5}}},
		{"same epoch ignored", []EpochEntry{{1, 0}, {2, 5}}, 2, 9, false, []EpochEntry{{1, 0}, {2, 5}}},
		{"older epoch ignored", []EpochEntry{{1, 0}, {3, 5}}, 2, 9, false, []EpochEntry{{1, 0}, {3, 5}}},
		{"same start supersedes an empty epoch", []EpochEntry{{1, 0}, {2, 5}}, 3, 5, true, []EpochEntry{{1, 0}, {3, 5}}},
		{"lower start drops the entries at or after it", []EpochEntry{{1, 0}, {2, 5}, {4, 8}}, 5, 5, true, []EpochEntry{{1, 0}, {5, 5}}},
		{"lower start inside an epoch", []EpochEntry{{1, 0}, {2, 5}, {4, 8}}, 5, 6, true, []EpochEntry{{1, 0}, {2, 5}, {5, 6}}},
		{"start 0 replaces everything", []EpochEntry{{1, 0}, {2, 5}}, 7, 0, true, []EpochEntry{{7, 0}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := cache(tc.start...)
			if got := c.Assign(tc.epoch, tc.offset); got != tc.ok {
				t.Errorf("Assign(%d, %d) = %v, want %v", tc.epoch, tc.offset, got, tc.ok)
			}
			if got := c.Entries(); !slices.Equal(got, tc.want) {
				t.Errorf("entries %v, want %v", got, tc.want)
			}
		})
	}
}

func TestEpochCacheLatestAndCopy(t *testing.T) {
	var c EpochCache
	if _, ok := c.Latest(); ok {
		t.Fatal("Latest of an empty cache: ok")
	}
	c.Assign(2, 4)
	c.Assign(3, 9)
	if e, ok := c.Latest(); !ok || e != (EpochEntry{3, 9}) {
		t.Fatalf("Latest = %v %v, want {3 9} true", e, ok)
	}
	got := c.Entries()
	got[0].Epoch = 99
	if c.Entries()[0].Epoch != 2 {
		t.Fatal("Entries does not return a copy")
	}
}

// TestEndOffsetFor follows KIP-279's examples: the answer is the largest
// epoch <= the requested one and the start of the next epoch (or the LEO).
func TestEndOffsetFor(t *testing.T) {
	c := cache(EpochEntry{1, 0}, EpochEntry{2, 5}, EpochEntry{4, 8})
	const leo = 12
	for _, tc := range []struct {
		req   uint32
		epoch uint32
		end   uint64
		ok    bool
	}{
		{0, 0, 0, false}, // no epoch <= 0: the first entry's start
		{1, 1, 5, true},
		{2, 2, 8, true},
		{3, 2, 8, true}, // epoch 3 never appended: 2's end
		{4, 4, leo, true},
		{9, 4, leo, true}, // newer than any: the latest, up to the LEO
	} {
		e, end, ok := c.EndOffsetFor(tc.req, leo)
		if e != tc.epoch || end != tc.end || ok != tc.ok {
			t.Errorf("EndOffsetFor(%d) = %d %d %v, want %d %d %v", tc.req, e, end, ok, tc.epoch, tc.end, tc.ok)
		}
	}
	later := cache(EpochEntry{3, 40})
	if e, end, ok := later.EndOffsetFor(2, 50); e != 2 || end != 40 || ok {
		t.Errorf("EndOffsetFor before the first epoch = %d %d %v, want 2 40 false", e, end, ok)
	}
	var empty EpochCache
	if _, end, ok := empty.EndOffsetFor(2, 50); end != 0 || ok {
		t.Errorf("EndOffsetFor on an empty cache = %d %v, want 0 false", end, ok)
	}
}

func TestTruncateFromEnd(t *testing.T) {
	for _, tc := range []struct {
		off  uint64
		want []EpochEntry
	}{
		{12, []EpochEntry{{1, 0}, {2, 5}, {4, 8}}},
		{9, []EpochEntry{{1, 0}, {2, 5}, {4, 8}}},
		{8, []EpochEntry{{1, 0}, {2, 5}}},
		{6, []EpochEntry{{1, 0}, {2, 5}}},
		{5, []EpochEntry{{1, 0}}},
		{0, nil},
	} {
		c := cache(EpochEntry{1, 0}, EpochEntry{2, 5}, EpochEntry{4, 8})
		c.TruncateFromEnd(tc.off)
		if got := c.Entries(); !slices.Equal(got, tc.want) {
			t.Errorf("TruncateFromEnd(%d): %v, want %v", tc.off, got, tc.want)
		}
	}
}

func TestTruncateFromStart(t *testing.T) {
	for _, tc := range []struct {
		off  uint64
		want []EpochEntry
	}{
		{0, []EpochEntry{{1, 0}, {2, 5}, {4, 8}}},
		{3, []EpochEntry{{1, 3}, {2, 5}, {4, 8}}},
		{5, []EpochEntry{{2, 5}, {4, 8}}},
		{7, []EpochEntry{{2, 7}, {4, 8}}},
		{8, []EpochEntry{{4, 8}}},
		{20, []EpochEntry{{4, 20}}},
	} {
		c := cache(EpochEntry{1, 0}, EpochEntry{2, 5}, EpochEntry{4, 8})
		c.TruncateFromStart(tc.off)
		if got := c.Entries(); !slices.Equal(got, tc.want) {
			t.Errorf("TruncateFromStart(%d): %v, want %v", tc.off, got, tc.want)
		}
	}
}

// TestTruncationOffset covers KIP-101's divergence cases and KIP-279's
// case where the follower lacks the epoch the leader answers with.
func TestTruncationOffset(t *testing.T) {
	for _, tc := range []struct {
		name        string
		local       []EpochEntry
		localLEO    uint64
		leaderEpoch uint32
		leaderEnd   uint64
		leaderKnows bool
		want        uint64
	}{
		{"same epoch, follower behind", []EpochEntry{{1, 0}, {2, 5}}, 7, 2, 10, true, 7},
		{"same epoch, follower has an uncommitted suffix", []EpochEntry{{1, 0}, {2, 5}}, 12, 2, 10, true, 10},
		{"follower's latest epoch unknown to the leader", []EpochEntry{{1, 0}, {3, 5}}, 9, 1, 6, true, 5},
		{"leader's epoch ended after the follower's own end for it", []EpochEntry{{1, 0}, {3, 5}}, 9, 1, 7, true, 5},
		{"follower lacks the leader's epoch (KIP-279)", []EpochEntry{{1, 0}, {3, 10}}, 20, 2, 8, true, 8},
		{"follower has no epoch <= the leader's", []EpochEntry{{4, 6}}, 9, 2, 8, true, 6},
		{"leader knows no epoch <= ours", []EpochEntry{{1, 0}}, 9, 1, 4, false, 4},
		{"leader knows none, follower shorter", []EpochEntry{{1, 0}}, 3, 1, 4, false, 3},
		{"follower without epochs", nil, 9, 2, 5, true, 5},
		{"empty follower", nil, 0, 2, 5, true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := TruncationOffset(cache(tc.local...), tc.localLEO, tc.leaderEpoch, tc.leaderEnd, tc.leaderKnows)
			if got != tc.want {
				t.Errorf("TruncationOffset = %d, want %d", got, tc.want)
			}
		})
	}
}

// truncateRounds runs KIP-279's exchange between a follower and a leader
// until TruncationComplete, and returns the offset of each round.
func truncateRounds(t *testing.T, leader *EpochCache, leaderLEO uint64, follower *EpochCache, leo uint64) []uint64 {
	t.Helper()
	var trace []uint64
	for range 10 {
		latest, _ := follower.Latest()
		e, end, ok := leader.EndOffsetFor(latest.Epoch, leaderLEO)
		to := TruncationOffset(follower, leo, e, end, ok)
		done := TruncationComplete(follower, e, ok)
		trace = append(trace, to)
		leo = to
		follower.TruncateFromEnd(to)
		if done {
			return trace
		}
	}
	t.Fatalf("no end after 10 rounds: %v", trace)
	return nil
}

// TestTruncationRounds runs KIP-279's loop where one round is not enough.
func TestTruncationRounds(t *testing.T) {
	for _, tc := range []struct {
		name      string
		leader    []EpochEntry
		leaderLEO uint64
		follower  []EpochEntry
		leo       uint64
		want      []uint64
	}{
		{
			// Follower: epoch 1 at 0..9, its own epoch 3 from 10. Leader:
			// epoch 1 at 0..4, epoch 2 from 5, epoch 4 from 8.
			"follower kept a suffix the leader overwrote in a later epoch",
			[]EpochEntry{{1, 0}, {2, 5}, {4, 8}}, 12,
			[]EpochEntry{{1, 0}, {3, 10}}, 20,
			[]uint64{8, 5},
		},
		{
			// The follower led epoch 372 from 5738 without appending; its
			// 5736..5737 are epoch 370, the leader's are epoch 371. The
			// first answer (371, 5744) cuts nothing, yet the logs differ.
			"follower's latest epoch appended nothing",
			[]EpochEntry{{370, 5000}, {371, 5736}, {373, 5744}}, 5746,
			[]EpochEntry{{370, 5000}, {372, 5738}}, 5738,
			[]uint64{5738, 5736},
		},
		{
			"same epoch: one round",
			[]EpochEntry{{1, 0}, {2, 5}}, 12,
			[]EpochEntry{{1, 0}, {2, 5}}, 14,
			[]uint64{12},
		},
		{
			"leader knows no epoch <= the follower's",
			[]EpochEntry{{5, 40}}, 50,
			[]EpochEntry{{1, 0}}, 45,
			[]uint64{40},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := truncateRounds(t, cache(tc.leader...), tc.leaderLEO, cache(tc.follower...), tc.leo)
			if !slices.Equal(got, tc.want) {
				t.Fatalf("truncation rounds %v, want %v", got, tc.want)
			}
		})
	}
}

func TestTruncationComplete(t *testing.T) {
	c := cache(EpochEntry{1, 0}, EpochEntry{3, 10})
	for _, tc := range []struct {
		epoch uint32
		knows bool
		want  bool
	}{
		{1, true, true}, {3, true, true}, {2, true, false}, {0, true, false}, {4, true, false}, {2, false, true},
	} {
		if got := TruncationComplete(c, tc.epoch, tc.knows); got != tc.want {
			t.Errorf("TruncationComplete(%d, %v) = %v, want %v", tc.epoch, tc.knows, got, tc.want)
		}
	}
	if !TruncationComplete(&EpochCache{}, 2, true) || !TruncationComplete(nil, 2, true) {
		t.Error("an empty cache: not complete")
	}
}

func TestEpochCheckpointText(t *testing.T) {
	c := cache(EpochEntry{1, 0}, EpochEntry{2, 5}, EpochEntry{4, 8})
	b, err := c.MarshalText()
	if err != nil {
		t.Fatal(err)
	}
	if want := "0\n3\n1 0\n2 5\n4 8\n"; string(b) != want {
		t.Fatalf("MarshalText = %q, want %q", b, want)
	}
	var d EpochCache
	if err := d.UnmarshalText(b); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(d.Entries(), c.Entries()) {
		t.Fatalf("round trip: %v, want %v", d.Entries(), c.Entries())
	}
	var empty EpochCache
	if b, _ := empty.MarshalText(); string(b) != "0\n0\n" {
		t.Fatalf("empty MarshalText = %q", b)
	}
}

func TestEpochCheckpointCorrupt(t *testing.T) {
	for _, text := range []string{
		"",
		"0\n",
		"0\n1\n1 0",            // torn: no final newline
		"1\n0\n",               // unknown version
		"0\nx\n",               // count not a number
		"0\n2\n1 0\n",          // count too high
		"0\n0\n1 0\n",          // count too low
		"0\n1\n1\n",            // one field
		"0\n1\n1 0 3\n",        // three fields
		"0\n1\n-1 0\n",         // negative epoch
		"0\n1\n4294967296 0\n", // epoch above 32 bits
		"0\n2\n2 5\n1 9\n",     // epochs descending
		"0\n2\n1 5\n2 5\n",     // start offsets not ascending
	} {
		c := cache(EpochEntry{7, 70})
		err := c.UnmarshalText([]byte(text))
		if !errors.Is(err, ErrCorrupt) {
			t.Errorf("UnmarshalText(%q) = %v, want ErrCorrupt", text, err)
		}
		if got := c.Entries(); !slices.Equal(got, []EpochEntry{{7, 70}}) {
			t.Errorf("UnmarshalText(%q) changed the cache to %v", text, got)
		}
	}
}
