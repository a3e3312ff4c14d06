package dataplane

import (
	"testing"

	"github.com/seedqueue/sq/api"
)

// DeleteTopic of the in-memory broker: the topic goes, long polls wake.
func (b *memBroker) DeleteTopic(name string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.topics[name]; !ok {
		return api.NewError(api.CodeUnknownTopic, "topic %q does not exist", name)
	}
	delete(b.topics, name)
	close(b.wake)
	b.wake = make(chan struct{})
	return nil
}

// ListOffsets of the in-memory broker knows no append times: -2 is 0,
// anything else the log end.
func (b *memBroker) ListOffsets(topic string, partition int, timestamp int64) (uint64, int64, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	ps, ok := b.topics[topic]
	switch {
	case !ok:
		return 0, -1, api.NewError(api.CodeUnknownTopic, "topic %q does not exist", topic)
	case partition < 0 || partition >= len(ps):
		return 0, -1, api.NewError(api.CodeUnknownPartition, "no partition %d", partition)
	case timestamp == -2:
		return 0, -1, nil
	}
	return ps[partition].next, -1, nil
}

func deleteTopicReq(name string) func(api.Frame) error {
	return func(f api.Frame) error {
		r, err := f.NewDeleteTopicRequest()
		if err != nil {
			return err
		}
		return r.SetName(name)
	}
}

func listOffsetsReq(topic string, partition uint32, ts int64) func(api.Frame) error {
	return func(f api.Frame) error {
		r, err := f.NewListOffsetsRequest()
		if err != nil {
			return err
		}
		r.SetPartition(partition)
		r.SetTimestamp(ts)
		return r.SetTopic(topic)
	}
}

func TestDeleteTopicAndListOffsets(t *testing.T) {
	forEachBroker(t, func(t *testing.T, b Broker) {
		h := startServer(t, b, Options{})
		c, _ := connect(t, h.addr)
		c.createTopic("t", 1)
		c.publish("t", 0, buildBatch(t, []byte("a"), []byte("b")))
		listOffsets := func(ts int64) (uint64, int64, api.Code) {
			t.Helper()
			r := c.call(listOffsetsReq("t", 0, ts), nil)
			expectWhich(t, r, api.Frame_Which_listOffsetsResponse)
			lo, err := r.f.ListOffsetsResponse()
			if err != nil {
				t.Fatal(err)
			}
			return lo.Offset(), lo.Timestamp(), wireErr(lo.Error())
		}
		if off, ts, code := listOffsets(-1); off != 2 || ts != -1 || code != api.CodeNone {
			t.Fatalf("latest = %d, %d, %v", off, ts, code)
		}
		if off, _, code := listOffsets(-2); off != 0 || code != api.CodeNone {
			t.Fatalf("earliest = %d, %v", off, code)
		}
		// A long poll on the topic is answered when it is deleted.
		pollID := c.send(fetchReq("t", 0, 2, 0, 30_000), nil)
		c.send(deleteTopicReq("t"), nil)
		var r, poll reply
		for range 2 {
			got := c.recv()
			if got.f.CorrelationId() == pollID {
				poll = got
			} else {
				r = got
			}
		}
		expectWhich(t, r, api.Frame_Which_deleteTopicResponse)
		dt, err := r.f.DeleteTopicResponse()
		if err != nil {
			t.Fatal(err)
		}
		if code := wireErr(dt.Error()); code != api.CodeNone {
			t.Fatalf("delete: %v", code)
		}
		expectWhich(t, poll, api.Frame_Which_fetchResponse)
		fr, _ := poll.f.FetchResponse()
		// The in-memory broker answers the woken poll empty; the engine
		// with UNKNOWN_TOPIC.
		if code := wireErr(fr.Error()); code != api.CodeUnknownTopic && code != api.CodeNone {
			t.Fatalf("long poll answered %v", code)
		}
		if _, _, code := listOffsets(-1); code != api.CodeUnknownTopic {
			t.Fatalf("listOffsets after delete: %v", code)
		}
		r = c.call(deleteTopicReq("t"), nil)
		dt, _ = r.f.DeleteTopicResponse()
		if code := wireErr(dt.Error()); code != api.CodeUnknownTopic {
			t.Fatalf("second delete: %v", code)
		}
		// The name is free again, and the new topic is empty.
		c.createTopic("t", 1)
		if off, _, code := listOffsets(-1); off != 0 || code != api.CodeNone {
			t.Fatalf("latest of the new topic = %d, %v", off, code)
		}
	})
}

func createPartitionsReq(name string, total uint32) func(api.Frame) error {
	return func(f api.Frame) error {
		r, err := f.NewCreatePartitionsRequest()
		if err != nil {
			return err
		}
		r.SetTotalCount(total)
		return r.SetName(name)
	}
}

// TestCreatePartitions grows a topic over the data plane: the answer
// carries every partition and the same id, a publish to a new partition
// succeeds, the old partition keeps its records, and refused counts and
// unknown topics come back with their codes. A broker that does not add
// partitions answers INVALID_REQUEST.
func TestCreatePartitions(t *testing.T) {
	forEachBroker(t, func(t *testing.T, b Broker) {
		h := startServer(t, b, Options{})
		c, _ := connect(t, h.addr)
		created := c.createTopic("t", 2)
		c.publish("t", 0, buildBatch(t, []byte("a"), []byte("b")))
		grow := func(name string, total uint32) (api.CreatePartitionsResponse, api.Code) {
			t.Helper()
			r := c.call(createPartitionsReq(name, total), nil)
			if _, ok := b.(PartitionCreator); !ok {
				expectWhich(t, r, api.Frame_Which_errorResponse)
				return api.CreatePartitionsResponse{}, wireErr(r.f.ErrorResponse())
			}
			expectWhich(t, r, api.Frame_Which_createPartitionsResponse)
			cp, err := r.f.CreatePartitionsResponse()
			if err != nil {
				t.Fatal(err)
			}
			return cp, wireErr(cp.Error())
		}
		cp, code := grow("t", 4)
		if _, ok := b.(PartitionCreator); !ok {
			if code != api.CodeInvalidRequest {
				t.Fatalf("grow on a broker without partition creation: %v", code)
			}
			return
		}
		if code != api.CodeNone {
			t.Fatalf("grow to 4: %v", code)
		}
		ti, _ := cp.Topic()
		infos, _ := ti.PartitionInfos()
		ct, _ := created.Topic()
		id, _ := ti.TopicId()
		oldID, _ := ct.TopicId()
		if ti.Partitions() != 4 || infos.Len() != 4 || string(id) != string(oldID) || infos.At(0).HighWatermark() != 2 {
			t.Fatalf("after growing: %d partitions, %d infos, id %x (was %x), partition 0 at %d", ti.Partitions(), infos.Len(), id, oldID, infos.At(0).HighWatermark())
		}
		c.publish("t", 3, buildBatch(t, []byte("new")))
		for _, tc := range []struct {
			name  string
			total uint32
			want  api.Code
		}{
			{"t", 4, api.CodeInvalidConfig},
			{"t", 1, api.CodeInvalidConfig},
			{"t", 0, api.CodeInvalidConfig},
			{"t", 1 << 31, api.CodeInvalidConfig},
			{"t", 1<<32 - 1, api.CodeInvalidConfig},
			{"nope", 8, api.CodeUnknownTopic},
			{"bad/name", 8, api.CodeInvalidTopicName},
		} {
			if _, code := grow(tc.name, tc.total); code != tc.want {
				t.Errorf("grow %q to %d: %v, want %v", tc.name, tc.total, code, tc.want)
			}
		}
	})
}
