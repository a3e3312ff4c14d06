package sdk

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/seedqueue/sq/api"
)

// ErrProducerFenced is wrapped by the error of every record of a Producer
// (or BatchProducer, or GrpcProducer) after a partition's leader refused
// one of its batches with INVALID_PRODUCER_EPOCH: a newer epoch of its producer id
// exists, so this producer may not write any more (KIP-98's fencing). Make
// a new producer to go on.
var ErrProducerFenced = errors.New("sdk: idempotent producer fenced")

// producerID is an idempotent producer identity granted by the server
// (initProducerId): the id and epoch stamped on every batch.
type producerID struct {
	id    int64
	epoch int16
}

// zero reports whether p is no identity (not granted yet).
func (p producerID) zero() bool { return p == producerID{} }

// idempotence grants a producer its identities (docs/architecture.md
// §4.2). Every partition starts with the shared identity, obtained at the
// first publish from the node that publish goes to (any node grants ids,
// and that one answers if the publish can succeed); a partition whose run of
// sequences broke (a batch that carried a sequence failed for good, or
// moved to another partition) takes a fresh identity of its own, whose
// sequences start at 0 again. A server that does not serve initProducerId
// turns idempotence off for the producer's life, with one warning.
// Producer and GrpcProducer each hold one.
type idempotence struct {
	logger *slog.Logger

	mu       sync.Mutex
	shared   producerID
	disabled bool          // the server does not grant ids: batches carry none
	fenced   error         // wraps ErrProducerFenced once a leader fenced the producer
	pending  chan struct{} // closed when the shared request in flight ends
}

// producerIDError is a failure to obtain a producer id from a partition's
// leader, the failed attempt of the batch that needed it (handled as a
// failed publish to that leader: retried as its cause is).
type producerIDError struct{ err error }

func (e *producerIDError) Error() string {
	return fmt.Sprintf("sdk: obtain an idempotent producer id: %v", e.err)
}

func (e *producerIDError) Unwrap() error { return e.err }

// idSource asks one node, the partition's leader, for a new producer id:
// over Cap'n Proto (Client.initProducerID) or gRPC (InitProducerId).
type idSource struct {
	addr string // for the log
	ask  func(context.Context) (producerID, error)
}

// identity returns the identity a partition that holds old (zero: none
// yet) is to stamp from now on: the shared one for a partition without
// one, else a fresh one, asked of src (the partition's leader). ok is false
// when idempotence is off (the server does not serve initProducerId). The
// error is that of the request (a *producerIDError), or the fencing error.
func (m *idempotence) identity(ctx context.Context, old producerID, src idSource) (producerID, bool, error) {
	for {
		m.mu.Lock()
		switch {
		case m.fenced != nil:
			err := m.fenced
			m.mu.Unlock()
			return producerID{}, false, err
		case m.disabled:
			m.mu.Unlock()
			return producerID{}, false, nil
		case !old.zero():
			m.mu.Unlock()
			return m.request(ctx, src)
		case !m.shared.zero():
			id := m.shared
			m.mu.Unlock()
			return id, true, nil
		case m.pending != nil:
			ch := m.pending
			m.mu.Unlock()
			select {
			case <-ch:
				continue
			case <-ctx.Done():
				return producerID{}, false, &producerIDError{err: ctx.Err()}
			}
		}
		m.pending = make(chan struct{})
		m.mu.Unlock()
		id, ok, err := m.request(ctx, src)
		m.mu.Lock()
		if err == nil && ok {
			m.shared = id
		}
		close(m.pending)
		m.pending = nil
		m.mu.Unlock()
		return id, ok, err
	}
}

