package dataplane

import (
	"testing"
	"time"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/internal/quota"
)

// TestQuotaThrottlesPublishesAndFetches: a publish and a fetch over the
// principal's quotas are answered at once with their throttle time; the
// connection's next publish then waits it out while a metadata request
// sent after it is answered first (group and metadata requests are not
// held back); the fetch still returns its records. Without a quota no
// throttle time is reported.
func TestQuotaThrottlesPublishesAndFetches(t *testing.T) {
	tests := []struct {
		name      string
		table     quota.Table
		throttled bool
	}{
		{"own quota", quota.Table{Principals: map[string]quota.Limits{"User:ANONYMOUS": {ProduceBytesPerSec: 1, FetchBytesPerSec: 1}}}, true},
		{"default quota", quota.Table{Default: &quota.Limits{ProduceBytesPerSec: 1, FetchBytesPerSec: 1}}, true},
		{"another principal's quota", quota.Table{Principals: map[string]quota.Limits{"User:CN=other": {ProduceBytesPerSec: 1, FetchBytesPerSec: 1}}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// 1 B/s over 2 samples of 250 ms: every publish is throttled
			// by the cap, 500 ms.
			m := quota.New(quota.Options{Samples: 2, Window: 250 * time.Millisecond})
			m.SetTable(tt.table)
			h := startServer(t, openEngine(t), Options{Quotas: m})
			c, _ := connect(t, h.addr)
			c.createTopic("q", 1)
			b := buildBatch(t, []byte("value"))
			p := c.publish("q", 0, b)
			if got := p.ThrottleTimeMs() > 0; got != tt.throttled {
				t.Fatalf("publish throttle %d ms, want throttled %v", p.ThrottleTimeMs(), tt.throttled)
			}
			if tt.throttled && p.ThrottleTimeMs() != 500 {
				t.Fatalf("publish throttle %d ms, want the cap of 500", p.ThrottleTimeMs())
			}
			pubID := c.send(publishReq("q", 0, len(b)), b)
			metaID := c.send(metadataReq("q"), nil)
			first := c.recv().f.CorrelationId()
			second := c.recv().f.CorrelationId()
			if tt.throttled && (first != metaID || second != pubID) {
				t.Fatalf("answered %d then %d; want the metadata (%d) before the held publish (%d)", first, second, metaID, pubID)
			}
			f, tail := c.fetch("q", 0, 0, 1<<20, 0)
			if len(tail) == 0 || f.RecordsLength() != uint32(len(tail)) {
				t.Fatalf("a throttled fetch returned %d bytes of records, want the batches (never dropped)", len(tail))
			}
			if got := f.ThrottleTimeMs() > 0; got != tt.throttled {
				t.Fatalf("fetch throttle %d ms, want throttled %v", f.ThrottleTimeMs(), tt.throttled)
			}
			if code := wireErr(f.Error()); code != api.CodeNone {
				t.Fatalf("fetch: %v", code)
			}
		})
	}
}
