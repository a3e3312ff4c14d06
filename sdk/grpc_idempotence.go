package sdk

import (
	"context"
	"sync"
	"time"

	"github.com/seedqueue/sq/api/sqv1"
)

// grpcRuns is a GrpcProducer's idempotence (docs/architecture.md §4.2,
// the gRPC producer): the identity shared with idempotence, and per
// partition a run of sequences and a turn. A partition has one request in
// flight at a time (Kafka allows 5 with a window the leader reorders; one
// keeps the sequences in the order the leader sees them without a
// window): the request holds the partition's turn from its stamp until
// its last attempt ends, retries and backoff included, so concurrent
// SendBatch calls to one partition take turns. A partition used once
// keeps its run for the producer's life (one small entry per partition).
type grpcRuns struct {
	idem *idempotence

	mu   sync.Mutex
	runs map[topicPartition]*grpcSeq
}

// grpcSeq is one partition's run: seq is touched only by the holder of
// turn.
type grpcSeq struct {
	turn chan struct{} // one slot: full while a request of the partition is in flight
	seq  partSeq
}

// take waits for k's turn until ctx ends, the producer closes (closed) or
// deadline passes (expired: the delivery timeout's error). A nil
// receiver (idempotence off) returns a nil run, whose release does
// nothing.
func (g *grpcRuns) take(ctx, closed context.Context, k topicPartition, deadline time.Time, expired func() error) (*grpcSeq, error) {
	if g == nil {
		return nil, nil
	}
	g.mu.Lock()
	r := g.runs[k]
	if r == nil {
		r = &grpcSeq{turn: make(chan struct{}, 1)}
		g.runs[k] = r
	}
	g.mu.Unlock()
	select {
	case r.turn <- struct{}{}:
		return r, nil
	default:
	}
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case r.turn <- struct{}{}:
		return r, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-closed.Done():
		return nil, ErrClosed
	case <-t.C:
		return nil, expired()
	}
}

// release ends the holder's turn.
func (r *grpcSeq) release() {
	if r != nil {
		<-r.turn
	}
}

// stamp gives req its producer id, epoch and base sequence before an
// attempt on msg, the Messaging client of the partition's leader (at
// addr). A stamped request keeps its stamp: a retry carries the same
// sequence, so a leader that stored an earlier attempt answers with its
// offsets. An unstamped one takes the run's next sequence, first asking
// the leader for an identity when the run has none or broke. With
// idempotence off (r nil, or the server grants no ids) req stays
// unstamped. It fails with a *producerIDError (a failed attempt, retried
// as its cause is) or the fencing error.
func (p *GrpcProducer) stamp(ctx context.Context, r *grpcSeq, req *sqv1.PublishRequest, msg sqv1.MessagingClient, addr string) error {
	if r == nil {
		return nil
	}
	m := p.runs.idem
	if err := m.fencedErr(); err != nil {
		return err
	}
	if req.Idempotent {
		return nil
	}
	ps := &r.seq
	if ps.id.zero() || ps.broken {
		ask := func(ctx context.Context) (producerID, error) {
			res, err := unary(ctx, p.cfg.RequestTimeout, msg.InitProducerId, &sqv1.InitProducerIdRequest{})
			if err != nil {
				return producerID{}, err
			}
			return producerID{id: res.ProducerId, epoch: int16(res.ProducerEpoch)}, nil
		}
		id, ok, err := m.identity(ctx, ps.id, idSource{addr: addr, ask: ask})
		if err != nil || !ok {
			return err
		}
		*ps = partSeq{id: id}
	}
	req.Idempotent, req.ProducerId, req.ProducerEpoch, req.BaseSequence = true, ps.id.id, int32(ps.id.epoch), ps.next
	ps.next = nextSequence(ps.next, len(req.Records))
	return nil
}

// broke ends req's attempts on its partition's run r without an
// acknowledgement (err: it failed for good, or its records move to
// another partition): a request that carried the run's identity leaves
// a hole in its sequences, so the partition's next request starts a fresh
// identity. The error returned is idempotence's refusal of err.
func (p *GrpcProducer) broke(r *grpcSeq, k topicPartition, req *sqv1.PublishRequest, err error) error {
	if r == nil || !req.Idempotent {
		return err
	}
	pid := producerID{id: req.ProducerId, epoch: int16(req.ProducerEpoch)}
	if pid == r.seq.id {
		r.seq.broken = true
	}
	return p.runs.idem.refusal(k, pid, req.BaseSequence, err)
}
