# shellcheck shell=bash
# Shared by scripts/test, scripts/redis-up and scripts/redis-down: install Redis from Debian's
# packages when missing, and run a private server on 127.0.0.1 whose every file (pid file, log,
# port) lives in one base directory. Sourced by scripts that run under `set -euo pipefail`.
#
# The server keeps nothing on disk (--save '' --appendonly no): tests make their own streams
# and need none of them after a restart. apt does not start it (these machines have no init
# system), and Debian's own configuration is not read: every setting is on the command line.

rd_log() { printf '%s\n' "$*" >&2; }
rd_ms_since() { echo $(( ($(date +%s%N) - $1) / 1000000 )); }

rd_as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi
}

# rd_bin NAME: the path of a Redis program, or nothing.
rd_bin() {
  local p
  for p in "$(command -v "$1" 2>/dev/null || true)" "/usr/bin/$1" "/usr/sbin/$1"; do
    if [ -n "$p" ] && [ -x "$p" ]; then echo "$p"; return 0; fi
  done
}

# Installs redis-server (which brings redis-cli) if either is missing.
rd_install() {
  if [ -n "$(rd_bin redis-server)" ] && [ -n "$(rd_bin redis-cli)" ]; then
    return 0
  fi
  rd_log "Redis not found: installing redis-server with apt-get"
  local t0
  t0=$(date +%s%N)
  if declare -F apt_install >/dev/null; then   # scripts/lib/pg.sh's, which updates apt once
    apt_install redis-server
  else
    rd_as_root apt-get update -qq >&2
    rd_as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends redis-server >&2
  fi
  [ -n "$(rd_bin redis-server)" ] || { rd_log "no redis-server after installing redis-server"; return 1; }
  rd_log "redis-server installed: $(rd_ms_since "$t0") ms"
}

# True if something accepts TCP connections on 127.0.0.1:PORT.
rd_port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# rd_port BASE: the port the server of BASE was started on (written by rd_start).
rd_port() { cat "$1/port"; }

# rd_running BASE: the server of BASE runs and answers PING.
rd_running() {
  [ -f "$1/redis.pid" ] && [ -f "$1/port" ] && kill -0 "$(cat "$1/redis.pid")" 2>/dev/null &&
    [ "$(timeout 5 "$(rd_bin redis-cli)" -h 127.0.0.1 -p "$(rd_port "$1")" ping 2>/dev/null)" = PONG ]
}

# rd_start BASE FIRST_PORT TRIES: start a server for BASE on the first free port from
# FIRST_PORT, trying at most TRIES ports, and wait until it answers; sets RD_PORT. Another run
# may take a port between our check and the server's bind, so a bind failure moves on.
rd_start() {
  local base=$1 port=$2 tries=$3 i j t0
  mkdir -p "$base"
  chmod 700 "$base"
  for ((i = 0; i < tries; i++, port++)); do
    if rd_port_in_use "$port"; then continue; fi
    t0=$(date +%s%N)
    rm -f "$base/redis.pid"
    : >"$base/redis.log"
    # --daemonize: redis-server forks and writes the pid file itself. It gets none of our
    # descriptors past stderr: one it kept open (redis-up's lock, a pipe of the caller's) would
    # outlive this script for as long as the server runs.
    if ! (
      for fd in /proc/$BASHPID/fd/*; do
        fd=${fd##*/}
        [ "$fd" -le 2 ] || eval "exec $fd>&-"
      done
      exec "$(rd_bin redis-server)" --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
        --dir "$base" --daemonize yes --pidfile "$base/redis.pid" --logfile "$base/redis.log"
    ) </dev/null >>"$base/redis.log" 2>&1; then
      tail -n 20 "$base/redis.log" >&2
      return 1
    fi
    for ((j = 0; j < 100; j++)); do
      if [ "$(timeout 5 "$(rd_bin redis-cli)" -h 127.0.0.1 -p "$port" ping 2>/dev/null)" = PONG ]; then
        echo "$port" >"$base/port"
        RD_PORT=$port
        rd_log "Redis started on 127.0.0.1:$port: $(rd_ms_since "$t0") ms"
        return 0
      fi
      if grep -qi 'Address already in use' "$base/redis.log"; then break; fi
      sleep 0.05
    done
    if ! grep -qi 'Address already in use' "$base/redis.log"; then
      tail -n 20 "$base/redis.log" >&2
      rd_log "Redis did not answer within 5 s"
      rd_stop "$base"
      return 1
    fi
    rd_log "port $port was taken meanwhile; trying the next one"
  done
  rd_log "no free port in $2..$(($2 + tries - 1)) for Redis"
  return 1
}

# rd_stop BASE: stop the server of BASE, if any, by the pid in its pid file: SIGTERM (with
# nothing to save it exits at once), then SIGKILL if it is still there after 10 s.
rd_stop() {
  local base=$1 pid i
  [ -f "$base/redis.pid" ] || return 0
  pid=$(cat "$base/redis.pid" 2>/dev/null) || return 0
  [ -n "$pid" ] || return 0
  kill -TERM "$pid" 2>/dev/null || { rm -f "$base/redis.pid"; return 0; }
  for ((i = 0; i < 200; i++)); do
    if ! kill -0 "$pid" 2>/dev/null; then rm -f "$base/redis.pid"; return 0; fi
    sleep 0.05
  done
  kill -KILL "$pid" 2>/dev/null || true
  rm -f "$base/redis.pid"
}

# rd_percent_decode S: S with its %XX escapes decoded (a backslash stays a backslash).
rd_percent_decode() {
  local s=${1//\\/\\\\}
  printf '%b' "${s//%/\\x}"
}

# rd_url_answers URL: a server answers PING at a redis://[user:password@]host[:port][/db] URL.
# The password goes to redis-cli through REDISCLI_AUTH, and the URL it gets has no user
# information (the user goes in --user), so no command line that ps shows carries it. As
# redis-cli and go-redis do, user information without a colon is the password.
rd_url_answers() {
  local cli scheme rest authority userinfo user='' pass=''
  cli=$(rd_bin redis-cli)
  [ -n "$cli" ] || return 1
  case $1 in redis://* | rediss://*) ;; *) return 1 ;; esac
  scheme=${1%%://*}
  rest=${1#*://}
  authority=${rest%%[/?]*}
  rest=${rest#"$authority"}
  if [[ $authority == *@* ]]; then
    userinfo=${authority%@*}
    authority=${authority##*@}
    if [[ $userinfo == *:* ]]; then
      user=$(rd_percent_decode "${userinfo%%:*}")
      pass=$(rd_percent_decode "${userinfo#*:}")
    else
      pass=$(rd_percent_decode "$userinfo")
    fi
  fi
  local -a args=(-u "$scheme://$authority$rest" --no-auth-warning)
  [ -z "$user" ] || args+=(--user "$user")
  if [ -n "$pass" ]; then
    [ "$(REDISCLI_AUTH=$pass timeout 5 "$cli" "${args[@]}" ping 2>/dev/null)" = PONG ]
  else
    [ "$(env -u REDISCLI_AUTH timeout 5 "$cli" "${args[@]}" ping 2>/dev/null)" = PONG ]
  fi
}

# rd_export BASE: the environment the tests read.
rd_export() {
  export TEST_REDIS_URL="redis://127.0.0.1:$(rd_port "$1")/0"
}
rd_print_export() {
  local q="'"
  printf "export TEST_REDIS_URL='%s'\n" "${TEST_REDIS_URL//$q/$q\\$q$q}"
}
