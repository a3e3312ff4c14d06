package acl

import (
	"errors"
	"slices"
	"testing"
)

func TestFilter(t *testing.T) {
	all := mustParse(t,
		"User:alice allow read topic:orders",
		"User:alice allow write topic:orders-*",
		"User:* deny describe topic:*",
		"User:bob allow read group:billing",
		"User:bob allow describe cluster",
	)
	tests := []struct {
		name string
		f    Filter
		want []int // indexes into all
	}{
		{"empty selects everything", Filter{}, []int{0, 1, 2, 3, 4}},
		{"by principal", Filter{Principal: "User:alice"}, []int{0, 1}},
		{"by permission", Filter{Permission: Deny}, []int{2}},
		{"by operation", Filter{Operation: Read}, []int{0, 3}},
		{"by type", Filter{Type: Group}, []int{3}},
		{"by name, any pattern", Filter{Type: Topic, Name: "orders-"}, []int{1}},
		{"literal only", Filter{Type: Topic, PatternType: Literal}, []int{0, 2}},
		{"prefixed only", Filter{PatternType: Prefixed}, []int{1}},
		{"match: every pattern that applies", Filter{Type: Topic, Name: "orders-eu", PatternType: Match}, []int{1, 2}},
		{"match the literal", Filter{Type: Topic, Name: "orders", PatternType: Match}, []int{0, 2}},
		{"match the cluster", Filter{Type: Cluster, PatternType: Match}, []int{4}},
	}
	for _, tt := range tests {
		if err := tt.f.Validate(); err != nil {
			t.Fatalf("%s: Validate: %v", tt.name, err)
		}
		var want []Binding
		for _, i := range tt.want {
			want = append(want, all[i])
		}
		if got := Select(all, []Filter{tt.f}); !slices.Equal(got, want) {
			t.Errorf("%s: Select = %v, want %v", tt.name, got, want)
		}
	}
}

func TestFilterValidate(t *testing.T) {
	for _, f := range []Filter{
		{Principal: "alice"}, {Permission: "maybe"}, {Operation: "fly"}, {Type: "queue"},
		{PatternType: "regex"}, {PatternType: Match},
	} {
		if err := f.Validate(); !errors.Is(err, ErrInvalid) {
			t.Errorf("%+v: Validate = %v, want ErrInvalid", f, err)
		}
	}
}

func TestSorted(t *testing.T) {
	bs := mustParse(t, "User:b allow read topic:x", "User:a allow read topic:x", "User:b allow read topic:x")
	got := Sorted(bs)
	if len(got) != 2 || got[0].Principal != "User:a" || bs[0].Principal != "User:b" {
		t.Fatalf("Sorted = %v (input %v)", got, bs)
	}
	if Sorted(nil) != nil {
		t.Fatal("Sorted(nil) must be nil")
	}
}
