# shellcheck shell=bash
# Shared by scripts/test, scripts/mysql-up and scripts/mysql-down: install MariaDB from Debian's
# packages when missing, and run a private server on 127.0.0.1 whose every file (data, socket,
# pid file, log) lives in one base directory. Sourced by scripts that run under
# `set -euo pipefail`.
#
# The server runs with --no-defaults, so a machine's own /etc/mysql configuration cannot change
# the test server, and as whoever calls it (--user=root when that is root). apt does not start
# it: these machines have no init system. root connects over TCP without a password
# (--auth-root-authentication-method=normal), which is what TEST_MYSQL_URL names.

my_log() { printf '%s\n' "$*" >&2; }
my_ms_since() { echo $(( ($(date +%s%N) - $1) / 1000000 )); }

my_as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi
}

# my_bin NAME: the path of a MariaDB program (Debian puts mariadbd in /usr/sbin), or nothing.
my_bin() {
  local p
  for p in "$(command -v "$1" 2>/dev/null || true)" "/usr/sbin/$1" "/usr/bin/$1"; do
    if [ -n "$p" ] && [ -x "$p" ]; then echo "$p"; return 0; fi
  done
}

# Installs mariadb-server (about 40 s) if mariadbd or mariadb-install-db is missing.
my_install() {
  if [ -n "$(my_bin mariadbd)" ] && [ -n "$(my_bin mariadb-install-db)" ] && [ -n "$(my_bin mariadb-admin)" ]; then
    return 0
  fi
  my_log "MariaDB not found: installing mariadb-server with apt-get"
  local t0
  t0=$(date +%s%N)
  if declare -F apt_install >/dev/null; then   # scripts/lib/pg.sh's, which updates apt once
    apt_install mariadb-server
  else
    my_as_root apt-get update -qq >&2
    my_as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends mariadb-server >&2
  fi
  [ -n "$(my_bin mariadbd)" ] || { my_log "no mariadbd after installing mariadb-server"; return 1; }
  my_log "mariadb-server installed: $(my_ms_since "$t0") ms"
}

# True if something accepts TCP connections on 127.0.0.1:PORT.
my_port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# my_user: the --user the server runs as (mariadbd refuses root unless told to).
my_user() { id -un; }

# my_init BASE: a fresh data directory in BASE/data.
my_init() {
  local base=$1 t0
  t0=$(date +%s%N)
  mkdir -p "$base"
  chmod 700 "$base"
  rm -rf "$base/data"
  if ! "$(my_bin mariadb-install-db)" --no-defaults --datadir="$base/data" --user="$(my_user)" \
      --auth-root-authentication-method=normal --skip-test-db >"$base/install-db.log" 2>&1; then
    cat "$base/install-db.log" >&2
    return 1
  fi
  my_log "mariadb-install-db -> $base/data: $(my_ms_since "$t0") ms"
}

# my_running BASE: the server of BASE answers on its socket.
my_running() {
  [ -S "$1/sock" ] && [ -f "$1/mariadb.pid" ] && kill -0 "$(cat "$1/mariadb.pid")" 2>/dev/null &&
    "$(my_bin mariadb-admin)" --no-defaults --socket="$1/sock" -uroot ping >/dev/null 2>&1
}

# my_port BASE: the port the server of BASE was started on (written by my_start).
my_port() { cat "$1/port"; }

