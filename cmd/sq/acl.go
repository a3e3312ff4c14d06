package main

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/seedqueue/sq/api/sqv1"
	"github.com/seedqueue/sq/internal/acl"
)

func newACLCommand(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "acl",
		Short: "Add, list and remove access control lists (authorization, control plane)",
		Long: "Manage the ACLs a server started with --authorization checks every request\n" +
			"against (docs/security.md, \"Authorization\"). An ACL allows or denies one\n" +
			"principal one operation on a topic, a consumer group or the cluster, named\n" +
			"literally (\"*\": all of them) or by prefix; a deny wins over an allow. Each\n" +
			"ACL is written on one line as PRINCIPAL allow|deny OPERATION RESOURCE:\n\n" +
			"  User:alice allow read topic:orders\n" +
			"  User:alice allow write topic:orders-*      (prefix)\n" +
			"  User:* allow describe group:*              (every principal, every group)\n" +
			"  User:ops allow alter cluster",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newACLAddCommand(g), newACLListCommand(g), newACLRemoveCommand(g))
	return cmd
}

// aclFlags are the resource and principal flags of the acl commands, in
// the words of Kafka's kafka-acls.
type aclFlags struct {
	principals, operations, topics, groups []string
	cluster, prefixed, deny, allow         bool
	patternType                            string
}

func (f *aclFlags) bind(cmd *cobra.Command, many bool) {
	fl := cmd.Flags()
	if many {
		fl.StringArrayVar(&f.principals, "principal", nil, "principal, User:NAME or User:* (repeatable)")
		fl.StringArrayVar(&f.operations, "operation", nil, "read, write, create, delete, describe, alter, clusteraction or all (repeatable)")
		fl.StringArrayVar(&f.topics, "topic", nil, "topic name, * for all, or a prefix with --prefixed (repeatable)")
		fl.StringArrayVar(&f.groups, "group", nil, "consumer group name, * for all, or a prefix with --prefixed (repeatable)")
	} else {
		fl.StringArrayVar(&f.principals, "principal", nil, "only ACLs of this principal")
		fl.StringArrayVar(&f.operations, "operation", nil, "only ACLs of this operation")
		fl.StringArrayVar(&f.topics, "topic", nil, "only ACLs of this topic pattern name")
		fl.StringArrayVar(&f.groups, "group", nil, "only ACLs of this group pattern name")
		fl.BoolVar(&f.allow, "allow", false, "only allow ACLs")
	}
	fl.BoolVar(&f.cluster, "cluster", false, "the cluster resource")
	fl.BoolVar(&f.prefixed, "prefixed", false, "the same as --resource-pattern-type prefixed")
	fl.StringVar(&f.patternType, "resource-pattern-type", "", "literal or prefixed (add; default literal); literal, prefixed or match (list, remove: match selects every ACL that applies to the named resource; default any)")
	fl.BoolVar(&f.deny, "deny", false, "a deny ACL (add), only deny ACLs (list, remove)")
}

// pattern returns the pattern type of the flags ("" when not given).
func (f *aclFlags) pattern() (acl.PatternType, error) {
	p := acl.PatternType(strings.ToLower(f.patternType))
	if f.prefixed {
		if p != "" && p != acl.Prefixed {
			return "", fmt.Errorf("--prefixed and --resource-pattern-type %s disagree", f.patternType)
		}
		p = acl.Prefixed
	}
	return p, nil
}

// resources returns the patterns named by --topic, --group and --cluster.
func (f *aclFlags) resources(pt acl.PatternType) []acl.Pattern {
	var out []acl.Pattern
	for _, t := range f.topics {
		out = append(out, acl.Pattern{Type: acl.Topic, Name: t, PatternType: pt})
	}
	for _, g := range f.groups {
		out = append(out, acl.Pattern{Type: acl.Group, Name: g, PatternType: pt})
	}
	if f.cluster {
		out = append(out, acl.Pattern{Type: acl.Cluster, PatternType: acl.Literal})
	}
	return out
}

