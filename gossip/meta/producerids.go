package meta

import (
	"math"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/engine"
)

// ProducerIDBlock is how many producer ids one allocate-producer-ids
// command reserves for the node that proposed it (engine.ProducerIDBlock,
// as a single node reserves them).
const ProducerIDBlock = engine.ProducerIDBlock

// applyAllocateProducerIDs reserves the block [NextProducerID,
// NextProducerID+ProducerIDBlock) for node c.NodeID: Result.ProducerIDStart
// is its first id and State.NextProducerID moves past it. Every node
// applies the same commands in the same order, so no two blocks overlap
// and no id is handed out twice, whatever node asked. INVALID_REQUEST for
// a node that is not registered, or when the ids are exhausted.
func (s *State) applyAllocateProducerIDs(c Command) Result {
	if _, ok := s.Nodes[c.NodeID]; !ok {
		return refused(api.CodeInvalidRequest, "allocate-producer-ids: node %q is not a member of the cluster", c.NodeID)
	}
	if s.NextProducerID < 0 || s.NextProducerID > math.MaxInt64-ProducerIDBlock {
		return refused(api.CodeInvalidRequest, "allocate-producer-ids: producer ids exhausted (next %d)", s.NextProducerID)
	}
	start := s.NextProducerID
	s.NextProducerID += ProducerIDBlock
	return Result{ProducerIDStart: start}
}
