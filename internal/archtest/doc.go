// Package archtest holds the test that keeps the import rules of docs/architecture.md §2:
// imports point down only (cmd -> net, control, gossip, tier -> engine ->
// segment -> ring), api is a leaf, and the SDK never imports server code.
package archtest
