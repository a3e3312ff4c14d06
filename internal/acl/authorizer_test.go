package acl

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/seedqueue/sq/api"
)

func mustParse(t *testing.T, lines ...string) []Binding {
	t.Helper()
	var out []Binding
	for _, l := range lines {
		b, err := Parse(l)
		if err != nil {
			t.Fatalf("Parse(%q): %v", l, err)
		}
		out = append(out, b)
	}
	return out
}

// TestAuthorize: the matching rules of Kafka's AclAuthorizer, each row a
// set of bindings and one request.
func TestAuthorize(t *testing.T) {
	const alice, bob = "User:alice", "User:bob"
	tests := []struct {
		name      string
		acls      []string
		principal string
		op        Operation
		res       Resource
		want      bool
	}{
		{"no ACL: deny", nil, alice, Read, TopicResource("orders"), false},
		{"literal allow", []string{"User:alice allow read topic:orders"}, alice, Read, TopicResource("orders"), true},
		{"literal is exact", []string{"User:alice allow read topic:orders"}, alice, Read, TopicResource("orders2"), false},
		{"other principal", []string{"User:alice allow read topic:orders"}, bob, Read, TopicResource("orders"), false},
		{"other operation", []string{"User:alice allow read topic:orders"}, alice, Write, TopicResource("orders"), false},
		{"other resource type", []string{"User:alice allow read topic:orders"}, alice, Read, GroupResource("orders"), false},
		{"wildcard resource", []string{"User:alice allow read topic:*"}, alice, Read, TopicResource("anything"), true},
		{"wildcard principal", []string{"User:* allow read topic:orders"}, bob, Read, TopicResource("orders"), true},
		{"prefixed", []string{"User:alice allow write topic:orders-*"}, alice, Write, TopicResource("orders-eu"), true},
		{"prefixed equal to the name", []string{"User:alice allow write topic:orders-*"}, alice, Write, TopicResource("orders-"), true},
		{"prefixed does not match shorter", []string{"User:alice allow write topic:orders-*"}, alice, Write, TopicResource("orders"), false},
		{"all allows every operation", []string{"User:alice allow all topic:orders"}, alice, Delete, TopicResource("orders"), true},
		{"deny wins over allow", []string{"User:alice allow read topic:orders", "User:alice deny read topic:orders"}, alice, Read, TopicResource("orders"), false},
		{"deny of User:* wins over own allow", []string{"User:alice allow read topic:orders", "User:* deny read topic:*"}, alice, Read, TopicResource("orders"), false},
		{"prefixed deny wins over literal allow", []string{"User:alice allow all topic:orders-eu", "User:alice deny write topic:orders-*"}, alice, Write, TopicResource("orders-eu"), false},
		{"deny all denies every operation", []string{"User:alice allow read topic:orders", "User:alice deny all topic:orders"}, alice, Read, TopicResource("orders"), false},
		{"deny of another operation does not deny", []string{"User:alice allow read topic:orders", "User:alice deny write topic:orders"}, alice, Read, TopicResource("orders"), true},
		{"read implies describe", []string{"User:alice allow read topic:orders"}, alice, Describe, TopicResource("orders"), true},
		{"write implies describe", []string{"User:alice allow write topic:orders"}, alice, Describe, TopicResource("orders"), true},
		{"delete implies describe", []string{"User:alice allow delete topic:orders"}, alice, Describe, TopicResource("orders"), true},
		{"alter implies describe", []string{"User:alice allow alter topic:orders"}, alice, Describe, TopicResource("orders"), true},
		{"create does not imply describe", []string{"User:alice allow create topic:orders"}, alice, Describe, TopicResource("orders"), false},
		{"describe implies nothing", []string{"User:alice allow describe topic:orders"}, alice, Read, TopicResource("orders"), false},
		{"deny read does not deny describe", []string{"User:alice allow write topic:orders", "User:alice deny read topic:orders"}, alice, Describe, TopicResource("orders"), true},
		{"group read", []string{"User:alice allow read group:billing"}, alice, Read, GroupResource("billing"), true},
		{"cluster describe", []string{"User:alice allow describe cluster"}, alice, Describe, ClusterResource(), true},
		{"cluster alter implies describe", []string{"User:alice allow alter cluster"}, alice, Describe, ClusterResource(), true},
		{"create on the cluster creates any topic", []string{"User:alice allow create cluster"}, alice, Create, TopicResource("new"), true},
		{"create on the cluster, denied on the topic", []string{"User:alice allow create cluster", "User:alice deny create topic:new"}, alice, Create, TopicResource("new"), false},
		{"super user without ACL", nil, "User:admin", Delete, TopicResource("orders"), true},
		{"super user despite deny", []string{"User:admin deny all topic:*"}, "User:admin", Delete, TopicResource("orders"), true},
		{"anonymous without ACL", nil, "User:ANONYMOUS", Describe, ClusterResource(), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			denied := 0
			a, err := New(Options{Enabled: true, SuperUsers: []string{"User:admin"}, OnDeny: func(Operation, ResourceType) { denied++ }})
			if err != nil {
				t.Fatal(err)
			}
			a.SetBindings(mustParse(t, tt.acls...))
			if got := a.Authorize(tt.principal, tt.op, tt.res); got != tt.want {
				t.Fatalf("Authorize(%s, %s, %+v) = %v, want %v", tt.principal, tt.op, tt.res, got, tt.want)
			}
			if want := map[bool]int{true: 0, false: 1}[tt.want]; denied != want {
				t.Errorf("OnDeny called %d times, want %d", denied, want)
			}
			err = a.Check(tt.principal, tt.op, tt.res)
			if (err == nil) != tt.want {
				t.Fatalf("Check: %v", err)
			}
			if err != nil && !errors.Is(err, api.ErrAuthorizationFailed) {
				t.Errorf("Check: %v is not AUTHORIZATION_FAILED", err)
			}
		})
	}
}

