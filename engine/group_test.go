package engine

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seedqueue/sq/api"
)

// fakeClock is an injected clock for session expiry.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func groupEngine(t *testing.T, partitions int) (*Engine, *fakeClock) {
	t.Helper()
	clk := &fakeClock{now: time.Unix(1_000_000, 0)}
	opts := testOptions(t.TempDir())
	opts.Now = clk.Now
	e := openTest(t, opts)
	if _, err := e.CreateTopic("t", partitions, TopicConfig{}); err != nil {
		t.Fatal(err)
	}
	return e, clk
}

// sim is a member as the SDK runs it: it releases revoked partitions at
// once and reports what it owns in each heartbeat.
type sim struct {
	id    string
	gen   int32
	owned map[int]bool
}

func (s *sim) ownedList() GroupAssignment {
	a := GroupAssignment{"t": {}}
	for p := range s.owned {
		a["t"] = append(a["t"], p)
	}
	return a
}

func (s *sim) apply(r JoinResult) {
	s.id, s.gen = r.MemberID, r.Generation
	s.owned = map[int]bool{}
	for _, p := range r.Assignment["t"] {
		s.owned[p] = true
	}
}

func join(t *testing.T, e *Engine, session time.Duration) *sim {
	t.Helper()
	r, err := e.JoinGroup("g", "", "c", []string{"t"}, session)
	if err != nil {
		t.Fatal(err)
	}
	s := &sim{}
	s.apply(r)
	return s
}

func (s *sim) beat(t *testing.T, e *Engine) error {
	t.Helper()
	r, err := e.Heartbeat("g", s.id, s.gen, s.ownedList())
	if err == nil {
		s.apply(r)
	}
	return err
}

// checkDisjoint fails when a partition is owned by two members.
func checkDisjoint(t *testing.T, ms ...*sim) {
	t.Helper()
	seen := map[int]string{}
	for _, m := range ms {
		for p := range m.owned {
			if o, ok := seen[p]; ok {
				t.Fatalf("partition %d owned by %s and %s", p, o, m.id)
			}
			seen[p] = m.id
		}
	}
}

// rounds heartbeats every member n times, checking ownership after each.
func rounds(t *testing.T, e *Engine, n int, ms ...*sim) {
	t.Helper()
	for range n {
		for _, m := range ms {
			if err := m.beat(t, e); err != nil {
				t.Fatal(err)
			}
			checkDisjoint(t, ms...)
		}
	}
}

func TestGroupIncrementalAssignment(t *testing.T) {
	e, clk := groupEngine(t, 6)
	a := join(t, e, 300*time.Millisecond)
	if len(a.owned) != 6 {
		t.Fatalf("single member owns %v", a.owned)
	}
	b := join(t, e, 300*time.Millisecond)
	checkDisjoint(t, a, b)
	rounds(t, e, 2, a, b)
	c := join(t, e, 300*time.Millisecond)
	// Partitions a and b keep are never revoked from them.
	keptA, keptB := copySet(a.owned), copySet(b.owned)
	rounds(t, e, 3, a, b, c)
	for _, m := range []*sim{a, b, c} {
		if len(m.owned) != 2 {
			t.Fatalf("member %s owns %v, want 2 partitions", m.id, m.owned)
		}
	}
	for p := range a.owned {
		if !keptA[p] {
			t.Errorf("a gained partition %d during the join of c", p)
		}
	}
	for p := range b.owned {
		if !keptB[p] {
			t.Errorf("b gained partition %d during the join of c", p)
		}
	}
	if d, _ := e.DescribeGroup("g"); d.Summary.State != GroupStable || d.Summary.Members != 3 {
		t.Errorf("describe: %+v", d.Summary)
	}

	// c leaves: a and b own all 6 after one heartbeat each.
	if err := e.LeaveGroup("g", c.id); err != nil {
		t.Fatal(err)
	}
	rounds(t, e, 1, a, b)
	if len(a.owned)+len(b.owned) != 6 {
		t.Fatalf("after leave: a %v b %v", a.owned, b.owned)
	}

	// b stops heartbeating: after its session timeout a owns everything.
	clk.Add(200 * time.Millisecond)
	rounds(t, e, 1, a)
	clk.Add(200 * time.Millisecond)
	e.coord().expire(clk.Now())
	rounds(t, e, 1, a)
	if len(a.owned) != 6 {
		t.Fatalf("after b expired a owns %v", a.owned)
	}
	if err := b.beat(t, e); codeOf(err) != api.CodeFencedGeneration {
		t.Fatalf("heartbeat of an expired member: %v", err)
	}
}

