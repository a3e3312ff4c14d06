package sim

import (
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"time"
)

// Rule names a replication rule the simulator breaks on purpose, to show
// that its checker finds the loss that follows. RuleNone runs the rules
// of package replica unchanged.
type Rule uint8

const (
	// RuleNone breaks nothing.
	RuleNone Rule = iota
	// BreakElectOutsideISR: the controller elects the first eligible
	// replica whether or not it is in the ISR (an unclean election).
	BreakElectOutsideISR
	// BreakLeaderAloneHW: the leader's high watermark is its own durable
	// log end offset, as if it were the only replica.
	BreakLeaderAloneHW
	// BreakSkipTruncation: a follower of a new epoch fetches without the
	// offsetForLeaderEpoch exchange, keeping a divergent suffix.
	BreakSkipTruncation
	// BreakFollowerHWUncapped: a follower takes the leader's high
	// watermark without capping it by its own log end offset
	// (KAFKA-14704).
	BreakFollowerHWUncapped
	// BreakReadAboveHW: a leader serves consumers up to its log end
	// offset, as if it were the high watermark.
	BreakReadAboveHW
	// BreakResumeEpoch: a leader restarted after a crash leads its old
	// epoch again until the controller notices, instead of waiting for a
	// new one.
	BreakResumeEpoch
	// BreakTruncationOneRound: a follower stops truncating once a round
	// cuts nothing, instead of once replica.TruncationComplete.
	BreakTruncationOneRound
)

// ruleNames are the names of the rules, indexed by Rule.
var ruleNames = [...]string{
	RuleNone:                "none",
	BreakElectOutsideISR:    "elect-outside-isr",
	BreakLeaderAloneHW:      "leader-alone-hw",
	BreakSkipTruncation:     "skip-truncation",
	BreakFollowerHWUncapped: "follower-hw-uncapped",
	BreakReadAboveHW:        "read-above-hw",
	BreakResumeEpoch:        "resume-epoch",
	BreakTruncationOneRound: "truncation-one-round",
}

// String returns the rule's name, as cmd/sq-sim's -break flag takes it
// ("none", "elect-outside-isr", ...).
func (r Rule) String() string {
	if int(r) < len(ruleNames) {
		return ruleNames[r]
	}
	return fmt.Sprintf("rule(%d)", uint8(r))
}

// RuleNames returns the name of every rule, RuleNone first.
func RuleNames() []string { return append([]string(nil), ruleNames[:]...) }

// ParseRule returns the rule named name (Rule.String); an unknown name is
// an error listing the names.
func ParseRule(name string) (Rule, error) {
	for r, n := range ruleNames {
		if n == name {
			return Rule(r), nil
		}
	}
	return 0, fmt.Errorf("sim: unknown rule %q (want one of %s)", name, strings.Join(ruleNames[:], ", "))
}

// Config sets up a simulation. The zero value of each field but Seed has
// a default (see New).
type Config struct {
	// Seed drives every random choice: the same seed and Config replay
	// the same run, step for step.
	Seed uint64
	// Nodes is the number of replicas of the partition (default 3).
	Nodes int
	// MinISR is min.insync.replicas (default 2, or 1 with fewer than 3
	// nodes).
	MinISR int
	// LagMax is replica.lag.time.max.ms in simulated time (default
	// 500ms).
	LagMax time.Duration
	// Break breaks one rule on purpose (default RuleNone).
	Break Rule
	// Trace, when set, receives one line per step and per delivered
	// message.
	Trace io.Writer
}

// Simulated timing, in simulated time. Each step advances the clock by
// 1 to stepMaxMs; a message takes 1 to delayMaxMs, or with
// a chance of longDelayPermille per mille, up to longDelayMaxMs.
const (
	stepMaxMs         = 10
	delayMaxMs        = 20
	longDelayPermille = 20
	longDelayMaxMs    = 500
	dropPermille      = 30 // a message lost at send
	dupPermille       = 10 // a message delivered twice
	requestTimeout    = 100 * time.Millisecond
	proposalResend    = 200 * time.Millisecond
	fetchBatchesMax   = 8 // batches per fetch response
)

// Failure is an invariant violated at a step of a seeded run; replaying
// the seed with the same Config reproduces it.
type Failure struct {
	Seed      uint64
	Step      int
	Invariant string
}

// Error returns "seed S failed at step N: <invariant>".
func (f *Failure) Error() string {
	return fmt.Sprintf("seed %d failed at step %d: %s", f.Seed, f.Step, f.Invariant)
}

