#!/bin/sh
# After removal: systemd forgets the unit. A purge (deb) removes
# /var/lib/sq only if it is empty: the data of a node is never deleted by
# the package manager; the sq user stays (its files may remain).
set -e
if [ -d /run/systemd/system ]; then
  systemctl daemon-reload >/dev/null 2>&1 || true
fi
if [ "$1" = purge ]; then
  rmdir /var/lib/sq 2>/dev/null || true
  rmdir /etc/sq 2>/dev/null || true
fi
