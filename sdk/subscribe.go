package sdk

import (
	"context"
	"errors"
	"math"
	"sync"

	"github.com/seedqueue/sq/api"
)

// ErrSubscriptionEnded is returned by Subscription.Next after the server
// ended the subscription without an error (Close, or the server's own
// unsubscribe).
var ErrSubscriptionEnded = errors.New("sdk: subscription ended")

// pushStream queues the frames of one subscription. The queue is bounded
// by the subscription's credit: the server pushes no more than the credit
// granted plus one batch.
type pushStream struct {
	mu     sync.Mutex
	q      []response
	notify chan struct{} // cap 1
}

func newPushStream() *pushStream { return &pushStream{notify: make(chan struct{}, 1)} }

func (s *pushStream) put(r response) {
	s.mu.Lock()
	s.q = append(s.q, r)
	s.mu.Unlock()
	notify(s.notify)
}

func (s *pushStream) next(ctx context.Context) (response, error) {
	for {
		s.mu.Lock()
		if len(s.q) > 0 {
			r := s.q[0]
			s.q[0] = response{}
			s.q = s.q[1:]
			s.mu.Unlock()
			return r, r.err
		}
		s.mu.Unlock()
		select {
		case <-s.notify:
		case <-ctx.Done():
			return response{}, ctx.Err()
		}
	}
}

// openStream sends a subscribe built by build and registers its stream.
// The in-flight token is given back once the frame is sent: the server
// serves a subscription outside its request slots.
func (c *conn) openStream(ctx context.Context, build func(api.Frame) error, maxTailBytes uint32) (uint64, *pushStream, error) {
	st := newPushStream()
	id, err := c.issue(ctx, &call{maxTailBytes: maxTailBytes, stream: st}, build, nil)
	if err != nil {
		return 0, nil, err
	}
	<-c.sem
	return id, st, nil
}

// sendOnly sends a request that has no response (grantCredit).
func (c *conn) sendOnly(ctx context.Context, build func(api.Frame) error) error {
	_, err := c.issue(ctx, nil, build, nil)
	return err
}

// Subscription is a push subscription to one partition (docs/architecture.md §4): the
// server sends batches as they become readable, within the byte credit
// the subscriber grants. Next returns them; Grant returns credit once
// they are processed, so a slow subscriber makes the server wait instead
// of buffering. A Subscription is used by one goroutine at a time.
type Subscription struct {
	cn        *conn
	id        uint64
	st        *pushStream
	topic     string
	partition uint32
	pos       uint64
}

// Subscribe starts a push subscription of topic/partition at offset with
// creditBytes of initial credit (the window: the server pushes at most
// that much, plus one batch, before Grant). It fails as a request does;
// errors about the partition (UNKNOWN_TOPIC, OFFSET_OUT_OF_RANGE) come
// from Next.
func (c *Client) Subscribe(ctx context.Context, topic string, partition uint32, offset uint64, creditBytes uint32) (*Subscription, error) {
	return c.SubscribeID(ctx, topic, api.TopicID{}, partition, offset, creditBytes)
}

// SubscribeID is Subscribe of the topic with id (TopicInfo.ID; zero: by
// name). Next fails with api.ErrUnknownTopicID when the topic was deleted,
// or deleted and created again, before or during the subscription.
// Without an id the server pins the subscription to the id of the topic
// it finds first, with the same effect.
func (c *Client) SubscribeID(ctx context.Context, topic string, topicID api.TopicID, partition uint32, offset uint64, creditBytes uint32) (*Subscription, error) {
	if err := c.waitThrottle(ctx); err != nil {
		return nil, err
	}
	cn, err := c.conn(ctx)
	if err != nil {
		return nil, err
	}
	maxTail := uint32(min(uint64(creditBytes)+uint64(c.Limits().MaxBatchBytes), math.MaxUint32))
	id, st, err := cn.openStream(ctx, func(f api.Frame) error {
		r, err := f.NewSubscribeRequest()
		if err != nil {
			return err
		}
		r.SetPartition(partition)
		r.SetOffset(offset)
		r.SetCreditBytes(creditBytes)
		if !topicID.IsZero() {
			if err := r.SetTopicId(topicID.Bytes()); err != nil {
				return err
			}
		}
		return r.SetTopic(topic)
	}, maxTail)
	if err != nil {
		return nil, err
	}
	return &Subscription{cn: cn, id: id, st: st, topic: topic, partition: partition, pos: offset}, nil
}

// PushResult is one push of a subscription, decoded.
type PushResult struct {
	HighWatermark  uint64
	LogStartOffset uint64
	// Messages are the records at or after the subscription's position,
	// in offset order.
	Messages []Message
	// Bytes is the size of the push's batches: the credit to Grant back
	// once the messages are processed.
	Bytes uint32
	// NextOffset is the subscription's position after this push.
	NextOffset uint64
}

// Next waits for the next push. It fails with the server's error that
// ended the subscription (for example api.ErrOffsetOutOfRange with the
// valid range), ErrSubscriptionEnded, an error wrapping ErrConnection, or
// ctx's error.
func (s *Subscription) Next(ctx context.Context) (PushResult, error) {
	r, err := s.st.next(ctx)
	if err != nil {
		return PushResult{}, err
	}
	if r.f.Which() == api.Frame_Which_errorResponse {
		we, _ := r.f.ErrorResponse()
		return PushResult{}, wireErr(we)
	}
	if err := expect(r.f, api.Frame_Which_pushBatches); err != nil {
		return PushResult{}, err
	}
	p, err := r.f.PushBatches()
	if err != nil {
		return PushResult{}, err
	}
	if err := respErr(p.Error()); err != nil {
		return PushResult{}, err
	}
	if len(r.tail) == 0 {
		return PushResult{}, ErrSubscriptionEnded
	}
	res := PushResult{HighWatermark: p.HighWatermark(), LogStartOffset: p.LogStartOffset(), Bytes: uint32(len(r.tail))}
	res.Messages, res.NextOffset, err = decodeBatches(r.tail, s.topic, s.partition, s.pos)
	if err != nil {
		return PushResult{}, err
	}
	s.pos = res.NextOffset
	return res, nil
}

// Grant gives n bytes of credit back to the server.
func (s *Subscription) Grant(ctx context.Context, n uint32) error {
	return s.cn.sendOnly(ctx, func(f api.Frame) error {
		r, err := f.NewGrantCreditRequest()
		if err != nil {
			return err
		}
		r.SetSubscriptionId(s.id)
		r.SetCreditBytes(n)
		return nil
	})
}

// Close ends the subscription (unsubscribe). It does not wait for the
// server's answer; pushes not yet returned by Next are dropped.
func (s *Subscription) Close(ctx context.Context) error {
	if s.cn.broken() {
		return nil
	}
	return s.cn.sendNoWait(ctx, func(f api.Frame) error {
		r, err := f.NewUnsubscribeRequest()
		if err != nil {
			return err
		}
		r.SetSubscriptionId(s.id)
		return nil
	})
}

// sendNoWait sends a request whose response is read and dropped by the
// reader, without waiting for it.
func (c *conn) sendNoWait(ctx context.Context, build func(api.Frame) error) error {
	_, err := c.start(ctx, build, nil, 0)
	return err
}
