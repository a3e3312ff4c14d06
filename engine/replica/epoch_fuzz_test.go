package replica

import (
	"bytes"
	"testing"
)

// FuzzEpochCheckpoint: UnmarshalText never panics; what it accepts is
// strictly ascending and encodes back to the same bytes.
func FuzzEpochCheckpoint(f *testing.F) {
	for _, s := range []string{"0\n0\n", "0\n3\n1 0\n2 5\n4 8\n", "0\n1\n4294967295 18446744073709551615\n", "0\n2\n2 5\n1 9\n", "0\n1\n1 0"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var c EpochCache
		if err := c.UnmarshalText(b); err != nil {
			return
		}
		e := c.Entries()
		for i := 1; i < len(e); i++ {
			if e[i].Epoch <= e[i-1].Epoch || e[i].StartOffset <= e[i-1].StartOffset {
				t.Fatalf("accepted entries not ascending: %v", e)
			}
		}
		out, err := c.MarshalText()
		if err != nil {
			t.Fatal(err)
		}
		// Leading zeros parse but do not round-trip; every
		// canonical checkpoint does.
		var d EpochCache
		if err := d.UnmarshalText(out); err != nil {
			t.Fatalf("MarshalText output %q does not parse: %v", out, err)
		}
		if again, _ := d.MarshalText(); !bytes.Equal(again, out) {
			t.Fatalf("round trip %q -> %q", out, again)
		}
	})
}