// aclLines returns the ACLs of the arguments of `sq acl add`: each
// argument is one ACL, or several, one per line (the output of sq acl
// list, given back as "$(sq acl list)"); blank lines are skipped, but an
// argument with nothing else stays, to be refused. The textual form
// quotes a newline inside a name, so a line is never part of one ACL.
func aclLines(args []string) []string {
	var out []string
	for _, a := range args {
		n := len(out)
		for _, l := range strings.Split(a, "\n") {
			if l = strings.TrimSuffix(l, "\r"); strings.TrimSpace(l) != "" {
				out = append(out, l)
			}
		}
		if len(out) == n {
			out = append(out, a)
		}
	}
	return out
}

// bindings returns the ACLs of `sq acl add`: each argument in the
// textual form, and every principal × operation × resource of the flags.
func (f *aclFlags) bindings(args []string) ([]acl.Binding, error) {
	var out []acl.Binding
	var errs []error
	for _, a := range aclLines(args) {
		b, err := acl.Parse(a)
		if err != nil {
			errs = append(errs, err)
		}
		out = append(out, b)
	}
	pt, err := f.pattern()
	if err != nil {
		return nil, err
	}
	if pt == "" {
		pt = acl.Literal
	}
	perm := acl.Allow
	if f.deny {
		perm = acl.Deny
	}
	res := f.resources(pt)
	if len(f.principals)+len(f.operations)+len(res) > 0 {
		if len(f.principals) == 0 || len(f.operations) == 0 || len(res) == 0 {
			return nil, errors.New("an ACL from flags needs --principal, --operation and a resource (--topic, --group or --cluster)")
		}
		for _, p := range f.principals {
			for _, op := range f.operations {
				for _, r := range res {
					b := acl.Binding{Principal: p, Permission: perm, Operation: acl.Operation(strings.ToLower(op)), Pattern: r}
					if err := b.Validate(); err != nil {
						errs = append(errs, err)
					}
					out = append(out, b)
				}
			}
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if len(out) == 0 {
		return nil, errors.New("no ACL given: write one as an argument (\"User:alice allow read topic:orders\") or with --principal, --operation and --topic, --group or --cluster")
	}
	return out, nil
}

// filter returns the filter of `sq acl list` and `sq acl remove`, and
// whether any flag narrowed it.
func (f *aclFlags) filter() (acl.Filter, bool, error) {
	var fl acl.Filter
	if len(f.principals) > 1 || len(f.operations) > 1 || len(f.topics)+len(f.groups) > 1 {
		return fl, false, errors.New("a filter takes at most one --principal, --operation and one of --topic, --group")
	}
	pt, err := f.pattern()
	if err != nil {
		return fl, false, err
	}
	fl.PatternType = pt
	if len(f.principals) == 1 {
		fl.Principal = f.principals[0]
	}
	if len(f.operations) == 1 {
		fl.Operation = acl.Operation(strings.ToLower(f.operations[0]))
	}
	switch {
	case len(f.topics) == 1:
		fl.Type, fl.Name = acl.Topic, f.topics[0]
	case len(f.groups) == 1:
		fl.Type, fl.Name = acl.Group, f.groups[0]
	}
	if f.cluster {
		if fl.Type != "" {
			return fl, false, errors.New("--cluster and --topic or --group exclude each other in a filter")
		}
		fl.Type = acl.Cluster
	}
	switch {
	case f.allow && f.deny:
		return fl, false, errors.New("--allow and --deny exclude each other")
	case f.allow:
		fl.Permission = acl.Allow
	case f.deny:
		fl.Permission = acl.Deny
	}
	if err := fl.Validate(); err != nil {
		return fl, false, err
	}
	return fl, fl != acl.Filter{}, nil
}

func newACLAddCommand(g *globals) *cobra.Command {
	f := &aclFlags{}
	cmd := &cobra.Command{
		Use:   "add [ACL...]",
		Short: "Add ACLs, given as arguments or with flags",
		Long: "Add ACLs: each argument is one ACL in the textual form (see sq acl --help), or\n" +
			"several, one per line (sq acl list's output: sq acl add \"$(sq acl list)\"), and\n" +
			"the flags add one ACL for every --principal, --operation and resource (--topic,\n" +
			"--group, --cluster) given, as Kafka's kafka-acls --add does. An ACL present\n" +
			"already is kept once. Needs alter on the cluster when authorization is on.",
		Example: "  sq acl add 'User:alice allow read topic:orders' 'User:alice allow read group:billing'\n" +
			"  sq acl add --principal User:alice --operation write --topic orders- --prefixed\n" +
			"  sq acl add --principal 'User:CN=ops,O=shop' --operation alter --operation describe --cluster\n" +
			"  sq acl add --deny --principal User:* --operation delete --topic '*'",
		RunE: func(cmd *cobra.Command, args []string) error {
			bs, err := f.bindings(args)
			if err != nil {
				return err
			}
			c, err := g.controlConn(cmd)
			if err != nil {
				return err
			}
			defer c.Close()
			if _, err := call(cmd.Context(), c, "Acls.CreateAcls", sqv1.NewAclsClient(c.conn).CreateAcls,
				&sqv1.CreateAclsRequest{Acls: acl.ListToProto(bs)}); err != nil {
				return err
			}
			for _, b := range bs {
				fmt.Fprintf(g.stdout, "added: %s\n", acl.Format(b))
			}
			return nil
		},
	}
	f.bind(cmd, true)
	return cmd
}

func newACLListCommand(g *globals) *cobra.Command {
	f := &aclFlags{}
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List ACLs, one per line in the textual form",
		Long: "List the ACLs the flags select (all without a flag), one per line in the\n" +
			"form sq acl add reads. --topic NAME with --resource-pattern-type match lists\n" +
			"every ACL that applies to the topic: its literal name, the wildcard and every\n" +
			"matching prefix. Needs describe on the cluster when authorization is on.",
		Example: "  sq acl list\n  sq acl list --principal User:alice\n  sq acl list --topic orders-eu --resource-pattern-type match",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fl, _, err := f.filter()
			if err != nil {
				return err
			}
			c, err := g.controlConn(cmd)
			if err != nil {
				return err
			}
			defer c.Close()
			resp, err := call(cmd.Context(), c, "Acls.ListAcls", sqv1.NewAclsClient(c.conn).ListAcls,
				&sqv1.ListAclsRequest{Filter: acl.FilterToProto(fl)})
			if err != nil {
				return err
			}
			printACLs(g.stdout, "", resp.GetAcls())
			return nil
		},
	}
	f.bind(cmd, false)
	return cmd
}