func copySet(s map[int]bool) map[int]bool {
	out := map[int]bool{}
	for k := range s {
		out[k] = true
	}
	return out
}

// A partition moving from a to b is given to b only after a released it.
func TestGroupMoveWaitsForRelease(t *testing.T) {
	e, _ := groupEngine(t, 2)
	a := join(t, e, time.Second)
	b := join(t, e, time.Second)
	if len(b.owned) != 0 {
		t.Fatalf("b got %v while a still holds both partitions", b.owned)
	}
	// a's heartbeat still reports both: b must not get the moving one.
	r, err := e.Heartbeat("g", a.id, a.gen, GroupAssignment{"t": {0, 1}})
	if err != nil || len(r.Assignment["t"]) != 1 {
		t.Fatalf("a's assignment after b joined: %+v %v", r, err)
	}
	if err := b.beat(t, e); err != nil || len(b.owned) != 0 {
		t.Fatalf("b owns %v before a released, err %v", b.owned, err)
	}
	a.apply(r)
	rounds(t, e, 1, a, b)
	if len(a.owned) != 1 || len(b.owned) != 1 {
		t.Fatalf("a %v b %v", a.owned, b.owned)
	}
}

func TestGroupCommitFencing(t *testing.T) {
	e, _ := groupEngine(t, 2)
	ctx := context.Background()
	for range 5 {
		if _, err := e.Append(ctx, "t", 0, mkBatch(t, "x")); err != nil {
			t.Fatal(err)
		}
	}
	a := join(t, e, time.Second)
	if _, err := e.CommitOffsets("g", a.id, a.gen, []OffsetCommit{{Topic: "t", Partition: 0, Offset: 2}}); err != nil {
		t.Fatal(err)
	}
	old := a.gen
	b := join(t, e, time.Second)
	rounds(t, e, 2, a, b)
	if a.gen == old {
		t.Fatal("generation not bumped by a join")
	}
	cases := []struct {
		name   string
		member string
		gen    int32
		off    OffsetCommit
		code   api.Code // of the request, or of the entry
	}{
		{"stale generation", a.id, old, OffsetCommit{Topic: "t", Partition: 0, Offset: 4}, api.CodeFencedGeneration},
		{"unknown member", "nobody", a.gen, OffsetCommit{Topic: "t", Partition: 0, Offset: 4}, api.CodeFencedGeneration},
		{"standalone while members", "", -1, OffsetCommit{Topic: "t", Partition: 0, Offset: 4}, api.CodeFencedGeneration},
		{"HW+1", a.id, a.gen, OffsetCommit{Topic: "t", Partition: 0, Offset: 6}, api.CodeOffsetOutOfRange},
		{"2^63-1", a.id, a.gen, OffsetCommit{Topic: "t", Partition: 0, Offset: math.MaxInt64}, api.CodeOffsetOutOfRange},
		{"2^64-1", a.id, a.gen, OffsetCommit{Topic: "t", Partition: 0, Offset: math.MaxUint64}, api.CodeOffsetOutOfRange},
		{"no such partition", a.id, a.gen, OffsetCommit{Topic: "t", Partition: 9, Offset: 0}, api.CodeUnknownPartition},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			owner := a
			if !a.owned[0] {
				owner = b
			}
			member, gen := tc.member, tc.gen
			if member == a.id && owner == b {
				member = b.id
				if gen == a.gen {
					gen = b.gen
				}
			}
			res, err := e.CommitOffsets("g", member, gen, []OffsetCommit{tc.off})
			got := codeOf(err)
			if err == nil {
				got = codeOf(res[0].Err)
			}
			if got != tc.code {
				t.Fatalf("code %v (err %v, res %+v), want %v", got, err, res, tc.code)
			}
			if o, _ := e.FetchOffsets("g", "t"); len(o) != 1 || o[0].Offset != 2 {
				t.Fatalf("stored offsets changed: %+v", o)
			}
		})
	}
	// A member may not commit a partition it does not hold.
	notHeld := 1
	if a.owned[1] {
		notHeld = 0
	}
	res, err := e.CommitOffsets("g", a.id, a.gen, []OffsetCommit{{Topic: "t", Partition: notHeld, Offset: 0}})
	if err != nil || codeOf(res[0].Err) != api.CodeFencedGeneration {
		t.Fatalf("commit of a partition not held: %+v %v", res, err)
	}
}

