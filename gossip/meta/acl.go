package meta

import (
	"slices"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/internal/acl"
)

// MaxACLs bounds State.ACLs: a create-acls that would hold more is
// refused with INVALID_REQUEST.
const MaxACLs = 100000

// applyCreateACLs adds c.ACLs to s.ACLs, keeping them sorted and without
// duplicates. Refused (nothing added) when a binding is invalid or the
// total would pass MaxACLs.
func (s *State) applyCreateACLs(c Command) Result {
	if len(c.ACLs) == 0 {
		return refused(api.CodeInvalidRequest, "create-acls without a binding")
	}
	for _, b := range c.ACLs {
		if err := b.Validate(); err != nil {
			return refused(api.CodeInvalidRequest, "%v", err)
		}
	}
	next := acl.Sorted(append(slices.Clone(s.ACLs), c.ACLs...))
	if len(next) > MaxACLs {
		return refused(api.CodeInvalidRequest, "%d ACLs, at most %d", len(next), MaxACLs)
	}
	s.ACLs = next
	return Result{}
}

// applyDeleteACLs removes every binding one of c.ACLFilters selects and
// returns them in Result.ACLs (none selected: nothing changes). Refused
// when a filter is invalid.
func (s *State) applyDeleteACLs(c Command) Result {
	if len(c.ACLFilters) == 0 {
		return refused(api.CodeInvalidRequest, "delete-acls without a filter")
	}
	for _, f := range c.ACLFilters {
		if err := f.Validate(); err != nil {
			return refused(api.CodeInvalidRequest, "%v", err)
		}
	}
	removed := acl.Select(s.ACLs, c.ACLFilters)
	if len(removed) == 0 {
		return Result{}
	}
	kept := slices.DeleteFunc(slices.Clone(s.ACLs), func(b acl.Binding) bool {
		return slices.Contains(removed, b)
	})
	s.ACLs = cloneSlice(kept)
	return Result{ACLs: removed}
}
