package main

import (
	"errors"
	"net"
	"slices"
	"strings"
	"testing"
)

// TestClusterFlags: the defaults of the cluster listeners (gRPC port + 6
// and + 7, port 0 kept), the SQ_* variables, --seeds parsing and the
// start errors.
func TestClusterFlags(t *testing.T) {
	c, err := parseConfig(t, nil)
	if err != nil {
		t.Fatal(err)
	}
	o, err := c.gossipOptions(listeners{GRPC: "127.0.0.1:6060", Data: "127.0.0.1:6064", HTTP: "127.0.0.1:6062"})
	if err != nil {
		t.Fatal(err)
	}
	if o.GossipBind != "127.0.0.1:6066" || o.RaftBind != "127.0.0.1:6067" || o.GossipAdvertise != "127.0.0.1:6066" || o.RaftAdvertise != "127.0.0.1:6067" {
		t.Errorf("defaults: gossip %s (%s), raft %s (%s); want 127.0.0.1:6066 and :6067", o.GossipBind, o.GossipAdvertise, o.RaftBind, o.RaftAdvertise)
	}
	if o.GRPCAddr != "127.0.0.1:6060" || o.DataAddr != "127.0.0.1:6064" || o.HTTPAddr != "127.0.0.1:6062" || len(o.Seeds) != 0 ||
		o.NodeID != "node-1" || o.ClusterID != "default" || o.DefaultReplicationFactor != 0 {
		t.Errorf("options %+v", o)
	}

	c, err = parseConfig(t, map[string]string{
		"SQ_SEEDS": " 10.0.0.1:6060 ,10.0.0.2:6070,", "SQ_GRPC_HOST": "127.0.0.1:0",
		"SQ_DEFAULT_REPLICATION_FACTOR": "2", "SQ_ADVERTISE_HOST": "10.0.0.3",
	})
	if err != nil {
		t.Fatal(err)
	}
	o, err = c.gossipOptions(listeners{GRPC: "127.0.0.1:41000", Data: "127.0.0.1:41001"})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(o.Seeds, []string{"10.0.0.1:6060", "10.0.0.2:6070"}) || o.DefaultReplicationFactor != 2 {
		t.Errorf("from env: seeds %q, rf %d", o.Seeds, o.DefaultReplicationFactor)
	}
	if o.GossipBind != "127.0.0.1:0" || o.RaftBind != "127.0.0.1:0" || o.GossipAdvertise != "10.0.0.3:0" || o.GRPCAddr != "10.0.0.3:41000" || o.HTTPAddr != "" {
		t.Errorf("gRPC port 0: gossip %s (%s), raft %s, gRPC %s, HTTP %q", o.GossipBind, o.GossipAdvertise, o.RaftBind, o.GRPCAddr, o.HTTPAddr)
	}

	c, err = parseConfig(t, map[string]string{"SQ_GOSSIP_HOST": "0.0.0.0:7000"}, "--raft-host", "0.0.0.0:7001", "--grpc-host", "0.0.0.0:6060", "--advertise-host", "192.168.1.5")
	if err != nil {
		t.Fatal(err)
	}
	if o, err = c.gossipOptions(listeners{GRPC: "0.0.0.0:6060", Data: "0.0.0.0:6064"}); err != nil {
		t.Fatal(err)
	}
	if o.GossipBind != "0.0.0.0:7000" || o.RaftAdvertise != "192.168.1.5:7001" || o.DataAddr != "192.168.1.5:6064" {
		t.Errorf("flags: %+v", o)
	}

	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"seeds without grpc", []string{"--grpc-host", "", "--seeds", "10.0.0.1:6060"}, []string{"--seeds needs --grpc-host"}},
		{"seed without port", []string{"--seeds", "10.0.0.1"}, []string{"--seeds", `"10.0.0.1"`}},
		{"bad gossip host", []string{"--gossip-host", "nowhere"}, []string{"--gossip-host"}},
		{"bad raft port", []string{"--raft-host", "127.0.0.1:70000"}, []string{"--raft-host"}},
		{"port above the range", []string{"--grpc-host", "127.0.0.1:65530"}, []string{"above 65535"}},
		{"advertise a bad name", []string{"--advertise-host", "sq_1!"}, []string{"--advertise-host", "IP address or a host name"}},
		{"negative rf", []string{"--default-replication-factor", "-1"}, []string{"--default-replication-factor -1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseConfig(t, nil, tc.args...)
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

// TestAdvertiseHost: --advertise-host wins, then the listener's IP, then
// for an unspecified listener the first private IPv4 of the interfaces
// (loopback and link-local skipped), else the first other IPv4.
func TestAdvertiseHost(t *testing.T) {
	ipnet := func(s string) net.Addr { ip, n, _ := net.ParseCIDR(s); n.IP = ip; return n }
	ifs := func(as ...string) func() ([]net.Addr, error) {
		return func() ([]net.Addr, error) {
			var out []net.Addr
			for _, a := range as {
				out = append(out, ipnet(a))
			}
			return out, nil
		}
	}
	for _, tc := range []struct {
		name, flag, listen string
		addrs              func() ([]net.Addr, error)
		want               string
		err                bool
	}{
		{"flag", "10.9.9.9", "0.0.0.0", ifs("10.0.0.1/24"), "10.9.9.9", false},
		{"flag, a name resolved", "localhost", "0.0.0.0", ifs("10.0.0.1/24"), "127.0.0.1", false},
		{"flag, a name not resolved", "sq-no-such-host.invalid", "0.0.0.0", ifs("10.0.0.1/24"), "", true},
		{"listener ip", "", "127.0.0.1", ifs("10.0.0.1/24"), "127.0.0.1", false},
		{"unspecified v4", "", "0.0.0.0", ifs("127.0.0.1/8", "169.254.1.1/16", "203.0.113.9/24", "10.0.0.2/24"), "10.0.0.2", false},
		{"unspecified v6", "", "::", ifs("::1/128", "203.0.113.9/24"), "203.0.113.9", false},
		{"no host", "", "", ifs("192.168.0.7/24"), "192.168.0.7", false},
		{"nothing to advertise", "", "0.0.0.0", ifs("127.0.0.1/8"), "", true},
		{"interfaces fail", "", "0.0.0.0", func() ([]net.Addr, error) { return nil, errors.New("boom") }, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := config{AdvertiseHost: tc.flag}
			got, err := c.advertise(tc.listen, tc.addrs)
			if (err != nil) != tc.err || got != tc.want {
				t.Fatalf("advertise(%q) = %q, %v; want %q (error %v)", tc.listen, got, err, tc.want, tc.err)
			}
			if err != nil && !strings.Contains(err.Error(), "--advertise-host") {
				t.Errorf("error %q does not name --advertise-host", err)
			}
		})
	}
}
