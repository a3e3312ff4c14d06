#!/bin/sh
# The data directory and the config's group, then systemd's view of the
# unit. The service is not started: `systemctl enable --now sq-server`.
set -e
install -d -o sq -g sq -m 0750 /var/lib/sq
chgrp sq /etc/sq/sq-server.toml
chmod 0640 /etc/sq/sq-server.toml
if [ -d /run/systemd/system ]; then
  systemctl daemon-reload >/dev/null 2>&1 || true
  # An upgrade restarts a running node with the new binary.
  if systemctl is-active --quiet sq-server; then
    systemctl try-restart sq-server || true
  fi
fi
