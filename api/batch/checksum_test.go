package batch

import (
	"errors"
	"testing"
)

// TestCheckHeaderSumMatchesCheckHeader: a CRC accumulated in pieces of any
// size gives CheckHeaderSum the verdict CheckHeader gives the whole batch,
// for an intact batch and for each kind of damage CheckHeader finds.
func TestCheckHeaderSumMatchesCheckHeader(t *testing.T) {
	mutations := map[string]func([]byte){
		"intact":          func([]byte) {},
		"record bit flip": func(b []byte) { b[len(b)-3] ^= 0x10 },
		"crc bit flip":    func(b []byte) { b[offCRC] ^= 1 },
		"attributes":      func(b []byte) { b[offAttributes] ^= 1 },
		"magic":           func(b []byte) { b[offMagic] = 2 },
		"record count":    func(b []byte) { b[offRecordCount] ^= 1 },
		"last delta":      func(b []byte) { b[offLastOffsetDelta] ^= 1 },
	}
	for name, mutate := range mutations {
		b := build(t, 5, 300)
		mutate(b)
		_, want := CheckHeader(b)
		for _, piece := range []int{1, 7, 64, 1000, len(b)} {
			sum := UpdateChecksum(0, b[ChecksumFrom:HeaderSize])
			for at := HeaderSize; at < len(b); at += piece {
				sum = UpdateChecksum(sum, b[at:min(at+piece, len(b))])
			}
			_, got := CheckHeaderSum(b[:HeaderSize], sum)
			if (got == nil) != (want == nil) || (want != nil && (!errors.Is(got, ErrCorrupt) || got.Error() != want.Error())) {
				t.Errorf("%s, pieces of %d: CheckHeaderSum = %v, CheckHeader = %v", name, piece, got, want)
			}
		}
		if name == "intact" && want != nil {
			t.Fatalf("intact batch: %v", want)
		}
	}
}
