package acl

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"
)

// ResourceType is the kind of resource a binding protects.
type ResourceType string

// The resource types (Kafka's Topic, Group and Cluster).
const (
	Topic   ResourceType = "topic"
	Group   ResourceType = "group"
	Cluster ResourceType = "cluster"
)

// PatternType says how a Pattern's name names resources.
type PatternType string

// The pattern types (KIP-290).
const (
	// Literal names one resource, or every resource of the type when the
	// name is Wildcard.
	Literal PatternType = "literal"
	// Prefixed names every resource whose name starts with the name.
	Prefixed PatternType = "prefixed"
)

// Wildcard is the literal name that matches every resource of its type.
const Wildcard = "*"

// Operation is what a request does to a resource.
type Operation string

// The operations (Kafka's AclOperation, those SQ's requests use).
const (
	Read          Operation = "read"
	Write         Operation = "write"
	Create        Operation = "create"
	Delete        Operation = "delete"
	Describe      Operation = "describe"
	Alter         Operation = "alter"
	ClusterAction Operation = "clusteraction"
	// All matches every operation.
	All Operation = "all"
)

// Operations lists every Operation, All last.
var Operations = []Operation{Read, Write, Create, Delete, Describe, Alter, ClusterAction, All}

// ResourceTypes lists every ResourceType.
var ResourceTypes = []ResourceType{Topic, Group, Cluster}

// validOps are the operations a binding may name for each resource type,
// as in Kafka (a group is read, described or deleted; the cluster is
// described, altered, has topics created on it, and takes node-to-node
// calls).
var validOps = map[ResourceType][]Operation{
	Topic:   {Read, Write, Create, Delete, Describe, Alter, All},
	Group:   {Read, Delete, Describe, All},
	Cluster: {Create, Describe, Alter, ClusterAction, All},
}

// Permission is a binding's verdict.
type Permission string

// The permissions.
const (
	Allow Permission = "allow"
	Deny  Permission = "deny"
)

// PrincipalPrefix starts every principal ("User:NAME").
const PrincipalPrefix = "User:"

// AnyPrincipal is the principal of a binding that applies to every
// principal.
const AnyPrincipal = "User:*"

// MaxNameBytes bounds a principal's and a resource name's length, in
// bytes.
const MaxNameBytes = 1024

// Pattern names the resources a binding applies to. The cluster's
// pattern has an empty Name and PatternType Literal.
type Pattern struct {
	Type        ResourceType `json:"type"`
	Name        string       `json:"name,omitempty"`
	PatternType PatternType  `json:"pattern"`
}

// Binding is one access control entry: Permission for Principal to do
// Operation on the resources of Pattern.
type Binding struct {
	Principal  string     `json:"principal"`
	Permission Permission `json:"permission"`
	Operation  Operation  `json:"operation"`
	Pattern    Pattern    `json:"resource"`
}

// Resource is the resource one request acts on. The cluster's Name is
// empty.
type Resource struct {
	Type ResourceType
	Name string
}

// TopicResource, GroupResource and ClusterResource build the Resource of
// a request.
func TopicResource(name string) Resource { return Resource{Type: Topic, Name: name} }

// GroupResource is the Resource of consumer group name.
func GroupResource(name string) Resource { return Resource{Type: Group, Name: name} }

// ClusterResource is the cluster's Resource.
func ClusterResource() Resource { return Resource{Type: Cluster} }

// ErrInvalid is the class of every error of Validate and Parse.
var ErrInvalid = errors.New("invalid ACL")

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

// ValidatePrincipal checks that p is "User:" and a non-empty name of at
// most MaxNameBytes bytes of valid UTF-8.
func ValidatePrincipal(p string) error {
	name, ok := strings.CutPrefix(p, PrincipalPrefix)
	switch {
	case !ok:
		return invalid("principal %q must start with %q (User:NAME, or User:* for every principal)", p, PrincipalPrefix)
	case name == "":
		return invalid("principal %q has an empty name", p)
	case len(p) > MaxNameBytes:
		return invalid("principal of %d bytes, at most %d", len(p), MaxNameBytes)
	case !utf8.ValidString(p):
		return invalid("principal %q is not valid UTF-8", p)
	}
	return nil
}

