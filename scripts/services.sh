#!/usr/bin/env bash
# Start, stop and report the engines the tests need, on loopback, on non-default ports, with
# their data in a temporary folder. Usage: scripts/services.sh up|down|status [engine...]
#
# Each engine is a set of functions named <engine>_up, <engine>_down and <engine>_status; to add
# one, write those three and list it in ENGINES. PIDs are written to $STATE/<name>.pid and every
# process is stopped by PID.
set -euo pipefail

STATE=${FENCELOCK_SERVICES_DIR:-${TMPDIR:-/tmp}/fencelock-services}
ENGINES=(redis)

# Ports (override with the environment; keep in step with test/helpers/engines.ts).
REDIS_PORT=${FENCELOCK_REDIS_PORT:-6390}

log() { printf 'services: %s\n' "$*" >&2; }

wait_until() { # wait_until <seconds> <description> <command...>
  local seconds=$1 what=$2; shift 2
  local deadline=$((SECONDS + seconds))
  until "$@" >/dev/null 2>&1; do
    if ((SECONDS >= deadline)); then log "$what did not answer within ${seconds}s"; return 1; fi
    sleep 0.2
  done
}

port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

require_free_port() { # require_free_port <port> <engine>
  if port_busy "$1"; then
    log "port $1 for $2 is already in use by another process; free it or set another port"
    return 1
  fi
}

pid_alive() { [[ -f $1 ]] && kill -0 "$(cat "$1")" 2>/dev/null; }

stop_pidfile() { # stop_pidfile <name>
  local pidfile=$STATE/$1.pid
  if pid_alive "$pidfile"; then
    local pid; pid=$(cat "$pidfile")
    kill -CONT "$pid" 2>/dev/null || true # a test may have left it stopped (SIGSTOP)
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
    log "$1 stopped (pid $pid)"
  fi
  rm -f "$pidfile"
}

# --- Redis: one standalone node -----------------------------------------------------------------
redis_up() {
  if pid_alive "$STATE/redis.pid"; then log "redis already up on $REDIS_PORT"; return; fi
  require_free_port "$REDIS_PORT" redis
  local dir=$STATE/redis
  rm -rf "$dir" && mkdir -p "$dir"
  redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --dir "$dir" --save '' --appendonly no \
    --daemonize yes --pidfile "$STATE/redis.pid" --logfile "$dir/redis.log"
  wait_until 20 "redis on $REDIS_PORT" redis-cli -p "$REDIS_PORT" ping
  pid_alive "$STATE/redis.pid" || { log "redis exited; see $dir/redis.log"; return 1; }
  log "redis up on 127.0.0.1:$REDIS_PORT"
}
redis_down() { stop_pidfile redis; }
redis_status() {
  if pid_alive "$STATE/redis.pid" && redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1; then
    echo "redis: up on 127.0.0.1:$REDIS_PORT (pid $(cat "$STATE/redis.pid"))"
  else
    echo "redis: down"
  fi
}

main() {
  local cmd=${1:-status}; shift || true
  local engines=("$@"); ((${#engines[@]})) || engines=("${ENGINES[@]}")
  mkdir -p "$STATE"
  case $cmd in
    up) for e in "${engines[@]}"; do "${e}_up"; done ;;
    down) for e in "${engines[@]}"; do "${e}_down"; done ;;
    status) for e in "${engines[@]}"; do "${e}_status"; done ;;
    *) echo "usage: $0 up|down|status [${ENGINES[*]}]" >&2; exit 2 ;;
  esac
}

main "$@"