// request asks src's server for a new producer id. A server that does not
// know the request (INVALID_REQUEST, UNSUPPORTED_VERSION, or gRPC's
// Unimplemented) turns idempotence off.
func (m *idempotence) request(ctx context.Context, src idSource) (producerID, bool, error) {
	id, err := src.ask(ctx)
	if errors.Is(err, api.ErrInvalidRequest) || errors.Is(err, api.ErrUnsupportedVersion) || status.Code(err) == codes.Unimplemented {
		m.mu.Lock()
		first := !m.disabled
		m.disabled = true
		m.mu.Unlock()
		if first {
			m.logger.Warn("sdk: the server does not grant idempotent producer ids; producing without idempotence (a retried batch may be stored twice)",
				"addr", src.addr, "err", err)
		}
		return producerID{}, false, nil
	}
	if err != nil {
		return producerID{}, false, &producerIDError{err: err}
	}
	m.logger.Debug("sdk: idempotent producer id granted", "producerId", id.id, "epoch", id.epoch, "addr", src.addr)
	return id, true, nil
}

// fence records that a leader refused the producer's epoch: every later
// batch fails with err.
func (m *idempotence) fence(err error) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fenced == nil {
		m.fenced = fmt.Errorf("%w: a partition's leader refused its epoch (a newer producer with its id exists): %w", ErrProducerFenced, err)
		m.logger.Error("sdk: idempotent producer fenced; every later record fails", "err", err)
	}
	return m.fenced
}

// InitProducerID asks the server for a new idempotent producer id and its
// epoch (KIP-98; docs/cluster.md, Producer ids), for a caller that stamps
// its own batches (batch.Builder.SetProducer) and sends them with
// Publish: it counts a sequence per partition from 0 (a batch of n
// records at s is followed by one at s+n, wrapping from 2^31-1 to 0) and
// retries a batch whose outcome is unknown with the same bytes, which the
// partition's leader then stores once. Errors: INVALID_REQUEST or
// UNSUPPORTED_VERSION from a server that does not grant ids, NO_QUORUM
// (retriable) from a cluster that cannot allocate them now, a connection
// error.
func (c *Client) InitProducerID(ctx context.Context) (id int64, epoch int16, err error) {
	p, err := c.initProducerID(ctx)
	return p.id, p.epoch, err
}

// initProducerID asks the server for a new idempotent producer id.
func (c *Client) initProducerID(ctx context.Context) (producerID, error) {
	r, err := c.roundTrip(ctx, 0, func(f api.Frame) error {
		_, err := f.NewInitProducerIdRequest()
		return err
	}, nil, 0)
	if err != nil {
		return producerID{}, err
	}
	if err := expect(r.f, api.Frame_Which_initProducerIdResponse); err != nil {
		return producerID{}, err
	}
	resp, err := r.f.InitProducerIdResponse()
	if err != nil {
		return producerID{}, err
	}
	if err := respErr(resp.Error()); err != nil {
		return producerID{}, err
	}
	return producerID{id: resp.ProducerId(), epoch: resp.ProducerEpoch()}, nil
}

// partSeq is a partition's run of sequences: the identity its batches
// carry and the sequence of the next one. It is touched only by the
// partition's goroutine.
type partSeq struct {
	id     producerID
	next   int32
	broken bool // a batch of the run failed for good or moved away: the next batch starts a fresh identity
}

// stamp gives f's batch its producer id, epoch and base sequence before
// it is sent, in the order the partition's batches are first sent:
//   - a batch that carries the partition's current identity keeps its
//     sequence (a retry, deduplicated by the leader when the first
//     attempt was stored);
//   - so does a batch that may have been stored under an older identity
//     (its outcome unknown): only its own sequence can tell the leader;
//   - any other batch takes the next sequence of the partition's current
//     identity, first obtaining a fresh identity when the run broke.
//
// It fails with a *producerIDError when no identity could be obtained
// from c, the partition's leader, or with the fencing error.
func (w *window) stamp(ctx context.Context, f *flight, c *Client) error {
	m := w.pl.p.idem
	if m == nil {
		return nil
	}
	if fenced := m.fencedErr(); fenced != nil {
		return fenced
	}
	ps := &w.pp.seq
	if !f.pid.zero() && (f.maybeStored || (f.pid == ps.id && !ps.broken)) {
		return nil
	}
	if ps.id.zero() || ps.broken {
		id, ok, err := m.identity(ctx, ps.id, idSource{addr: c.cfg.Addr, ask: c.initProducerID})
		if err != nil || !ok {
			return err
		}
		*ps = partSeq{id: id}
	}
	f.pid, f.seq = ps.id, ps.next
	ps.next = nextSequence(ps.next, len(f.b.msgs))
	setProducer(f.data, f.pid, f.seq)
	return nil
}

