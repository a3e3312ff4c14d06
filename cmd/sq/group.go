package main

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/seedqueue/sq/sdk"
)

func newGroupCommand(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "group",
		Short: "List, describe, reset and delete consumer groups",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return cmd.Help()
		},
	}
	cmd.AddCommand(newGroupListCommand(g), newGroupDescribeCommand(g), newGroupResetCommand(g), newGroupDeleteCommand(g))
	return cmd
}

// withClient dials, runs fn and closes the client; broker errors are
// printed as "NAME: message".
func withClient(cmd *cobra.Command, g *globals, fn func(*sdk.Client) error) error {
	c, err := g.dial(cmd)
	if err != nil {
		return err
	}
	defer c.Close()
	if err := fn(c); err != nil {
		return apiError(g.addr(cmd), err)
	}
	return nil
}

func newGroupListCommand(g *globals) *cobra.Command {
	var format *adminFormat
	cmd := &cobra.Command{
		Use:     "list",
		Short:   "List consumer groups with their state, members and generation",
		Example: "  sq group list\n  sq group list -f json",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			asJSON, err := format.json()
			if err != nil {
				return err
			}
			return withClient(cmd, g, func(c *sdk.Client) error {
				groups, err := c.ListGroups(cmd.Context())
				if err != nil {
					return err
				}
				if asJSON {
					return printGroupListJSON(cmd.OutOrStdout(), groups)
				}
				w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 8, 2, ' ', 0)
				fmt.Fprintln(w, "GROUP\tSTATE\tMEMBERS\tGENERATION")
				for _, s := range groups {
					fmt.Fprintf(w, "%s\t%s\t%d\t%d\n", s.Group, s.State, s.Members, s.Generation)
				}
				return w.Flush()
			})
		},
	}
	format = addAdminFormatFlag(cmd)
	return cmd
}

func newGroupDescribeCommand(g *globals) *cobra.Command {
	var format *adminFormat
	cmd := &cobra.Command{
		Use:     "describe GROUP",
		Short:   "Show a group's members, assignment, and per partition the committed offset, log end and lag",
		Example: "  sq group describe billing\n  sq group describe billing -f json",
		Args:    oneGroupName,
		RunE: func(cmd *cobra.Command, args []string) error {
			asJSON, err := format.json()
			if err != nil {
				return err
			}
			return withClient(cmd, g, func(c *sdk.Client) error {
				d, err := c.DescribeGroup(cmd.Context(), args[0])
				if err != nil {
					return err
				}
				if asJSON {
					return printGroupJSON(cmd.OutOrStdout(), d)
				}
				return printGroup(cmd.OutOrStdout(), d)
			})
		},
	}
	format = addAdminFormatFlag(cmd)
	return cmd
}

func printGroup(out io.Writer, d sdk.GroupDescription) error {
	fmt.Fprintf(out, "Group: %s  State: %s  Members: %d  Generation: %d\n\n", d.Summary.Group, d.Summary.State, d.Summary.Members, d.Summary.Generation)
	w := tabwriter.NewWriter(out, 0, 8, 2, ' ', 0)
	fmt.Fprintln(w, "MEMBER\tCLIENT\tASSIGNMENT")
	for _, m := range d.Members {
		var parts []string
		for _, t := range slices.Sorted(maps.Keys(m.Assignment)) {
			var ids []string
			for _, p := range slices.Sorted(slices.Values(m.Assignment[t])) {
				ids = append(ids, strconv.FormatUint(uint64(p), 10))
			}
			parts = append(parts, t+":"+strings.Join(ids, ","))
		}
		fmt.Fprintf(w, "%s\t%s\t%s\n", m.MemberID, orDash(m.ClientID), orDash(strings.Join(parts, " ")))
	}
	if err := w.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(out)
	w = tabwriter.NewWriter(out, 0, 8, 2, ' ', 0)
	fmt.Fprintln(w, "TOPIC\tPARTITION\tCOMMITTED\tLOG END\tLAG\tMEMBER")
	for _, o := range d.Offsets {
		committed := "-"
		if o.CommittedOffset >= 0 {
			committed = strconv.FormatInt(o.CommittedOffset, 10)
		}
		// A negative lag means the partition's statistics are unknown
		// (in a cluster, its leader is not available): the log end the
		// server sends is then 0, not a value.
		logEnd, lag := "-", "-"
		if o.Lag >= 0 {
			logEnd, lag = strconv.FormatUint(o.LogEndOffset, 10), strconv.FormatInt(o.Lag, 10)
		}
		fmt.Fprintf(w, "%s\t%d\t%s\t%s\t%s\t%s\n", o.Topic, o.Partition, committed, logEnd, lag, orDash(o.MemberID))
	}
	return w.Flush()
}

func newGroupResetCommand(g *globals) *cobra.Command {
	var topic, to string
	cmd := &cobra.Command{
		Use:   "reset-offsets GROUP -t TOPIC --to earliest|latest|OFFSET",
		Short: "Set a group's committed offsets of a topic (only while the group has no members)",
		Example: "  sq group reset-offsets billing --topic orders --to earliest\n" +
			"  sq group reset-offsets billing -t orders --to 1200",
		Args: oneGroupName,
		RunE: func(cmd *cobra.Command, args []string) error {
			if cmd.Flags().Changed("topic") && strings.TrimSpace(topic) == "" {
				return fmt.Errorf("--topic/-t is empty: give the topic's name (sq topic list names the topics)")
			}
			if topic == "" {
				return fmt.Errorf("--topic is required")
			}
			mode, value, err := parseResetTo(to)
			if err != nil {
				return err
			}
			return withClient(cmd, g, func(c *sdk.Client) error {
				offs, err := c.ResetOffsets(cmd.Context(), args[0], topic, mode, value)
				if err != nil {
					return err
				}
				for _, o := range offs {
					fmt.Fprintf(cmd.OutOrStdout(), "%s/%d -> %d\n", o.Topic, o.Partition, o.Offset)
				}
				return nil
			})
		},
	}
	cmd.Flags().StringVarP(&topic, "topic", "t", "", "topic whose offsets to reset (required)")
	cmd.Flags().StringVar(&to, "to", "", "earliest, latest, or an offset (required)")
	return cmd
}

// parseResetTo parses --to.
func parseResetTo(to string) (sdk.ResetMode, int64, error) {
	switch to {
	case "earliest":
		return sdk.ResetEarliest, 0, nil
	case "latest":
		return sdk.ResetLatest, 0, nil
	case "":
		return 0, 0, fmt.Errorf("--to is required: earliest, latest or an offset")
	}
	n, err := strconv.ParseInt(to, 10, 64)
	if err != nil || n < 0 {
		return 0, 0, fmt.Errorf("--to %q: want earliest, latest or a non-negative offset", to)
	}
	return sdk.ResetToOffset, n, nil
}

func newGroupDeleteCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "delete GROUP",
		Short: "Delete a group and its committed offsets (only while it has no members)",
		Args:  oneGroupName,
		RunE: func(cmd *cobra.Command, args []string) error {
			return withClient(cmd, g, func(c *sdk.Client) error {
				if err := c.DeleteGroup(cmd.Context(), args[0]); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "group %q deleted\n", args[0])
				return nil
			})
		},
	}
}
