package acl

import (
	"errors"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	tests := []struct {
		in   string
		want Binding
		text string // Format of the result; "" when it is in
	}{
		{"User:alice allow read topic:orders", Binding{"User:alice", Allow, Read, Pattern{Topic, "orders", Literal}}, ""},
		{"User:alice allow write topic:orders-*", Binding{"User:alice", Allow, Write, Pattern{Topic, "orders-", Prefixed}}, ""},
		{"User:* deny describe group:*", Binding{"User:*", Deny, Describe, Pattern{Group, "*", Literal}}, ""},
		{"User:CN=ops,O=shop allow alter cluster", Binding{"User:CN=ops,O=shop", Allow, Alter, Pattern{Cluster, "", Literal}}, ""},
		{"  User:bob\tALLOW  ClusterAction  Cluster ", Binding{"User:bob", Allow, ClusterAction, Pattern{Cluster, "", Literal}}, "User:bob allow clusteraction cluster"},
		{`"User:CN=John Smith" allow read Topic:t`, Binding{"User:CN=John Smith", Allow, Read, Pattern{Topic, "t", Literal}}, `"User:CN=John Smith" allow read topic:t`},
		{`User:a allow read group:"my group"`, Binding{"User:a", Allow, Read, Pattern{Group, "my group", Literal}}, ""},
		{`User:a allow read group:"my group"*`, Binding{"User:a", Allow, Read, Pattern{Group, "my group", Prefixed}}, ""},
		{`User:a allow read group:"g*"`, Binding{"User:a", Allow, Read, Pattern{Group, "g*", Literal}}, ""},
		{`User:a allow read group:g**`, Binding{"User:a", Allow, Read, Pattern{Group, "g*", Prefixed}}, ""},
		{`User:a allow read group:"x"`, Binding{"User:a", Allow, Read, Pattern{Group, "x", Literal}}, "User:a allow read group:x"},
	}
	for _, tt := range tests {
		got, err := Parse(tt.in)
		if err != nil {
			t.Errorf("Parse(%q): %v", tt.in, err)
			continue
		}
		if got != tt.want {
			t.Errorf("Parse(%q) = %+v, want %+v", tt.in, got, tt.want)
		}
		text := tt.text
		if text == "" {
			text = tt.in
		}
		if f := Format(got); f != text {
			t.Errorf("Format(Parse(%q)) = %q, want %q", tt.in, f, text)
		}
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", "want 4 fields"},
		{"User:a allow read", "want 4 fields"},
		{"User:a allow read topic:t extra", "want 4 fields"},
		{"alice allow read topic:t", `must start with "User:"`},
		{"User: allow read topic:t", "empty name"},
		{"User:a permit read topic:t", `permission "permit"`},
		{"User:a allow fly topic:t", `operation "fly"`},
		{"User:a allow write group:g", "does not apply to a group"},
		{"User:a allow read cluster", "does not apply to a cluster"},
		{"User:a allow read queue:t", `type "queue"`},
		{"User:a allow read topic", "want cluster, topic:NAME"},
		{"User:a allow read topic:", "topic name is empty"},
		{"User:a allow read topic:**", "the wildcard is literal"},
		{"User:a allow read topic:a*b", `topic name "a*b" holds *`},
		{"User:a allow read topic:orders*-eu*", `topic name "orders*-eu" holds *`},
		{`User:a allow read topic:"a*"`, `topic name "a*" holds *`},
		{`User:a allow read topic:"t`, "unterminated"},
		{`User:a allow read topic:"t"x`, `after the quoted name`},
		{`User:a allow read topic:a"b"`, "must be quoted whole"},
		{`Us"er":a allow read topic:t`, "principal"},
		{"User:a allow describe cluster:x", `type "cluster", want cluster, topic:NAME`},
	}
	for _, tt := range tests {
		_, err := Parse(tt.in)
		if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Parse(%q) = %v, want an ErrInvalid naming %q", tt.in, err, tt.want)
		}
	}
}

// FuzzParse: Parse never panics, and every binding it accepts formats to
// a text that parses back to the same binding (parse∘format round trip).
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"User:alice allow read topic:orders", "User:* deny all group:*", "User:a allow write topic:p-*",
		`"User:CN=a b" allow describe cluster`, `User:a allow read group:"x y"*`, `User:a allow read group:"g*"`,
		"User:a allow delete group:g**", "User:\u00e9 deny alter topic:t",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		b, err := Parse(s)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("Parse(%q): error %v is not ErrInvalid", s, err)
			}
			return
		}
		text := Format(b)
		b2, err := Parse(text)
		if err != nil {
			t.Fatalf("Parse(Format(%+v)) = Parse(%q): %v", b, text, err)
		}
		if b2 != b {
			t.Fatalf("round trip of %q: %+v, then %q gives %+v", s, b, text, b2)
		}
	})
}

// FuzzFormat: every valid binding, whatever its principal and name,
// formats to a text Parse reads back to it.
func FuzzFormat(f *testing.F) {
	f.Add("User:alice", "orders", uint8(0), uint8(0), uint8(0), true)
	f.Add("User:CN=a b,O=\"x\"", "g*", uint8(1), uint8(2), uint8(3), false)
	f.Add("User:*", "*", uint8(0), uint8(5), uint8(1), true)
	f.Fuzz(func(t *testing.T, principal, name string, typ, op, pattern uint8, allow bool) {
		b := Binding{Principal: principal, Permission: Deny, Operation: Operations[int(op)%len(Operations)],
			Pattern: Pattern{Type: ResourceTypes[int(typ)%len(ResourceTypes)], Name: name, PatternType: Literal}}
		if allow {
			b.Permission = Allow
		}
		if pattern%2 == 1 {
			b.Pattern.PatternType = Prefixed
		}
		if b.Pattern.Type == Cluster {
			b.Pattern.Name, b.Pattern.PatternType = "", Literal
		}
		if b.Validate() != nil {
			return
		}
		text := Format(b)
		got, err := Parse(text)
		if err != nil || got != b {
			t.Fatalf("Format(%+v) = %q parses to %+v, %v", b, text, got, err)
		}
	})
}
