package clusternet_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/seedqueue/sq/sdk"
	"github.com/seedqueue/sq/tier"
)

// tierSegBytes is the segment size of the tiered topic: small, so that a
// few MiB seal several segments.
const tierSegBytes = 256 << 10

// tieredValue is record i of the tiered topic: numbered, of varying
// length, made again to compare what is read back.
func tieredValue(i int) []byte {
	return fmt.Appendf(nil, "record %07d %s", i, strings.Repeat(string(rune('a'+i%26)), 40+i%60))
}

// TestTieredLeaderKilledMidUpload: in a 3-node cluster with tiered storage
// on a fake S3 served in the client namespace, the leader of a partition
// (replication factor 3, 256 KiB segments, 512 KiB of local retention) is
// killed with SIGKILL while it uploads a segment: its PUT of the segment's
// .log is stored but never answered. A new leader takes over the uploads
// from the manifest's end, records keep coming, and the killed node
// restarts. Then the bucket holds one manifest chain for the partition:
// every version stored reads and checks, their leader epochs never
// decrease, each is a prefix of the latest, whose segments run from 0
// without gap or overlap, each object present with the size and CRC-32C
// the manifest records, the orphaned upload not among them; and a
// consumer reading from offset 0 through the restarted node gets every
// acknowledged record once, in order, byte for byte, the oldest read back
// from the bucket.
func TestTieredLeaderKilledMidUpload(t *testing.T) {
	c := newCluster(t, 3)
	fake := startFakeS3(t, c)
	startCluster(t, c, "--replica-lag-time-max-ms", "3000", "--s3-bucket", fakeS3Bucket, "--s3-endpoint", fake.URL,
		"--tier-upload-interval", "100ms", "--max-batch-bytes", "65536", "--max-record-bytes", "16384")
	n1 := c.Node(1)
	sqOK(t, c.Client(), n1.Addr, "", "--control", grpcAddr(n1), "topic", "create", "tiered", "--partitions", "1", "--replication-factor", "3",
		"--segment-bytes", strconv.Itoa(tierSegBytes), "--local-retention-bytes", strconv.Itoa(2*tierSegBytes))
	waitAgree(t, c, 1, 2, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dial := sdk.DialFunc(c.Client().DialContext)
	describeVia := func(node int) (sdk.TopicInfo, error) {
		cl, err := sdk.Dial(ctx, sdk.ClientConfig{Addr: c.Node(node).Addr, Dialer: dial})
		if err != nil {
			return sdk.TopicInfo{}, err
		}
		defer cl.Close()
		return cl.DescribeTopic(ctx, "tiered")
	}
	ti, err := describeVia(1)
	if err != nil {
		t.Fatal(err)
	}
	part := tier.Partition{Topic: "tiered", TopicID: ti.ID, Partition: 0}
	old := ti.PartitionInfos[0]
	killed := nodeIndex(t, old.Leader)

	// want maps each acknowledged offset to the record stored there.
	want := map[uint64]int{}
	sent := 0
	send := func(prod *sdk.Producer, n int) {
		t.Helper()
		for end := sent + n; sent < end; {
			msgs := make([]sdk.ProducerMessage, 0, 500)
			for i := sent; i < min(sent+500, end); i++ {
				msgs = append(msgs, sdk.NewProducerMessage("tiered", tieredValue(i)))
			}
			sctx, scancel := context.WithTimeout(ctx, 30*time.Second)
			acks, err := prod.SendBatch(sctx, msgs)
			scancel()
			if err != nil {
				t.Fatalf("records %d..: %v", sent, err)
			}
			for k, a := range acks {
				if a.Err != nil {
					t.Fatalf("record %d: %v", sent+k, a.Err)
				}
				if prev, dup := want[a.Offset]; dup {
					t.Fatalf("records %d and %d both acknowledged at offset %d", prev, sent+k, a.Offset)
				}
				want[a.Offset] = sent + k
			}
			sent += len(msgs)
		}
	}
	latest := func() (*tier.Manifest, error) {
		scan, err := tier.LatestManifest(ctx, fake.Store, part)
		if err != nil {
			return nil, err
		}
		if scan.Manifest == nil {
			return nil, errors.New("no manifest yet")
		}
		return scan.Manifest, nil
	}

	// About 1 MiB, 4 segments: the leader uploads at least two.
	prod, err := sdk.NewProducer(ctx, sdk.ProducerConfig{Addr: n1.Addr, Dialer: dial})
	if err != nil {
		t.Fatal(err)
	}
	send(prod, 12000)
	eventually(t, "two segments uploaded by the first leader", func() error {
		m, err := latest()
		if err == nil && len(m.Segments) < 2 {
			err = fmt.Errorf("%d segments in manifest version %d", len(m.Segments), m.Version)
		}
		return err
	})
	// The leader's next .log PUT is stored and never answered; it is
	// killed while that upload is in flight.
	fake.Hold(c.Node(killed).IP, ".log")
	send(prod, 12000)
	prod.Close()
	phase2 := uint64(sent)
	heldKey := fake.WaitHeld(t, waitTimeout)
	before, err := latest()
	if err != nil {
		t.Fatal(err)
	}
	c.Node(killed).Kill()
	fake.Release()
	t.Logf("node %d (leader, epoch %d) killed uploading %s; manifest version %d ends at %d", killed, old.LeaderEpoch, heldKey,
		before.Version, before.Segments[len(before.Segments)-1].LastOffset+1)

	live := 1 + killed%3
	var now sdk.PartitionInfo
	eventually(t, "a new leader", func() error {
		ti, err := describeVia(live)
		if err != nil {
			return err
		}
		now = ti.PartitionInfos[0]
		if now.Leader == "" || now.Leader == old.Leader || now.LeaderEpoch <= old.LeaderEpoch {
			return fmt.Errorf("leader %q epoch %d", now.Leader, now.LeaderEpoch)
		}
		return nil
	})
	// About 800 KiB more through the new leader: with 512 KiB of local
	// retention, what it uploads first leaves its disk too.
	prod2, err := sdk.NewProducer(ctx, sdk.ProducerConfig{Addr: c.Node(nodeIndex(t, now.Leader)).Addr, Dialer: dial})
	if err != nil {
		t.Fatal(err)
	}
	send(prod2, 10000)
	prod2.Close()
	c.Node(killed).Restart()
	eventually(t, "the restarted node back in sync", func() error {
		ti, err := describeVia(killed)
		if err != nil {
			return err
		}
		if p := ti.PartitionInfos[0]; len(p.ISR) != 3 {
			return fmt.Errorf("in-sync replicas %v", p.ISR)
		}
		return nil
	})

	total := uint64(sent)
	for o := range total {
		if _, ok := want[o]; !ok {
			t.Fatalf("%d records acknowledged, none at offset %d", total, o)
		}
	}
	// The new leader's uploads: past the first leader's manifest, and
	// its local log trimmed past its own first upload, so a read from 0
	// crosses both leaders' segments in the bucket.
	var m *tier.Manifest
	var leader sdk.PartitionInfo
	eventually(t, "the new leader's uploads, and its local log trimmed", func() error {
		var err error
		if m, err = latest(); err != nil {
			return err
		}
		ti, err := describeVia(live)
		if err != nil {
			return err
		}
		leader = ti.PartitionInfos[0]
		first, found := uint64(0), false
		for _, s := range m.Segments {
			if s.LeaderEpoch > old.LeaderEpoch {
				first, found = s.BaseOffset, true
				break
			}
		}
		if !found || manifestEndOf(m) < phase2 {
			return fmt.Errorf("manifest version %d (epoch %d) ends at %d", m.Version, m.LeaderEpoch, manifestEndOf(m))
		}
		if leader.LogStartOffset <= first {
			return fmt.Errorf("leader %s's local log starts at %d, its first upload at %d", leader.Leader, leader.LogStartOffset, first)
		}
		return nil
	})

	checkBucket(ctx, t, fake, part, old.LeaderEpoch, manifestEndOf(before), heldKey)

	cons, err := sdk.NewConsumer(ctx, sdk.ConsumerConfig{Addr: c.Node(killed).Addr, Dialer: dial, Topic: "tiered",
		Partitions: []uint32{0}, StartOffsets: map[uint32]uint64{0: 0}, EndOffsets: map[uint32]uint64{0: total}})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	next := uint64(0)
	for {
		ms, err := cons.Poll(ctx)
		for _, msg := range ms {
			if msg.Offset != next {
				t.Fatalf("offset %d read after %d", msg.Offset, next)
			}
			if w := tieredValue(want[next]); string(msg.Value) != string(w) {
				t.Fatalf("offset %d: %q, want %q", next, msg.Value, w)
			}
			next++
		}
		if errors.Is(err, sdk.ErrEndOffsetsReached) {
			break
		}
		if err != nil {
			t.Fatalf("poll at %d of %d: %v", next, total, err)
		}
	}
	if next != total {
		t.Fatalf("read %d records, %d acknowledged", next, total)
	}
	ln := nodeIndex(t, leader.Leader)
	if reads := metric(t, c, c.Node(ln), "sq_tier_remote_reads_total"); reads == 0 {
		t.Errorf("leader node %d served no fetch from the bucket", ln)
	}
	t.Logf("%d records read back through node %d; manifest version %d: %d segments to %d; leader %s local log from %d",
		total, killed, m.Version, len(m.Segments), manifestEndOf(m), leader.Leader, leader.LogStartOffset)
}

// manifestEndOf is the offset after m's last segment (0 without one).
func manifestEndOf(m *tier.Manifest) uint64 {
	if len(m.Segments) == 0 {
		return 0
	}
	return m.Segments[len(m.Segments)-1].LastOffset + 1
}

// checkBucket checks that the bucket holds one manifest chain for p:
// consecutive versions that all read and check, leader epochs never
// decreasing, each version's segments a prefix of the latest's (no
// retention removed any); the latest's segments run from offset 0
// without gap, include uploads of the first leader (epoch first) and of a
// later one, and each object they list is stored with the recorded size
// and CRC-32C. orphan, the upload the first leader never saw answered,
// is not listed, and no later leader uploaded again a segment below
// confirmed, the end of the first leader's last manifest.
func checkBucket(ctx context.Context, t *testing.T, fake *fakeS3, p tier.Partition, first uint32, confirmed uint64, orphan string) {
	t.Helper()
	objs, err := fake.Store.List(ctx, p.Prefix())
	if err != nil {
		t.Fatal(err)
	}
	var versions []uint64
	for _, o := range objs {
		if v, ok := p.ParseManifestKey(o.Key); ok {
			versions = append(versions, v)
		}
	}
	if len(versions) == 0 {
		t.Fatal("no manifest in the bucket")
	}
	var chain []*tier.Manifest
	for i, v := range versions {
		if i > 0 && v != versions[i-1]+1 {
			t.Errorf("manifest versions %v stored: not one chain", versions)
		}
		m, err := tier.ReadManifest(ctx, fake.Store, p, v)
		if err != nil {
			t.Errorf("manifest version %d: %v", v, err)
			continue
		}
		chain = append(chain, m)
	}
	if t.Failed() {
		t.FailNow()
	}
	m := chain[len(chain)-1]
	for i, prev := range chain[:len(chain)-1] {
		if prev.LeaderEpoch > chain[i+1].LeaderEpoch {
			t.Errorf("manifest version %d has leader epoch %d, version %d %d", prev.Version, prev.LeaderEpoch, chain[i+1].Version, chain[i+1].LeaderEpoch)
		}
		if len(prev.Segments) > len(m.Segments) || !reflect.DeepEqual(prev.Segments, m.Segments[:len(prev.Segments)]) {
			t.Errorf("manifest version %d is not a prefix of version %d", prev.Version, m.Version)
		}
	}
	if m.LogStartOffset != 0 {
		t.Errorf("remote log start %d, want 0 (no retention)", m.LogStartOffset)
	}
	epochs := map[bool]int{}
	listed := map[string]bool{}
	next := uint64(0)
	for i, s := range m.Segments {
		if s.BaseOffset != next {
			t.Errorf("segment %d starts at %d, want %d", i, s.BaseOffset, next)
		}
		next = s.LastOffset + 1
		epochs[s.LeaderEpoch > first]++
		for _, o := range []tier.ObjectRef{s.Log, s.Index, s.TimeIndex} {
			listed[o.Key] = true
			if err := tier.Verify(ctx, fake.Store, o.Key, o.Size, o.CRC32C); err != nil {
				t.Errorf("segment %d: %v", i, err)
			}
		}
		if s.FileBaseOffset != nil {
			t.Logf("segment %d (epoch %d) uploaded whole from %d, served from %d", i, s.LeaderEpoch, *s.FileBaseOffset, s.BaseOffset)
		}
	}
	if epochs[false] == 0 || epochs[true] == 0 {
		t.Errorf("segments of epoch %d: %d; of later epochs: %d; want both", first, epochs[false], epochs[true])
	}
	if listed[orphan] {
		t.Errorf("the upload never answered, %s, is in the manifest", orphan)
	}
	var orphans []string
	for _, o := range objs {
		if _, ok := p.ParseManifestKey(o.Key); ok || listed[o.Key] {
			continue
		}
		name := strings.TrimPrefix(o.Key, p.Prefix())
		orphans = append(orphans, name)
		var base uint64
		var epoch uint32
		if _, err := fmt.Sscanf(name, "%20d-%d.", &base, &epoch); err == nil && epoch > first && base < confirmed {
			t.Errorf("%s: epoch %d uploaded again a segment below %d, which epoch %d's manifest had", name, epoch, confirmed, first)
		}
	}
	t.Logf("manifest versions %v; latest %d (epoch %d): %d segments, %d from epoch %d; objects not in it: %v",
		versions, m.Version, m.LeaderEpoch, len(m.Segments), epochs[false], first, orphans)
}
