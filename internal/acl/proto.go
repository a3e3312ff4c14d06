package acl

import "github.com/seedqueue/sq/api/sqv1"

// ToProto converts b to its gRPC message (api/sq.proto, AclBinding).
func ToProto(b Binding) *sqv1.AclBinding {
	return &sqv1.AclBinding{Principal: b.Principal, Permission: string(b.Permission), Operation: string(b.Operation),
		ResourceType: string(b.Pattern.Type), ResourceName: b.Pattern.Name, PatternType: string(b.Pattern.PatternType)}
}

// FromProto converts an AclBinding message to a Binding (not validated).
// An empty pattern type reads as literal.
func FromProto(m *sqv1.AclBinding) Binding {
	b := Binding{Principal: m.GetPrincipal(), Permission: Permission(m.GetPermission()), Operation: Operation(m.GetOperation()),
		Pattern: Pattern{Type: ResourceType(m.GetResourceType()), Name: m.GetResourceName(), PatternType: PatternType(m.GetPatternType())}}
	if b.Pattern.PatternType == "" {
		b.Pattern.PatternType = Literal
	}
	return b
}

// ListToProto converts bs to messages.
func ListToProto(bs []Binding) []*sqv1.AclBinding {
	out := make([]*sqv1.AclBinding, len(bs))
	for i, b := range bs {
		out[i] = ToProto(b)
	}
	return out
}

// FilterToProto converts f to its gRPC message (AclFilter).
func FilterToProto(f Filter) *sqv1.AclFilter {
	return &sqv1.AclFilter{Principal: f.Principal, Permission: string(f.Permission), Operation: string(f.Operation),
		ResourceType: string(f.Type), ResourceName: f.Name, PatternType: string(f.PatternType)}
}

// FilterFromProto converts an AclFilter message (nil: select all) to a
// Filter (not validated).
func FilterFromProto(m *sqv1.AclFilter) Filter {
	return Filter{Principal: m.GetPrincipal(), Permission: Permission(m.GetPermission()), Operation: Operation(m.GetOperation()),
		Type: ResourceType(m.GetResourceType()), Name: m.GetResourceName(), PatternType: PatternType(m.GetPatternType())}
}
