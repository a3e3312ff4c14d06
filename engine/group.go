package engine

import (
	"crypto/rand"
	"encoding/hex"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seedqueue/sq/api"
)

// Bounds and defaults of group membership (docs/architecture.md §6).
const (
	// DefaultSessionTimeout is the session timeout of a member that asks
	// for none.
	DefaultSessionTimeout = 10 * time.Second
	// MinSessionTimeout and MaxSessionTimeout bound the timeout a member
	// may ask for; a request outside is clamped.
	MinSessionTimeout = 100 * time.Millisecond
	MaxSessionTimeout = 5 * time.Minute
	// maxGroupMembers bounds the members of one group.
	maxGroupMembers = 1000
	// maxMembers bounds the members of every group together: each takes
	// about 2 KiB with its group, so joins with ever new group names
	// cannot grow the server's memory without end.
	maxMembers = 50000
)

// Group states reported by ListGroups and DescribeGroup.
const (
	GroupEmpty       = "empty"
	GroupStable      = "stable"
	GroupRebalancing = "rebalancing"
)

// GroupAssignment is a member's assignment: partitions per topic, each
// list sorted.
type GroupAssignment map[string][]int

// MaxOwnedEntries bounds the topic entries plus partitions of the owned
// list a member reports in a heartbeat: a member owns at most what it was
// assigned, and a list beyond this bound is not a report but a way to make
// the coordinator build a large set under the group's lock.
const MaxOwnedEntries = 100000

// size is the number of topic entries plus partitions of a.
func (a GroupAssignment) size() int {
	n := 0
	for _, ps := range a {
		n += 1 + len(ps)
	}
	return n
}

// JoinResult is the answer to JoinGroup and Heartbeat.
type JoinResult struct {
	MemberID   string
	Generation int32
	// Assignment holds the partitions the member may consume now. It
	// omits partitions of the member's target that another member has not
	// released yet, and partitions being revoked from it.
	Assignment        GroupAssignment
	SessionTimeout    time.Duration
	HeartbeatInterval time.Duration
}

// GroupSummary describes a group in ListGroups.
type GroupSummary struct {
	Group      string
	State      string // GroupEmpty, GroupStable or GroupRebalancing
	Members    int
	Generation int32
}

// GroupMemberInfo describes one member in DescribeGroup.
type GroupMemberInfo struct {
	MemberID   string
	ClientID   string
	Assignment GroupAssignment // partitions the member holds now
}

// GroupPartitionLag is one partition of a group's topics in DescribeGroup.
type GroupPartitionLag struct {
	Topic           string
	TopicID         api.TopicID // the topic's current id
	Partition       int
	CommittedOffset int64 // -1 when the group has none
	LogEndOffset    uint64
	HighWatermark   uint64
	Lag             int64  // records left to read: ConsumerLag (HW - max(committed, log start))
	MemberID        string // holder in the current generation, "" if none
}

// GroupDescription is the answer to DescribeGroup.
type GroupDescription struct {
	Summary GroupSummary
	Members []GroupMemberInfo
	Offsets []GroupPartitionLag
}

// member is one group member. target is what the coordinator wants it to
// own; held is what it may be consuming: partitions sent to it and not yet
// confirmed released.
type member struct {
	id         string
	clientID   string
	topics     []string
	session    time.Duration
	deadline   time.Time
	generation int32 // the group generation last sent to this member
	target     map[tp]bool
	held       map[tp]bool
}

// group is one consumer group's membership. Its fields are guarded by mu,
// which is also held across a commit so that fencing and the write agree.
type group struct {
	mu         sync.Mutex
	name       string
	generation int32
	members    map[string]*member
	sig        string // sorted member ids at the last generation bump
	deleted    bool   // removed by DeleteGroup: look the group up again
}

// coordinator runs the groups of one engine. Assignment follows the
// broker-side model of Kafka's KIP-848: the coordinator computes a target
// assignment (balanced, sticky) and hands each member its target
// incrementally: a partition moving from A to B is removed from A's
// assignment first and given to B only once A has reported, in a
// heartbeat's owned list, that it released it, or A was removed. So no
// partition is held by two members at once, and members keep consuming
// the partitions that do not move.
type coordinator struct {
	e      *Engine
	now    func() time.Time
	mu     sync.Mutex
	groups map[string]*group
	reaper sync.Once
	// members counts the members of every group (maxMembers); changed
	// under the group's lock.
	members atomic.Int64
}

