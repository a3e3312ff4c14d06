package dataplane

import (
	"testing"

	"github.com/seedqueue/sq/api"
)

// Topic ids in fetch, commit and subscribe frames: a malformed id (any
// length but 0 or 16) is INVALID_REQUEST and the connection goes on; an id
// that is not the topic's is UNKNOWN_TOPIC_ID; no id reads by name.
func TestTopicIDFields(t *testing.T) {
	forEachBroker(t, func(t *testing.T, b Broker) {
		h := startServer(t, b, Options{})
		c, _ := connect(t, h.addr)
		c.createTopic("t", 1)
		c.publish("t", 0, buildBatch(t, []byte("a"), []byte("b")))
		fetchWithID := func(id []byte) error {
			r := c.call(func(f api.Frame) error {
				if err := fetchReq("t", 0, 0, 1<<20, 0)(f); err != nil {
					return err
				}
				fr, _ := f.FetchRequest()
				return fr.SetTopicId(id)
			}, nil)
			fr, err := r.f.FetchResponse()
			if err != nil {
				t.Fatal(err)
			}
			return api.FromWire(mustWire(fr.Error()))
		}
		commitWithID := func(id []byte) error {
			r := c.call(func(f api.Frame) error {
				req, err := f.NewCommitOffsetsRequest()
				if err != nil {
					return err
				}
				req.SetGeneration(-1)
				if err := req.SetGroup("g"); err != nil {
					return err
				}
				l, err := req.NewOffsets(1)
				if err != nil {
					return err
				}
				l.At(0).SetOffset(1)
				if err := l.At(0).SetTopicId(id); err != nil {
					return err
				}
				return l.At(0).SetTopic("t")
			}, nil)
			co, err := r.f.CommitOffsetsResponse()
			if err != nil {
				t.Fatal(err)
			}
			if err := api.FromWire(mustWire(co.Error())); err != nil {
				return err
			}
			l, _ := co.Offsets()
			return api.FromWire(mustWire(l.At(0).Error()))
		}
		subscribeWithID := func(id []byte) error {
			r := c.call(func(f api.Frame) error {
				s, err := f.NewSubscribeRequest()
				if err != nil {
					return err
				}
				s.SetCreditBytes(1 << 20)
				s.SetOffset(5) // beyond the log end: fails at once when the id is good
				if err := s.SetTopicId(id); err != nil {
					return err
				}
				return s.SetTopic("t")
			}, nil)
			p, err := r.f.PushBatches()
			if err != nil {
				t.Fatal(err)
			}
			return api.FromWire(mustWire(p.Error()))
		}
		other := api.NewTopicID()
		for _, bad := range [][]byte{{1}, make([]byte, 15), make([]byte, 17)} {
			if err := fetchWithID(bad); api.AsError(err).Code != api.CodeInvalidRequest {
				t.Errorf("fetch with a %d-byte id: %v, want INVALID_REQUEST", len(bad), err)
			}
			if err := commitWithID(bad); api.AsError(err).Code != api.CodeInvalidRequest {
				t.Errorf("commit with a %d-byte id: %v, want INVALID_REQUEST", len(bad), err)
			}
			if err := subscribeWithID(bad); api.AsError(err).Code != api.CodeInvalidRequest {
				t.Errorf("subscribe with a %d-byte id: %v, want INVALID_REQUEST", len(bad), err)
			}
		}
		if err := fetchWithID(other[:]); api.AsError(err).Code != api.CodeUnknownTopicID {
			t.Errorf("fetch with another id: %v, want UNKNOWN_TOPIC_ID", err)
		}
		if err := subscribeWithID(other[:]); api.AsError(err).Code != api.CodeUnknownTopicID {
			t.Errorf("subscribe with another id: %v, want UNKNOWN_TOPIC_ID", err)
		}
		if err := fetchWithID(nil); err != nil {
			t.Errorf("fetch without an id: %v", err)
		}
		// The connection still serves: the bad frames were answered, not fatal.
		if fr, tail := c.fetch("t", 0, 0, 1<<20, 0); len(tail) == 0 {
			t.Errorf("fetch after the bad ids: %v", api.FromWire(mustWire(fr.Error())))
		}
	})
}
