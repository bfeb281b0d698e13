# shellcheck shell=bash
# Shared by scripts/test: install promtool, which tests the alert rules of docs/observability
# (outboxotel TestAlertRulesFireOnTheirSeries), from Debian's `prometheus` package when missing.
# Sourced by scripts that run under `set -euo pipefail`, after scripts/lib/pg.sh (apt_install).
#
# The package also ships the Prometheus server and a service for it. Only the binary is wanted:
# while apt-get runs, a policy-rc.d that answers 101 ("action forbidden") keeps invoke-rc.d from
# starting the service (machines with an init system would otherwise run a Prometheus on :9090),
# and the one found in place, if any, is left as it was.

promtool_log() { printf '%s\n' "$*" >&2; }

# promtool_install: make `promtool` available, installing `prometheus` if it is missing.
promtool_install() {
  if command -v promtool >/dev/null; then return 0; fi
  promtool_log "promtool not found: installing Debian's prometheus package with apt-get (the server is not started)"
  local policy=/usr/sbin/policy-rc.d ours=
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\n# scripts/lib/promtool.sh: no service starts while prometheus installs.\nexit 101\n' |
      as_root tee "$policy" >/dev/null
    as_root chmod 755 "$policy"
    ours=1
  fi
  local rc=0
  apt_install prometheus || rc=$?
  [ -z "$ours" ] || as_root rm -f "$policy"
  [ "$rc" = 0 ] || return "$rc"
  command -v promtool >/dev/null || { promtool_log "no promtool on PATH after installing prometheus"; return 1; }
}
