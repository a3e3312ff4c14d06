package main

import (
	"strings"
	"testing"
)

// TestPositionalArguments: a stray argument is named, and a topic given
// to sq consume or sq produce as an argument is pointed to -t, and a
// file given to sq produce to --file and --value-file; a group command without
// its NAME says so, and so do sq consume and sq produce without a topic;
// an empty (or blank) NAME, node ID, topic or group is refused as such.
// Nothing is dialed.
func TestPositionalArguments(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"consume", "orders"}, `sq consume takes no arguments, got "orders": name the topic with -t/--topic: sq consume -t orders`},
		{[]string{"consume", "-t", "orders", "more"}, `sq consume takes no arguments, got "more" (see --help)`},
		{[]string{"consume"}, `sq consume needs a topic: give it with -t/--topic, e.g. sq consume -t orders (sq topic list names the topics)`},
		{[]string{"produce"}, `sq produce needs a topic: give it with -t/--topic, e.g. sq produce -t orders (sq topic list names the topics)`},
		{[]string{"produce", "--file", "lines.txt"}, `sq produce needs a topic: give it with -t/--topic, e.g. sq produce -t orders`},
		{[]string{"consume", "-g", "billing", "-f", "json"}, `sq consume needs a topic: give it with -t/--topic, e.g. sq consume -t orders`},
		{[]string{"produce", "orders"}, `sq produce takes no arguments, got "orders": name the topic with -t/--topic: sq produce -t orders`},
		{[]string{"produce", "-t", "orders", "lines.txt"}, `sq produce takes no arguments, got "lines.txt": to send a file give --file lines.txt (one record per line) or --value-file lines.txt (the whole file as one record)`},
		{[]string{"produce", "-t", "orders", "a", "b"}, `sq produce takes no arguments, got "a" "b" (see --help)`},
		{[]string{"produce", "a", "b"}, `sq produce takes no arguments, got "a" "b" (see --help)`},
		{[]string{"consume", "a", "b"}, `sq consume takes no arguments, got "a" "b" (see --help)`},
		{[]string{"topic", "list", "x"}, `sq topic list takes no arguments, got "x" (see --help)`},
		{[]string{"group", "list", "billing"}, `sq group list takes no arguments, got "billing" (see --help)`},
		{[]string{"cluster", "info", "now"}, `sq cluster info takes no arguments, got "now" (see --help)`},
		{[]string{"version", "x"}, `sq version takes no arguments, got "x" (see --help)`},
		{[]string{"group", "describe"}, `sq group describe takes exactly one group NAME, got 0 arguments (see --help)`},
		{[]string{"group", "delete", "a", "b"}, `sq group delete takes exactly one group NAME, got 2 arguments (see --help)`},
		{[]string{"consume", "-t", "orders", "-c", "abc"}, `invalid argument "abc" for "-c, --count" flag: want 0 (no limit) or more, a whole number of records`},
		{[]string{"consume", "-t", "orders", "-c", "-1"}, `invalid argument "-1" for "-c, --count" flag: want 0 (no limit) or more`},
		{[]string{"consume", "-t", "orders", "-c", "99999999999999999999"}, `invalid argument "99999999999999999999" for "-c, --count" flag: want 0 (no limit)`},
		{[]string{"consume", "-t", "orders", "-g", ""}, `--group/-g is empty: give the group's name, or drop -g to read without a group`},
		{[]string{"group", "reset-offsets", "-t", "orders", "--to", "earliest"}, `sq group reset-offsets takes exactly one group NAME, got 0 arguments`},
		{[]string{"consume", "-t", "orders", "-g", " "}, `--group/-g is empty: give the group's name`},
		{[]string{"consume", "-t", ""}, `--topic/-t is empty: give the topic's name (sq topic list names the topics)`},
		{[]string{"produce", "-t", " "}, `--topic/-t is empty: give the topic's name (sq topic list names the topics)`},
		{[]string{"topic", "create", ""}, `sq topic create got an empty topic NAME "": give one (the name of the topic to create, e.g. orders)`},
		{[]string{"topic", "describe", ""}, `sq topic describe got an empty topic NAME "": give one (sq topic list names the topics)`},
		{[]string{"topic", "alter", " ", "--partitions", "3"}, `sq topic alter got an empty topic NAME " ": give one (sq topic list names the topics)`},
		{[]string{"topic", "delete", ""}, `sq topic delete got an empty topic NAME "": give one (sq topic list names the topics)`},
		{[]string{"topic", "describe", "a", "b"}, `sq topic describe takes exactly one topic NAME, got 2 arguments (see --help)`},
		{[]string{"group", "describe", ""}, `sq group describe got an empty group NAME "": give one (sq group list names the groups)`},
		{[]string{"group", "delete", ""}, `sq group delete got an empty group NAME "": give one (sq group list names the groups)`},
		{[]string{"group", "reset-offsets", "", "-t", "orders", "--to", "earliest"}, `sq group reset-offsets got an empty group NAME "": give one`},
		{[]string{"group", "reset-offsets", "billing", "-t", " ", "--to", "earliest"}, `--topic/-t is empty: give the topic's name (sq topic list names the topics)`},
		{[]string{"cluster", "remove-node", ""}, `sq cluster remove-node got an empty node ID "": give one (sq cluster members lists them)`},
		{[]string{"cluster", "remove-node", "a", "b"}, `sq cluster remove-node takes exactly one node ID, got 2 arguments (see --help)`},
	} {
		_, err := runSQ(t, map[string]string{"SQ_SERVER": "127.0.0.1:1", "SQ_CONTROL": "127.0.0.1:1"}, tc.args...)
		if err == nil || err.Error() != tc.want && !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("sq %q: error %v, want %q", tc.args, err, tc.want)
		}
	}
}
