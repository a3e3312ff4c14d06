package authn

import "sync/atomic"

// StoreRef is a Store set after the servers start: the user store of the
// metadata log, which a node has only once it joined its cluster. Until
// Set, and on a node that never calls it, Credential fails with
// ErrUnavailable. Safe for concurrent use; the zero value is ready.
type StoreRef struct {
	p atomic.Pointer[Store]
}

// Set makes s the store answered from now on.
func (r *StoreRef) Set(s Store) { r.p.Store(&s) }

// Credential implements Store.
func (r *StoreRef) Credential(name string) (Credential, bool, error) {
	p := r.p.Load()
	if p == nil {
		return Credential{}, false, ErrUnavailable
	}
	return (*p).Credential(name)
}
