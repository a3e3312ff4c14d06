package meta

import (
	"bytes"
	"reflect"
	"strings"
	"testing"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/engine"
)

// sampleCommands holds one command of every op.
func sampleCommands() []Command {
	cfg := engine.TopicConfig{RetentionMs: 9, ReplicationFactor: 1}
	return []Command{
		{Op: OpRegisterNode, Node: &Node{ID: "n1", DataDirID: "d", GRPCAddr: "a:1", DataAddr: "a:2", GossipAddr: "a:3", RaftAddr: "a:4", HTTPAddr: "a:5"}},
		{Op: OpRemoveNode, NodeID: "n1", Leaders: []LeaderChange{{Topic: "t", ID: tid(1), Partition: 2, Leader: "n2", Epoch: 3}}},
		{Op: OpCreateTopic, Topic: newTopic("t", 1)},
		{Op: OpDeleteTopic, Name: "t", ID: tid(1)},
		{Op: OpAlterTopic, Name: "t", ID: tid(1), Config: &cfg},
		{Op: OpCreatePartitions, Name: "t", ID: tid(1), NewPartitions: []Partition{{Replicas: []string{"n1"}, Leader: "n1"}}},
		{Op: OpSetLeaders, Leaders: []LeaderChange{{Topic: "t", ID: tid(1), Leader: "n1"}}},
		{Op: OpMarkData, Name: "t", ID: tid(1), Partition: 1, NodeID: "n1"},
		{Op: OpImport, Topics: []*Topic{newTopic("t", 1), newTopic("u", 2)}},
		{Op: OpAssignGroup, Name: "billing", NodeID: "n2"},
		{Op: OpUnassignGroup, Name: "billing", NodeID: "n2"},
		{Op: OpSetISR, Name: "t", ID: tid(1), Partition: 1, Epoch: 4, ISR: []string{"n1", "n2"}},
	}
}

func TestEncodeDecodeRoundTrip(t *testing.T) {
	for _, c := range sampleCommands() {
		t.Run(string(c.Op), func(t *testing.T) {
			b, err := Encode(c)
			if err != nil {
				t.Fatal(err)
			}
			if b[0] != CommandVersion {
				t.Fatalf("version byte %d", b[0])
			}
			got, err := Decode(b)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, c) {
				t.Fatalf("decoded %+v, want %+v", got, c)
			}
		})
	}
}

func TestDecodeRefuses(t *testing.T) {
	good, err := Encode(Command{Op: OpDeleteTopic, Name: "t", ID: tid(1)})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, in, want string
	}{
		{"empty", "", "empty command"},
		{"version 0", "\x00" + string(good[1:]), "version 0"},
		{"version 2", "\x02" + string(good[1:]), "version 2"},
		{"unknown op", "\x01" + `{"op":"explode"}`, `unknown op "explode"`},
		{"no op", "\x01{}", `unknown op ""`},
		{"unknown field", "\x01" + `{"op":"delete-topic","color":1}`, "unknown field"},
		{"trailing data", string(good) + "{}", "trailing data"},
		{"not json", "\x01{", "decoding a command"},
		{"bad topic id", "\x01" + `{"op":"delete-topic","id":"zz"}`, "not a UUID"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Decode([]byte(tc.in))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one containing %q", err, tc.want)
			}
		})
	}
	if _, err := Encode(Command{Op: "explode"}); err == nil {
		t.Fatal("Encode accepted an unknown op")
	}
}

func TestResultRoundTrip(t *testing.T) {
	nl := api.NewError(api.CodeNotLeader, "not here")
	nl.LeaderID, nl.LeaderAddr = "n2", "h:1"
	for _, r := range []Result{
		{},
		{Moved: 3},
		{Topic: newTopic("t", 1)},
		{Err: api.NewError(api.CodeTopicExists, "topic %q already exists", "t")},
		{Err: nl},
	} {
		b, err := EncodeResult(r)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeResult(b)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, r) {
			t.Fatalf("decoded %+v, want %+v", got, r)
		}
	}
	for _, in := range []string{"", "\x02{}", "\x01{", "\x01{\"x\":1}"} {
		if _, err := DecodeResult([]byte(in)); err == nil {
			t.Fatalf("DecodeResult(%q) accepted", in)
		}
	}
}

