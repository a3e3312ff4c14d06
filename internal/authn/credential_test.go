package authn

import (
	"errors"
	"strings"
	"testing"
)

func TestCredential(t *testing.T) {
	c, err := NewCredential("pässword", 0)
	if err != nil {
		t.Fatal(err)
	}
	if c.Iterations != DefaultIterations || len(c.Salt) != SaltBytes || c.Validate() != nil {
		t.Fatalf("credential %+v: %v", c, c.Validate())
	}
	if !c.CheckPassword("pässword") || c.CheckPassword("password") {
		t.Fatal("CheckPassword")
	}
	d, _ := NewCredential("pässword", 0)
	if string(d.Salt) == string(c.Salt) || string(d.StoredKey) == string(c.StoredKey) {
		t.Fatal("two credentials of one password share a salt")
	}
	bad := []struct {
		name string
		mod  func(*Credential)
		want string
	}{
		{"mechanism", func(c *Credential) { c.Mechanism = "SCRAM-SHA-1" }, "mechanism"},
		{"few iterations", func(c *Credential) { c.Iterations = 4095 }, "iterations"},
		{"many iterations", func(c *Credential) { c.Iterations = MaxIterations + 1 }, "iterations"},
		{"no salt", func(c *Credential) { c.Salt = nil }, "salt"},
		{"short key", func(c *Credential) { c.StoredKey = c.StoredKey[:31] }, "stored key"},
		{"long server key", func(c *Credential) { c.ServerKey = append(c.ServerKey, 0) }, "server key"},
	}
	for _, b := range bad {
		x := c.Clone()
		b.mod(&x)
		if err := x.Validate(); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), b.want) {
			t.Errorf("%s: %v", b.name, err)
		}
	}
	if _, err := NewCredential("", 0); !errors.Is(err, ErrInvalid) {
		t.Errorf("empty password: %v", err)
	}
}

func TestValidateUserName(t *testing.T) {
	for name, ok := range map[string]bool{
		"alice": true, "svc,orders=1": true, "Ünïcode": true,
		"": false, " alice": false, "alice ": false, "a\nb": false, "\xff": false,
		strings.Repeat("a", 256): false, strings.Repeat("a", 255): true,
		AnonymousUserName: false, "anonymous": true,
	} {
		if err := ValidateUserName(name); (err == nil) != ok {
			t.Errorf("%q: %v", name, err)
		}
	}
}
