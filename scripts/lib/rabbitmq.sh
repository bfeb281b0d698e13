# shellcheck shell=bash
# Shared by scripts/test, scripts/rabbitmq-up, scripts/rabbitmq-down and scripts/lib/rabbitmq-ctl:
# install RabbitMQ from Debian's packages when missing, and run a private broker node on
# 127.0.0.1 whose every file (database, logs, pid file, Erlang cookie, config) lives in one
# base directory. Sourced by scripts that run under `set -euo pipefail`.
#
# The node is started with Debian's rabbitmq-server script but not through its wrapper in
# /usr/sbin (that one switches to the rabbitmq user and writes to /var/lib/rabbitmq and
# /var/log/rabbitmq), so it runs as whoever calls it, root included. RabbitMQ 3.10's scripts
# and boot code read the RABBITMQ_* variables written to BASE/env; the config files they would
# read from /etc/rabbitmq are redirected to BASE, so a machine's own configuration or plugins
# cannot change the test broker. It gets an epmd of its own on a private port, started and
# stopped here by pid, so nothing else's Erlang nodes are touched. No rabbitmqctl: it costs a
# second Erlang VM per call (about a second each); readiness is an AMQP handshake on the
# port, and SIGTERM is RabbitMQ's graceful stop.

RMQ_SBIN=/usr/lib/rabbitmq/bin   # the package's scripts, without the /usr/sbin wrapper

rmq_log() { printf '%s\n' "$*" >&2; }
rmq_ms_since() { echo $(( ($(date +%s%N) - $1) / 1000000 )); }

rmq_as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi
}

# Installs rabbitmq-server (and with it Erlang and epmd) if missing. apt does not start it:
# these machines have no init system, and the broker runs only as scripts/test starts it.
rmq_install() {
  if [ -x "$RMQ_SBIN/rabbitmq-server" ] && command -v epmd >/dev/null; then return 0; fi
  rmq_log "RabbitMQ not found: installing rabbitmq-server with apt-get"
  local t0
  t0=$(date +%s%N)
  if declare -F apt_install >/dev/null; then   # scripts/lib/pg.sh's, which updates apt once
    apt_install rabbitmq-server
  else
    rmq_as_root apt-get update -qq >&2
    rmq_as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends rabbitmq-server >&2
  fi
  [ -x "$RMQ_SBIN/rabbitmq-server" ] || { rmq_log "no $RMQ_SBIN/rabbitmq-server after installing"; return 1; }
  rmq_log "rabbitmq-server installed: $(rmq_ms_since "$t0") ms"
}

# True if something accepts TCP connections on 127.0.0.1:PORT.
rmq_port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# rmq_free_port FIRST TRIES [EXCEPT...]: the first port from FIRST nobody listens on.
rmq_free_port() {
  local port=$1 tries=$2 i p taken
  shift 2
  for ((i = 0; i < tries; i++, port++)); do
    taken=
    for p in "$@"; do [ "$p" != "$port" ] || taken=1; done
    [ -z "$taken" ] || continue
    rmq_port_in_use "$port" || { echo "$port"; return 0; }
  done
  return 1
}

