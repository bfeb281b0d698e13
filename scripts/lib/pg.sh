# shellcheck shell=bash
# Shared by scripts/test, scripts/pg-up and scripts/pg-down: find (or install) the PostgreSQL
# server binaries, and start/stop a private cluster with the settings the tests need.
# Sourced by scripts that run under `set -euo pipefail`.

# Server settings every test cluster gets. They go into the cluster's postgresql.conf, not
# onto the pg_ctl command line, so that a test which stops the server and starts it again
# with a bare `pg_ctl start -D "$TEST_PGDATA"` gets the same server back. fsync and
# synchronous_commit keep their defaults: benchmarks must measure default durability.
PG_SETTINGS=(
  "listen_addresses = '127.0.0.1'"
  "wal_level = logical"
  "max_connections = 300"
  "max_wal_senders = 10"
  "max_replication_slots = 10"
  "shared_buffers = 128MB"
)

pg_log() { printf '%s\n' "$*" >&2; }
pg_ms_since() { echo $(( ($(date +%s%N) - $1) / 1000000 )); }

# initdb and pg_ctl refuse to run as root, so as root they run as the postgres user.
if [ "$(id -u)" = 0 ]; then PG_RUNAS=postgres; else PG_RUNAS=; fi
pg_as() {
  if [ -n "$PG_RUNAS" ]; then runuser -u "$PG_RUNAS" -- "$@"; else "$@"; fi
}
as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi
}

PG_APT_UPDATED=
apt_update_once() {
  [ -n "$PG_APT_UPDATED" ] || { as_root apt-get update -qq >&2; PG_APT_UPDATED=1; }
}
apt_install() {
  apt_update_once
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >&2
}

# Newest installed server bin dir, or nothing. (printf, not ls: no error when none match.)
pg_newest_bindir() {
  local initdb
  initdb=$(printf '%s\n' /usr/lib/postgresql/*/bin/initdb | sort -V | tail -n1)
  if [ -x "$initdb" ]; then echo "${initdb%/initdb}"; fi
}

# Sets PG_BINDIR, installing the server from Debian's packages if it is missing.
pg_find_bindir() {
  PG_BINDIR=$(pg_newest_bindir)
  if [ -z "$PG_BINDIR" ]; then
    pg_log "PostgreSQL server binaries not found: installing them with apt-get"
    # Without this, the package's postinst creates a "main" cluster on port 5432 and, where
    # an init system is running, starts it: we want the binaries only.
    local noconf=/etc/postgresql-common/createcluster.d/zz-outbox-no-main-cluster.conf
    as_root mkdir -p "${noconf%/*}"
    echo 'create_main_cluster = false' | as_root tee "$noconf" >/dev/null
    # Name the versioned package, never the `postgresql` metapackage (it upgrades needlessly).
    local pkg=postgresql-15
    apt_update_once
    if ! apt-cache show "$pkg" >/dev/null 2>&1; then
      pkg=$(apt-cache search --names-only '^postgresql-[0-9]+$' | awk '{print $1}' | sort -V | tail -n1)
      [ -n "$pkg" ] || { pg_log "apt has no postgresql-NN package"; return 1; }
      pkg="postgresql-common $pkg"
    fi
    # shellcheck disable=SC2086
    apt_install $pkg
    as_root rm -f "$noconf"
    PG_BINDIR=$(pg_newest_bindir)
    [ -n "$PG_BINDIR" ] || { pg_log "still no initdb after installing $pkg"; return 1; }
  fi
  if [ -n "$PG_RUNAS" ] && ! id -u "$PG_RUNAS" >/dev/null 2>&1; then
    useradd --system --no-create-home "$PG_RUNAS"
  fi
}

# pg_reachable URL: a `select 1` works there (psql from PATH or from any server bin dir).
pg_reachable() {
  local psql
  psql=$(command -v psql || printf '%s\n' /usr/lib/postgresql/*/bin/psql | sort -V | tail -n1)
  [ -x "$psql" ] || return 1
  PGCONNECT_TIMEOUT=5 "$psql" -X -q -At -d "$1" -c 'select 1' >/dev/null 2>&1
}

# pg_init BASE: a fresh cluster in BASE/data (BASE becomes the server user's, and holds the
# unix socket and the server log too).
pg_init() {
  local base=$1 t0
  t0=$(date +%s%N)
  mkdir -p "$base"
  if [ -n "$PG_RUNAS" ]; then chown "$PG_RUNAS": "$base"; fi
  chmod 700 "$base"
  rm -rf "$base/data"
  # --locale=C: works whatever LANG says and whether or not its locale is generated.
  # --no-sync: the cluster is disposable; this only skips initdb's own final flush.
  if ! pg_as "$PG_BINDIR/initdb" -D "$base/data" --auth=trust -U postgres -E UTF8 --locale=C \
      --no-sync >"$base/initdb.log" 2>&1; then
    cat "$base/initdb.log" >&2
    return 1
  fi
  printf '%s\n' "" "# added by scripts/lib/pg.sh" "unix_socket_directories = '$base'" \
    "${PG_SETTINGS[@]}" >>"$base/data/postgresql.conf"
  pg_log "initdb $PG_BINDIR -> $base/data: $(pg_ms_since "$t0") ms"
}