// nextSequence is the sequence after a batch of n records at seq: it
// wraps from math.MaxInt32 to 0, as Kafka's.
func nextSequence(seq int32, n int) int32 {
	s := int64(seq) + int64(n)
	if s > math.MaxInt32 {
		s -= math.MaxInt32 + 1
	}
	return int32(s)
}

// Offsets of the producer fields in a batch header (api/batch's format,
// docs/architecture.md §3.2); the CRC covers them.
const (
	offProducerID    = 43
	offProducerEpoch = 51
	offBaseSequence  = 53
	offCRC           = 17
)

// setProducer writes id and seq into the header of the encoded batch b
// and updates its CRC (patchHeader: without a pass over the records).
func setProducer(b []byte, id producerID, seq int32) {
	var f [offBaseSequence + 4 - offProducerID]byte
	le := binary.LittleEndian
	le.PutUint64(f[0:], uint64(id.id))
	le.PutUint16(f[offProducerEpoch-offProducerID:], uint16(id.epoch))
	le.PutUint32(f[offBaseSequence-offProducerID:], uint32(seq))
	patchHeader(b, offProducerID, f[:])
}

// broke notes that f, which failed for good or moved to another
// partition, leaves a hole in its partition's run of sequences when it
// carried the run's identity: the partition's next batch starts a fresh
// identity. The error returned is refusal's.
func (w *window) broke(f *flight, err error) error {
	m := w.pl.p.idem
	if m == nil || f.pid.zero() {
		return err
	}
	ps := &w.pp.seq
	if f.pid == ps.id {
		ps.broken = true
	}
	return m.refusal(w.pp.tp, f.pid, f.seq, err)
}

// refusal returns err, the failure of a batch of tp stamped with pid at
// seq, made explicit for the refusals of idempotence:
// INVALID_PRODUCER_EPOCH fences the producer (the fencing error), and
// OUT_OF_ORDER_SEQUENCE and UNKNOWN_PRODUCER_ID say that the batch was not
// stored and the partition goes on with a new producer id (logged).
func (m *idempotence) refusal(tp topicPartition, pid producerID, seq int32, err error) error {
	switch {
	case err == nil:
	case errors.Is(err, api.ErrInvalidProducerEpoch):
		return m.fence(err)
	case errors.Is(err, api.ErrOutOfOrderSequence), errors.Is(err, api.ErrUnknownProducerID):
		m.logger.Warn("sdk: a partition's leader refused an idempotent batch; it fails, and the partition goes on with a new producer id",
			"topic", tp.topic, "partition", tp.partition, "producerId", pid.id, "sequence", seq, "err", err)
		return fmt.Errorf("sdk: batch of producer %d (epoch %d) at sequence %d to %s/%d refused: an earlier batch of its run is missing from the partition (lost or failed), so it was not stored, and the producer goes on with a new producer id: %w",
			pid.id, pid.epoch, seq, tp.topic, tp.partition, err)
	}
	return err
}

// fencedErr returns the fencing error once a leader fenced the producer,
// else nil.
func (m *idempotence) fencedErr() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.fenced
}

// outcomeUnknown reports whether a publish that failed with err may
// still have been stored: its connection failed or timed out, or the
// leader appended it but could not replicate it in time
// (NOT_ENOUGH_REPLICAS after the append).
func outcomeUnknown(err error) bool {
	var ae *api.Error
	return !errors.As(err, &ae) || ae.Code == api.CodeNotEnoughReplicas
}