# rmq_amqp_answers HOST PORT: an AMQP 0-9-1 server answers the protocol header there with a
# frame (connection.start begins with frame type 1). Stronger than an open port: a broker
# still booting, or something else on the port, does not pass.
rmq_amqp_answers() {
  local reply
  # shellcheck disable=SC2016 # $1 and $2 are the inner shell's arguments
  reply=$(timeout 5 bash -c 'exec 3<>"/dev/tcp/$1/$2" || exit 1
    printf "AMQP\x00\x00\x09\x01" >&3
    head -c 1 <&3 | od -An -tx1' _ "$1" "$2" 2>/dev/null) || return 1
  [ "${reply// /}" = 01 ]
}

# rmq_url_answers URL: the host and port of an amqp:// URL answer as an AMQP server.
rmq_url_answers() {
  local rest hostport host port
  case $1 in amqp://*) rest=${1#amqp://} ;; *) return 1 ;; esac
  rest=${rest%%/*}
  rest=${rest%%\?*}
  hostport=${rest##*@}
  host=${hostport%:*}
  port=5672
  if [ "$host" != "$hostport" ]; then port=${hostport##*:}; fi
  [ -n "$host" ] || host=127.0.0.1
  rmq_amqp_answers "$host" "$port"
}

# rmq_init BASE NODENAME AMQP_PORT DIST_PORT EPMD_PORT: a fresh node directory in BASE, with
# BASE/env holding the environment every later start, stop and test uses.
rmq_init() {
  local base=$1 node=$2 port=$3 dist=$4 epmd=$5 q="'"
  mkdir -p "$base/mnesia" "$base/log"
  chmod 700 "$base"
  echo '[].' >"$base/enabled_plugins"   # no plugins, management included: faster boot
  : >"$base/rabbitmq-env.conf"
  # Small node: the tests need no more, and a developer's laptop is spared.
  printf '%s\n' "# written by scripts/lib/rabbitmq.sh" \
    "log.console = false" "log.file.level = info" >"$base/rabbitmq.conf"
  {
    echo "# RabbitMQ node of scripts/lib/rabbitmq.sh; sourced by scripts/lib/rabbitmq-ctl"
    local v val
    for v in \
      "HOME=$base" \
      "RABBITMQ_NODENAME=$node" \
      "RABBITMQ_NODE_IP_ADDRESS=127.0.0.1" \
      "RABBITMQ_NODE_PORT=$port" \
      "RABBITMQ_DIST_PORT=$dist" \
      "ERL_EPMD_ADDRESS=127.0.0.1" \
      "ERL_EPMD_PORT=$epmd" \
      "RABBITMQ_MNESIA_BASE=$base/mnesia" \
      "RABBITMQ_LOG_BASE=$base/log" \
      "RABBITMQ_PID_FILE=$base/rabbitmq.pid" \
      "ERL_CRASH_DUMP=$base/erl_crash.dump" \
      "RABBITMQ_CONF_ENV_FILE=$base/rabbitmq-env.conf" \
      "RABBITMQ_CONFIG_FILE=$base/rabbitmq.conf" \
      "RABBITMQ_ADVANCED_CONFIG_FILE=$base/advanced.config" \
      "RABBITMQ_ENABLED_PLUGINS_FILE=$base/enabled_plugins" \
      "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS=-kernel inet_dist_use_interface {127,0,0,1}" \
      "RABBITMQ_CTL_ERL_ARGS=-kernel inet_dist_use_interface {127,0,0,1}"; do
      val=${v#*=}
      printf "export %s='%s'\n" "${v%%=*}" "${val//$q/$q\\$q$q}"
    done
  } >"$base/env"
}

# rmq_env BASE: export the node's environment into this shell. Call it in a subshell only:
# it sets HOME, which the Go tool must not see.
rmq_env() {
  [ -f "$1/env" ] || { rmq_log "no RabbitMQ node in $1 (no $1/env)"; return 1; }
  # shellcheck disable=SC1091
  . "$1/env"
}

# rmq_var BASE NAME: one variable of the node's environment.
rmq_var() { (rmq_env "$1" && printf '%s' "${!2}"); }

# rmq_live_pid FILE PATTERN: the pid in FILE, if that process is alive and its command line
# contains PATTERN (a stale pid file must not make us signal whoever got the pid since).
rmq_live_pid() {
  local pid
  pid=$(head -n1 "$1" 2>/dev/null) || return 1
  [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF -- "$2" || return 1
  echo "$pid"
}
rmq_pid() { rmq_live_pid "$1/rabbitmq.pid" "-home $1 "; }
# rmq_script_pid BASE: the pid of the rabbitmq-server script that started the node, while it
# runs (it waits for the VM, and forwards SIGTERM to it).
rmq_script_pid() {
  local pid
  pid=$(rmq_live_pid "$1/server-script.pid" rabbitmq-server) || return 1
  tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qxF "HOME=$1" || return 1
  echo "$pid"
}
rmq_epmd_pid() { rmq_live_pid "$1/epmd.pid" "-port $(rmq_var "$1" ERL_EPMD_PORT) "; }

# rmq_start BASE: start the node of BASE (rmq_init'ed) in the background and return at once;
# rmq_wait waits for it. Its own epmd is started first unless it runs. Both are children of
# the calling shell, so it can reap them.
rmq_start() {
  local base=$1
  if ! rmq_epmd_pid "$base" >/dev/null; then
    # Not -daemon: that forks, and we want the pid, to stop exactly this epmd.
    (rmq_env "$base" && exec setsid epmd -port "$ERL_EPMD_PORT" -address 127.0.0.1) \
      </dev/null >>"$base/epmd.log" 2>&1 &
    echo $! >"$base/epmd.pid"
  fi
  rm -f "$base/rabbitmq.pid"
  date +%s%N >"$base/start.ns"
  # setsid: a Ctrl-C in the terminal must reach scripts/test's trap, not the broker.
  (rmq_env "$base" && exec setsid "$RMQ_SBIN/rabbitmq-server") </dev/null >>"$base/server.out" 2>&1 &
  echo $! >"$base/server-script.pid"
}

# rmq_wait BASE TIMEOUT_S: wait until the node answers AMQP on its port; fails early if the
# server script exits. Prints the boot time.
rmq_wait() {
  local base=$1 timeout=$2 script deadline t0 port node
  script=$(cat "$base/server-script.pid")
  t0=$(cat "$base/start.ns")
  port=$(rmq_var "$base" RABBITMQ_NODE_PORT)
  node=$(rmq_var "$base" RABBITMQ_NODENAME)
  deadline=$(($(date +%s) + timeout))
  until rmq_amqp_answers 127.0.0.1 "$port"; do
    if ! kill -0 "$script" 2>/dev/null; then
      rmq_log "RabbitMQ exited while starting; the end of $base/server.out and of its log:"
      tail -n 20 "$base/server.out" >&2 || true
      tail -n 20 "$base/log/$node.log" >&2 2>/dev/null || true
      return 1
    fi
    if [ "$(date +%s)" -ge "$deadline" ]; then
      rmq_log "RabbitMQ did not answer on 127.0.0.1:$port within ${timeout}s"
      tail -n 20 "$base/server.out" >&2 || true
      return 1
    fi
    sleep 0.1
  done
  rmq_log "RabbitMQ started on 127.0.0.1:$port (node $node): $(rmq_ms_since "$t0") ms"
}

# rmq_stop BASE [--epmd]: stop the broker gracefully (SIGTERM: RabbitMQ closes the client
# connections and halts) and wait for its process to end; SIGKILL after 30 s. With --epmd,
# also stop the node's own epmd (it outlives the broker otherwise).
rmq_stop() {
  local base=$1 pid i t0 script
  [ -f "$base/env" ] || return 0
  # No pid file yet while the node boots: then signal the server script, which passes it on.
  if pid=$(rmq_pid "$base") || pid=$(rmq_script_pid "$base"); then
    t0=$(date +%s%N)
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 300; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then
      rmq_log "RabbitMQ (pid $pid) still running 30 s after SIGTERM: SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
      if pid=$(rmq_pid "$base"); then kill -KILL "$pid" 2>/dev/null || true; fi
    fi
    rmq_log "RabbitMQ on 127.0.0.1:$(rmq_var "$base" RABBITMQ_NODE_PORT) stopped: $(rmq_ms_since "$t0") ms"
  fi
  # The server script exits after the VM; reap it if it is our child.
  if script=$(rmq_script_pid "$base"); then
    for ((i = 0; i < 50; i++)); do kill -0 "$script" 2>/dev/null || break; sleep 0.1; done
    wait "$script" 2>/dev/null || true
  fi
  if [ "${2:-}" = --epmd ] && pid=$(rmq_epmd_pid "$base"); then
    kill -TERM "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    rm -f "$base/epmd.pid"
  fi
}

rmq_running() { rmq_pid "$1" >/dev/null; }

# rmq_export BASE: the environment the tests read. TEST_RABBITMQ_CTL stop|start|restart stops
# and starts this same broker (same port, same data: durable queues survive).
rmq_export() {
  local lib port
  lib=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
  port=$(rmq_var "$1" RABBITMQ_NODE_PORT)
  export TEST_AMQP_URL="amqp://guest:guest@127.0.0.1:$port/"
  export TEST_RABBITMQ_CTL="$lib/rabbitmq-ctl" TEST_RABBITMQ_BASE="$1"
}
rmq_print_export() {
  local v q="'"
  for v in TEST_AMQP_URL TEST_RABBITMQ_CTL TEST_RABBITMQ_BASE; do
    printf "export %s='%s'\n" "$v" "${!v//$q/$q\\$q$q}"
  done
}

# rmq_start_fresh BASE NODENAME FIRST_PORT: init and start a node on free ports from
# FIRST_PORT (AMQP), FIRST_PORT+1000 (Erlang distribution), FIRST_PORT+2000 (epmd). Does not
# wait. Keep the ports below the kernel's ephemeral range (ip_local_port_range, from 32768 by
# default): while a test has the broker stopped, clients retry connecting to its port many
# times a second, and a connect to a free port inside that range can pick the port itself as
# its source and connect to itself (TCP self-connect), which then keeps the broker from
# binding the port when it restarts. Seen here with 55672.
rmq_start_fresh() {
  local base=$1 node=$2 first=$3 port dist epmd
  port=$(rmq_free_port "$first" 50) || { rmq_log "no free port in $first..$((first + 49))"; return 1; }
  dist=$(rmq_free_port $((first + 1000)) 50 "$port") || { rmq_log "no free Erlang distribution port"; return 1; }
  epmd=$(rmq_free_port $((first + 2000)) 50 "$port" "$dist") || { rmq_log "no free epmd port"; return 1; }
  rmq_init "$base" "$node" "$port" "$dist" "$epmd"
  rmq_start "$base"
}