func TestGroupAdmin(t *testing.T) {
	e, _ := groupEngine(t, 2)
	a := join(t, e, time.Second)
	if _, err := e.ResetOffsets("g", "t", ResetEarliest, 0); codeOf(err) != api.CodeInvalidRequest || !strings.Contains(err.Error(), "1 active members; stop them first") {
		t.Fatalf("reset with members: %v", err)
	}
	if err := e.DeleteGroup("g"); codeOf(err) != api.CodeInvalidRequest || api.IsRetriable(err) {
		t.Fatalf("delete with members: %v", err)
	}
	if gs := e.ListGroups(); len(gs) != 1 || gs[0].Members != 1 {
		t.Fatalf("list: %+v", gs)
	}
	_ = e.LeaveGroup("g", a.id)
	if _, err := e.Append(context.Background(), "t", 1, mkBatch(t, "x", "y")); err != nil {
		t.Fatal(err)
	}
	res, err := e.ResetOffsets("g", "t", ResetLatest, 0)
	if err != nil || len(res) != 2 || res[1].Offset != 2 {
		t.Fatalf("reset latest: %+v %v", res, err)
	}
	if _, err := e.ResetOffsets("g", "t", ResetOffset, 3); codeOf(err) != api.CodeOffsetOutOfRange {
		t.Fatalf("reset beyond HW: %v", err)
	}
	d, err := e.DescribeGroup("g")
	if err != nil || len(d.Offsets) != 2 || d.Offsets[1].CommittedOffset != 2 || d.Offsets[1].Lag != 0 {
		t.Fatalf("describe: %+v %v", d, err)
	}
	if err := e.DeleteGroup("g"); err != nil {
		t.Fatal(err)
	}
	if o, _ := e.FetchOffsets("g", ""); len(o) != 0 {
		t.Fatalf("offsets after delete: %+v", o)
	}
	if _, err := e.DescribeGroup("g"); codeOf(err) != api.CodeUnknownGroup {
		t.Fatalf("describe after delete: %v", err)
	}
}

// A group with neither members nor committed offsets does not exist:
// describe and delete answer UNKNOWN_GROUP (not retriable) and list
// leaves it out.
func TestUnknownGroup(t *testing.T) {
	e, _ := groupEngine(t, 1)
	a := join(t, e, time.Second)
	_ = e.LeaveGroup("g", a.id) // members gone, nothing committed
	for _, name := range []string{"nosuch", "g"} {
		if _, err := e.DescribeGroup(name); codeOf(err) != api.CodeUnknownGroup || api.IsRetriable(err) {
			t.Errorf("describe %s: %v", name, err)
		}
		if err := e.DeleteGroup(name); codeOf(err) != api.CodeUnknownGroup {
			t.Errorf("delete %s: %v", name, err)
		}
	}
	if gs := e.ListGroups(); len(gs) != 0 {
		t.Fatalf("list: %+v", gs)
	}
}

