// Package e2e holds the end-to-end tests of SQ: they build the real
// sq-server and sq binaries once (in TestMain), run servers as separate
// processes on 127.0.0.1 with temporary data directories, and drive them
// with the sq CLI, the Go SDK and raw TCP clients. They cover the CLI on
// real input, recovery after SIGKILL under load, malformed input and the
// server's flags. The package has no non-test code besides this comment.
package e2e