// Stats counts what a run exercised.
type Stats struct {
	Steps       int
	Elections   int // leader changes committed (leaderless ones included)
	ISRChanges  int // set-isr commands committed
	Truncations int // follower truncations of a divergent or uncommitted suffix
	Crashes     int
	Partitions  int
	Produced    int // values appended by a leader
	Acked       int // acknowledgements received by the producer
	Consumed    int // values read by consumers
	Delivered   int // messages delivered
	InFlightMax int // the most messages in flight at once
}

// meta is the partition's metadata as the controller commits it.
type meta struct {
	Version uint64 // bumped by every committed change
	Epoch   uint32
	Leader  string // "" while leaderless
	ISR     []string
}

func (m meta) clone() meta { m.ISR = slices.Clone(m.ISR); return m }

func (m meta) String() string {
	return fmt.Sprintf("v%d epoch=%d leader=%q isr=%v", m.Version, m.Epoch, m.Leader, m.ISR)
}

// consumer reads the partition from a node that leads it, from pos up to
// that node's high watermark.
type consumer struct {
	pos    uint64
	lastHW uint64
}

// Sim is one simulated partition replicated over Config.Nodes nodes, a
// controller, producers and consumers, driven step by step.
type Sim struct {
	cfg   Config
	rng   *rand.Rand
	now   time.Time
	step  int
	ids   []string
	nodes []*node
	net   network
	ctl   struct {
		meta      meta
		leaderInc int // the leader's incarnation when elected
	}
	nextValue uint64
	consumers []*consumer
	stats     Stats
	chk       checker
}

// New returns a simulation in its initial state: node n1 leads epoch 1
// with every node in the ISR, all logs empty. Defaults: 3 nodes, MinISR
// 2 (1 below 3 nodes), LagMax 500ms.
func New(cfg Config) *Sim {
	if cfg.Nodes <= 0 {
		cfg.Nodes = 3
	}
	if cfg.MinISR <= 0 {
		cfg.MinISR = 2
		if cfg.Nodes < 3 {
			cfg.MinISR = 1
		}
	}
	if cfg.LagMax <= 0 {
		cfg.LagMax = 500 * time.Millisecond
	}
	s := &Sim{
		cfg:       cfg,
		rng:       rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)),
		now:       time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC),
		net:       network{side: map[string]int{}},
		nextValue: 1,
		consumers: []*consumer{{}, {}},
	}
	for i := range cfg.Nodes {
		id := fmt.Sprintf("n%d", i+1)
		s.ids = append(s.ids, id)
		// A coin flip: sync every batch, or at sync steps (the interval
		// policy).
		s.nodes = append(s.nodes, &node{id: id, i: i, up: true, everyBatch: s.rng.IntN(2) == 0})
	}
	s.chk = newChecker(cfg.Nodes)
	s.ctl.meta = meta{Version: 1, Epoch: 1, Leader: s.ids[0], ISR: slices.Clone(s.ids)}
	for _, n := range s.nodes {
		n.meta = s.ctl.meta.clone()
		s.applyRole(n)
	}
	return s
}

// Stats returns the counts of the run so far.
func (s *Sim) Stats() Stats { st := s.stats; st.Steps = s.step; return st }

// Run takes steps until one violates an invariant (a *Failure) or steps
// were taken.
func (s *Sim) Run(steps int) error {
	for range steps {
		if err := s.Step(); err != nil {
			return err
		}
	}
	return nil
}

// Step advances the clock, takes one random action (deliver a message,
// a node's tick, the controller's tick, a produce, a consume, a sync, a
// crash or restart, a network partition or heal), then checks every
// invariant. It returns a *Failure naming the first invariant violated.
func (s *Sim) Step() error {
	s.step++
	s.now = s.now.Add(time.Duration(1+s.rng.IntN(stepMaxMs)) * time.Millisecond)
	s.act()
	s.chk.check(s)
	if s.chk.failed != "" {
		return &Failure{Seed: s.cfg.Seed, Step: s.step, Invariant: s.chk.failed}
	}
	return nil
}

func (s *Sim) tracef(format string, args ...any) {
	if s.cfg.Trace != nil {
		fmt.Fprintf(s.cfg.Trace, "step %d +%s: %s\n", s.step, s.now.Sub(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)), fmt.Sprintf(format, args...))
	}
}

// The weights of a step's actions: how many steps in weightTotal take
// each.
const (
	weightDeliver     = 570 // one due message (else a node's tick)
	weightTick        = 130
	weightController  = 60
	weightProduce     = 100
	weightConsume     = 60
	weightSync        = 40
	weightCrash       = 6
	weightPartition   = 14
	weightHealRestart = 20 // a heal while partitioned, half the time; else a restart
	weightTotal       = weightDeliver + weightTick + weightController + weightProduce +
		weightConsume + weightSync + weightCrash + weightPartition + weightHealRestart
)