func TestSnapshotRoundTrip(t *testing.T) {
	s := base(t)
	s.DeletedIDs = []api.TopicID{tid(4)}
	s.Imported = true
	b, err := s.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	got, err := UnmarshalState(b)
	if err != nil {
		t.Fatal(err)
	}
	if got.Hash() != s.Hash() || !reflect.DeepEqual(got, s.Clone()) {
		t.Fatalf("round trip changed the state:\n%+v\n%+v", got, s)
	}
	empty, err := NewState().Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if got, err := UnmarshalState(empty); err != nil || got.Hash() != NewState().Hash() || got.Topics == nil || got.Nodes == nil {
		t.Fatalf("empty state: %v %+v", err, got)
	}
	for name, in := range map[string]string{
		"empty":         "",
		"version":       "\x02" + string(b[1:]),
		"truncated":     string(b[:len(b)-1]),
		"unknown":       "\x01{\"shards\":1}",
		"topic key":     "\x01{\"topics\":{\"a\":{\"name\":\"b\"}}}",
		"nil topic":     "\x01{\"topics\":{\"a\":null}}",
		"node key":      "\x01{\"nodes\":{\"a\":{\"id\":\"b\"}}}",
		"trailing":      string(b) + " 1",
		"not an object": "\x01[]",
	} {
		if _, err := UnmarshalState([]byte(in)); err == nil {
			t.Errorf("%s: UnmarshalState accepted %q", name, in)
		}
	}
}

func TestHashCanonical(t *testing.T) {
	a := base(t)
	b := base(t)
	// Same content, built differently: empty against nil slices, nodes
	// registered in another order.
	b.DeletedIDs = []api.TopicID{}
	b.Topics["orders"].Partitions[0].ISR = append([]string{}, b.Topics["orders"].Partitions[0].ISR...)
	c := withNodes(t, "n3", "n1", "n2")
	addTopic(t, c, "orders", 1, 3, 2)
	if a.Hash() != b.Hash() || a.Hash() != c.Hash() {
		t.Fatal("equal states hash differently")
	}
	if len(a.Hash()) != 64 {
		t.Fatalf("hash %q is not 64 hex digits", a.Hash())
	}
	b.Topics["orders"].Partitions[0].Replicas = []string{"n2", "n1"} // order matters
	if a.Hash() == b.Hash() {
		t.Fatal("replica order does not change the hash")
	}
}

func FuzzDecode(f *testing.F) {
	for _, c := range sampleCommands() {
		b, err := Encode(c)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{})
	f.Add([]byte{1})
	f.Add([]byte("\x01{\"op\":\"set-leaders\",\"leaders\":[{\"topic\":\"orders\",\"partition\":-5}]}"))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := Decode(b)
		if err != nil {
			return
		}
		// A decoded command encodes to bytes that decode and encode to
		// the same bytes (an empty list and a missing one are alike), and
		// applying it never panics, whether it is accepted or refused.
		again, err := Encode(c)
		if err != nil {
			t.Fatalf("re-encoding %+v: %v", c, err)
		}
		c2, err := Decode(again)
		if err != nil {
			t.Fatalf("decoding %q: %v", again, err)
		}
		if third, err := Encode(c2); err != nil || !bytes.Equal(third, again) {
			t.Fatalf("round trip %q -> %q (%v)", again, third, err)
		}
		s := base(t)
		before := s.Hash()
		if r := s.Apply(c); r.Err != nil && s.Hash() != before {
			t.Fatalf("refused %+v changed the state", c)
		}
	})
}
