// Package archtest holds the tests that keep the architecture's rules:
// the import rules of docs/architecture.md §2 (imports point down only:
// cmd -> net, control, gossip, tier -> engine -> segment -> ring; api is a
// leaf; the SDK never imports server code), and the disk seam (engine and
// segment touch the disk only through ring's FS, File and Backend, so that
// internal/faultfs can fail and crash-test every call; docs/storage.md).
package archtest