func TestAuthorizeOffAndNil(t *testing.T) {
	var nilA *Authorizer
	if !nilA.Allowed("User:x", Delete, TopicResource("t")) || nilA.Enabled() {
		t.Fatal("a nil Authorizer must allow everything")
	}
	a, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	a.SetBindings(mustParse(t, "User:x deny all topic:*"))
	if !a.Authorize("User:x", Delete, TopicResource("t")) {
		t.Fatal("authorization off must allow everything")
	}
}

func TestAuthorizeAnyOf(t *testing.T) {
	tests := []struct {
		acls []string
		want bool
	}{
		{nil, false},
		{[]string{"User:alice allow write topic:orders"}, true},
		{[]string{"User:alice allow write topic:orders-*"}, true},
		{[]string{"User:* allow all topic:orders"}, true},
		{[]string{"User:alice allow read topic:orders"}, false},
		{[]string{"User:alice allow write topic:orders", "User:alice deny write topic:*"}, false},
		{[]string{"User:alice allow write topic:orders", "User:alice deny write topic:other"}, true},
	}
	for _, tt := range tests {
		a, _ := New(Options{Enabled: true})
		a.SetBindings(mustParse(t, tt.acls...))
		if got := a.AuthorizeAnyOf("User:alice", Write, Topic); got != tt.want {
			t.Errorf("%v: AuthorizeAnyOf = %v, want %v", tt.acls, got, tt.want)
		}
	}
}

func TestSuperUsers(t *testing.T) {
	tests := []struct {
		in   string
		want []string
	}{
		{"", nil},
		{"User:admin", []string{"User:admin"}},
		{" User:admin, ,User:CN=node-1,O=sq ", []string{"User:admin", "User:CN=node-1,O=sq"}},
		{"User:CN=node-1,O=sq;User:CN=node-2,O=sq,", []string{"User:CN=node-1,O=sq", "User:CN=node-2,O=sq"}},
	}
	for _, tt := range tests {
		got, err := ParseSuperUsers(tt.in)
		if err != nil || !slices.Equal(got, tt.want) {
			t.Errorf("ParseSuperUsers(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
	if _, err := ParseSuperUsers("admin"); !errors.Is(err, ErrInvalid) {
		t.Fatalf("a principal without User: must be refused, got %v", err)
	}
	if _, err := New(Options{SuperUsers: []string{"alice"}}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("New with a bad super user: %v", err)
	}
}

// TestCheckNamesTheDeny: a request refused by a deny ACL says so (deny
// wins over the allow the user may be looking at), and one without an
// allow says no ACL allows it.
func TestCheckNamesTheDeny(t *testing.T) {
	tests := []struct {
		name string
		acls []string
		res  Resource
		want string
	}{
		{"denied despite a prefixed allow", []string{"User:app allow write topic:logs-*", "User:app deny write topic:logs-b"}, TopicResource("logs-b"), "a deny ACL matches it"},
		{"denied for every principal", []string{"User:app allow write topic:logs-*", "User:* deny all topic:logs-b"}, TopicResource("logs-b"), "a deny ACL matches it"},
		{"no allow", []string{"User:app allow write topic:logs-*"}, TopicResource("orders"), "no ACL allows it"},
		{"a deny of another topic", []string{"User:app deny write topic:logs-b"}, TopicResource("orders"), "no ACL allows it"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := New(Options{Enabled: true})
			if err != nil {
				t.Fatal(err)
			}
			a.SetBindings(mustParse(t, tt.acls...))
			err = a.Check("User:app", Write, tt.res)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Check = %v, want an error saying %q", err, tt.want)
			}
		})
	}
}
