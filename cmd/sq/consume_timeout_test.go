package main

import (
	"testing"
	"time"
)

// TestGroupMemberHonoursTimeout: the sdk.Consumer of `sq consume -g`
// dials within --timeout (else SQ_TIMEOUT, else 5s), as every other
// connection of sq does, not within a fixed bound.
func TestGroupMemberHonoursTimeout(t *testing.T) {
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want time.Duration
	}{
		{[]string{"--timeout", "1500ms"}, nil, 1500 * time.Millisecond},
		{[]string{"--timeout", "30s"}, map[string]string{"SQ_TIMEOUT": "2s"}, 30 * time.Second},
		{nil, map[string]string{"SQ_TIMEOUT": "2s"}, 2 * time.Second},
		{nil, nil, defaultTimeout},
	} {
		root := newRootCommand(nil, nil, nil, func(k string) string { return tc.env[k] })
		args := append(append([]string{}, tc.args...), "consume", "-t", "orders", "-g", "billing")
		cmd, rest, err := root.Find(args)
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.ParseFlags(rest); err != nil {
			t.Fatal(err)
		}
		g := &globals{getenv: func(k string) string { return tc.env[k] }, server: defaultServer, timeout: defaultTimeout}
		if v := cmd.Flags().Lookup("timeout"); v.Changed {
			g.timeout, _ = cmd.Flags().GetDuration("timeout")
		}
		s, err := newGroupSession(cmd, g, consumeFlags{topic: "orders", group: "billing"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := s.consumerConfig(0).DialTimeout; got != tc.want {
			t.Errorf("sq %q (env %v): the group's consumer dials within %v, want %v", tc.args, tc.env, got, tc.want)
		}
	}
}
