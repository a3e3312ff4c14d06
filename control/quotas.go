package control

import (
	"context"
	"strings"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/api/sqv1"
	"github.com/seedqueue/sq/internal/acl"
)

// QuotaBackend stores the client byte-rate quotas in the cluster
// metadata (the cluster layer's node implements it beside
// ClusterBackend). The requests it gets are checked: a principal in the
// "User:<name>" form or the default entity, values not negative, at least
// one positive on SetQuota. Refusals are catalog errors (INVALID_CONFIG,
// INVALID_REQUEST); NO_QUORUM when the metadata cannot commit.
type QuotaBackend interface {
	SetQuota(ctx context.Context, req *sqv1.SetQuotaRequest) (*sqv1.SetQuotaResponse, error)
	RemoveQuota(ctx context.Context, req *sqv1.RemoveQuotaRequest) (*sqv1.RemoveQuotaResponse, error)
	ListQuotas(ctx context.Context) (*sqv1.ListQuotasResponse, error)
}

// quotasService implements sq.v1.Quotas through the cluster backend
// (when it is a QuotaBackend); FailedPrecondition outside a cluster.
type quotasService struct {
	sqv1.UnimplementedQuotasServer
	s *Server
}

// quotaBackend returns the cluster backend as a QuotaBackend, or nil.
func (s *Server) quotaBackend() QuotaBackend {
	b, _ := s.clusterBackend().(QuotaBackend)
	return b
}

// principalArg returns the principal a quota request names: "alice" is
// "User:alice". INVALID_REQUEST for none (without the default entity),
// for both, for a principal without a name ("User:") and for "User:*".
func principalArg(principal string, def bool) (string, error) {
	switch {
	case def && principal != "":
		return "", invalid("principal %q and default_entity both set: name one principal, or the default", principal)
	case def:
		return "", nil
	case strings.TrimSpace(principal) == "":
		return "", invalid("principal is empty: name a principal (User:<name>), or set default_entity")
	case !strings.HasPrefix(principal, acl.PrincipalPrefix):
		principal = acl.PrincipalPrefix + principal
	}
	if err := acl.ValidatePrincipal(principal); err != nil {
		return "", invalid("%s", strings.TrimPrefix(err.Error(), acl.ErrInvalid.Error()+": "))
	}
	if principal == acl.AnyPrincipal {
		// A quota is looked up by the client's own principal: one keyed
		// User:* would never apply.
		return "", invalid("principal %q: a quota for every principal is the default (default_entity, sq quota set --default)", principal)
	}
	return principal, nil
}

// SetQuota implements sq.v1.Quotas: INVALID_CONFIG naming the field for
// a negative value or when neither is set.
func (q *quotasService) SetQuota(ctx context.Context, req *sqv1.SetQuotaRequest) (*sqv1.SetQuotaResponse, error) {
	b := q.s.quotaBackend()
	if b == nil {
		return nil, errNotClustered()
	}
	p, err := principalArg(req.GetPrincipal(), req.GetDefaultEntity())
	if err != nil {
		return nil, err
	}
	switch {
	case req.GetProduceBytesPerSec() < 0:
		return nil, api.NewError(api.CodeInvalidConfig, "produce_bytes_per_sec %d: must be a positive number of bytes per second", req.GetProduceBytesPerSec())
	case req.GetFetchBytesPerSec() < 0:
		return nil, api.NewError(api.CodeInvalidConfig, "fetch_bytes_per_sec %d: must be a positive number of bytes per second", req.GetFetchBytesPerSec())
	case req.GetProduceBytesPerSec() == 0 && req.GetFetchBytesPerSec() == 0:
		return nil, api.NewError(api.CodeInvalidConfig, "neither produce_bytes_per_sec nor fetch_bytes_per_sec is set: give at least one, positive (remove a quota with RemoveQuota)")
	}
	return b.SetQuota(ctx, &sqv1.SetQuotaRequest{Principal: p, DefaultEntity: req.GetDefaultEntity(),
		ProduceBytesPerSec: req.GetProduceBytesPerSec(), FetchBytesPerSec: req.GetFetchBytesPerSec()})
}

// RemoveQuota implements sq.v1.Quotas.
func (q *quotasService) RemoveQuota(ctx context.Context, req *sqv1.RemoveQuotaRequest) (*sqv1.RemoveQuotaResponse, error) {
	b := q.s.quotaBackend()
	if b == nil {
		return nil, errNotClustered()
	}
	p, err := principalArg(req.GetPrincipal(), req.GetDefaultEntity())
	if err != nil {
		return nil, err
	}
	return b.RemoveQuota(ctx, &sqv1.RemoveQuotaRequest{Principal: p, DefaultEntity: req.GetDefaultEntity()})
}

// ListQuotas implements sq.v1.Quotas.
func (q *quotasService) ListQuotas(ctx context.Context, _ *sqv1.ListQuotasRequest) (*sqv1.ListQuotasResponse, error) {
	b := q.s.quotaBackend()
	if b == nil {
		return nil, errNotClustered()
	}
	return b.ListQuotas(ctx)
}

// quotaResource is the audited resource of a quota change: the principal
// as given, or "<default>".
func quotaResource(r interface {
	GetPrincipal() string
	GetDefaultEntity() bool
}) string {
	if r.GetDefaultEntity() {
		return "<default>"
	}
	return r.GetPrincipal()
}
