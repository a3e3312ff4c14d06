#!/bin/sh
# Stop and disable the service when the package is removed (not when it is
# upgraded: deb "upgrade", rpm $1 = 1).
set -e
case "$1" in
  remove|purge|0)
    if [ -d /run/systemd/system ]; then
      systemctl disable --now sq-server >/dev/null 2>&1 || true
    fi
    ;;
esac
