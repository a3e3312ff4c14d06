package acl

import "strings"

// Match is the Filter pattern type that selects every binding whose
// pattern applies to the filter's resource (Kafka's
// PatternType.MATCH): the literal name, the wildcard, and every prefix of
// the name.
const Match PatternType = "match"

// Filter selects bindings, as Kafka's AclBindingFilter: each empty field
// matches anything. With PatternType Literal or Prefixed (or empty) a
// non-empty Name must equal the binding's; with Match, the binding's
// pattern must apply to the resource (Type, Name).
type Filter struct {
	Principal   string       `json:"principal,omitempty"`
	Permission  Permission   `json:"permission,omitempty"`
	Operation   Operation    `json:"operation,omitempty"`
	Type        ResourceType `json:"type,omitempty"`
	Name        string       `json:"name,omitempty"`
	PatternType PatternType  `json:"pattern,omitempty"`
}

// Validate checks that each set field of f holds a known value.
func (f Filter) Validate() error {
	if f.Principal != "" {
		if err := ValidatePrincipal(f.Principal); err != nil {
			return err
		}
	}
	if f.Permission != "" && f.Permission != Allow && f.Permission != Deny {
		return invalid("permission %q: want allow or deny", f.Permission)
	}
	if f.Operation != "" && !contains(Operations, f.Operation) {
		return invalid("operation %q: want one of %s", f.Operation, opList(Operations))
	}
	switch f.Type {
	case "", Topic, Group, Cluster:
	default:
		return invalid("resource type %q: want topic, group or cluster", f.Type)
	}
	switch f.PatternType {
	case "", Literal, Prefixed:
	case Match:
		if f.Type == "" {
			return invalid("pattern type match needs a resource type")
		}
	default:
		return invalid("pattern type %q: want literal, prefixed or match", f.PatternType)
	}
	return nil
}

func contains[T comparable](s []T, v T) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// Matches reports whether f selects b.
func (f Filter) Matches(b Binding) bool {
	switch {
	case f.Principal != "" && f.Principal != b.Principal,
		f.Permission != "" && f.Permission != b.Permission,
		f.Operation != "" && f.Operation != b.Operation,
		f.Type != "" && f.Type != b.Pattern.Type:
		return false
	}
	switch f.PatternType {
	case Match:
		return b.Pattern.matches(Resource{Type: f.Type, Name: f.Name}) || f.Name == "" && f.Type == b.Pattern.Type
	case Literal, Prefixed:
		if f.PatternType != b.Pattern.PatternType {
			return false
		}
	}
	return f.Name == "" || f.Name == b.Pattern.Name
}

// Select returns the bindings of bs that any of fs selects, in their
// order (nil for none).
func Select(bs []Binding, fs []Filter) []Binding {
	var out []Binding
	for _, b := range bs {
		for _, f := range fs {
			if f.Matches(b) {
				out = append(out, b)
				break
			}
		}
	}
	return out
}

// String writes the set fields of f as key=value pairs
// ("principal=User:alice type=topic name=orders"), "all" when none is
// set.
func (f Filter) String() string {
	var parts []string
	for _, kv := range [][2]string{
		{"principal", f.Principal}, {"permission", string(f.Permission)}, {"operation", string(f.Operation)},
		{"type", string(f.Type)}, {"name", f.Name}, {"pattern", string(f.PatternType)},
	} {
		if kv[1] != "" {
			parts = append(parts, kv[0]+"="+formatToken(kv[1]))
		}
	}
	if len(parts) == 0 {
		return "all"
	}
	return strings.Join(parts, " ")
}