// act takes one action, chosen with the weights above.
func (s *Sim) act() {
	r := s.rng.IntN(weightTotal)
	next := func(w int) bool {
		if r < w {
			return true
		}
		r -= w
		return false
	}
	switch {
	case next(weightDeliver):
		if !s.deliver() {
			s.tick(s.nodes[s.rng.IntN(len(s.nodes))])
		}
	case next(weightTick):
		s.tick(s.nodes[s.rng.IntN(len(s.nodes))])
	case next(weightController):
		s.controllerTick()
	case next(weightProduce):
		s.produce()
	case next(weightConsume):
		s.consume(s.consumers[s.rng.IntN(len(s.consumers))])
	case next(weightSync):
		s.sync(s.nodes[s.rng.IntN(len(s.nodes))])
	case next(weightCrash):
		s.crash(s.nodes[s.rng.IntN(len(s.nodes))])
	case next(weightPartition):
		s.partition()
	default:
		if s.net.partitioned() && s.rng.IntN(2) == 0 {
			s.heal()
		} else {
			s.restart()
		}
	}
}

// send puts m in flight, or loses it (dropPermille), or duplicates it.
func (s *Sim) send(m *message) {
	if s.rng.IntN(1000) < dropPermille {
		s.tracef("drop %s", m)
		return
	}
	if n := s.node(m.to); n != nil {
		m.toInc = n.inc
	}
	m.deliverAt = s.now.Add(s.delay())
	s.net.inflight = append(s.net.inflight, m)
	s.stats.InFlightMax = max(s.stats.InFlightMax, len(s.net.inflight))
	if s.rng.IntN(1000) < dupPermille {
		d := *m
		d.deliverAt = s.now.Add(s.delay())
		s.net.inflight = append(s.net.inflight, &d)
	}
}

func (s *Sim) delay() time.Duration {
	if s.rng.IntN(1000) < longDelayPermille {
		return time.Duration(1+s.rng.IntN(longDelayMaxMs)) * time.Millisecond
	}
	return time.Duration(1+s.rng.IntN(delayMaxMs)) * time.Millisecond
}

// deliver delivers one message among those due, chosen at random (so
// messages overtake each other); false when none is due.
func (s *Sim) deliver() bool {
	var due []int
	for i, m := range s.net.inflight {
		if !m.deliverAt.After(s.now) {
			due = append(due, i)
		}
	}
	if len(due) == 0 {
		return false
	}
	i := due[s.rng.IntN(len(due))]
	m := s.net.inflight[i]
	s.net.inflight = slices.Delete(s.net.inflight, i, i+1)
	if !s.net.reachable(m.from, m.to) {
		s.tracef("lost across the partition: %s", m)
		return true
	}
	switch m.to {
	case ctlID:
		s.tracef("deliver %s", m)
		s.stats.Delivered++
		s.handlePropose(m)
		return true
	case clientID:
		s.tracef("deliver %s", m)
		s.stats.Delivered++
		s.handleAck(m)
		return true
	}
	n := s.node(m.to)
	if !n.up || n.inc != m.toInc {
		s.tracef("lost, %s crashed: %s", n.id, m)
		return true
	}
	s.tracef("deliver %s", m)
	s.stats.Delivered++
	switch m.kind {
	case msgFetch:
		s.handleFetch(n, m)
	case msgFetchResp:
		s.handleFetchResp(n, m)
	case msgEpochReq:
		s.handleEpochReq(n, m)
	case msgEpochResp:
		s.handleEpochResp(n, m)
	case msgMeta:
		s.applyMeta(n, m.meta)
	case msgProduce:
		s.handleProduce(n, m)
	}
	return true
}

func (s *Sim) node(id string) *node {
	for _, n := range s.nodes {
		if n.id == id {
			return n
		}
	}
	return nil
}

// partition splits the endpoints: either one node (the leader half the
// time) alone, the controller on the other side, or a minority of the
// nodes apart from a majority that keeps the controller.
func (s *Sim) partition() {
	s.stats.Partitions++
	clear(s.net.side)
	if s.rng.IntN(2) == 0 {
		victim := s.ids[s.rng.IntN(len(s.ids))]
		if l := s.ctl.meta.Leader; l != "" && s.rng.IntN(2) == 0 {
			victim = l
		}
		s.net.side[victim] = 1
		s.tracef("partition: %s isolated", victim)
		return
	}
	order := s.rng.Perm(len(s.ids))
	minority := s.rng.IntN((len(s.ids)-1)/2) + 1
	var apart []string
	for _, i := range order[:minority] {
		s.net.side[s.ids[i]] = 1
		apart = append(apart, s.ids[i])
	}
	s.tracef("partition: %v apart from the majority and the controller", apart)
}

