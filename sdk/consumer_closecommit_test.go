package sdk

import (
	"errors"
	"testing"
	"time"

	"github.com/seedqueue/sq/api"
)

// TestCloseCommitsAfterPollRecovered: an error from Poll (here the topic
// missing for a while) skips the commit at Close only while it is the
// last thing Poll returned. An application that went on polling, and was
// handed records after the error, gets them committed at Close, as
// AutoCommit promises; one that stops at the error does not.
func TestCloseCommitsAfterPollRecovered(t *testing.T) {
	for _, recovered := range []bool{true, false} {
		s := newFakeServer(t)
		s.createTopic("t", 1)
		produce(t, s, "t", 4)
		c := newTestConsumer(t, s, ConsumerConfig{Topic: "t", ConsumerGroup: "g", AutoCommit: true, AutoCommitInterval: time.Hour})
		if got := pollN(t, c, 4); len(got) != 4 {
			t.Fatalf("first polls returned %d records, want 4", len(got))
		}
		s.mu.Lock()
		saved := s.topics["t"]
		delete(s.topics, "t")
		s.mu.Unlock()
		var err error
		waitFor(t, 5*time.Second, "the error", func() bool {
			_, err = c.Poll(testCtx(t))
			return err != nil
		})
		if !errors.Is(err, api.ErrUnknownTopic) {
			t.Fatalf("Poll while the topic is missing: %v", err)
		}
		s.mu.Lock()
		s.topics["t"] = saved
		s.mu.Unlock()
		want := uint64(4)
		if recovered {
			produce(t, s, "t", 3)
			// Poll may still answer the error once before the records.
			var got []Message
			waitFor(t, 5*time.Second, "the records after the error", func() bool {
				msgs, _ := c.Poll(testCtx(t))
				got = append(got, msgs...)
				return len(got) >= 3
			})
			want = 7
		}
		if err := c.Close(); err != nil {
			t.Fatalf("recovered %v: Close: %v", recovered, err)
		}
		cl := dialTest(t, s)
		offs, err := cl.FetchOffsets(testCtx(t), "g", "t")
		cl.Close()
		if err != nil {
			t.Fatal(err)
		}
		var committed uint64
		if len(offs) == 1 {
			committed = offs[0].Offset
		}
		if !recovered {
			want = 0 // nothing committed: Poll's last answer was the error
		}
		if committed != want {
			t.Fatalf("recovered %v: committed %d after Close (offsets %+v), want %d", recovered, committed, offs, want)
		}
	}
}
