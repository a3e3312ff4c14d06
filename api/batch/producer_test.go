package batch

import "testing"

// TestBuilderSetProducer: SetProducer's fields reach the header under a
// valid CRC, a negative id leaves the batch without a producer, and
// Reset forgets them.
func TestBuilderSetProducer(t *testing.T) {
	tests := []struct {
		name      string
		set       bool
		id        int64
		epoch     int16
		seq       int32
		wantID    int64
		wantEpoch int16
		wantSeq   int32
	}{
		{"none", false, 0, 0, 0, -1, -1, -1},
		{"cluster id 0", true, 0, 0, 0, 0, 0, 0},
		{"single-node id", true, 1 << 48, 3, 1<<31 - 1, 1 << 48, 3, 1<<31 - 1},
		{"negative id is none", true, -1, 7, 9, -1, -1, -1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var b Builder
			b.Add([]byte("k"), []byte("v"), nil, 1000)
			b.Add(nil, []byte("w"), nil, 1001)
			if tc.set {
				b.SetProducer(tc.id, tc.epoch, tc.seq)
			}
			out, err := b.Build()
			if err != nil {
				t.Fatal(err)
			}
			h, err := Validate(out, Limits{})
			if err != nil {
				t.Fatalf("Validate: %v", err)
			}
			if h.ProducerID != tc.wantID || h.ProducerEpoch != tc.wantEpoch || h.BaseSequence != tc.wantSeq {
				t.Errorf("producer fields (%d, %d, %d), want (%d, %d, %d)",
					h.ProducerID, h.ProducerEpoch, h.BaseSequence, tc.wantID, tc.wantEpoch, tc.wantSeq)
			}
			b.Reset()
			b.Add(nil, []byte("x"), nil, 1002)
			out, err = b.Build()
			if err != nil {
				t.Fatal(err)
			}
			if h, _ := ParseHeader(out); h.ProducerID != -1 {
				t.Errorf("after Reset: producerId %d, want -1", h.ProducerID)
			}
		})
	}
}
