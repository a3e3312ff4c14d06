package dataplane

import (
	"log/slog"
	"testing"

	"github.com/seedqueue/sq/engine"
)

// The protocol tests also run against the real engine on a temporary
// data directory.
func init() {
	brokerKinds = append(brokerKinds, brokerKind{"engine", openEngine})
}

func openEngine(t testing.TB) Broker {
	t.Helper()
	opts := engine.Options{DataDir: t.TempDir(), Logger: slog.New(slog.DiscardHandler)}
	opts.Defaults()
	eng, err := engine.Open(opts)
	if err != nil {
		t.Fatalf("engine.Open: %v", err)
	}
	t.Cleanup(func() {
		if err := eng.Close(); err != nil {
			t.Errorf("engine.Close: %v", err)
		}
	})
	return eng
}