// List and describe report the same generation for an empty group that
// had members and committed offsets.
func TestListAndDescribeAgreeOnGeneration(t *testing.T) {
	e, _ := groupEngine(t, 1)
	a := join(t, e, time.Second)
	b := join(t, e, time.Second)
	// Committed before the members leave: a group left with neither
	// members nor offsets is forgotten, generation included.
	rounds(t, e, 3, a, b)
	owner := a
	if b.owned[0] {
		owner = b
	}
	res, err := e.CommitOffsets("g", owner.id, owner.gen, []OffsetCommit{{Topic: "t", Partition: 0, Offset: 0}})
	if err != nil || len(res) != 1 || res[0].Err != nil {
		t.Fatalf("commit: %+v, %v", res, err)
	}
	_ = e.LeaveGroup("g", b.id)
	_ = e.LeaveGroup("g", a.id)
	if _, err := e.ResetOffsets("g", "t", ResetEarliest, 0); err != nil {
		t.Fatal(err)
	}
	d, err := e.DescribeGroup("g")
	if err != nil {
		t.Fatal(err)
	}
	gs := e.ListGroups()
	if len(gs) != 1 || gs[0] != d.Summary || d.Summary.Generation == 0 || d.Summary.State != GroupEmpty {
		t.Fatalf("list %+v, describe %+v", gs, d.Summary)
	}
}

// Committed offsets survive a crash: a second store opened on the same
// directory without closing the first (as after SIGKILL) sees them.
func TestOffsetsSurviveCrash(t *testing.T) {
	dir := t.TempDir()
	opts := testOptions(dir)
	opts.Defaults()
	s, err := openOffsetStore(dir, opts.FS, opts.Logger)
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	if err := s.commit(offsetRecord{Group: "g", Member: "m", Generation: 3, Offsets: []offsetEntry{{Topic: "t", Offset: 300}}}); err != nil {
		t.Fatal(err)
	}
	s2, err := openOffsetStore(dir, opts.FS, opts.Logger)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.close()
	if got := s2.get("g", "t"); len(got) != 1 || got[0].Offset != 300 {
		t.Fatalf("after crash: %+v", got)
	}
}

// commitMany commits n offsets of 100 partitions without fdatasync and
// returns the largest file size seen.
func commitMany(tb testing.TB, s *offsetStore, n int) int64 {
	var peak int64
	for i := range n {
		rec := offsetRecord{Group: "g", Member: "m-0123456789abcdef01234567", Generation: int32(i / 1000),
			Offsets: []offsetEntry{{Topic: "orders", Partition: i % 100, Offset: uint64(i)}}}
		if err := s.commit(rec); err != nil {
			tb.Fatal(err)
		}
		peak = max(peak, s.size)
	}
	return peak
}

func openNoSync(tb testing.TB) *offsetStore {
	dir := tb.TempDir()
	opts := testOptions(dir)
	opts.Defaults()
	s, err := openOffsetStore(dir, opts.FS, opts.Logger)
	if err != nil {
		tb.Fatal(err)
	}
	s.noSync = true
	return s
}

// The offsets log stays bounded under auto-commit: 100,000 commits leave
// it under compactBytes plus one record, and the state survives reopen.
func TestOffsetsLogBounded(t *testing.T) {
	s := openNoSync(t)
	peak := commitMany(t, s, 100_000)
	s.close()
	st, err := os.Stat(filepath.Join(s.dir, offsetsFile))
	if err != nil {
		t.Fatal(err)
	}
	if peak > compactBytes+4096 || st.Size() > compactBytes {
		t.Fatalf("offsets log peak %d bytes, final %d, bound %d", peak, st.Size(), compactBytes)
	}
	s2, err := openOffsetStore(s.dir, s.fs, s.log)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.close()
	got := s2.get("g", "orders")
	if len(got) != 100 || got[99].Offset != 99_999 {
		t.Fatalf("state after reopen: %d partitions, last %+v", len(got), got[len(got)-1])
	}
}

// BenchmarkOffsetsLog1M commits 1,000,000 offsets (one partition each, 100
// partitions, no fdatasync: compaction is what is measured) and reports
// the largest size of the offsets log.
func BenchmarkOffsetsLog1M(b *testing.B) {
	for range b.N {
		s := openNoSync(b)
		peak := commitMany(b, s, 1_000_000)
		s.close()
		b.ReportMetric(float64(peak), "peak-log-bytes")
		if peak > compactBytes+4096 {
			b.Fatalf("offsets log reached %d bytes", peak)
		}
	}
}

