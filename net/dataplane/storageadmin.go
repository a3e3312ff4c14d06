package dataplane

import (
	"github.com/seedqueue/sq/api"
)

// parseStorageAdmin decodes a deleteTopicRequest or listOffsetsRequest.
func parseStorageAdmin(f api.Frame, req *request) error {
	if req.kind == api.Frame_Which_deleteTopicRequest {
		r, err := f.DeleteTopicRequest()
		if err != nil {
			return err
		}
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