// coord returns the engine's coordinator, made on first use. It lives in
// the offset store, which the engine owns from Open to Close.
func (e *Engine) coord() *coordinator {
	s := e.offsets
	s.coordOnce.Do(func() {
		s.coord = &coordinator{e: e, now: e.opts.Now, groups: map[string]*group{}}
	})
	return s.coord
}

// startReaper runs, once, a goroutine that removes members whose session
// expired. It stops when the engine closes.
func (c *coordinator) startReaper() {
	c.reaper.Do(func() {
		go func() {
			t := time.NewTicker(MinSessionTimeout / 4)
			defer t.Stop()
			for {
				select {
				case <-c.e.closing:
					return
				case <-t.C:
					c.expire(c.now())
				}
			}
		}()
	})
}

// expire removes every member whose session ended before now.
func (c *coordinator) expire(now time.Time) {
	for _, g := range c.snapshot() {
		g.mu.Lock()
		changed := false
		for id, m := range g.members {
			if now.After(m.deadline) {
				c.e.log.Info("group member session expired", "group", g.name, "member", id, "session", m.session)
				c.removeMember(g, id)
				changed = true
			}
		}
		if changed {
			c.rebalance(g)
			c.dropIfUnused(g)
		}
		g.mu.Unlock()
	}
}

// removeMember removes member id from g, locked.
func (c *coordinator) removeMember(g *group, id string) {
	if _, ok := g.members[id]; ok {
		delete(g.members, id)
		c.members.Add(-1)
	}
}

// dropIfUnused forgets g, locked, once it has neither members nor
// committed offsets: such a group does not exist for ListGroups and
// DescribeGroup, and keeping it would let joins under ever new names
// hold memory after their members left. A later join makes it anew.
func (c *coordinator) dropIfUnused(g *group) {
	if len(g.members) > 0 || c.e.hasOffsets(g.name) {
		return
	}
	c.mu.Lock()
	if c.groups[g.name] == g {
		delete(c.groups, g.name)
	}
	c.mu.Unlock()
	g.deleted = true
}

func (c *coordinator) snapshot() []*group {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]*group, 0, len(c.groups))
	for _, g := range c.groups {
		out = append(out, g)
	}
	return out
}

// lock returns the group locked, creating it when create is set (nil
// when it does not exist). A group deleted meanwhile is looked up again.
func (c *coordinator) lock(name string, create bool) *group {
	for {
		g := c.get(name, create)
		if g == nil {
			return nil
		}
		g.mu.Lock()
		if !g.deleted {
			return g
		}
		g.mu.Unlock()
	}
}

// get returns the group, creating it when create is set.
func (c *coordinator) get(name string, create bool) *group {
	c.mu.Lock()
	defer c.mu.Unlock()
	g := c.groups[name]
	if g == nil && create {
		g = &group{name: name, members: map[string]*member{}}
		c.groups[name] = g
	}
	return g
}

func newMemberID() string {
	var b [12]byte
	rand.Read(b[:])
	return "m-" + hex.EncodeToString(b[:])
}

// clampSession applies the server bounds to a requested timeout (0: the
// default).
func clampSession(d time.Duration) time.Duration {
	if d <= 0 {
		return DefaultSessionTimeout
	}
	return min(max(d, MinSessionTimeout), MaxSessionTimeout)
}

