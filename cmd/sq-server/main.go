// Command sq-server runs one SQ broker node: the durable log engine and the
// Cap'n Proto data plane, configured by flags or SQ_* environment variables
// (a flag wins over its variable).
//
//	sq-server serve
//	sq-server --node-id n1 --capnp-host 0.0.0.0:6064 --data-dir /var/lib/sq serve
package main

import (
	"fmt"
	"os"
)

func main() {
	if err := newRootCommand().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "sq-server:", err)
		os.Exit(1)
	}
}
