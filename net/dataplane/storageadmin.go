package dataplane

import (
	"math"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/engine"
)

// PartitionCreator is implemented by a Broker that adds partitions to a
// topic (engine.Engine.CreatePartitions); without it a
// createPartitionsRequest is answered with INVALID_REQUEST.
type PartitionCreator interface {
	// CreatePartitions grows topic name to total partitions (the new
	// total, KIP-195) and returns the topic with every partition.
	CreatePartitions(name string, total int) (engine.TopicInfo, error)
}

var _ PartitionCreator = (*engine.Engine)(nil)

// parseStorageAdmin decodes a deleteTopicRequest, createPartitionsRequest
// or listOffsetsRequest.
func parseStorageAdmin(f api.Frame, req *request) error {
	switch req.kind {
	case api.Frame_Which_deleteTopicRequest:
		r, err := f.DeleteTopicRequest()
		if err != nil {
			return err
		}
		req.name, err = r.Name()
		return err
	case api.Frame_Which_createPartitionsRequest:
		r, err := f.CreatePartitionsRequest()
		if err != nil {
			return err
		}
		req.partitions = r.TotalCount()
		req.name, err = r.Name()
		return err
	}
	r, err := f.ListOffsetsRequest()
	if err != nil {
		return err
	}
	req.partition = r.Partition()
	req.timestamp = r.Timestamp()
	req.topic, err = r.Topic()
	return err
}

// deleteTopic answers a deleteTopicRequest.
func (c *conn) deleteTopic(req request) (*response, error) {
	berr := c.srv.broker.DeleteTopic(req.name)
	c.audit("topic.delete", req.name, berr)
	r, f, err := newResponse(req)
	if err != nil {
		return nil, err
	}
	dt, err := f.NewDeleteTopicResponse()
	if err != nil {
		return r, err
	}
	return r, setErr(berr, dt.NewError)
}

// createPartitions answers a createPartitionsRequest. A count above
// MaxInt32 is passed on as MaxInt32, which the engine refuses as above
// its maximum.
func (c *conn) createPartitions(req request) (*response, error) {
	pc, ok := c.srv.broker.(PartitionCreator)
	if !ok {
		return c.buildError(req, api.NewError(api.CodeInvalidRequest, "this server does not add partitions to topics")), nil
	}
	info, berr := pc.CreatePartitions(req.name, int(min(req.partitions, math.MaxInt32)))
	c.audit("partitions.create", req.name, berr)
	r, f, err := newResponse(req)
	if err != nil {
		return nil, err
	}
	cp, err := f.NewCreatePartitionsResponse()
	if err != nil {
		return nil, err
	}
	if berr == nil {
		t, err := cp.NewTopic()
		if err != nil {
			return nil, err
		}
		if err := c.srv.encodeTopic(t, info, true); err != nil {
			return nil, err
		}
	}
	return r, setErr(berr, cp.NewError)
}

// listOffsets answers a listOffsetsRequest (KIP-79 semantics: timestamp
// -1 latest, -2 earliest, else broker append time in Unix ms).
func (c *conn) listOffsets(req request) (*response, error) {
	off, ts, berr := c.srv.broker.ListOffsets(req.topic, int(req.partition), req.timestamp)
	r, f, err := newResponse(req)
	if err != nil {
		return nil, err
	}
	lo, err := f.NewListOffsetsResponse()
	if err != nil {
		return r, err
	}
	if berr == nil {
		lo.SetOffset(off)
		lo.SetTimestamp(ts)
	} else {
		lo.SetTimestamp(-1)
	}
	return r, setErr(berr, lo.NewError)
}