// JoinGroup adds a member (memberID "") subscribed to topics, or updates
// the subscription of an existing one, and returns its assignment.
// sessionTimeout 0 means DefaultSessionTimeout; others are clamped to
// [MinSessionTimeout, MaxSessionTimeout]. Errors: INVALID_REQUEST (bad
// group id, no topics, too many members), UNKNOWN_TOPIC,
// FENCED_GENERATION when memberID is not a member (rejoin with ""). Group
// and client ids must be valid UTF-8 (INVALID_REQUEST otherwise).
func (e *Engine) JoinGroup(groupID, memberID, clientID string, topics []string, sessionTimeout time.Duration) (JoinResult, error) {
	if err := e.checkGroup(groupID); err != nil {
		return JoinResult{}, err
	}
	if err := validateID("member id", memberID); err != nil {
		return JoinResult{}, err
	}
	if err := validateID("client id", clientID); err != nil {
		return JoinResult{}, err
	}
	if len(topics) == 0 {
		return JoinResult{}, api.NewError(api.CodeInvalidRequest, "join of group %q names no topic", groupID)
	}
	for _, t := range topics {
		if _, err := e.topic(t); err != nil {
			return JoinResult{}, err
		}
	}
	c := e.coord()
	c.startReaper()
	g := c.lock(groupID, true)
	defer g.mu.Unlock()
	m := g.members[memberID]
	if memberID != "" && m == nil {
		return JoinResult{}, api.NewError(api.CodeFencedGeneration, "member %q is not in group %q; join again without a member id", memberID, groupID)
	}
	if m == nil {
		if len(g.members) >= maxGroupMembers {
			return JoinResult{}, api.NewError(api.CodeInvalidRequest, "group %q has %d members, the maximum", groupID, maxGroupMembers)
		}
		if c.members.Add(1) > maxMembers {
			c.members.Add(-1)
			c.dropIfUnused(g)
			return JoinResult{}, api.NewError(api.CodeThrottled, "the server has %d group members, the maximum over all groups; join again once members leave", maxMembers)
		}
		m = &member{id: newMemberID(), target: map[tp]bool{}, held: map[tp]bool{}}
		g.members[m.id] = m
	}
	m.clientID = clientID
	m.topics = sortedUnique(topics)
	m.session = clampSession(sessionTimeout)
	m.deadline = c.now().Add(m.session)
	c.rebalance(g)
	return c.answer(g, m), nil
}

// Heartbeat keeps a member alive, records the partitions it still owns
// (owned; nil means "unchanged") and returns its current assignment.
// Errors: FENCED_GENERATION when the member is unknown (its session
// expired or it left): it must drop its partitions and join again.
func (e *Engine) Heartbeat(groupID, memberID string, generation int32, owned GroupAssignment) (JoinResult, error) {
	if err := e.checkGroup(groupID); err != nil {
		return JoinResult{}, err
	}
	if err := validateID("member id", memberID); err != nil {
		return JoinResult{}, err
	}
	if n := owned.size(); n > MaxOwnedEntries {
		return JoinResult{}, api.NewError(api.CodeInvalidRequest, "owned list of %d topic entries and partitions: want at most %d", n, MaxOwnedEntries)
	}
	c := e.coord()
	g := c.lock(groupID, false)
	if g == nil {
		return JoinResult{}, api.NewError(api.CodeFencedGeneration, "group %q has no member %q; join again", groupID, memberID)
	}
	defer g.mu.Unlock()
	m := g.members[memberID]
	if m == nil {
		return JoinResult{}, api.NewError(api.CodeFencedGeneration, "group %q has no member %q; join again", groupID, memberID)
	}
	m.deadline = c.now().Add(m.session)
	if owned != nil {
		set := map[tp]bool{}
		for t, ps := range owned {
			for _, p := range ps {
				set[tp{t, p}] = true
			}
		}
		// A partition being revoked is released once the member no longer
		// reports it.
		for k := range m.held {
			if !m.target[k] && !set[k] {
				delete(m.held, k)
			}
		}
	}
	// Topics created or grown since the last change may add partitions.
	c.rebalance(g)
	return c.answer(g, m), nil
}

// LeaveGroup removes a member at once; its partitions go to the others at
// their next heartbeat. Leaving twice is not an error.
func (e *Engine) LeaveGroup(groupID, memberID string) error {
	if err := e.checkGroup(groupID); err != nil {
		return err
	}
	if err := validateID("member id", memberID); err != nil {
		return err
	}
	g := e.coord().lock(groupID, false)
	if g == nil {
		return nil
	}
	defer g.mu.Unlock()
	if _, ok := g.members[memberID]; ok {
		c := e.coord()
		c.removeMember(g, memberID)
		c.rebalance(g)
		c.dropIfUnused(g)
	}
	return nil
}