// TestJoinRefusesTextThatIsNotUTF8: a group id or client id that is not
// valid UTF-8 is refused at the join with INVALID_REQUEST (both planes pass
// the engine; the SDK refuses such a client id before it dials, so a
// hostile client is what reaches this), and nothing is joined.
func TestJoinRefusesTextThatIsNotUTF8(t *testing.T) {
	e, _ := groupEngine(t, 2)
	for _, bad := range []string{"\x80", "caf\xc3", "\xc0\xaf", "ok-\xff-ok"} {
		if _, err := e.JoinGroup("g", "", bad, []string{"t"}, time.Second); !errors.Is(err, api.ErrInvalidRequest) {
			t.Errorf("join with client id %q: %v, want INVALID_REQUEST", bad, err)
		}
		if _, err := e.JoinGroup(bad, "", "c", []string{"t"}, time.Second); !errors.Is(err, api.ErrInvalidRequest) {
			t.Errorf("join of group %q: %v, want INVALID_REQUEST", bad, err)
		}
	}
	if gs := e.ListGroups(); len(gs) != 0 {
		t.Errorf("groups after refused joins: %+v", gs)
	}
}

// TestGroupIDsAndOwnedListsBounded: a member id or client id over
// MaxIDLength bytes is refused by every group call (both planes pass the
// engine) without echoing it, and so is a heartbeat's owned list over
// MaxOwnedEntries; commit metadata over MaxCommitMetadataBytes is refused,
// and a refused commit's metadata is echoed at most in part.
func TestGroupIDsAndOwnedListsBounded(t *testing.T) {
	e, _ := groupEngine(t, 2)
	long := strings.Repeat("m", MaxIDLength+1)
	short := func(err error) bool {
		return errors.Is(err, api.ErrInvalidRequest) && len(err.Error()) < 300
	}
	if _, err := e.JoinGroup("g", long, "c", []string{"t"}, time.Second); !short(err) {
		t.Errorf("join with a %d-byte member id: %v", len(long), err)
	}
	if _, err := e.JoinGroup("g", "", long, []string{"t"}, time.Second); !short(err) {
		t.Errorf("join with a %d-byte client id: %v", len(long), err)
	}
	if _, err := e.Heartbeat("g", long, 1, nil); !short(err) {
		t.Errorf("heartbeat with a %d-byte member id: %v", len(long), err)
	}
	if err := e.LeaveGroup("g", long); !short(err) {
		t.Errorf("leave with a %d-byte member id: %v", len(long), err)
	}
	if _, err := e.CommitOffsets("g", long, 1, []OffsetCommit{{Topic: "t", Partition: 0, Offset: 0}}); !short(err) {
		t.Errorf("commit with a %d-byte member id: %v", len(long), err)
	}
	m := join(t, e, time.Second)
	if _, err := e.Heartbeat("g", m.id, m.gen, GroupAssignment{"t": make([]int, MaxOwnedEntries)}); !errors.Is(err, api.ErrInvalidRequest) {
		t.Errorf("heartbeat with an owned list of %d: %v", MaxOwnedEntries+1, err)
	}
	if _, err := e.Heartbeat("g", m.id, m.gen, m.ownedList()); err != nil {
		t.Errorf("heartbeat after the refused ones: %v", err)
	}
	for _, md := range []string{"\xff" + strings.Repeat("x", 100), strings.Repeat("x", MaxCommitMetadataBytes+1), "\xff" + strings.Repeat("x", 1<<20)} {
		res, err := e.CommitOffsets("g", m.id, m.gen, []OffsetCommit{{Topic: "t", Partition: 0, Offset: 0, Metadata: md}})
		if err != nil || len(res) != 1 || !errors.Is(res[0].Err, api.ErrInvalidRequest) || len(res[0].Err.Error()) > 300 {
			t.Errorf("commit with %d bytes of metadata: %v, %v", len(md), res, err)
		}
	}
	owned := m.ownedList()["t"]
	res, err := e.CommitOffsets("g", m.id, m.gen, []OffsetCommit{{Topic: "t", Partition: owned[0], Offset: 0, Metadata: strings.Repeat("x", MaxCommitMetadataBytes)}})
	if err != nil || len(res) != 1 || res[0].Err != nil {
		t.Errorf("commit with %d bytes of metadata (the bound): %v, %v", MaxCommitMetadataBytes, res, err)
	}
}
