package main

import (
	"errors"
	"strings"
	"testing"
)

// failingWriter fails every write with err.
type failingWriter struct{ err error }

func (f failingWriter) Write([]byte) (int, error) { return 0, f.err }

// TestRecordWriterFinish: a write to stdout that failed is reported once,
// not again by the final flush; a failure of the flush alone, or one
// besides another error, is reported.
func TestRecordWriterFinish(t *testing.T) {
	full := errors.New("write /dev/stdout: no space left on device")
	other := errors.New("UNKNOWN_TOPIC: gone")
	for _, tc := range []struct {
		name     string
		fill     int  // bytes written before finish: more than the buffer fails at once
		runErr   bool // the run ended with the error of that write
		extra    error
		want     []string
		wantNone bool
	}{
		{name: "write failed, then flush", fill: 128 << 10, runErr: true, want: []string{full.Error()}},
		{name: "only the flush fails", fill: 10, want: []string{full.Error()}},
		{name: "flush fails after another error", fill: 10, extra: other, want: []string{other.Error(), full.Error()}},
		{name: "nothing buffered", fill: 0, wantNone: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rw, err := newRecordWriter(failingWriter{full}, formatRaw)
			if err != nil {
				t.Fatal(err)
			}
			_, werr := rw.w.Write(make([]byte, tc.fill))
			runErr := tc.extra
			if tc.runErr {
				if werr == nil {
					t.Fatal("a write past the buffer did not fail")
				}
				runErr = werr
			}
			got := rw.finish(runErr)
			if tc.wantNone {
				if got != nil {
					t.Fatalf("finish: %v, want nil", got)
				}
				return
			}
			if got == nil {
				t.Fatal("finish: nil, want an error")
			}
			for _, w := range tc.want {
				if n := strings.Count(got.Error(), w); n != 1 {
					t.Errorf("finish: %q has %q %d times, want once", got, w, n)
				}
			}
		})
	}
}
