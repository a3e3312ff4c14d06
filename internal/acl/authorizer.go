package acl

import (
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/seedqueue/sq/api"
)

// Options configure an Authorizer.
type Options struct {
	// Enabled turns authorization on (the server's --authorization):
	// then every request needs a matching allow binding (or a super user),
	// and without one is refused. Off (the default), every request is
	// allowed.
	Enabled bool
	// SuperUsers are principals allowed everything, deny bindings
	// notwithstanding (--super-users, and the node's own certificate
	// subject).
	SuperUsers []string
	// OnDeny, when set, is called for every refused Authorize (metrics:
	// sq_authorization_denied_total). It must not block.
	OnDeny func(op Operation, t ResourceType)
}

// Authorizer answers whether a principal may do an operation on a
// resource, from the bindings last given to SetBindings. It is safe for
// concurrent use; a nil *Authorizer allows everything.
type Authorizer struct {
	opts  Options
	super map[string]bool
	acls  atomic.Pointer[index]
}

// index holds the bindings by principal.
type index struct {
	all         []Binding
	byPrincipal map[string][]Binding // AnyPrincipal's under its own key
}

// New returns an Authorizer without bindings. Errors: a super user that
// is not a valid principal (ErrInvalid).
func New(opts Options) (*Authorizer, error) {
	a := &Authorizer{opts: opts, super: map[string]bool{}}
	for _, p := range opts.SuperUsers {
		if err := ValidatePrincipal(p); err != nil {
			return nil, fmt.Errorf("super user: %w", err)
		}
		a.super[p] = true
	}
	a.acls.Store(&index{})
	return a, nil
}

// ParseSuperUsers splits a list of principals (--super-users) at every
// comma or semicolon that is followed (after blanks) by "User:", so that
// a certificate subject's own commas stay in it ("User:CN=node-1,O=sq,
// User:admin" is two principals); blanks around each are trimmed and
// empty items dropped. Errors: an item that is not a principal
// (ErrInvalid).
func ParseSuperUsers(s string) ([]string, error) {
	var out []string
	start := 0
	for i := 0; i <= len(s); i++ {
		if i < len(s) && !((s[i] == ',' || s[i] == ';') && strings.HasPrefix(strings.TrimLeft(s[i+1:], " \t"), PrincipalPrefix)) {
			continue
		}
		if p := strings.TrimSpace(s[start:i]); p != "" && p != "," && p != ";" {
			p = strings.TrimRight(p, ",; ")
			if err := ValidatePrincipal(p); err != nil {
				return nil, err
			}
			out = append(out, p)
		}
		start = i + 1
	}
	return out, nil
}

// Enabled reports whether authorization is on (false for nil).
func (a *Authorizer) Enabled() bool { return a != nil && a.opts.Enabled }

// SuperUser reports whether principal is a super user.
func (a *Authorizer) SuperUser(principal string) bool { return a != nil && a.super[principal] }

// SetBindings replaces the bindings the Authorizer decides from (the
// cluster metadata's, after each change). bs is not modified and may
// not be modified afterwards.
func (a *Authorizer) SetBindings(bs []Binding) {
	ix := &index{all: bs, byPrincipal: map[string][]Binding{}}
	for _, b := range bs {
		ix.byPrincipal[b.Principal] = append(ix.byPrincipal[b.Principal], b)
	}
	a.acls.Store(ix)
}

// Bindings returns the bindings last set (not to be modified).
func (a *Authorizer) Bindings() []Binding { return a.acls.Load().all }

// Allowed reports whether principal may do op on r, without counting a
// refusal: for filtering listings.
func (a *Authorizer) Allowed(principal string, op Operation, r Resource) bool {
	if !a.Enabled() || a.super[principal] {
		return true
	}
	ix := a.acls.Load()
	own, any := ix.byPrincipal[principal], ix.byPrincipal[AnyPrincipal]
	if denies(own, op, r) || denies(any, op, r) {
		return false
	}
	if allows(own, op, r) || allows(any, op, r) {
		return true
	}
	// Create on the cluster allows creating every topic (Kafka's
	// CreateTopics).
	if op == Create && r.Type == Topic {
		return a.Allowed(principal, Create, ClusterResource())
	}
	return false
}

// Authorize is Allowed, counting a refusal (Options.OnDeny).
func (a *Authorizer) Authorize(principal string, op Operation, r Resource) bool {
	if a.Allowed(principal, op, r) {
		return true
	}
	if a.opts.OnDeny != nil {
		a.opts.OnDeny(op, r.Type)
	}
	return false
}

// Check returns nil when Authorize allows principal op on r, else
// AUTHORIZATION_FAILED naming them.
func (a *Authorizer) Check(principal string, op Operation, r Resource) error {
	if a.Authorize(principal, op, r) {
		return nil
	}
	return Refusal(principal, op, r, a.denied(principal, op, r))
}

