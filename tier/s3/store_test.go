package s3

import (
	"testing"

	"github.com/seedqueue/sq/tier/tiertest"
)

func TestStoreConformance(t *testing.T) {
	f := newFake(t)
	tiertest.Run(t, f.store(t, nil))
}
