package sdk

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/seedqueue/sq/api"
)

// errConnSwitched: the live connection is not the one the pipeline of a
// partition is using, so the publish was not sent (startPublish).
var errConnSwitched = errors.New("sdk: connection changed under a pipeline")

// pubCall is one publish written to a connection and not yet answered.
type pubCall struct {
	c  *Client // the partition leader's, that sent it
	cn *conn
	cl *call
	// batched: the batch went to the connection's publishBatches queue
	// (pubbatch.go); its response is an entry of a publishBatches
	// response.
	batched   bool
	deadline  time.Time // RequestTimeout after the send
	topic     string
	partition uint32
}

// startPublish sends one publish of data to topic/partition and returns
// once the frame is queued for the connection's writer, without waiting
// for the response: publishes started one after the other are written in
// that order. When want is not nil and the live connection is another one,
// nothing is sent and the error is errConnSwitched. chained sets the
// request's chained flag (the server fails this publish if the previous
// one of the partition on this connection failed); acks its acks.
//
// On a connection that speaks api.PublishBatchesVersion the batch joins
// the connection's queue for the next publishBatches request instead
// (pubbatch.go), written once a token of sem (the producer's bound on
// requests in flight; nil: none) is free; gate, when set, is the
// SendBatch call it belongs to.
func (c *Client) startPublish(ctx context.Context, want *conn, topic string, partition uint32, data []byte, chained bool, acks Acks, sem chan struct{}, gate *sendCall) (*pubCall, error) {
	if lim := c.Limits(); len(data) > int(lim.MaxBatchBytes) {
		return nil, api.NewError(api.CodeMessageTooLarge, "batch of %d bytes over the server's maxBatchBytes %d", len(data), lim.MaxBatchBytes)
	}
	if err := c.waitThrottle(ctx); err != nil {
		return nil, err
	}
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout)
	defer cancel()
	cn, err := c.conn(ctx)
	if err != nil {
		return nil, connectTimedOut(parent, err, c.cfg.RequestTimeout)
	}
	if want != nil && cn != want {
		return nil, errConnSwitched
	}
	if cn.pubq != nil {
		cl, err := cn.enqueuePublish(&pubItem{topic: topic, partition: partition, data: data, chained: chained, acks: acks, sem: sem, gate: gate})
		if err != nil {
			return nil, err
		}
		return &pubCall{c: c, cn: cn, cl: cl, batched: true, deadline: time.Now().Add(c.cfg.RequestTimeout), topic: topic, partition: partition}, nil
	}
	cl, err := cn.start(ctx, func(f api.Frame) error {
		req, err := f.NewPublishRequest()
		if err != nil {
			return err
		}
		req.SetPartition(partition)
		req.SetRecordsLength(uint32(len(data)))
		req.SetChained(chained)
		req.SetAcks(acks.wire())
		return req.SetTopic(topic)
	}, data, 0)
	if err != nil {
		if c.isClosed() {
			return nil, ErrClosed
		}
		return nil, err
	}
	return &pubCall{c: c, cn: cn, cl: cl, deadline: time.Now().Add(c.cfg.RequestTimeout), topic: topic, partition: partition}, nil
}

// pubResult decodes the response r of pc.
func (c *Client) pubResult(pc *pubCall, r response) (PublishResult, error) {
	if r.err != nil {
		if c.isClosed() {
			return PublishResult{}, ErrClosed
		}
		return PublishResult{}, r.err
	}
	if r.f.Which() == api.Frame_Which_errorResponse {
		we, _ := r.f.ErrorResponse()
		return PublishResult{}, wireErr(we)
	}
	if pc.batched {
		return decodePublishEntry(r, pc.topic, pc.partition)
	}
	return decodePublish(r, pc.topic, pc.partition)
}

// decodePublishEntry reads the result of entry r.entry of a
// publishBatches response, which must name topic and partition.
func decodePublishEntry(r response, topic string, partition uint32) (PublishResult, error) {
	if err := expect(r.f, api.Frame_Which_publishBatchesResponse); err != nil {
		return PublishResult{}, err
	}
	resp, err := r.f.PublishBatchesResponse()
	if err != nil {
		return PublishResult{}, err
	}
	if err := respErr(resp.Error()); err != nil {
		return PublishResult{}, err
	}
	l, err := resp.Results()
	if err != nil {
		return PublishResult{}, err
	}
	if r.entry >= l.Len() {
		return PublishResult{}, fmt.Errorf("%w: publishBatches response of %d results, want at least %d", ErrUnexpectedResponse, l.Len(), r.entry+1)
	}
	res := l.At(r.entry)
	if t, err := res.Topic(); err != nil || t != topic || res.Partition() != partition {
		return PublishResult{}, fmt.Errorf("%w: publishBatches result %d is for %s/%d, want %s/%d", ErrUnexpectedResponse, r.entry, t, res.Partition(), topic, partition)
	}
	return publishResult(res, topic, partition)
}

// timedOut closes pc's connection because pc got no response by its
// deadline; every request waiting on it then fails with ErrConnection.
func (c *Client) timedOut(pc *pubCall) {
	cause := fmt.Errorf("no response within %v", c.cfg.RequestTimeout)
	pc.cn.fail(cause)
	c.cfg.Logger.Warn("sdk: request timed out, closing the connection", "addr", c.cfg.Addr, "timeout", c.cfg.RequestTimeout)
}

// decodePublish reads a publish response.
func decodePublish(r response, topic string, partition uint32) (PublishResult, error) {
	if err := expect(r.f, api.Frame_Which_publishResponse); err != nil {
		return PublishResult{}, err
	}
	resp, err := r.f.PublishResponse()
	if err != nil {
		return PublishResult{}, err
	}
	return publishResult(resp, topic, partition)
}

// publishResult reads one partition's publish result.
func publishResult(resp api.PublishResponse, topic string, partition uint32) (PublishResult, error) {
	if err := respErr(resp.Error()); err != nil {
		return PublishResult{}, err
	}
	return PublishResult{
		Topic:         topic,
		Partition:     partition,
		BaseOffset:    resp.BaseOffset(),
		RecordCount:   resp.RecordCount(),
		LogAppendTime: resp.LogAppendTime(),
		Durability:    Durability(resp.Durability()),
		Replicas:      max(resp.Replicas(), 1), // 0: a server from before replication
	}, nil
}
