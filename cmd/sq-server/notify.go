package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
)

// The states sent to systemd (sd_notify(3)) when the unit is
// Type=notify: READY=1 once /readyz says ready, STOPPING=1 when the stop
// begins, WATCHDOG=1 every half WatchdogSec. Outside systemd
// (NOTIFY_SOCKET unset) nothing is sent.
const (
	sdReady    = daemon.SdNotifyReady    // "READY=1"
	sdStopping = daemon.SdNotifyStopping // "STOPPING=1"
	sdWatchdog = daemon.SdNotifyWatchdog // "WATCHDOG=1"
)

// sdNotify sends state to the service manager through NOTIFY_SOCKET; a
// failure (a socket that went away) is logged, never fatal.
func sdNotify(log *slog.Logger, state string) {
	if _, err := daemon.SdNotify(false, state); err != nil {
		log.Warn("sd_notify to the service manager failed", "state", state, "err", err)
	}
}

// startWatchdog sends WATCHDOG=1 every half of the watchdog interval the
// service manager set (WATCHDOG_USEC, for this process: WATCHDOG_PID)
// until ctx ends; without one it does nothing. It runs from the start,
// so that a long storage recovery is not taken for a hang.
func startWatchdog(ctx context.Context, log *slog.Logger) {
	interval, err := daemon.SdWatchdogEnabled(false)
	if err != nil {
		log.Warn("systemd watchdog: ignoring a bad WATCHDOG_USEC", "err", err)
		return
	}
	if interval <= 0 {
		return
	}
	log.Info("systemd watchdog on", "interval", interval, "ping_every", interval/2)
	go func() {
		t := time.NewTicker(interval / 2)
		defer t.Stop()
		for {
			sdNotify(log, sdWatchdog)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
}