// Validate checks p: a known resource type and pattern type, an empty
// name for the cluster (literal), a non-empty valid UTF-8 name of at
// most MaxNameBytes otherwise, and no prefixed wildcard.
func (p Pattern) Validate() error {
	switch p.Type {
	case Cluster:
		if p.Name != "" || p.PatternType != Literal {
			return invalid("the cluster resource has no name and no prefix")
		}
		return nil
	case Topic, Group:
	default:
		return invalid("resource type %q: want topic, group or cluster", p.Type)
	}
	switch p.PatternType {
	case Literal, Prefixed:
	default:
		return invalid("pattern type %q: want literal or prefixed", p.PatternType)
	}
	switch {
	case p.Name == "":
		return invalid("%s name is empty", p.Type)
	case len(p.Name) > MaxNameBytes:
		return invalid("%s name of %d bytes, at most %d", p.Type, len(p.Name), MaxNameBytes)
	case !utf8.ValidString(p.Name):
		return invalid("%s name %q is not valid UTF-8", p.Type, p.Name)
	case p.PatternType == Prefixed && p.Name == Wildcard:
		return invalid("prefix %q: the wildcard is literal (%s:*)", Wildcard, p.Type)
	case p.Type == Topic && p.Name != Wildcard && strings.Contains(p.Name, Wildcard):
		// No topic name holds '*' (engine's names: [a-zA-Z0-9._-]), so
		// such a pattern would never match: a glob typed by mistake.
		return invalid("topic name %q holds *, which no topic name may: a prefix has one * at its end (topic:orders-*), every topic is topic:*", p.Name)
	}
	return nil
}

// Validate checks every field of b, and that its operation applies to
// its resource type (Kafka's rule: a group is read, described or
// deleted; the cluster is created on, described, altered or takes
// clusteraction).
func (b Binding) Validate() error {
	if err := ValidatePrincipal(b.Principal); err != nil {
		return err
	}
	if b.Permission != Allow && b.Permission != Deny {
		return invalid("permission %q: want allow or deny", b.Permission)
	}
	if err := b.Pattern.Validate(); err != nil {
		return err
	}
	if !slices.Contains(Operations, b.Operation) {
		return invalid("operation %q: want one of %s", b.Operation, opList(Operations))
	}
	if ops := validOps[b.Pattern.Type]; !slices.Contains(ops, b.Operation) {
		return invalid("operation %s does not apply to a %s: want one of %s", b.Operation, b.Pattern.Type, opList(ops))
	}
	return nil
}

func opList(ops []Operation) string {
	s := make([]string, len(ops))
	for i, o := range ops {
		s[i] = string(o)
	}
	return strings.Join(s, ", ")
}

// matches reports whether p names resource r.
func (p Pattern) matches(r Resource) bool {
	if p.Type != r.Type {
		return false
	}
	switch p.PatternType {
	case Literal:
		return p.Name == r.Name || p.Name == Wildcard || p.Type == Cluster
	case Prefixed:
		return strings.HasPrefix(r.Name, p.Name)
	}
	return false
}

// Compare orders bindings by principal, resource type, pattern type,
// name, operation and permission: the order State keeps and List returns.
func Compare(a, b Binding) int {
	return cmpStrings(
		[]string{a.Principal, string(a.Pattern.Type), string(a.Pattern.PatternType), a.Pattern.Name, string(a.Operation), string(a.Permission)},
		[]string{b.Principal, string(b.Pattern.Type), string(b.Pattern.PatternType), b.Pattern.Name, string(b.Operation), string(b.Permission)})
}

func cmpStrings(a, b []string) int {
	for i := range a {
		if c := strings.Compare(a[i], b[i]); c != 0 {
			return c
		}
	}
	return 0
}

// Sorted returns bs sorted by Compare with duplicates removed (a new
// slice; nil for none).
func Sorted(bs []Binding) []Binding {
	if len(bs) == 0 {
		return nil
	}
	out := slices.Clone(bs)
	slices.SortFunc(out, Compare)
	return slices.Compact(out)
}
