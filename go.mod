module github.com/seedqueue/sq

go 1.26.0

require capnproto.org/go/capnp/v3 v3.1.0-alpha.2

require (
	github.com/colega/zeropool v0.0.0-20230505084239-6fb4a4f75381 // indirect
	github.com/inconshreveable/mousetrap v1.1.0 // indirect
	github.com/spf13/cobra v1.10.2 // indirect
	github.com/spf13/pflag v1.0.9 // indirect
	golang.org/x/sync v0.7.0 // indirect
	golang.org/x/sys v0.50.0 // indirect
)