# pg_conf_apply DATA: for each of PG_SETTINGS whose value in DATA/postgresql.conf (the last line
# setting it wins) differs, append it; prints how many lines it appended. Idempotent: brings a
# cluster made by an older version of this file up to date and leaves a current one untouched.
pg_conf_apply() {
  local conf=$1/postgresql.conf s name last n=0
  for s in "${PG_SETTINGS[@]}"; do
    name=${s%% =*}
    last=$(grep -E "^[[:space:]]*$name[[:space:]]*=" "$conf" | tail -n1 || true)
    if [ "$last" != "$s" ]; then
      [ "$n" -gt 0 ] || printf '%s\n' "" "# added by scripts/lib/pg.sh (pg_conf_apply)" >>"$conf"
      printf '%s\n' "$s" >>"$conf"
      n=$((n + 1))
    fi
  done
  echo "$n"
}

# pg_replication_ready: prints t if the server at 127.0.0.1:PG_PORT runs with what the logical
# replication wake-up (outboxpg.Options.WatchWAL) and its tests need (these settings take a
# restart), f if it does not; fails if the server cannot be asked (busy, starting), which must
# never lead to a restart.
pg_replication_ready() {
  "$PG_BINDIR/psql" -X -q -At -h 127.0.0.1 -p "$PG_PORT" -U postgres -d postgres -c \
    "select current_setting('wal_level') = 'logical'
       and current_setting('max_replication_slots')::int >= 10
       and current_setting('max_wal_senders')::int >= 10"
}

# True if something accepts TCP connections on 127.0.0.1:PORT.
pg_port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# pg_start BASE FIRST_PORT TRIES: start the cluster on the first free port from FIRST_PORT,
# trying at most TRIES ports; sets PG_PORT. Another run may take a port between our check
# and the server's bind, so a bind failure moves on to the next port.
pg_start() {
  local base=$1 port=$2 tries=$3 i t0
  for ((i = 0; i < tries; i++, port++)); do
    if pg_port_in_use "$port"; then continue; fi
    echo "port = $port" >>"$base/data/postgresql.conf"   # the last `port =` line wins
    t0=$(date +%s%N)
    if pg_as "$PG_BINDIR/pg_ctl" start -w -s -D "$base/data" -l "$base/postgres.log"; then
      PG_PORT=$port
      pg_log "PostgreSQL started on 127.0.0.1:$port: $(pg_ms_since "$t0") ms"
      return 0
    fi
    if ! grep -q 'could not bind\|could not create listen socket' "$base/postgres.log"; then
      tail -n 20 "$base/postgres.log" >&2
      return 1
    fi
    pg_log "port $port was taken meanwhile; trying the next one"
  done
  pg_log "no free port in $2..$(($2 + tries - 1)) for PostgreSQL"
  return 1
}

pg_running() { [ -f "$1/postmaster.pid" ] && pg_as "$PG_BINDIR/pg_ctl" status -D "$1" >/dev/null 2>&1; }

# pg_stop DATA: stop the server of that data dir, if any. pg_ctl first; if that fails
# (missing binaries, a wedged server), kill the postmaster named in postmaster.pid.
pg_stop() {
  local data=$1 pid i
  [ -f "$data/postmaster.pid" ] || return 0
  if [ -n "${PG_BINDIR:-}" ] && pg_as "$PG_BINDIR/pg_ctl" stop -w -s -m fast -t 30 -D "$data"; then
    return 0
  fi
  pid=$(head -n1 "$data/postmaster.pid" 2>/dev/null) || return 0
  [ -n "$pid" ] || return 0
  kill -QUIT "$pid" 2>/dev/null || return 0   # SIGQUIT: immediate shutdown
  for ((i = 0; i < 50; i++)); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
  kill -KILL "$pid" 2>/dev/null || true
}

pg_createdb() {   # pg_createdb NAME, on the cluster at 127.0.0.1:PG_PORT
  local psql=("$PG_BINDIR/psql" -X -q -At -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$PG_PORT" -U postgres -d postgres)
  if [ -z "$("${psql[@]}" -c "select 1 from pg_database where datname = '$1'")" ]; then
    "${psql[@]}" -c "create database \"$1\""
  fi
}

# pg_export DATA: the environment the tests read. TEST_PG_CTL/TEST_PGDATA/TEST_PG_RUNAS let
# a test stop and restart the server: ${TEST_PG_RUNAS:+runuser -u $TEST_PG_RUNAS --} $TEST_PG_CTL ...
pg_export() {
  export TEST_DATABASE_URL="postgres://postgres@127.0.0.1:$PG_PORT/outbox_test?sslmode=disable"
  export TEST_PG_CTL="$PG_BINDIR/pg_ctl" TEST_PGDATA="$1" TEST_PG_RUNAS="$PG_RUNAS"
}
pg_print_export() {
  local v q="'"
  for v in TEST_DATABASE_URL TEST_PG_CTL TEST_PGDATA TEST_PG_RUNAS; do
    printf "export %s='%s'\n" "$v" "${!v//$q/$q\\$q$q}"
  done
}
