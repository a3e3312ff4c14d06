package clusternet

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// netnsEtc is where ip-netns(8) looks for a namespace's own configuration
// files: `ip netns exec NAME` bind-mounts each file of netnsEtc/NAME over
// the file of the same name in /etc, in a mount namespace of its own.
const netnsEtc = "/etc/netns"

// SetHosts gives every namespace of the cluster (nodes and client) a
// hosts file (hosts(5)) that resolves each name of names to its IP
// address, after localhost, so the processes started from then on (by
// Node.Start or Namespace.Command) resolve those names, as containers
// resolve the service names of a compose file. The files are removed
// when the test ends. It fails the test on a name that is not a host
// name or an address that is not an IP.
func (c *Cluster) SetHosts(names map[string]string) {
	c.t.Helper()
	var b strings.Builder
	b.WriteString("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n")
	for _, name := range slices.Sorted(maps.Keys(names)) {
		ip := names[name]
		if net.ParseIP(ip) == nil || name == "" || strings.ContainsAny(name, " \t\n#") {
			c.t.Fatalf("clusternet: SetHosts: %q -> %q: want a host name and an IP address", name, ip)
		}
		fmt.Fprintf(&b, "%s\t%s\n", ip, name)
	}
	var dirs []string
	c.t.Cleanup(func() {
		var errs []error
		for _, d := range dirs {
			errs = append(errs, os.RemoveAll(d))
		}
		if err := errors.Join(errs...); err != nil {
			c.t.Errorf("clusternet: removing hosts files: %v", err)
		}
	})
	for _, name := range c.Names() {
		if name == c.bridge.Name {
			continue
		}
		dir := filepath.Join(netnsEtc, name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			c.t.Fatal(err)
		}
		dirs = append(dirs, dir)
		if err := os.WriteFile(filepath.Join(dir, "hosts"), []byte(b.String()), 0o644); err != nil {
			c.t.Fatal(err)
		}
	}
}
