package gossip

import (
	"context"

	"github.com/seedqueue/sq/api/sqv1"
	"github.com/seedqueue/sq/gossip/meta"
	"github.com/seedqueue/sq/internal/quota"
)

// quotaEntity is the metadata key of a quota request's entity: its
// principal, or meta.DefaultQuotaEntity.
func quotaEntity(principal string, def bool) string {
	if def {
		return meta.DefaultQuotaEntity
	}
	return principal
}

// quotaEntry converts one entity's quotas.
func quotaEntry(entity string, q meta.Quota) *sqv1.QuotaEntry {
	e := &sqv1.QuotaEntry{ProduceBytesPerSec: q.ProduceBytesPerSec, FetchBytesPerSec: q.FetchBytesPerSec}
	if entity == meta.DefaultQuotaEntity {
		e.DefaultEntity = true
	} else {
		e.Principal = entity
	}
	return e
}

// SetQuota implements control's QuotaBackend: a meta.OpSetQuota through
// the controller. The request is checked by control; the state refuses
// what is still wrong (INVALID_CONFIG, INVALID_REQUEST).
func (n *Node) SetQuota(ctx context.Context, req *sqv1.SetQuotaRequest) (*sqv1.SetQuotaResponse, error) {
	entity := quotaEntity(req.GetPrincipal(), req.GetDefaultEntity())
	res, err := n.ProposeCommand(ctx, meta.Command{Op: meta.OpSetQuota, Name: entity,
		Quota: &meta.Quota{ProduceBytesPerSec: req.GetProduceBytesPerSec(), FetchBytesPerSec: req.GetFetchBytesPerSec()}})
	if err != nil {
		return nil, err
	}
	if res.Err != nil {
		return nil, res.Err
	}
	return &sqv1.SetQuotaResponse{Quota: quotaEntry(entity, n.State().Quotas[entity])}, nil
}

// RemoveQuota implements control's QuotaBackend: a meta.OpRemoveQuota
// through the controller; INVALID_REQUEST when the entity has no quota.
func (n *Node) RemoveQuota(ctx context.Context, req *sqv1.RemoveQuotaRequest) (*sqv1.RemoveQuotaResponse, error) {
	entity := quotaEntity(req.GetPrincipal(), req.GetDefaultEntity())
	res, err := n.ProposeCommand(ctx, meta.Command{Op: meta.OpRemoveQuota, Name: entity})
	if err != nil {
		return nil, err
	}
	if res.Err != nil {
		return nil, res.Err
	}
	return &sqv1.RemoveQuotaResponse{}, nil
}

// ListQuotas implements control's QuotaBackend from this node's applied
// metadata: the default first, then the principals in order.
func (n *Node) ListQuotas(context.Context) (*sqv1.ListQuotasResponse, error) {
	st := n.State()
	out := &sqv1.ListQuotasResponse{}
	if q, ok := st.Quotas[meta.DefaultQuotaEntity]; ok {
		out.Quotas = append(out.Quotas, quotaEntry(meta.DefaultQuotaEntity, q))
	}
	for _, e := range st.QuotaEntities() {
		if e != meta.DefaultQuotaEntity {
			out.Quotas = append(out.Quotas, quotaEntry(e, st.Quotas[e]))
		}
	}
	return out, nil
}

// QuotaTable returns the quotas of s as a quota.Manager enforces them
// (quota.Manager.SetTable): the cluster's server calls it from OnApply.
func QuotaTable(s *meta.State) quota.Table {
	t := quota.Table{}
	for e, q := range s.Quotas {
		l := quota.Limits{ProduceBytesPerSec: q.ProduceBytesPerSec, FetchBytesPerSec: q.FetchBytesPerSec}
		if e == meta.DefaultQuotaEntity {
			t.Default = &l
			continue
		}
		if t.Principals == nil {
			t.Principals = map[string]quota.Limits{}
		}
		t.Principals[e] = l
	}
	return t
}