// denied reports whether a deny binding (the principal's or User:*'s)
// matches op on r: the refusal then comes from it, not from a missing
// allow.
func (a *Authorizer) denied(principal string, op Operation, r Resource) bool {
	ix := a.acls.Load()
	return denies(ix.byPrincipal[principal], op, r) || denies(ix.byPrincipal[AnyPrincipal], op, r)
}

// Refusal is the AUTHORIZATION_FAILED error of principal refused op on
// r; byDeny says a deny ACL matched (deny wins over every allow), else
// no ACL allowed it.
func Refusal(principal string, op Operation, r Resource, byDeny bool) error {
	what := string(r.Type)
	if r.Type != Cluster {
		what = fmt.Sprintf("%s %q", r.Type, r.Name)
	}
	if byDeny {
		return api.NewError(api.CodeAuthorizationFailed, "principal %s may not %s %s (a deny ACL matches it, and deny wins over allow; sq acl list)", principal, op, what)
	}
	return api.NewError(api.CodeAuthorizationFailed, "principal %s may not %s %s (no ACL allows it; sq acl add)", principal, op, what)
}

// AuthorizeAnyOf reports whether principal may do op on at least one
// resource of type t: a super user, or an allow binding for the
// principal (or User:*) with op or All on type t, unless a deny binding
// with op or All on the wildcard of t refuses every such resource. This
// is Kafka's authorizeByResourceType (KIP-679), used where Kafka allows
// an idempotent producer that may write to any topic. A refusal is
// counted.
func (a *Authorizer) AuthorizeAnyOf(principal string, op Operation, t ResourceType) bool {
	if !a.Enabled() || a.super[principal] {
		return true
	}
	ix := a.acls.Load()
	own, any := ix.byPrincipal[principal], ix.byPrincipal[AnyPrincipal]
	ok := !deniesAll(own, op, t) && !deniesAll(any, op, t) && (allowsType(own, op, t) || allowsType(any, op, t))
	if !ok && a.opts.OnDeny != nil {
		a.opts.OnDeny(op, t)
	}
	return ok
}

// denies reports whether a deny binding of bs matches op on r.
func denies(bs []Binding, op Operation, r Resource) bool {
	for _, b := range bs {
		if b.Permission == Deny && (b.Operation == op || b.Operation == All) && b.Pattern.matches(r) {
			return true
		}
	}
	return false
}

// deniesAll reports whether a deny binding of bs refuses op on every
// resource of type t: the literal wildcard (or the cluster).
func deniesAll(bs []Binding, op Operation, t ResourceType) bool {
	for _, b := range bs {
		p := b.Pattern
		if b.Permission == Deny && (b.Operation == op || b.Operation == All) && p.Type == t &&
			p.PatternType == Literal && (p.Name == Wildcard || t == Cluster) {
			return true
		}
	}
	return false
}

// allows reports whether an allow binding of bs matches op on r, an
// implied operation included.
func allows(bs []Binding, op Operation, r Resource) bool {
	for _, b := range bs {
		if b.Permission == Allow && implies(b.Operation, op) && b.Pattern.matches(r) {
			return true
		}
	}
	return false
}

func allowsType(bs []Binding, op Operation, t ResourceType) bool {
	for _, b := range bs {
		if b.Permission == Allow && implies(b.Operation, op) && b.Pattern.Type == t {
			return true
		}
	}
	return false
}

// implies reports whether an allow binding for granted allows op:
// the same operation, All, or Describe by Read, Write, Delete or Alter
// (Kafka's implied operations).
func implies(granted, op Operation) bool {
	switch {
	case granted == op, granted == All:
		return true
	case op == Describe:
		return granted == Read || granted == Write || granted == Delete || granted == Alter
	}
	return false
}

// Check is one authorization a request needs: Op on Resource, or with
// AnyOfType, Op on at least one resource of Resource.Type
// (AuthorizeAnyOf).
type Check struct {
	Op        Operation
	Resource  Resource
	AnyOfType bool
}

// CheckAll returns nil when principal passes every check, else the
// AUTHORIZATION_FAILED of the first it fails (counted).
func (a *Authorizer) CheckAll(principal string, checks []Check) error {
	if !a.Enabled() {
		return nil
	}
	for _, c := range checks {
		if c.AnyOfType {
			if !a.AuthorizeAnyOf(principal, c.Op, c.Resource.Type) {
				return api.NewError(api.CodeAuthorizationFailed, "principal %s may not %s any %s (no ACL allows it; sq acl add)", principal, c.Op, c.Resource.Type)
			}
			continue
		}
		if err := a.Check(principal, c.Op, c.Resource); err != nil {
			return err
		}
	}
	return nil
}
