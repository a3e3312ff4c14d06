package engine

import (
	"testing"

	"github.com/seedqueue/sq/internal/testutil"
	"github.com/seedqueue/sq/ring"
)

func forEachBackend(t *testing.T, fn func(t *testing.T, be ring.Backend)) {
	testutil.ForEachBackend(t, fn)
}
