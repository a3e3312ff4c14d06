package meta

import (
	"fmt"
	"strings"
	"testing"

	"github.com/seedqueue/sq/api"
)

// quotaCommand makes a set-quota or remove-quota of a few principals,
// valid or not (TestDeterminism).
func (g *gen) quotaCommand() Command {
	name := g.pick([]string{"User:a", "User:b", DefaultQuotaEntity, ""})
	if g.r.IntN(3) == 0 {
		return Command{Op: OpRemoveQuota, Name: name}
	}
	return Command{Op: OpSetQuota, Name: name, Quota: &Quota{
		ProduceBytesPerSec: int64(g.r.IntN(4) - 1), FetchBytesPerSec: int64(g.r.IntN(4) * 1000)}}
}

// TestApplyQuotas: each set-quota and remove-quota in turn, its result
// and the quotas it leaves; a refused command changes nothing.
func TestApplyQuotas(t *testing.T) {
	steps := []struct {
		c       Command
		code    api.Code // 0: applied
		errText string   // in the error
		want    map[string]Quota
	}{
		{Command{Op: OpSetQuota, Name: "User:a", Quota: &Quota{ProduceBytesPerSec: 100}}, 0, "",
			map[string]Quota{"User:a": {ProduceBytesPerSec: 100}}},
		{Command{Op: OpSetQuota, Name: "User:a", Quota: &Quota{FetchBytesPerSec: 200}}, 0, "",
			map[string]Quota{"User:a": {ProduceBytesPerSec: 100, FetchBytesPerSec: 200}}},
		{Command{Op: OpSetQuota, Name: DefaultQuotaEntity, Quota: &Quota{FetchBytesPerSec: 5}}, 0, "",
			map[string]Quota{"User:a": {ProduceBytesPerSec: 100, FetchBytesPerSec: 200}, DefaultQuotaEntity: {FetchBytesPerSec: 5}}},
		{Command{Op: OpSetQuota, Name: "User:a", Quota: &Quota{ProduceBytesPerSec: -1}}, api.CodeInvalidConfig, "produce_bytes_per_sec -1", nil},
		{Command{Op: OpSetQuota, Name: "User:a", Quota: &Quota{FetchBytesPerSec: -5}}, api.CodeInvalidConfig, "fetch_bytes_per_sec -5", nil},
		{Command{Op: OpSetQuota, Name: "User:a", Quota: &Quota{}}, api.CodeInvalidConfig, "neither", nil},
		{Command{Op: OpSetQuota, Name: "", Quota: &Quota{FetchBytesPerSec: 1}}, api.CodeInvalidRequest, "principal", nil},
		{Command{Op: OpSetQuota, Name: "User:a"}, api.CodeInvalidRequest, "quota", nil},
		{Command{Op: OpSetQuota, Name: "User:\xff", Quota: &Quota{FetchBytesPerSec: 1}}, api.CodeInvalidRequest, "UTF-8", nil},
		{Command{Op: OpRemoveQuota, Name: "User:nobody"}, api.CodeInvalidRequest, `"User:nobody" has no quota`, nil},
		{Command{Op: OpRemoveQuota, Name: "User:a"}, 0, "",
			map[string]Quota{DefaultQuotaEntity: {FetchBytesPerSec: 5}}},
		{Command{Op: OpRemoveQuota, Name: DefaultQuotaEntity}, 0, "", nil},
		{Command{Op: OpRemoveQuota, Name: DefaultQuotaEntity}, api.CodeInvalidRequest, "no default quota is set", nil},
	}
	s := base(t)
	empty := s.Hash()
	for i, st := range steps {
		before := s.Hash()
		r := s.Apply(st.c)
		if st.code != 0 {
			if r.Err == nil || r.Err.Code != st.code || !strings.Contains(r.Err.Error(), st.errText) {
				t.Fatalf("step %d: %+v, want %v with %q", i, r.Err, st.code, st.errText)
			}
			if s.Hash() != before {
				t.Fatalf("step %d: a refused command changed the state", i)
			}
			continue
		}
		if r.Err != nil {
			t.Fatalf("step %d: %v", i, r.Err)
		}
		if fmt.Sprint(s.Quotas) != fmt.Sprint(st.want) {
			t.Fatalf("step %d: quotas %v, want %v", i, s.Quotas, st.want)
		}
	}
	if s.Quotas != nil || s.Hash() != empty {
		t.Fatalf("all quotas removed: %v; hash differs from a state that never had any: %v", s.Quotas, s.Hash() != empty)
	}
}

// TestQuotasSnapshotAndCodec: quotas survive Clone, a snapshot and the
// command codec; the Hash depends on them and not on how they were built;
// a state without quotas encodes no quota field.
func TestQuotasSnapshotAndCodec(t *testing.T) {
	s := base(t)
	b, err := s.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "quota") {
		t.Fatalf("a state without quotas encodes them: %s", b)
	}
	cmds := []Command{
		{Op: OpSetQuota, Name: "User:b", Quota: &Quota{FetchBytesPerSec: 7}},
		{Op: OpSetQuota, Name: "User:a", Quota: &Quota{ProduceBytesPerSec: 9}},
	}
	for _, c := range cmds {
		enc, err := Encode(c)
		if err != nil {
			t.Fatal(err)
		}
		dc, err := Decode(enc)
		if err != nil || dc.Quota == nil || *dc.Quota != *c.Quota || dc.Name != c.Name {
			t.Fatalf("codec: %+v, %v", dc, err)
		}
		mustApply(t, s, dc)
	}
	other := base(t)
	mustApply(t, other, cmds[1])
	mustApply(t, other, cmds[0])
	if other.Hash() != s.Hash() {
		t.Fatal("the same quotas set in another order hash differently")
	}
	c := s.Clone()
	c.Quotas["User:a"] = Quota{ProduceBytesPerSec: 1}
	if s.Quotas["User:a"].ProduceBytesPerSec != 9 {
		t.Fatal("a clone shares its quotas")
	}
	snap, err := s.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	back, err := UnmarshalState(snap)
	if err != nil || back.Hash() != s.Hash() || back.Quotas["User:b"].FetchBytesPerSec != 7 {
		t.Fatalf("snapshot: %v, %v", err, back.Quotas)
	}
	if got := strings.Join(back.QuotaEntities(), ","); got != "User:a,User:b" {
		t.Fatalf("entities %s", got)
	}
}
