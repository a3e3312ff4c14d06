package api

import "testing"

// TestTailLengthReplicaFetch: a replica fetch response announces its records
// tail like a fetch response, so a reader stays in step with the stream.
func TestTailLengthReplicaFetch(t *testing.T) {
	msg, f, err := NewFrameMessage(7)
	if err != nil {
		t.Fatal(err)
	}
	defer msg.Release()
	r, err := f.NewReplicaFetchResponse()
	if err != nil {
		t.Fatal(err)
	}
	r.SetRecordsLength(4096)
	if got := TailLength(f); got != 4096 {
		t.Fatalf("TailLength(replicaFetchResponse) = %d, want 4096", got)
	}
	if _, err := f.NewOffsetForLeaderEpochResponse(); err != nil {
		t.Fatal(err)
	}
	if got := TailLength(f); got != 0 {
		t.Fatalf("TailLength(offsetForLeaderEpochResponse) = %d, want 0", got)
	}
}
