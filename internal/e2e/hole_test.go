package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/sdk"
)

// TestHoleEveryBatch: three acknowledged one-record batches, SIGKILL, the
// second batch's magic byte set to 0, restart. Under every-batch the
// records were synced, so that is corruption: the partition is failed with
// an error naming the file and position, the next publish does not reuse
// offset 1, nothing is cut, and the other partition keeps serving. Under
// none the hole is cut, logged at ERROR with the offsets dropped, and the
// next publish gets offset 1.
func TestHoleEveryBatch(t *testing.T) {
	t.Parallel()
	for _, policy := range []string{"every-batch", "none"} {
		t.Run(policy, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), faultTimeout)
			defer cancel()
			dir := t.TempDir()
			srv := startServer(t, dir, "--sync-policy", policy)
			c := dialT(ctx, t, srv.addr)
			if _, err := c.CreateTopic(ctx, "hole", 2, sdk.TopicConfig{SyncPolicy: policy}); err != nil {
				t.Fatal(err)
			}
			for _, v := range []string{"a", "b", "c"} {
				mustPublish(ctx, t, c, "hole", 0, v)
			}
			mustPublish(ctx, t, c, "hole", 1, "z")
			c.Close()
			srv.kill()
			path := segmentPath(dir, "hole", 0, 0)
			starts, data := batchStarts(t, path)
			if len(starts) != 3 {
				t.Fatalf("%d batches in %s, want 3", len(starts), path)
			}
			data[starts[1]+16] = 0 // magic
			if err := os.WriteFile(path, data, 0o644); err != nil {
				t.Fatal(err)
			}
			srv = startServer(t, dir, "--sync-policy", policy)
			c = dialT(ctx, t, srv.addr)
			if policy == "none" {
				line := srv.waitLogLine(t, "hole before valid data", path)
				if !strings.Contains(line, `"level":"ERROR"`) || !strings.Contains(line, `"from_offset":1,"to_offset":3`) {
					t.Fatalf("hole log line %q; want ERROR with from_offset=1 to_offset=3", line)
				}
				if got := fetchValues(ctx, t, c, "hole", 0); !slicesEqual(got, []string{"a"}) {
					t.Fatalf("after the cut: %v, want [a]", got)
				}
				if res := mustPublish(ctx, t, c, "hole", 0, "d"); res.BaseOffset != 1 {
					t.Fatalf("next publish at %d, want 1", res.BaseOffset)
				}
				return
			}
			where := fmt.Sprintf("%s at byte %d", path, starts[1])
			srv.waitLogLine(t, "partition failed", where)
			ti, err := c.DescribeTopic(ctx, "hole")
			if err != nil {
				t.Fatal(err)
			}
			if perr := ti.PartitionInfos[0].Err; !errors.Is(perr, api.ErrPartitionFailed) || !strings.Contains(perr.Error(), where) {
				t.Fatalf("partition 0 error %v; want PARTITION_FAILED naming %q", perr, where)
			}
			if _, err := publishValues(ctx, c, "hole", 0, "d"); !errors.Is(err, api.ErrPartitionFailed) {
				t.Fatalf("publish to the damaged partition = %v, want PARTITION_FAILED", err)
			}
			if fi, err := os.Stat(path); err != nil || fi.Size() != int64(len(data)) {
				t.Fatalf("segment after start: %v %v; want %d bytes (nothing cut)", fi, err, len(data))
			}
			mustPublish(ctx, t, c, "hole", 1, "y")
			if got := fetchValues(ctx, t, c, "hole", 1); !slicesEqual(got, []string{"z", "y"}) {
				t.Fatalf("partition 1: %v", got)
			}
		})
	}
}
