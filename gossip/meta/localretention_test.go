package meta

import (
	"bytes"
	"reflect"
	"strings"
	"testing"

	"github.com/seedqueue/sq/engine"
)

// The local retention settings travel in the metadata log and snapshots;
// at their default (-2) they are left out of the encoding, so a topic that
// never sets them encodes, and hashes, as before they existed; entries and
// snapshots written before them read back with -2.
func TestLocalRetentionInMetadata(t *testing.T) {
	cfg := engine.TopicConfig{SyncPolicy: "none", RetentionMs: 7200000, RetentionBytes: -1, ReplicationFactor: 1,
		LocalRetentionMs: 3600000, LocalRetentionBytes: 0}
	for _, c := range []Command{
		{Op: OpAlterTopic, Name: "t", ID: tid(1), Config: &cfg},
		{Op: OpCreateTopic, Topic: &Topic{Name: "t", ID: tid(1), Config: cfg,
			Partitions: []Partition{{Replicas: []string{"n1"}, Leader: "n1", ISR: []string{"n1"}}}}},
	} {
		b, err := Encode(c)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(b, []byte(`"local_retention_ms":3600000,"local_retention_bytes":0`)) {
			t.Fatalf("%s encodes as %s", c.Op, b)
		}
		got, err := Decode(b)
		if err != nil || !reflect.DeepEqual(got, c) {
			t.Fatalf("%s decoded as %+v (%v), want %+v", c.Op, got, err, c)
		}
	}

	// An entry written before the settings existed.
	old := "\x01" + `{"op":"alter-topic","name":"t","id":"` + tid(1).String() + `","config":{"sync_policy":"none","segment_bytes":65536,"retention_bytes":-1,"retention_ms":86400000,"max_record_bytes":1048576,"segment_ms":86400000,"replication_factor":1}}`
	c, err := Decode([]byte(old))
	if err != nil {
		t.Fatal(err)
	}
	if c.Config.LocalRetentionMs != engine.LocalRetentionDefault || c.Config.LocalRetentionBytes != engine.LocalRetentionDefault {
		t.Fatalf("old entry decoded with local retention %d ms, %d bytes", c.Config.LocalRetentionMs, c.Config.LocalRetentionBytes)
	}
	again, err := Encode(c)
	if err != nil || string(again) != old {
		t.Fatalf("old entry re-encodes as %s (%v), want %s", again, err, old)
	}
	// An unknown setting in a config is refused, as anywhere in an entry.
	if _, err := Decode([]byte(strings.Replace(old, `"sync_policy"`, `"cleanup_policy":"compact","sync_policy"`, 1))); err == nil || !strings.Contains(err.Error(), "unknown field") {
		t.Fatalf("an unknown config key: %v", err)
	}

	// A state whose topics never set them: the same snapshot and Hash
	// whether the configs say -2 or come from an old snapshot.
	s := base(t)
	resolved := s.Topics["orders"].Config
	resolved.LocalRetentionMs, resolved.LocalRetentionBytes = engine.LocalRetentionDefault, engine.LocalRetentionDefault
	mustApply(t, s, Command{Op: OpAlterTopic, Name: "orders", ID: tid(1), Config: &resolved})
	snap, err := s.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(snap, []byte("local_retention")) {
		t.Fatalf("default local retention in the snapshot: %s", snap)
	}
	restored, err := UnmarshalState(snap)
	if err != nil {
		t.Fatal(err)
	}
	if c := restored.Topics["orders"].Config; c.LocalRetentionMs != engine.LocalRetentionDefault || c.LocalRetentionBytes != engine.LocalRetentionDefault {
		t.Fatalf("restored config %+v", c)
	}
	if restored.Hash() != s.Hash() {
		t.Fatal("the hash changed through a snapshot")
	}
	// Setting them changes the state, and a snapshot keeps them.
	set := restored.Topics["orders"].Config
	set.LocalRetentionMs, set.LocalRetentionBytes = 60000, 4096
	mustApply(t, restored, Command{Op: OpAlterTopic, Name: "orders", ID: tid(1), Config: &set})
	if restored.Hash() == s.Hash() {
		t.Fatal("setting local retention left the hash unchanged")
	}
	snap, err = restored.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	again2, err := UnmarshalState(snap)
	if err != nil || again2.Topics["orders"].Config != set || again2.Hash() != restored.Hash() {
		t.Fatalf("snapshot with local retention: %+v (%v)", again2.Topics["orders"].Config, err)
	}
}
