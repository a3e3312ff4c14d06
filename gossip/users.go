package gossip

import (
	"context"

	"github.com/seedqueue/sq/gossip/meta"
	"github.com/seedqueue/sq/internal/authn"
)

// Credential implements authn.Store over the metadata this node applied:
// the SCRAM credential of user name (upsert-user), replicated to every
// node by the Raft log.
func (n *Node) Credential(name string) (authn.Credential, bool, error) {
	c, ok := n.State().Users[name]
	return c, ok, nil
}

// Users returns the users and their credentials as this node applied them
// (an immutable map: do not modify).
func (n *Node) Users() map[string]authn.Credential { return n.State().Users }

// UpsertUser creates user name or replaces its credential through the
// metadata log. Errors: INVALID_REQUEST for a bad name or credential,
// those of ProposeCommand.
func (n *Node) UpsertUser(ctx context.Context, name string, c authn.Credential) error {
	return n.proposeUser(ctx, meta.Command{Op: meta.OpUpsertUser, Name: name, Credential: &c})
}

// DeleteUser deletes user name through the metadata log. Errors:
// INVALID_REQUEST for an unknown user, those of ProposeCommand.
func (n *Node) DeleteUser(ctx context.Context, name string) error {
	return n.proposeUser(ctx, meta.Command{Op: meta.OpDeleteUser, Name: name})
}

func (n *Node) proposeUser(ctx context.Context, c meta.Command) error {
	res, err := n.ProposeCommand(ctx, c)
	if err != nil {
		return err
	}
	if res.Err != nil {
		return res.Err
	}
	return nil
}

var _ authn.Store = (*Node)(nil)
