package meta

import (
	"maps"
	"slices"
	"unicode/utf8"

	"github.com/seedqueue/sq/api"
)

// DefaultQuotaEntity is the key of State.Quotas under which the default
// quota is stored: it applies to every principal without its own entry
// (Kafka's <default> user entity, KIP-257/546). A principal is always
// "User:..." and never collides with it.
const DefaultQuotaEntity = "<default>"

// MaxQuotas bounds State.Quotas: a set-quota for a new entity beyond it
// is refused with INVALID_CONFIG.
const MaxQuotas = 10000

// MaxQuotaEntityBytes bounds the length of a quota's principal.
const MaxQuotaEntityBytes = 1024

// Quota is the byte-rate quotas of one entity (a principal or
// DefaultQuotaEntity), in bytes per second; 0 is no quota of that kind
// (docs/security.md, "Quotas"). An entity listed with a zero kind has no
// quota of that kind, even when the default has one.
type Quota struct {
	ProduceBytesPerSec int64 `json:"produce_bytes_per_sec,omitempty"`
	FetchBytesPerSec   int64 `json:"fetch_bytes_per_sec,omitempty"`
}

// cloneQuotas copies q; an empty q gives nil (omitted from the encoding,
// so the Hash of a cluster without quotas does not change).
func cloneQuotas(q map[string]Quota) map[string]Quota {
	if len(q) == 0 {
		return nil
	}
	return maps.Clone(q)
}

// QuotaEntities returns the entities of s.Quotas in sorted order.
func (s *State) QuotaEntities() []string {
	return slices.Sorted(maps.Keys(s.Quotas))
}

// applySetQuota sets the quotas of entity Command.Name from
// Command.Quota: a kind given (non-zero) replaces the entity's value of
// that kind, a zero kind keeps it. Refused with INVALID_REQUEST without
// an entity or a quota, and with INVALID_CONFIG naming the field for a
// negative value, no kind given, or a new entity beyond MaxQuotas.
func (s *State) applySetQuota(c Command) Result {
	if c.Name == "" || c.Quota == nil {
		return refused(api.CodeInvalidRequest, "set-quota without a principal or a quota")
	}
	if len(c.Name) > MaxQuotaEntityBytes || !utf8.ValidString(c.Name) {
		return refused(api.CodeInvalidRequest, "set-quota: principal is not valid UTF-8 of at most %d bytes", MaxQuotaEntityBytes)
	}
	q := *c.Quota
	switch {
	case q.ProduceBytesPerSec < 0:
		return refused(api.CodeInvalidConfig, "produce_bytes_per_sec %d: must be positive", q.ProduceBytesPerSec)
	case q.FetchBytesPerSec < 0:
		return refused(api.CodeInvalidConfig, "fetch_bytes_per_sec %d: must be positive", q.FetchBytesPerSec)
	case q.ProduceBytesPerSec == 0 && q.FetchBytesPerSec == 0:
		return refused(api.CodeInvalidConfig, "set-quota of %q sets neither produce_bytes_per_sec nor fetch_bytes_per_sec", c.Name)
	}
	cur, ok := s.Quotas[c.Name]
	if !ok && len(s.Quotas) >= MaxQuotas {
		return refused(api.CodeInvalidConfig, "set-quota of %q: the cluster already holds the maximum of %d quotas", c.Name, MaxQuotas)
	}
	if q.ProduceBytesPerSec > 0 {
		cur.ProduceBytesPerSec = q.ProduceBytesPerSec
	}
	if q.FetchBytesPerSec > 0 {
		cur.FetchBytesPerSec = q.FetchBytesPerSec
	}
	if s.Quotas == nil {
		s.Quotas = map[string]Quota{}
	}
	s.Quotas[c.Name] = cur
	return Result{}
}

// applyRemoveQuota removes the quotas of entity Command.Name; refused
// with INVALID_REQUEST when it has none.
func (s *State) applyRemoveQuota(c Command) Result {
	if _, ok := s.Quotas[c.Name]; !ok {
		if c.Name == DefaultQuotaEntity {
			return refused(api.CodeInvalidRequest, "no default quota is set")
		}
		return refused(api.CodeInvalidRequest, "principal %q has no quota", c.Name)
	}
	delete(s.Quotas, c.Name)
	if len(s.Quotas) == 0 {
		s.Quotas = nil
	}
	return Result{}
}
