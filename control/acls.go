package control

import (
	"context"
	"strings"

	"github.com/seedqueue/sq/api/sqv1"
	"github.com/seedqueue/sq/internal/acl"
)

// ACLStore holds the access control bindings: the cluster metadata
// (gossip.Node implements it; docs/architecture.md §7). Its errors are
// catalog errors (*api.Error: NO_QUORUM, INVALID_REQUEST, ...).
type ACLStore interface {
	// CreateACLs adds bs through the metadata log.
	CreateACLs(ctx context.Context, bs []acl.Binding) error
	// DeleteACLs removes the bindings fs select through the metadata log
	// and returns them.
	DeleteACLs(ctx context.Context, fs []acl.Filter) ([]acl.Binding, error)
	// ACLs returns the bindings this node has applied, sorted.
	ACLs() []acl.Binding
}

// SetACLStore attaches the store the Acls service reads and changes. A
// server without one answers the Acls calls with FailedPrecondition.
func (s *Server) SetACLStore(st ACLStore) { s.aclStore.Store(&st) }

func (s *Server) acls() ACLStore {
	if p := s.aclStore.Load(); p != nil {
		return *p
	}
	return nil
}

// aclsService implements sq.v1.Acls.
type aclsService struct {
	sqv1.UnimplementedAclsServer
	s *Server
}

// CreateAcls implements sq.v1.Acls: INVALID_REQUEST for an empty request
// or an invalid binding (nothing is added then).
func (a *aclsService) CreateAcls(ctx context.Context, req *sqv1.CreateAclsRequest) (*sqv1.CreateAclsResponse, error) {
	st := a.s.acls()
	if st == nil {
		return nil, errNotClustered()
	}
	if len(req.GetAcls()) == 0 {
		return nil, invalid("no ACL to create")
	}
	bs := make([]acl.Binding, len(req.GetAcls()))
	for i, m := range req.GetAcls() {
		bs[i] = acl.FromProto(m)
		if err := bs[i].Validate(); err != nil {
			return nil, invalid("acls[%d]: %v", i, err)
		}
	}
	if err := st.CreateACLs(ctx, bs); err != nil {
		return nil, err
	}
	return &sqv1.CreateAclsResponse{}, nil
}

// ListAcls implements sq.v1.Acls: INVALID_REQUEST for an invalid filter.
func (a *aclsService) ListAcls(ctx context.Context, req *sqv1.ListAclsRequest) (*sqv1.ListAclsResponse, error) {
	st := a.s.acls()
	if st == nil {
		return nil, errNotClustered()
	}
	f := acl.FilterFromProto(req.GetFilter())
	if err := f.Validate(); err != nil {
		return nil, invalid("filter: %v", err)
	}
	return &sqv1.ListAclsResponse{Acls: acl.ListToProto(acl.Select(st.ACLs(), []acl.Filter{f}))}, nil
}

// DeleteAcls implements sq.v1.Acls: INVALID_REQUEST without a filter or
// for an invalid one.
func (a *aclsService) DeleteAcls(ctx context.Context, req *sqv1.DeleteAclsRequest) (*sqv1.DeleteAclsResponse, error) {
	st := a.s.acls()
	if st == nil {
		return nil, errNotClustered()
	}
	if len(req.GetFilters()) == 0 {
		return nil, invalid("no filter: name the ACLs to delete (an empty filter selects all)")
	}
	fs := make([]acl.Filter, len(req.GetFilters()))
	for i, m := range req.GetFilters() {
		fs[i] = acl.FilterFromProto(m)
		if err := fs[i].Validate(); err != nil {
			return nil, invalid("filters[%d]: %v", i, err)
		}
	}
	deleted, err := st.DeleteACLs(ctx, fs)
	if err != nil {
		return nil, err
	}
	return &sqv1.DeleteAclsResponse{Deleted: acl.ListToProto(deleted)}, nil
}

// aclsText is the audit resource of a list of bindings: their textual
// form, "; "-separated.
func aclsText(ms []*sqv1.AclBinding) string {
	s := make([]string, len(ms))
	for i, m := range ms {
		s[i] = acl.Format(acl.FromProto(m))
	}
	return strings.Join(s, "; ")
}

// filtersText is the audit resource of a delete: its filters.
func filtersText(ms []*sqv1.AclFilter) string {
	s := make([]string, len(ms))
	for i, m := range ms {
		s[i] = acl.FilterFromProto(m).String()
	}
	return strings.Join(s, "; ")
}
