package main

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
)

// noArgs refuses positional arguments, naming them: cobra's own message,
// `unknown command "orders" for "sq consume"`, reads as if a subcommand
// were missing.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	return fmt.Errorf("%s takes no arguments, got %s (see --help)", cmd.CommandPath(), quoteArgs(args))
}

// topicArgs is noArgs for sq consume and sq produce, which say where the
// topic goes when it was given as an argument (kcat and rpk users may
// write it so: `sq produce orders < file`); with the topic set, sq
// produce points a stray argument, most likely a file name, to --file and
// --value-file.
//
// Without any topic it says what is missing in place of cobra's
// `required flag(s) "topic" not set`; a blank -t is refused as such.
func topicArgs(cmd *cobra.Command, args []string) error {
	if len(args) == 0 && !cmd.Flags().Changed("topic") {
		return fmt.Errorf("%s needs a topic: give it with -t/--topic, e.g. %s -t orders (sq topic list names the topics)", cmd.CommandPath(), cmd.CommandPath())
	}
	if t, _ := cmd.Flags().GetString("topic"); cmd.Flags().Changed("topic") && strings.TrimSpace(t) == "" {
		return errors.New("--topic/-t is empty: give the topic's name (sq topic list names the topics)")
	}
	if len(args) == 1 && !cmd.Flags().Changed("topic") {
		return fmt.Errorf("%s takes no arguments, got %q: name the topic with -t/--topic: %s -t %s", cmd.CommandPath(), args[0], cmd.CommandPath(), args[0])
	}
	if len(args) == 1 && cmd.Name() == "produce" {
		return fmt.Errorf("%s takes no arguments, got %q: to send a file give --file %s (one record per line) or --value-file %s (the whole file as one record)", cmd.CommandPath(), args[0], args[0], args[0])
	}
	return noArgs(cmd, args)
}

// oneGroupName requires exactly one argument, the group NAME, not blank.
func oneGroupName(cmd *cobra.Command, args []string) error {
	return oneName(cmd, args, "group NAME", "sq group list names the groups")
}

// oneTopicName requires exactly one argument, the NAME of an existing
// topic, not blank.
func oneTopicName(cmd *cobra.Command, args []string) error {
	return oneName(cmd, args, "topic NAME", "sq topic list names the topics")
}

// oneNewTopicName requires exactly one argument, the NAME of the topic to
// create, not blank.
func oneNewTopicName(cmd *cobra.Command, args []string) error {
	return oneName(cmd, args, "topic NAME", "the name of the topic to create, e.g. orders")
}

// oneNodeID requires exactly one argument, a node ID, not blank.
func oneNodeID(cmd *cobra.Command, args []string) error {
	return oneName(cmd, args, "node ID", "sq cluster members lists them")
}

// oneName requires exactly one argument, what ("topic NAME"), that is not
// empty or only spaces (a shell variable that was not set gives ""); the
// blank one is refused here, before a server reads it as another name
// or answers with a less precise error. where says where to find one.
func oneName(cmd *cobra.Command, args []string, what, where string) error {
	if len(args) != 1 {
		return fmt.Errorf("%s takes exactly one %s, got %d arguments (see --help)", cmd.CommandPath(), what, len(args))
	}
	if strings.TrimSpace(args[0]) == "" {
		return fmt.Errorf("%s got an empty %s %q: give one (%s)", cmd.CommandPath(), what, args[0], where)
	}
	return nil
}

// quoteArgs renders args as "a" "b".
func quoteArgs(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = fmt.Sprintf("%q", a)
	}
	return strings.Join(q, " ")
}

// countFlag is --count/-c: a record count, 0 for no limit. Its error for
// a bad value says what is accepted (pflag's quotes strconv).
type countFlag int64

// Set parses a count of 0 or more.
func (c *countFlag) Set(s string) error {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return fmt.Errorf("want 0 (no limit) or more, a whole number of records")
	}
	*c = countFlag(n)
	return nil
}

// String returns the count in decimal.
func (c *countFlag) String() string { return strconv.FormatInt(int64(*c), 10) }

// Type names the flag's values in --help.
func (c *countFlag) Type() string { return "int" }
