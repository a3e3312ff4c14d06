package engine

import (
	"testing"
	"time"
)

// TestCheckpointBudget: a full budget of 3 per second grants 3 periodic
// checkpoints at once and refuses the next; a third of a second later (on
// a test clock) it grants one more, then refuses; a nil budget grants
// every one.
func TestCheckpointBudget(t *testing.T) {
	b := newCheckpointBudget(3)
	clock := b.last
	b.now = func() time.Time { return clock }
	for i := range 3 {
		if !b.take() {
			t.Fatalf("take %d of a full budget of 3 refused", i+1)
		}
	}
	if b.take() {
		t.Fatal("a 4th take right after 3 of a budget of 3 per second granted")
	}
	clock = clock.Add(time.Second/3 + time.Millisecond)
	if !b.take() || b.take() {
		t.Fatal("a third of a second after the budget ran out: want one take granted, the next refused")
	}
	var none *checkpointBudget
	for range 1000 {
		if !none.take() {
			t.Fatal("a nil budget refused a checkpoint")
		}
	}
}
