package tier_test

import (
	"errors"
	"testing"

	"github.com/seedqueue/sq/tier"
	"github.com/seedqueue/sq/tier/tiertest"
)

func TestMemStoreConformance(t *testing.T) {
	tiertest.Run(t, &tier.MemStore{})
}

func TestVerifyDamagedObject(t *testing.T) {
	s := &tier.MemStore{}
	data := tiertest.Data(1000)
	info := tiertest.MustPut(t, s, "k", data)
	damaged := append([]byte(nil), data...)
	damaged[500] ^= 1
	if !s.Damage("k", damaged) {
		t.Fatal("Damage: no object")
	}
	err := tier.Verify(t.Context(), s, "k", info.Size, info.CRC32C)
	if !errors.Is(err, tier.ErrCorrupt) {
		t.Fatalf("Verify of a flipped bit: %v, want ErrCorrupt", err)
	}
	s.Damage("k", data[:999])
	if err := tier.Verify(t.Context(), s, "k", info.Size, info.CRC32C); !errors.Is(err, tier.ErrCorrupt) {
		t.Fatalf("Verify of a short object: %v, want ErrCorrupt", err)
	}
}