func (s *Sim) heal() {
	clear(s.net.side)
	s.tracef("heal")
}

// controllerTick elects a leader when the current one is not eligible
// (crashed, restarted since its election, or cut off from the
// controller), then sends the metadata to every node after a change, else
// to one node at random (a node that missed an update catches up).
func (s *Sim) controllerTick() {
	md := &s.ctl.meta
	to := []string{s.ids[s.rng.IntN(len(s.ids))]}
	if l := md.Leader; l == "" || !s.eligible(l) || s.node(l).inc != s.ctl.leaderInc {
		if s.elect() {
			to = s.ids
		}
	}
	s.tracef("controller: %s", md)
	s.sendMeta(to...)
}

// sendMeta sends the metadata to the nodes named.
func (s *Sim) sendMeta(ids ...string) {
	for _, id := range ids {
		s.send(&message{kind: msgMeta, from: ctlID, to: id, meta: s.ctl.meta.clone()})
	}
}

func (s *Sim) eligible(id string) bool {
	n := s.node(id)
	return n.up && s.net.reachable(ctlID, id)
}

// elect commits a new leader chosen by replica.ChooseLeader (or
// leaderless), with the next epoch; the old leader leaves the ISR unless
// that would empty it. It reports whether the metadata changed.
func (s *Sim) elect() bool {
	md := &s.ctl.meta
	old := md.Leader
	leader, clean, ok := chooseLeader(s, md.ISR)
	if !ok && old == "" {
		return false
	}
	isr := slices.Clone(md.ISR)
	if old != "" && old != leader && len(isr) > 1 {
		isr = slices.DeleteFunc(isr, func(id string) bool { return id == old })
	}
	if ok && !clean {
		isr = []string{leader}
	}
	if ok && !slices.Contains(isr, leader) { // only under BreakElectOutsideISR
		isr = append(isr, leader)
	}
	md.Version++
	md.Epoch++
	md.Leader = leader
	md.ISR = isr
	if ok {
		s.ctl.leaderInc = s.node(leader).inc
	}
	s.stats.Elections++
	s.tracef("election: %s", md)
	return true
}

// handlePropose commits a set-isr proposal from the leader of the
// current epoch based on the current metadata version, and answers with
// the metadata either way.
func (s *Sim) handlePropose(m *message) {
	md := &s.ctl.meta
	if m.epoch == md.Epoch && m.from == md.Leader && m.base == md.Version {
		md.ISR = slices.Clone(m.isr)
		md.Version++
		s.stats.ISRChanges++
		s.tracef("set-isr committed: %s", md)
		s.sendMeta(s.ids...)
		return
	}
	s.sendMeta(m.from)
}

// produce sends the next value to the controller's leader, or one time
// in five to a random node (a client with stale metadata).
func (s *Sim) produce() {
	to := s.ctl.meta.Leader
	if to == "" || s.rng.IntN(5) == 0 {
		to = s.ids[s.rng.IntN(len(s.ids))]
	}
	v := s.nextValue
	s.nextValue++
	s.send(&message{kind: msgProduce, from: clientID, to: to, value: v})
}

// consume reads from a node that believes it leads (the controller's
// leader when it does, else any), from the consumer's position up to that
// node's high watermark, and checks the read.
func (s *Sim) consume(c *consumer) {
	var leaders []*node
	for _, n := range s.nodes {
		if n.up && n.role == roleLeader {
			leaders = append(leaders, n)
		}
	}
	if len(leaders) == 0 {
		return
	}
	n := leaders[s.rng.IntN(len(leaders))]
	if l := s.node(s.ctl.meta.Leader); l != nil && l.up && l.role == roleLeader && s.rng.IntN(4) != 0 {
		n = l
	}
	start, batches, hw, ok := n.read(c.pos, s.cfg.Break == BreakReadAboveHW)
	if !ok {
		return // OFFSET_NOT_AVAILABLE: the position is above this node's HW
	}
	s.tracef("consume from %s: [%d, %d)", n.id, start, hw)
	s.chk.consumed(s, c, n.id, start, batches, hw)
}

func (s *Sim) restart() {
	var down []*node
	for _, n := range s.nodes {
		if !n.up {
			down = append(down, n)
		}
	}
	if len(down) == 0 {
		return
	}
	s.restartNode(down[s.rng.IntN(len(down))])
}
