package control

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/api/sqv1"
)

// TestSendSplit: every response sendSplit sends is at most the bound, the
// records arrive in order and complete, and a record that cannot fit
// alone ends the stream with MESSAGE_TOO_LARGE after the ones before it.
func TestSendSplit(t *testing.T) {
	rec := func(off uint64, n int) *sqv1.ConsumedRecord {
		return &sqv1.ConsumedRecord{Offset: off, TimestampMs: 1, Value: bytes.Repeat([]byte{byte(off)}, n),
			Headers: []*sqv1.RecordHeader{{Key: []byte{0xff, byte(off)}, Value: []byte("h")}}}
	}
	const bound = 1000
	for _, c := range []struct {
		name    string
		sizes   []int
		tooBig  int // index of the record too large, -1 for none
		minSent int // least number of responses
	}{
		{"one small record", []int{10}, -1, 1},
		{"all fit in one", []int{100, 100, 100}, -1, 1},
		{"split in several", []int{400, 400, 400, 400, 400}, -1, 3},
		{"one record fills a response", []int{900, 900, 900}, -1, 3},
		{"record exactly at the bound", []int{1, boundValue(t, bound)}, -1, 2},
		{"record one byte over the bound", []int{10, boundValue(t, bound) + 1, 10}, 1, 1},
		{"first record too large", []int{5000}, 0, 0},
		{"empty values", []int{0, 0, 0}, -1, 1},
	} {
		var recs []*sqv1.ConsumedRecord
		for i, n := range c.sizes {
			recs = append(recs, rec(uint64(i), n))
		}
		var got []*sqv1.ConsumedRecord
		sent := 0
		err := sendSplit(func(r *sqv1.SubscribeResponse) error {
			if s := proto.Size(r); s > bound {
				t.Errorf("%s: response of %d bytes, above the bound %d", c.name, s, bound)
			}
			if r.Topic != "topic-name" || r.HighWatermark != 77 || r.LogStartOffset != 3 || len(r.Records) == 0 {
				t.Errorf("%s: response %v lacks its fields or records", c.name, r)
			}
			sent++
			got = append(got, r.Records...)
			return nil
		}, &sqv1.SubscribeResponse{Topic: "topic-name", Partition: 4, Records: recs, HighWatermark: 77, LogStartOffset: 3}, bound)
		want := recs
		if c.tooBig >= 0 {
			want = recs[:c.tooBig]
			if !errors.Is(err, api.ErrMessageTooLarge) || !bytes.Contains([]byte(err.Error()), fmt.Appendf(nil, "record at offset %d", c.tooBig)) {
				t.Errorf("%s: %v, want MESSAGE_TOO_LARGE naming offset %d", c.name, err, c.tooBig)
			}
		} else if err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
		if sent < c.minSent || len(got) != len(want) {
			t.Errorf("%s: %d responses with %d records, want at least %d with %d", c.name, sent, len(got), c.minSent, len(want))
			continue
		}
		for i := range want {
			if !proto.Equal(got[i], want[i]) {
				t.Errorf("%s: record %d changed", c.name, i)
			}
		}
	}
	stop := errors.New("client gone")
	if err := sendSplit(func(*sqv1.SubscribeResponse) error { return stop }, &sqv1.SubscribeResponse{Records: []*sqv1.ConsumedRecord{rec(0, 900), rec(1, 900)}}, bound); !errors.Is(err, stop) {
		t.Errorf("send error: %v, want it returned", err)
	}
}

// boundValue is the value length of the record at offset 1 (as built in
// TestSendSplit) whose response alone is exactly bound bytes.
func boundValue(t *testing.T, bound int) int {
	base := &sqv1.SubscribeResponse{Topic: "topic-name", Partition: 4, HighWatermark: 77, LogStartOffset: 3}
	for n := 0; n < bound; n++ {
		r := proto.Clone(base).(*sqv1.SubscribeResponse)
		r.Records = []*sqv1.ConsumedRecord{{Offset: 1, TimestampMs: 1, Value: make([]byte, n),
			Headers: []*sqv1.RecordHeader{{Key: []byte{0xff, 1}, Value: []byte("h")}}}}
		if proto.Size(r) == bound {
			return n
		}
	}
	t.Fatalf("no value length gives a %d-byte response", bound)
	return 0
}