func newACLRemoveCommand(g *globals) *cobra.Command {
	f := &aclFlags{}
	var all bool
	cmd := &cobra.Command{
		Use:   "remove",
		Short: "Remove the ACLs the flags select, and print them",
		Long: "Remove every ACL the flags select (the same flags as sq acl list) and print\n" +
			"the ones removed. Without a flag it refuses, unless --all is given. Needs\n" +
			"alter on the cluster when authorization is on.",
		Example: "  sq acl remove --principal User:alice --topic orders\n  sq acl remove --all",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fl, narrowed, err := f.filter()
			if err != nil {
				return err
			}
			if !narrowed && !all {
				return errors.New("no filter given: name the ACLs to remove (--principal, --operation, --topic, --group, --cluster, --deny, --allow), or give --all to remove every ACL")
			}
			c, err := g.controlConn(cmd)
			if err != nil {
				return err
			}
			defer c.Close()
			resp, err := call(cmd.Context(), c, "Acls.DeleteAcls", sqv1.NewAclsClient(c.conn).DeleteAcls,
				&sqv1.DeleteAclsRequest{Filters: []*sqv1.AclFilter{acl.FilterToProto(fl)}})
			if err != nil {
				return err
			}
			if len(resp.GetDeleted()) == 0 {
				fmt.Fprintln(g.stdout, "no ACL matched")
			}
			printACLs(g.stdout, "removed: ", resp.GetDeleted())
			return nil
		},
	}
	f.bind(cmd, false)
	cmd.Flags().BoolVar(&all, "all", false, "remove every ACL when no other flag narrows the selection")
	return cmd
}

func printACLs(out io.Writer, prefix string, ms []*sqv1.AclBinding) {
	for _, m := range ms {
		fmt.Fprintf(out, "%s%s\n", prefix, acl.Format(acl.FromProto(m)))
	}
}
