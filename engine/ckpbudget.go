package engine

import (
	"sync"
	"time"
)

// checkpointsPerSec is the engine-wide rate of periodic recovery-point
// checkpoints (checkpointBudget): with up to checkpointsPerSec ×
// checkpointInterval partitions (1,000) each written to still checkpoints
// at every tick; with more, each checkpoints less often. Each checkpoint
// costs about three fsyncs (the time index, the recovery-point file, its
// directory), so 10,000 partitions checkpointing every 5 s would ask the
// disk for some 6,000 fsyncs per second, more than the publishes need.
const checkpointsPerSec = 200

// checkpointBudget is a token bucket shared by the partitions of an
// engine: take grants a periodic checkpoint while tokens remain, refilled
// at perSec per second up to one second's worth. A nil budget grants
// every checkpoint. Safe for concurrent use.
type checkpointBudget struct {
	mu     sync.Mutex
	perSec float64
	tokens float64
	last   time.Time
	now    func() time.Time // time.Now; tests set a clock
}

// newCheckpointBudget returns a budget of perSec checkpoints per second
// (> 0), full.
func newCheckpointBudget(perSec int) *checkpointBudget {
	return &checkpointBudget{perSec: float64(perSec), tokens: float64(perSec), last: time.Now(), now: time.Now}
}

// take reports whether a periodic checkpoint may be written now, and
// counts it when so.
func (b *checkpointBudget) take() bool {
	if b == nil {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	b.tokens = min(b.perSec, b.tokens+now.Sub(b.last).Seconds()*b.perSec)
	b.last = now
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}
