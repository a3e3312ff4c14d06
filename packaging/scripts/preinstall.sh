#!/bin/sh
# The sq system user and group that run sq-server (the unit's User=).
set -e
if ! getent group sq >/dev/null; then
  groupadd --system sq
fi
if ! getent passwd sq >/dev/null; then
  useradd --system --gid sq --home-dir /var/lib/sq --no-create-home \
    --shell /usr/sbin/nologin --comment "SQ broker" sq
fi