// answer builds a member's response: its target partitions that no other
// member holds, plus those it holds and keeps. Giving a partition marks
// it held.
func (c *coordinator) answer(g *group, m *member) JoinResult {
	heldByOther := map[tp]bool{}
	for _, o := range g.members {
		if o == m {
			continue
		}
		for k := range o.held {
			heldByOther[k] = true
		}
	}
	out := GroupAssignment{}
	for k := range m.target {
		if m.held[k] || !heldByOther[k] {
			m.held[k] = true
			out[k.Topic] = append(out[k.Topic], k.Partition)
		}
	}
	for _, ps := range out {
		sort.Ints(ps)
	}
	m.generation = g.generation
	return JoinResult{
		MemberID: m.id, Generation: g.generation, Assignment: out,
		SessionTimeout: m.session, HeartbeatInterval: heartbeatInterval(m.session),
	}
}

// heartbeatInterval is a third of the session timeout, so that two lost
// heartbeats do not end a session.
func heartbeatInterval(session time.Duration) time.Duration {
	return max(session/3, 10*time.Millisecond)
}

// rebalance recomputes the target assignment and bumps the generation
// when it or the membership changed. Called with g.mu held.
func (c *coordinator) rebalance(g *group) {
	byTopic := map[string][]*member{}
	for _, m := range g.members {
		for _, t := range m.topics {
			byTopic[t] = append(byTopic[t], m)
		}
	}
	next := map[*member]map[tp]bool{}
	for _, m := range g.members {
		next[m] = map[tp]bool{}
	}
	for t, ms := range byTopic {
		n := 0
		if tt, err := c.e.topic(t); err == nil {
			n = len(tt.parts())
		}
		assignTopic(t, n, ms, next)
	}
	changed := false
	for m, tgt := range next {
		if !sameSet(m.target, tgt) {
			changed = true
			m.target = tgt
		}
	}
	// Members joining or leaving also change the group.
	ids := make([]string, 0, len(g.members))
	for id := range g.members {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	sig := strings.Join(ids, ",")
	if changed || sig != g.sig {
		g.generation++
		g.sig = sig
	}
}

// assignTopic spreads n partitions of topic over ms, sticky: a member keeps
// its current target partitions up to its fair share (n/k, the first n%k
// members by current load get one more); the rest go to the least loaded.
func assignTopic(topic string, n int, ms []*member, next map[*member]map[tp]bool) {
	if n == 0 || len(ms) == 0 {
		return
	}
	sort.Slice(ms, func(i, j int) bool {
		ci, cj := countTopic(ms[i].target, topic), countTopic(ms[j].target, topic)
		if ci != cj {
			return ci > cj
		}
		return ms[i].id < ms[j].id
	})
	base, extra := n/len(ms), n%len(ms)
	quota := make([]int, len(ms))
	for i := range ms {
		quota[i] = base
		if i < extra {
			quota[i]++
		}
	}
	taken := make([]bool, n)
	count := make([]int, len(ms))
	for i, m := range ms {
		for p := 0; p < n && count[i] < quota[i]; p++ {
			if m.target[tp{topic, p}] && !taken[p] {
				taken[p] = true
				next[m][tp{topic, p}] = true
				count[i]++
			}
		}
	}
	i := 0
	for p := 0; p < n; p++ {
		if taken[p] {
			continue
		}
		for count[i] >= quota[i] {
			i = (i + 1) % len(ms)
		}
		next[ms[i]][tp{topic, p}] = true
		count[i]++
	}
}

func countTopic(s map[tp]bool, topic string) int {
	n := 0
	for k := range s {
		if k.Topic == topic {
			n++
		}
	}
	return n
}

func sameSet(a, b map[tp]bool) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if !b[k] {
			return false
		}
	}
	return true
}

func sortedUnique(in []string) []string {
	out := append([]string(nil), in...)
	sort.Strings(out)
	j := 0
	for i, s := range out {
		if i == 0 || s != out[j-1] {
			out[j] = s
			j++
		}
	}
	return out[:j]
}