# my_start BASE FIRST_PORT TRIES: start the server of BASE on the first free port from
# FIRST_PORT, trying at most TRIES ports, and wait until it answers; sets MY_PORT. Another run
# may take a port between our check and the server's bind, so a bind failure moves on.
my_start() {
  local base=$1 port=$2 tries=$3 i t0 pid j
  for ((i = 0; i < tries; i++, port++)); do
    if my_port_in_use "$port"; then continue; fi
    t0=$(date +%s%N)
    : >"$base/mariadb.log"
    # max_connections: parallel tests each open pools; the default 151 is too few for several
    # test binaries at once. The binary log stays off: no test needs it.
    # The server gets none of our descriptors past stderr: one it kept open (mysql-up's lock,
    # a pipe of the caller's) would outlive this script for as long as the server runs.
    (
      for fd in /proc/$BASHPID/fd/*; do
        fd=${fd##*/}
        [ "$fd" -le 2 ] || eval "exec $fd>&-"
      done
      exec "$(my_bin mariadbd)" --no-defaults --datadir="$base/data" --user="$(my_user)" \
        --bind-address=127.0.0.1 --port="$port" --socket="$base/sock" --pid-file="$base/mariadb.pid" \
        --log-error="$base/mariadb.log" --max-connections=500 --skip-name-resolve \
        --innodb-buffer-pool-size=128M --character-set-server=utf8mb4 --collation-server=utf8mb4_bin
    ) </dev/null >>"$base/mariadb.log" 2>&1 &
    pid=$!
    for ((j = 0; j < 300; j++)); do
      if "$(my_bin mariadb-admin)" --no-defaults --socket="$base/sock" -uroot ping >/dev/null 2>&1; then
        echo "$port" >"$base/port"
        MY_PORT=$port
        my_log "MariaDB started on 127.0.0.1:$port: $(my_ms_since "$t0") ms"
        return 0
      fi
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
      kill -KILL "$pid" 2>/dev/null || true
      tail -n 20 "$base/mariadb.log" >&2
      my_log "MariaDB did not answer within 30 s"
      return 1
    fi
    if ! grep -qi 'Can.t start server: Bind\|Address already in use' "$base/mariadb.log"; then
      tail -n 20 "$base/mariadb.log" >&2
      return 1
    fi
    my_log "port $port was taken meanwhile; trying the next one"
  done
  my_log "no free port in $2..$(($2 + tries - 1)) for MariaDB"
  return 1
}

# my_stop BASE: stop the server of BASE, if any: a clean shutdown first, then the pid file's
# process by signal if that fails (missing binaries, a wedged server).
my_stop() {
  local base=$1 pid i admin
  [ -f "$base/mariadb.pid" ] || return 0
  pid=$(cat "$base/mariadb.pid" 2>/dev/null) || return 0
  [ -n "$pid" ] || return 0
  admin=$(my_bin mariadb-admin)
  if [ -n "$admin" ] && [ -S "$base/sock" ]; then
    "$admin" --no-defaults --socket="$base/sock" -uroot --shutdown-timeout=30 shutdown >/dev/null 2>&1 || true
  else
    kill -TERM "$pid" 2>/dev/null || true
  fi
  for ((i = 0; i < 300; i++)); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
  kill -KILL "$pid" 2>/dev/null || true
}

# my_createdb NAME: create database NAME on the server of BASE unless it exists.
my_createdb() {
  "$(my_bin mariadb)" --no-defaults --socket="$1/sock" -uroot -e "CREATE DATABASE IF NOT EXISTS \`$2\`"
}

# my_url_answers URL: a server answers `SELECT 1` at a mysql://user[:password]@host[:port]/db
# URL, over TCP (the password as it is written: no percent-decoding).
my_url_answers() {
  local rest host port user pass= client
  client=$(my_bin mariadb)
  [ -n "$client" ] || return 1
  rest=${1#mysql://}
  [ "$rest" != "$1" ] || return 1
  rest=${rest%%/*}
  user=root
  if [[ $rest == *@* ]]; then user=${rest%%@*}; rest=${rest#*@}; fi
  if [[ $user == *:* ]]; then pass=${user#*:}; user=${user%%:*}; fi
  host=${rest%%:*}
  port=3306
  [[ $rest != *:* ]] || port=${rest##*:}
  # The password through the environment, not the command line that ps shows.
  MYSQL_PWD=$pass "$client" --no-defaults --protocol=TCP -h "$host" -P "$port" -u "$user" \
    --connect-timeout=5 -e 'SELECT 1' >/dev/null 2>&1
}

# my_export BASE: the environment the tests read. TEST_MYSQL_CTL stop|start stops and starts
# this same server (same port, same data), for the fault suite.
my_export() {
  local lib
  lib=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
  export TEST_MYSQL_URL="mysql://root@127.0.0.1:$(my_port "$1")/outbox_test"
  export TEST_MYSQL_CTL="$lib/mariadb-ctl" TEST_MYSQL_BASE="$1"
}
my_print_export() {
  local v q="'"
  for v in TEST_MYSQL_URL TEST_MYSQL_CTL TEST_MYSQL_BASE; do
    printf "export %s='%s'\n" "$v" "${!v//$q/$q\\$q$q}"
  done
}
