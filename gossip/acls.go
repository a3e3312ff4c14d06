package gossip

import (
	"context"

	"github.com/seedqueue/sq/gossip/meta"
	"github.com/seedqueue/sq/internal/acl"
)

// CreateACLs adds bs to the cluster's access control bindings through
// the metadata log (create-acls; control.ACLStore). Errors: the
// command's refusal (INVALID_REQUEST), NO_QUORUM, ctx's error.
func (n *Node) CreateACLs(ctx context.Context, bs []acl.Binding) error {
	res, err := n.ProposeCommand(ctx, meta.Command{Op: meta.OpCreateACLs, ACLs: bs})
	if err != nil {
		return err
	}
	if res.Err != nil {
		return res.Err
	}
	return nil
}

// DeleteACLs removes the bindings fs select through the metadata log
// (delete-acls) and returns them; errors as CreateACLs.
func (n *Node) DeleteACLs(ctx context.Context, fs []acl.Filter) ([]acl.Binding, error) {
	res, err := n.ProposeCommand(ctx, meta.Command{Op: meta.OpDeleteACLs, ACLFilters: fs})
	if err != nil {
		return nil, err
	}
	if res.Err != nil {
		return nil, res.Err
	}
	return res.ACLs, nil
}

// ACLs returns the bindings of the metadata this node has applied,
// sorted (not to be modified).
func (n *Node) ACLs() []acl.Binding { return n.State().ACLs }
