package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/pflag"

	"github.com/seedqueue/sq/engine"
	"github.com/seedqueue/sq/internal/ratelog"
)

// liveSettings are the settings a SIGHUP applies without a restart: the
// log level, and the retention defaults of topics created afterwards.
// (The TLS files' contents reload too, tls.go; their paths do not.)
var liveSettings = map[string]bool{
	"log-level":             true,
	"retention-ms":          true,
	"retention-bytes":       true,
	"local-retention-ms":    true,
	"local-retention-bytes": true,
}

// topicDefaulter is the engine's side of a reload (*engine.Engine).
type topicDefaulter interface {
	SetTopicDefaults(engine.TopicDefaults) error
}

// settingChange is one setting whose effective value a reload found
// changed.
type settingChange struct {
	name, from, to, source string
}

// reloadResult is what a reload did: the changes it applied and those
// that wait for a restart.
type reloadResult struct {
	applied, restart []settingChange
}

// notifyHUP registers for SIGHUP now, so that one arriving before the
// reload loop starts is kept (and does not end the process).
func notifyHUP() chan os.Signal {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	return hup
}

// watchReload reloads the settings on each SIGHUP from hup until ctx
// ends (reload); with no settings to reload from (c.flags nil: run
// called without a command line), it does nothing.
func (c *config) watchReload(ctx context.Context, hup chan os.Signal, eng topicDefaulter, getenv func(string) string, log *slog.Logger) {
	if c.flags == nil {
		return
	}
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				c.reloadLogged(eng, getenv, log)
			}
		}
	}()
}

// reloadLogged is one SIGHUP's reload, its failure logged as an ERROR.
// Every line of a reload is logged, however close to the previous one
// (ratelog.Unlimited): each answers an operator's command.
func (c *config) reloadLogged(eng topicDefaulter, getenv func(string) string, log *slog.Logger) {
	if _, err := c.reload(eng, getenv, log); err != nil {
		log.ErrorContext(ratelog.Unlimited(context.Background()), "SIGHUP: configuration not reloaded; the current one stays", "err", err)
	}
}

// reload resolves the settings again as at start (the same command line,
// the SQ_* variables getenv returns, the config file as it is now), and
// applies the live ones that changed (liveSettings); the other changes
// are logged as waiting for a restart. Each change is logged with its
// old and new value and source. An invalid configuration (a bad file, a
// value validate refuses) changes nothing and is the error.
func (c *config) reload(eng topicDefaulter, getenv func(string) string, log *slog.Logger) (reloadResult, error) {
	var res reloadResult
	if c.flags == nil {
		return res, fmt.Errorf("no settings to reload from")
	}
	var nc config
	fs := pflag.NewFlagSet("reload", pflag.ContinueOnError)
	bindFlags(fs, &nc)
	// The command line, as given at start: Changed, not Visit, which
	// sees only the flags parsed by this very set (cobra parses the
	// persistent flags into the subcommand's set, sharing the *Flag).
	c.flags.VisitAll(func(f *pflag.Flag) {
		if !f.Changed {
			return
		}
		if g := fs.Lookup(f.Name); g != nil {
			copyFlag(g, f)
			g.Changed = true
		}
	})
	sources, err := nc.resolve(fs, getenv)
	if err == nil {
		err = nc.validate()
	}
	if err != nil {
		return res, err
	}
	fs.VisitAll(func(g *pflag.Flag) {
		f := c.flags.Lookup(g.Name)
		if f == nil || f.Value.String() == g.Value.String() {
			return
		}
		ch := settingChange{name: g.Name, from: f.Value.String(), to: g.Value.String(), source: sources[g.Name]}
		if liveSettings[g.Name] {
			res.applied = append(res.applied, ch)
		} else {
			res.restart = append(res.restart, ch)
		}
	})
	if len(res.applied) > 0 {
		if err := c.apply(&nc, res.applied, eng); err != nil {
			return reloadResult{}, err
		}
	}
	ctx := ratelog.Unlimited(context.Background()) // one line per setting
	for _, ch := range res.applied {
		log.InfoContext(ctx, "SIGHUP: setting changed", "setting", ch.name, "from", ch.from, "to", ch.to, "source", ch.source)
	}
	for _, ch := range res.restart {
		log.WarnContext(ctx, "SIGHUP: setting changed, takes effect at the next restart", "setting", ch.name, "from", ch.from, "to", ch.to, "source", ch.source)
	}
	log.InfoContext(ctx, "SIGHUP: configuration reloaded", "file", nc.ConfigFile, "applied", len(res.applied), "need_restart", len(res.restart))
	return res, nil
}

// apply makes the live changes of nc take effect: the engine's topic
// defaults first (the one step that may refuse), then the log level,
// then c's flags, so that the next reload compares with what runs.
func (c *config) apply(nc *config, changes []settingChange, eng topicDefaulter) error {
	if eng != nil {
		d := engine.TopicDefaults{RetentionMs: nc.RetentionMs, RetentionBytes: nc.RetentionBytes,
			LocalRetentionMs: nc.LocalRetentionMs, LocalRetentionBytes: nc.LocalRetentionBytes}
		if err := eng.SetTopicDefaults(d); err != nil {
			return err
		}
	}
	if c.level != nil {
		level, _ := parseLevel(nc.LogLevel) // validated
		c.level.Set(level)
	}
	for _, ch := range changes {
		if err := c.flags.Lookup(ch.name).Value.Set(ch.to); err != nil {
			return fmt.Errorf("%s: %w", ch.name, err)
		}
	}
	return nil
}

// copyFlag sets dst's value to src's (a list replaced whole).
func copyFlag(dst, src *pflag.Flag) {
	if sv, ok := src.Value.(pflag.SliceValue); ok {
		if dv, ok := dst.Value.(pflag.SliceValue); ok {
			_ = dv.Replace(sv.GetSlice())
			return
		}
	}
	_ = dst.Value.Set(src.Value.String())
}
