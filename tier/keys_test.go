package tier_test

import (
	"testing"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/tier"
)

// testPartition is partition 3 of topic "orders" with a fixed id.
func testPartition(t *testing.T) tier.Partition {
	t.Helper()
	id, err := api.ParseTopicID("6f1c2e0a-93b4-4d5e-8a7f-0b1c2d3e4f50")
	if err != nil {
		t.Fatal(err)
	}
	return tier.Partition{Topic: "orders", TopicID: id, Partition: 3}
}

func TestKeys(t *testing.T) {
	p := testPartition(t)
	const prefix = "orders/6f1c2e0a-93b4-4d5e-8a7f-0b1c2d3e4f50/3/"
	if got := p.Prefix(); got != prefix {
		t.Fatalf("Prefix = %q, want %q", got, prefix)
	}
	k := p.SegmentKeys(4096, 7)
	want := tier.SegmentKeys{
		Log:       prefix + "00000000000000004096-7.log",
		Index:     prefix + "00000000000000004096-7.index",
		TimeIndex: prefix + "00000000000000004096-7.timeindex",
	}
	if k != want {
		t.Fatalf("SegmentKeys = %+v, want %+v", k, want)
	}
	if got := p.SegmentKeys(1<<64-1, 1<<32-1).Log; got != prefix+"18446744073709551615-4294967295.log" {
		t.Fatalf("largest segment key = %q", got)
	}
	if got := p.ManifestKey(12); got != prefix+"manifest-00000000000000000012.json" {
		t.Fatalf("ManifestKey = %q", got)
	}
}

func TestParseManifestKey(t *testing.T) {
	p := testPartition(t)
	prefix := p.Prefix()
	for _, tc := range []struct {
		key string
		v   uint64
		ok  bool
	}{
		{p.ManifestKey(1), 1, true},
		{p.ManifestKey(1<<64 - 1), 1<<64 - 1, true},
		{prefix + "manifest-00000000000000000012.json", 12, true},
		{prefix + "manifest-12.json", 0, false},                   // not padded
		{prefix + "manifest-0000000000000000001x.json", 0, false}, // not a number
		{prefix + "manifest-+0000000000000000012.json", 0, false}, // sign
		{prefix + "manifest-00000000000000000012.json.tmp", 0, false},
		{prefix + "manifest-99999999999999999999.json", 0, false}, // above u64
		{prefix + "00000000000000000000-0.log", 0, false},
		{"other/6f1c2e0a-93b4-4d5e-8a7f-0b1c2d3e4f50/3/manifest-00000000000000000012.json", 0, false},
	} {
		v, ok := p.ParseManifestKey(tc.key)
		if v != tc.v || ok != tc.ok {
			t.Errorf("ParseManifestKey(%q) = %d, %v; want %d, %v", tc.key, v, ok, tc.v, tc.ok)
		}
	}
}

func TestPartitionValidate(t *testing.T) {
	good := testPartition(t)
	if err := good.Validate(); err != nil {
		t.Fatalf("Validate of %v: %v", good, err)
	}
	for _, bad := range []tier.Partition{
		{Topic: "", TopicID: good.TopicID},
		{Topic: "..", TopicID: good.TopicID},
		{Topic: "a/b", TopicID: good.TopicID},
		{Topic: "orders"},
		{Topic: "orders", TopicID: good.TopicID, Partition: -1},
	} {
		if err := bad.Validate(); err == nil {
			t.Errorf("Validate of %+v: nil, want an error", bad)
		}
	}
}
