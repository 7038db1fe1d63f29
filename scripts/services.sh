#!/usr/bin/env bash
# Start, stop and report the engines the tests need, on loopback, on non-default ports, with
# their data in a temporary folder. Usage: scripts/services.sh up|down|status [engine...]
#        scripts/services.sh etcd-member stop|kill|start|pause|resume <1|2|3>   (fault tests)
#        scripts/services.sh zk-member stop|kill|start|pause|resume <1|2|3>     (fault tests)
#        scripts/services.sh redlock-node stop|kill|start|restart-empty|pause|resume <1..5>
#        scripts/services.sh redis-server restart-empty                                    (fault tests)
#        scripts/services.sh pg-server restart-immediate|kill-backends                    (fault tests)
#
# Each engine is a set of functions named <engine>_up, <engine>_down and <engine>_status; to add
# one, write those three and list it in ENGINES. PIDs are written to $STATE/<name>.pid and every
# process is stopped by PID.
set -euo pipefail

# Descriptors the caller left open, other than stdin, stdout and stderr, are closed here, so the
# servers started below do not keep them. The `zookeeper` package opens its sockets without
# close-on-exec: a ZooKeeper server restarted from a test process kept that process's client
# sockets open, so after the test closed one, epoll in the test process went on reporting it
# under its number, and the next client given that number was woken with nothing to read until
# the binding declared its session expired (no new session for 20 s). 255: bash's script.
for fd in /proc/$$/fd/*; do
  fd=${fd##*/}
  if [[ $fd -gt 2 && $fd -ne 255 ]]; then eval "exec $fd>&-" 2>/dev/null || true; fi
done

STATE=${FENCELOCK_SERVICES_DIR:-${TMPDIR:-/tmp}/fencelock-services}
ENGINES=(redis redlock sentinel cluster etcd zookeeper postgres pgbouncer register)

# Ports (override with the environment; keep in step with test/helpers/engines.ts).
REDIS_PORT=${FENCELOCK_REDIS_PORT:-6390}
# Redlock node n (1..5), five independent Redis servers, listens on REDLOCK_PORT_BASE+n.
REDLOCK_PORT_BASE=${FENCELOCK_REDLOCK_PORT_BASE:-6400}
# Sentinel topology: primary on SENTINEL_DATA_PORT_BASE+1, replica on +2; Sentinel n (1..3) on
# SENTINEL_PORT_BASE+n. The Sentinels watch the primary under the name "fencelock".
SENTINEL_DATA_PORT_BASE=${FENCELOCK_SENTINEL_DATA_PORT_BASE:-6410}
SENTINEL_PORT_BASE=${FENCELOCK_SENTINEL_PORT_BASE:-26410}
# Redis Cluster: three primaries (no replicas) on CLUSTER_PORT_BASE+n, n = 1..3.
CLUSTER_PORT_BASE=${FENCELOCK_CLUSTER_PORT_BASE:-6420}
# etcd member n (1..3) listens for clients on CLIENT_BASE+n and for peers on PEER_BASE+n.
ETCD_CLIENT_PORT_BASE=${FENCELOCK_ETCD_CLIENT_PORT_BASE:-23790}
ETCD_PEER_PORT_BASE=${FENCELOCK_ETCD_PEER_PORT_BASE:-23800}
# ZooKeeper server n (1..3) listens for clients on CLIENT_BASE+n-1 (21811-21813), for its
# followers on PEER_BASE+n-1 (the leader only) and for leader election on ELECTION_BASE+n-1.
ZK_CLIENT_PORT_BASE=${FENCELOCK_ZK_CLIENT_PORT_BASE:-21811}
ZK_PEER_PORT_BASE=${FENCELOCK_ZK_PEER_PORT_BASE:-22881}
ZK_ELECTION_PORT_BASE=${FENCELOCK_ZK_ELECTION_PORT_BASE:-23881}
# PostgreSQL: one server, database "fencelock", user "fencelock" (trust auth on loopback only).
PG_PORT=${FENCELOCK_PG_PORT:-25432}
# A second PostgreSQL server that fault runs never touch: the fenced register of the torture
# harness (src/torture/register.ts) lives there, database "register", user "fencelock".
REGISTER_PORT=${FENCELOCK_REGISTER_PORT:-25433}
# PgBouncer in transaction mode in front of the PostgreSQL server above (database fencelock),
# and a second one that also lets statement_timeout through (ignore_startup_parameters).
PGBOUNCER_PORT=${FENCELOCK_PGBOUNCER_PORT:-25434}
PGBOUNCER_IGNORING_PORT=${FENCELOCK_PGBOUNCER_IGNORING_PORT:-$((PGBOUNCER_PORT + 1))}

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

proc_state() { # proc_state <pid>: R, S, T (stopped), Z (zombie)...; empty when no such process
  local stat; stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 0
  stat=${stat##*) }; echo "${stat%% *}"
}

stop_pidfile() { # stop_pidfile <name>
  local pidfile=$STATE/$1.pid
  if pid_alive "$pidfile"; then
    local pid; pid=$(cat "$pidfile")
    kill -CONT "$pid" 2>/dev/null || true # a test may have left it stopped (SIGSTOP)
    kill "$pid" 2>/dev/null || true
    # Done once it is a zombie: our parent-less servers are reaped by PID 1, which may take ~2 s.
    for _ in $(seq 50); do [[ $(proc_state "$pid") =~ ^Z?$ ]] && break; sleep 0.1; done
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
# redis_server restart-empty: kill -9 the standalone node and start it again at once, with no data
# (it persists nothing): what a Redis without persistence looks like after a crash.
redis_server() {
  case ${1:-} in
    restart-empty)
      if pid_alive "$STATE/redis.pid"; then kill -9 "$(cat "$STATE/redis.pid")"; rm -f "$STATE/redis.pid"; fi
      sleep 0.1; redis_up; log "redis restarted empty" ;;
    *) echo "usage: $0 redis-server restart-empty" >&2; exit 2 ;;
  esac
}
redis_status() {
  if pid_alive "$STATE/redis.pid" && redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1; then
    echo "redis: up on 127.0.0.1:$REDIS_PORT (pid $(cat "$STATE/redis.pid"))"
  else
    echo "redis: down"
  fi
}

# --- Redlock: five independent Redis nodes ------------------------------------------------------
# Node n (redlock1..redlock5): 127.0.0.1:$((REDLOCK_PORT_BASE + n)), data in $STATE/redlock/<n>,
# no persistence (a restarted node comes back empty: the case the Redlock delayed-restart rule is
# about). Fault tests drive single nodes with `redlock-node`.
REDLOCK_NODES=(1 2 3 4 5)
redlock_port() { echo $((REDLOCK_PORT_BASE + $1)); }

redlock_launch() { # redlock_launch <n>: start node n (fresh data), wait until it answers
  local n=$1 port; port=$(redlock_port "$1")
  local dir=$STATE/redlock/$n
  require_free_port "$port" "redlock node $n"
  rm -rf "$dir" && mkdir -p "$dir"
  redis-server --bind 127.0.0.1 --port "$port" --dir "$dir" --save '' --appendonly no \
    --daemonize yes --pidfile "$STATE/redlock$n.pid" --logfile "$dir/redis.log"
  wait_until 20 "redlock node $n on $port" redis-cli -p "$port" ping
}

redlock_up() {
  local n
  for n in "${REDLOCK_NODES[@]}"; do
    if pid_alive "$STATE/redlock$n.pid"; then continue; fi
    redlock_launch "$n"
  done
  log "redlock up: 5 nodes on 127.0.0.1:$(redlock_port 1)-$(redlock_port 5)"
}
redlock_down() { local n; for n in "${REDLOCK_NODES[@]}"; do stop_pidfile "redlock$n"; done; }
redlock_status() {
  local n port
  for n in "${REDLOCK_NODES[@]}"; do
    port=$(redlock_port "$n")
    if pid_alive "$STATE/redlock$n.pid" && redis-cli -p "$port" ping >/dev/null 2>&1; then
      echo "redlock$n: up on 127.0.0.1:$port (pid $(cat "$STATE/redlock$n.pid"))"
    elif pid_alive "$STATE/redlock$n.pid"; then
      echo "redlock$n: not answering on 127.0.0.1:$port (pid $(cat "$STATE/redlock$n.pid"))"
    else
      echo "redlock$n: down"
    fi
  done
}

redlock_node() { # redlock_node stop|kill|start|restart-empty|pause|resume <1..5>
  local action=${1:-} n=${2:-}
  if [[ ! $n =~ ^[1-5]$ ]]; then
    echo "usage: $0 redlock-node stop|kill|start|restart-empty|pause|resume <1..5>" >&2; exit 2
  fi
  local pidfile=$STATE/redlock$n.pid
  case $action in
    stop) stop_pidfile "redlock$n" ;;
    kill) if pid_alive "$pidfile"; then kill -9 "$(cat "$pidfile")"; rm -f "$pidfile"; fi
      log "redlock$n killed" ;;
    start) pid_alive "$pidfile" || redlock_launch "$n"; log "redlock$n up" ;;
    restart-empty) if pid_alive "$pidfile"; then kill -9 "$(cat "$pidfile")"; rm -f "$pidfile"; fi
      sleep 0.1; redlock_launch "$n"; log "redlock$n restarted empty" ;;
    pause) kill -STOP "$(cat "$pidfile")"; log "redlock$n paused (SIGSTOP)" ;;
    resume) kill -CONT "$(cat "$pidfile")"; log "redlock$n resumed (SIGCONT)" ;;
    *) echo "usage: $0 redlock-node stop|kill|start|restart-empty|pause|resume <1..5>" >&2; exit 2 ;;
  esac
}

# --- Sentinel: a primary, one replica and three Sentinels ---------------------------------------
# Data nodes sdata1 (primary at start) and sdata2 (its replica), Sentinels sentinel1..3, each in
# $STATE/sentinel/<name>. down-after 1000 ms and failover-timeout 5000 ms (fault F4 of
# docs/guarantees.md), quorum 2.
# `up` always starts a fresh topology with sdata1 as primary, so a test that failed over (and
# killed the old primary) gets it back with `down sentinel` then `up sentinel`.
SENTINEL_MASTER=fencelock
sdata_port() { echo $((SENTINEL_DATA_PORT_BASE + $1)); }
sentinel_port() { echo $((SENTINEL_PORT_BASE + $1)); }

sentinel_up() {
  if pid_alive "$STATE/sdata1.pid" || pid_alive "$STATE/sdata2.pid"; then
    log "sentinel topology already up"; return
  fi
  local n port dir
  for n in 1 2; do require_free_port "$(sdata_port "$n")" "sentinel data node $n"; done
  for n in 1 2 3; do require_free_port "$(sentinel_port "$n")" "sentinel $n"; done
  rm -rf "$STATE/sentinel" && mkdir -p "$STATE/sentinel"
  for n in 1 2; do
    port=$(sdata_port "$n") dir=$STATE/sentinel/sdata$n
    mkdir -p "$dir"
    local args=(--bind 127.0.0.1 --port "$port" --dir "$dir" --save '' --appendonly no
      --daemonize yes --pidfile "$STATE/sdata$n.pid" --logfile "$dir/redis.log")
    if ((n == 2)); then args+=(--replicaof 127.0.0.1 "$(sdata_port 1)"); fi
    redis-server "${args[@]}"
    wait_until 20 "sentinel data node $n on $port" redis-cli -p "$port" ping
  done
  wait_until 20 "replica sync" sentinel_replica_synced
  for n in 1 2 3; do
    port=$(sentinel_port "$n") dir=$STATE/sentinel/sentinel$n
    mkdir -p "$dir"
    printf '%s
' "bind 127.0.0.1" "port $port" "dir $dir" "daemonize yes" \
      "pidfile $STATE/sentinel$n.pid" "logfile $dir/sentinel.log" \
      "sentinel monitor $SENTINEL_MASTER 127.0.0.1 $(sdata_port 1) 2" \
      "sentinel down-after-milliseconds $SENTINEL_MASTER 1000" \
      "sentinel failover-timeout $SENTINEL_MASTER 5000" \
      "sentinel parallel-syncs $SENTINEL_MASTER 1" >"$dir/sentinel.conf"
    redis-sentinel "$dir/sentinel.conf"
    wait_until 20 "sentinel $n on $port" redis-cli -p "$port" ping
  done
  wait_until 30 "sentinels agreeing on the primary" sentinel_ready
  log "sentinel up: primary 127.0.0.1:$(sdata_port 1), replica :$(sdata_port 2)," \
    "sentinels :$(sentinel_port 1)-$(sentinel_port 3) (name $SENTINEL_MASTER)"
}
sentinel_replica_synced() {
  redis-cli -p "$(sdata_port 2)" info replication | grep -q 'master_link_status:up'
}
sentinel_field() { # sentinel_field <sentinel n> <field>: a field of SENTINEL MASTER
  redis-cli -p "$(sentinel_port "$1")" sentinel master "$SENTINEL_MASTER" 2>/dev/null |
    grep -A1 -x "$2" | tail -1
}
sentinel_ready() { # every Sentinel knows the primary, its replica and the other two Sentinels
  local n
  for n in 1 2 3; do
    [[ $(sentinel_field "$n" num-slaves) == 1 ]] || return 1
    [[ $(sentinel_field "$n" num-other-sentinels) == 2 ]] || return 1
  done
}
sentinel_down() {
  local n
  for n in 1 2 3; do stop_pidfile "sentinel$n"; done
  for n in 1 2; do stop_pidfile "sdata$n"; done
}
sentinel_status() {
  local n
  for n in 1 2; do
    if pid_alive "$STATE/sdata$n.pid"; then
      echo "sdata$n: up on 127.0.0.1:$(sdata_port "$n") ($(redis-cli -p "$(sdata_port "$n")" role 2>/dev/null | head -1))"
    else
      echo "sdata$n: down"
    fi
  done
  for n in 1 2 3; do
    if pid_alive "$STATE/sentinel$n.pid"; then
      echo "sentinel$n: up on 127.0.0.1:$(sentinel_port "$n")"
    else
      echo "sentinel$n: down"
    fi
  done
}

# --- Redis Cluster: three primaries, slots split by redis-cli ------------------------------------
# Node n (cluster1..cluster3) on 127.0.0.1:$((CLUSTER_PORT_BASE + n)), data and nodes.conf in
# $STATE/cluster/<n>. `up` always builds a fresh cluster.
cluster_port() { echo $((CLUSTER_PORT_BASE + $1)); }
cluster_ok() {
  local n
  for n in 1 2 3; do
    redis-cli -p "$(cluster_port "$n")" cluster info 2>/dev/null | grep -q 'cluster_state:ok' || return 1
  done
}
cluster_up() {
  if pid_alive "$STATE/cluster1.pid"; then log "redis cluster already up"; return; fi
  local n port dir members=()
  for n in 1 2 3; do require_free_port "$(cluster_port "$n")" "redis cluster node $n"; done
  rm -rf "$STATE/cluster" && mkdir -p "$STATE/cluster"
  for n in 1 2 3; do
    port=$(cluster_port "$n") dir=$STATE/cluster/$n
    mkdir -p "$dir"
    redis-server --bind 127.0.0.1 --port "$port" --dir "$dir" --save '' --appendonly no \
      --cluster-enabled yes --cluster-config-file "$dir/nodes.conf" --cluster-node-timeout 2000 \
      --daemonize yes --pidfile "$STATE/cluster$n.pid" --logfile "$dir/redis.log"
    wait_until 20 "redis cluster node $n on $port" redis-cli -p "$port" ping
    members+=("127.0.0.1:$port")
  done
  redis-cli --cluster create "${members[@]}" --cluster-replicas 0 --cluster-yes >"$STATE/cluster/create.log" 2>&1 ||
    { log "redis-cli --cluster create failed; see $STATE/cluster/create.log"; return 1; }
  wait_until 30 "redis cluster state ok" cluster_ok
  log "redis cluster up: 3 primaries on 127.0.0.1:$(cluster_port 1)-$(cluster_port 3)"
}
cluster_down() { local n; for n in 1 2 3; do stop_pidfile "cluster$n"; done; }
cluster_status() {
  local n
  for n in 1 2 3; do
    if pid_alive "$STATE/cluster$n.pid"; then
      echo "cluster$n: up on 127.0.0.1:$(cluster_port "$n")"
    else
      echo "cluster$n: down"
    fi
  done
}

# --- etcd: a 3-member cluster on loopback --------------------------------------------------------
# Member n (etcd1..etcd3): clients on http://127.0.0.1:$((ETCD_CLIENT_PORT_BASE + n)), peers on
# http://127.0.0.1:$((ETCD_PEER_PORT_BASE + n)), data in $STATE/etcd/etcd<n>, log in
# $STATE/etcd/etcd<n>.log, PID in $STATE/etcd<n>.pid. `up` starts from fresh data dirs; `down`
# keeps them (and the logs) until the next `up`. Heartbeat 100 ms and election timeout 1000 ms
# are etcd's own defaults, spelled out because the fault tests count on a killed leader being
# replaced within a few seconds. Fault tests drive single members with `etcd-member`.
ETCD_MEMBERS=(1 2 3)
ETCD_TOKEN=fencelock-test-cluster

# etcd and etcdctl refuse to run when an ETCD_*/ETCDCTL_* variable shadows a flag we pass; none
# of the caller's settings apply to this private cluster, so drop them all.
for _var in $(compgen -e); do [[ $_var == ETCD_* || $_var == ETCDCTL_* ]] && unset "$_var"; done
unset _var

etcd_client_url() { echo "http://127.0.0.1:$((ETCD_CLIENT_PORT_BASE + $1))"; }
etcd_peer_url() { echo "http://127.0.0.1:$((ETCD_PEER_PORT_BASE + $1))"; }
etcd_endpoints() { # all client URLs, comma-separated
  local n urls=()
  for n in "${ETCD_MEMBERS[@]}"; do urls+=("$(etcd_client_url "$n")"); done
  (IFS=,; echo "${urls[*]}")
}
etcd_initial_cluster() { # etcd1=http://127.0.0.1:23801,...
  local n urls=()
  for n in "${ETCD_MEMBERS[@]}"; do urls+=("etcd$n=$(etcd_peer_url "$n")"); done
  (IFS=,; echo "${urls[*]}")
}
# etcdctl with short timeouts, so a dead or paused member cannot hang a check.
etcdctl_() { ETCDCTL_API=3 etcdctl --dial-timeout=1s --command-timeout=2s "$@"; }

etcd_launch() { # etcd_launch <n> new|existing: start member n in the background, write its PID
  local n=$1 cluster_state=$2 client peer
  client=$(etcd_client_url "$n"); peer=$(etcd_peer_url "$n")
  # setsid: its own session (what --daemonize does for redis), so a Ctrl-C or hang-up aimed at
  # the caller, e.g. a test run that restarted the member, does not reach it.
  setsid nohup etcd --name "etcd$n" --data-dir "$STATE/etcd/etcd$n" \
    --listen-client-urls "$client" --advertise-client-urls "$client" \
    --listen-peer-urls "$peer" --initial-advertise-peer-urls "$peer" \
    --initial-cluster "$(etcd_initial_cluster)" --initial-cluster-token "$ETCD_TOKEN" \
    --initial-cluster-state "$cluster_state" \
    --heartbeat-interval 100 --election-timeout 1000 \
    --logger zap --log-outputs stderr \
    </dev/null >>"$STATE/etcd/etcd$n.log" 2>&1 &
  echo $! >"$STATE/etcd$n.pid"
}

etcd_logs_tail() { # the last lines of each member's log, after a failure
  local n
  for n in "${ETCD_MEMBERS[@]}"; do
    [[ -f $STATE/etcd/etcd$n.log ]] || continue
    log "--- last lines of $STATE/etcd/etcd$n.log"
    tail -n 5 "$STATE/etcd/etcd$n.log" >&2 || true
  done
}

etcd_up() {
  local n alive=0
  for n in "${ETCD_MEMBERS[@]}"; do pid_alive "$STATE/etcd$n.pid" && alive=$((alive + 1)); done
  if ((alive == ${#ETCD_MEMBERS[@]})); then log "etcd already up on $(etcd_endpoints)"; return; fi
  if ((alive > 0)); then
    log "etcd is partly up ($alive of ${#ETCD_MEMBERS[@]} members): '$0 etcd-member start <n>'" \
      "the missing ones, or '$0 down etcd' first"
    return 1
  fi
  for n in "${ETCD_MEMBERS[@]}"; do
    require_free_port "$((ETCD_CLIENT_PORT_BASE + n))" "etcd$n (client)"
    require_free_port "$((ETCD_PEER_PORT_BASE + n))" "etcd$n (peer)"
  done
  rm -rf "$STATE/etcd" && mkdir -p "$STATE/etcd"
  for n in "${ETCD_MEMBERS[@]}"; do etcd_launch "$n" new; done
  if ! wait_until 30 "etcd cluster on $(etcd_endpoints)" \
    etcdctl_ --endpoints="$(etcd_endpoints)" endpoint health; then
    etcd_logs_tail; etcd_down; return 1
  fi
  for n in "${ETCD_MEMBERS[@]}"; do
    if ! pid_alive "$STATE/etcd$n.pid"; then
      log "etcd$n exited; see $STATE/etcd/etcd$n.log"; etcd_logs_tail; etcd_down; return 1
    fi
  done
  log "etcd up: 3 members on $(etcd_endpoints) (peers on" \
    "127.0.0.1:$((ETCD_PEER_PORT_BASE + 1))-$((ETCD_PEER_PORT_BASE + 3)))"
}
etcd_down() {
  # Followers first, all at once, then the leader: a leader stopped together with its followers
  # waits for a leadership transfer that cannot happen (~5 s, then SIGKILL); stopped one after
  # the other, each member takes ~2 s. A leader without followers closes at once.
  local n pid leader="" stopped=()
  for n in "${ETCD_MEMBERS[@]}"; do
    pid_alive "$STATE/etcd$n.pid" || continue
    pid=$(cat "$STATE/etcd$n.pid"); stopped+=("etcd$n=$pid")
    kill -CONT "$pid" 2>/dev/null || true # a test may have left it stopped (SIGSTOP)
  done
  for n in "${ETCD_MEMBERS[@]}"; do
    pid_alive "$STATE/etcd$n.pid" || continue
    etcdctl_ --endpoints="$(etcd_client_url "$n")" endpoint status -w simple 2>/dev/null |
      cut -d, -f5 | grep -q true && leader=$n
  done
  for n in "${ETCD_MEMBERS[@]}"; do
    [[ $n != "$leader" ]] && pid_alive "$STATE/etcd$n.pid" && kill "$(cat "$STATE/etcd$n.pid")"
  done
  for n in "${ETCD_MEMBERS[@]}"; do [[ $n == "$leader" ]] || stop_pidfile "etcd$n"; done
  [[ -z $leader ]] || stop_pidfile "etcd$leader"
  ((${#stopped[@]} == 0)) || log "etcd stopped (${stopped[*]})"
}
etcd_status() {
  local n pid url line role
  for n in "${ETCD_MEMBERS[@]}"; do
    url=$(etcd_client_url "$n")
    if ! pid_alive "$STATE/etcd$n.pid"; then echo "etcd$n: down"; continue; fi
    pid=$(cat "$STATE/etcd$n.pid")
    if [[ $(proc_state "$pid") == T ]]; then
      echo "etcd$n: paused (SIGSTOP) on $url (pid $pid)"
    elif ! etcdctl_ --endpoints="$url" endpoint health >/dev/null 2>&1; then
      echo "etcd$n: unhealthy on $url (pid $pid; see $STATE/etcd/etcd$n.log)"
    else
      # simple format: endpoint, ID, version, db size, is leader, is learner, term, index, ...
      line=$(etcdctl_ --endpoints="$url" endpoint status -w simple 2>/dev/null || true)
      role=follower; [[ $(cut -d, -f5 <<<"$line") == *true* ]] && role=leader
      echo "etcd$n: up on $url, peer $(etcd_peer_url "$n") (pid $pid, $role)"
    fi
  done
}

etcd_member() { # etcd_member stop|kill|start|pause|resume <1|2|3>
  local action=${1:-} n=${2:-} pid pidfile
  if [[ ! $action =~ ^(stop|kill|start|pause|resume)$ || ! $n =~ ^[123]$ ]]; then
    echo "usage: $0 etcd-member stop|kill|start|pause|resume <1|2|3>" >&2; exit 2
  fi
  pidfile=$STATE/etcd$n.pid
  if [[ $action != start && $action != stop ]] && ! pid_alive "$pidfile"; then
    log "etcd$n is not running"; return 1
  fi
  case $action in
    stop) stop_pidfile "etcd$n" ;; # SIGCONT, SIGTERM, SIGKILL after 5 s
    kill)
      pid=$(cat "$pidfile")
      kill -KILL "$pid" 2>/dev/null || true
      for _ in $(seq 50); do [[ $(proc_state "$pid") =~ ^Z?$ ]] && break; sleep 0.1; done
      rm -f "$pidfile"
      log "etcd$n killed (SIGKILL, pid $pid)"
      ;;
    pause) kill -STOP "$(cat "$pidfile")"; log "etcd$n paused (SIGSTOP)" ;;
    resume) kill -CONT "$(cat "$pidfile")"; log "etcd$n resumed (SIGCONT)" ;;
    start)
      if pid_alive "$pidfile"; then log "etcd$n already running (pid $(cat "$pidfile"))"; return; fi
      if [[ ! -d $STATE/etcd/etcd$n/member ]]; then
        log "etcd$n has no data dir in $STATE/etcd; start the cluster with '$0 up etcd'"; return 1
      fi
      require_free_port "$((ETCD_CLIENT_PORT_BASE + n))" "etcd$n (client)"
      require_free_port "$((ETCD_PEER_PORT_BASE + n))" "etcd$n (peer)"
      etcd_launch "$n" existing
      wait_until 30 "etcd$n on $(etcd_client_url "$n")" \
        etcdctl_ --endpoints="$(etcd_client_url "$n")" endpoint health ||
        { tail -n 5 "$STATE/etcd/etcd$n.log" >&2; return 1; }
      pid_alive "$pidfile" || { log "etcd$n exited; see $STATE/etcd/etcd$n.log"; return 1; }
      log "etcd$n up again on $(etcd_client_url "$n") (pid $(cat "$pidfile"))"
      ;;
  esac
}

# --- ZooKeeper: a 3-server ensemble on loopback ---------------------------------------------------
# Server n (zk1..zk3): clients on 127.0.0.1:$((ZK_CLIENT_PORT_BASE + n - 1)), quorum (leader to
# followers) on $((ZK_PEER_PORT_BASE + n - 1)), leader election on $((ZK_ELECTION_PORT_BASE + n - 1)).
# Config, data (with myid) and transaction log in $STATE/zookeeper/zk<n>, server log in
# $STATE/zookeeper/zk<n>.log, PID in $STATE/zk<n>.pid. `up` starts from fresh data dirs; `down`
# keeps them (and the logs) until the next `up`. We run QuorumPeerMain straight from Debian's
# `zookeeper` package (no zkServer.sh, no system service, nothing in /etc/zookeeper or
# /var/lib/zookeeper): /usr/share/java/zookeeper.jar names its dependencies in its manifest, and
# slf4j-simple (libslf4j-java, a dependency) writes the log to stderr. tickTime 500 ms lets a
# client negotiate session timeouts from 1 s (2 ticks) to 60 s; a follower that hears nothing
# from the leader for syncLimit ticks (2 s) drops it and a new election starts. Fault tests drive
# single servers with `zk-member`.
ZK_SERVERS=(1 2 3)
ZK_CLASSPATH=/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar
# A small heap and a quick start: C1 only, serial GC, no hsperfdata files in /tmp.
# Container nodes (a lock key's node is one): the leader looks for empty ones every
# znode.container.checkIntervalMs and deletes at most znode.container.maxPerMinute of them a
# minute (ZooKeeper's defaults: 60000 ms and 10000). Here every second and without a rate limit,
# so that the idle tests (test/integration/idle/) see released keys go within seconds. Both are
# JVM system properties: zoo.cfg would prefix them with "zookeeper.".
ZK_CONTAINER_CHECK_MS=${FENCELOCK_ZK_CONTAINER_CHECK_MS:-1000}
ZK_JVM_FLAGS=(-Xms32m -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -XX:-UsePerfData
  -Dorg.slf4j.simpleLogger.showDateTime=true
  "-Dorg.slf4j.simpleLogger.dateTimeFormat=yyyy-MM-dd'T'HH:mm:ss.SSS"
  "-Dznode.container.checkIntervalMs=$ZK_CONTAINER_CHECK_MS" -Dznode.container.maxPerMinute=6000000)

zk_client_port() { echo $((ZK_CLIENT_PORT_BASE + $1 - 1)); }
zk_peer_port() { echo $((ZK_PEER_PORT_BASE + $1 - 1)); }
zk_election_port() { echo $((ZK_ELECTION_PORT_BASE + $1 - 1)); }
zk_connect_string() { # 127.0.0.1:21811,127.0.0.1:21812,127.0.0.1:21813
  local n hosts=()
  for n in "${ZK_SERVERS[@]}"; do hosts+=("127.0.0.1:$(zk_client_port "$n")"); done
  (IFS=,; echo "${hosts[*]}")
}

zk_4lw() { # zk_4lw <port> <word>: a four-letter-word command; the answer on stdout, 2 s at most
  (
    exec 3<>"/dev/tcp/127.0.0.1/$1" && printf '%s' "$2" >&3 || exit 1
    while IFS= read -r -t 2 -u 3 line || [[ -n $line ]]; do printf '%s\n' "$line"; done
  ) 2>/dev/null
}
zk_mode() { zk_4lw "$(zk_client_port "$1")" srvr | sed -n 's/^Mode: //p'; } # leader, follower
zk_ensemble_ready() { # every server serves, one of them as the leader
  local n mode leaders=0
  for n in "${ZK_SERVERS[@]}"; do
    mode=$(zk_mode "$n")
    case $mode in leader) leaders=$((leaders + 1)) ;; follower) ;; *) return 1 ;; esac
  done
  ((leaders == 1))
}
zk_serving() { [[ $(zk_mode "$1") =~ ^(leader|follower)$ ]]; }

zk_write_config() { # zk_write_config <n>: zoo.cfg and myid of server n, in a fresh folder
  local n=$1 m dir=$STATE/zookeeper/zk$1
  mkdir -p "$dir/data" "$dir/txlog"
  echo "$n" >"$dir/data/myid"
  {
    echo "tickTime=500"
    echo "initLimit=20"
    echo "syncLimit=4"
    echo "minSessionTimeout=1000"
    echo "maxSessionTimeout=60000"
    echo "dataDir=$dir/data"
    echo "dataLogDir=$dir/txlog"
    echo "clientPortAddress=127.0.0.1"
    echo "clientPort=$(zk_client_port "$n")"
    echo "maxClientCnxns=0" # no cap per client IP: every test client comes from 127.0.0.1
    echo "admin.enableServer=false"
    echo "4lw.commands.whitelist=ruok,srvr,stat,mntr,conf,cons,dump,wchs"
    # A killed process loses nothing the kernel has (only a host crash would), so skip fsync;
    # 1 MiB log preallocation instead of 64 MiB.
    echo "forceSync=no"
    echo "preAllocSize=1024"
    echo "cnxTimeout=1000" # election connections to a paused server give up after 1 s, not 5
    for m in "${ZK_SERVERS[@]}"; do
      echo "server.$m=127.0.0.1:$(zk_peer_port "$m"):$(zk_election_port "$m")"
    done
  } >"$dir/zoo.cfg"
}

zk_launch() { # zk_launch <n>: start server n in the background, write its PID
  local n=$1
  # setsid: its own session, as for etcd. A JVM crash report goes beside the log, not into $PWD.
  # Its pauses (collections, safepoints) go to zk<n>-pauses.log: a test that saw the ensemble fall
  # silent can be matched against them.
  setsid nohup java "${ZK_JVM_FLAGS[@]}" -XX:ErrorFile="$STATE/zookeeper/zk$n-hs_err_%p.log" \
    "-Xlog:gc,safepoint:file=$STATE/zookeeper/zk$n-pauses.log:time,uptime" \
    -cp "$ZK_CLASSPATH" org.apache.zookeeper.server.quorum.QuorumPeerMain \
    "$STATE/zookeeper/zk$n/zoo.cfg" \
    </dev/null >>"$STATE/zookeeper/zk$n.log" 2>&1 &
  echo $! >"$STATE/zk$n.pid"
}

zk_require_free_ports() { # zk_require_free_ports <n>
  require_free_port "$(zk_client_port "$1")" "zk$1 (client)"
  require_free_port "$(zk_peer_port "$1")" "zk$1 (quorum)"
  require_free_port "$(zk_election_port "$1")" "zk$1 (election)"
}

zk_logs_tail() { # the last lines of each server's log, after a failure
  local n
  for n in "${ZK_SERVERS[@]}"; do
    [[ -f $STATE/zookeeper/zk$n.log ]] || continue
    log "--- last lines of $STATE/zookeeper/zk$n.log"
    grep -v 'Processing srvr command' "$STATE/zookeeper/zk$n.log" | tail -n 5 >&2 || true
  done
}

zookeeper_up() {
  local n alive=0
  for n in "${ZK_SERVERS[@]}"; do pid_alive "$STATE/zk$n.pid" && alive=$((alive + 1)); done
  if ((alive == ${#ZK_SERVERS[@]})); then log "zookeeper already up on $(zk_connect_string)"; return; fi
  if ((alive > 0)); then
    log "zookeeper is partly up ($alive of ${#ZK_SERVERS[@]} servers): '$0 zk-member start <n>'" \
      "the missing ones, or '$0 down zookeeper' first"
    return 1
  fi
  if ! command -v java >/dev/null 2>&1 || [[ ! -f ${ZK_CLASSPATH%%:*} ]]; then
    log "zookeeper needs java and Debian's zookeeper package: run scripts/install-engines.sh"
    return 1
  fi
  for n in "${ZK_SERVERS[@]}"; do zk_require_free_ports "$n"; done
  rm -rf "$STATE/zookeeper" && mkdir -p "$STATE/zookeeper"
  for n in "${ZK_SERVERS[@]}"; do zk_write_config "$n"; done
  for n in "${ZK_SERVERS[@]}"; do zk_launch "$n"; done
  if ! wait_until 60 "zookeeper ensemble on $(zk_connect_string)" zk_ensemble_ready; then
    zk_logs_tail; zookeeper_down; return 1
  fi
  for n in "${ZK_SERVERS[@]}"; do
    if ! pid_alive "$STATE/zk$n.pid"; then
      log "zk$n exited; see $STATE/zookeeper/zk$n.log"; zk_logs_tail; zookeeper_down; return 1
    fi
  done
  log "zookeeper up: 3 servers on $(zk_connect_string) (quorum" \
    "$(zk_peer_port 1)-$(zk_peer_port 3), election $(zk_election_port 1)-$(zk_election_port 3))"
}
zookeeper_down() {
  # All at once (SIGCONT, SIGTERM), then wait for each: a JVM exits in ~0.3 s.
  local n pid stopped=()
  for n in "${ZK_SERVERS[@]}"; do
    pid_alive "$STATE/zk$n.pid" || continue
    pid=$(cat "$STATE/zk$n.pid"); stopped+=("zk$n=$pid")
    kill -CONT "$pid" 2>/dev/null || true # a test may have left it stopped (SIGSTOP)
    kill "$pid" 2>/dev/null || true
  done
  for n in "${ZK_SERVERS[@]}"; do stop_pidfile "zk$n"; done
  ((${#stopped[@]} == 0)) || log "zookeeper stopped (${stopped[*]})"
}
zookeeper_status() {
  local n pid mode port
  for n in "${ZK_SERVERS[@]}"; do
    port=$(zk_client_port "$n")
    if ! pid_alive "$STATE/zk$n.pid"; then echo "zk$n: down"; continue; fi
    pid=$(cat "$STATE/zk$n.pid")
    if [[ $(proc_state "$pid") == T ]]; then
      echo "zk$n: paused (SIGSTOP) on 127.0.0.1:$port (pid $pid)"
      continue
    fi
    mode=$(zk_mode "$n")
    if [[ $mode =~ ^(leader|follower)$ ]]; then
      echo "zk$n: up on 127.0.0.1:$port, quorum $(zk_peer_port "$n"), election" \
        "$(zk_election_port "$n") (pid $pid, $mode)"
    else
      echo "zk$n: not serving on 127.0.0.1:$port (pid $pid; no quorum? see" \
        "$STATE/zookeeper/zk$n.log)"
    fi
  done
}

zk_member() { # zk_member stop|kill|start|pause|resume <1|2|3>
  local action=${1:-} n=${2:-} pid pidfile
  if [[ ! $action =~ ^(stop|kill|start|pause|resume)$ || ! $n =~ ^[123]$ ]]; then
    echo "usage: $0 zk-member stop|kill|start|pause|resume <1|2|3>" >&2; exit 2
  fi
  pidfile=$STATE/zk$n.pid
  if [[ $action != start && $action != stop ]] && ! pid_alive "$pidfile"; then
    log "zk$n is not running"; return 1
  fi
  case $action in
    stop) stop_pidfile "zk$n" ;; # SIGCONT, SIGTERM, SIGKILL after 5 s
    kill)
      pid=$(cat "$pidfile")
      kill -KILL "$pid" 2>/dev/null || true
      for _ in $(seq 50); do [[ $(proc_state "$pid") =~ ^Z?$ ]] && break; sleep 0.1; done
      rm -f "$pidfile"
      log "zk$n killed (SIGKILL, pid $pid)"
      ;;
    pause) kill -STOP "$(cat "$pidfile")"; log "zk$n paused (SIGSTOP)" ;;
    resume) kill -CONT "$(cat "$pidfile")"; log "zk$n resumed (SIGCONT)" ;;
    start)
      if pid_alive "$pidfile"; then log "zk$n already running (pid $(cat "$pidfile"))"; return; fi
      if [[ ! -f $STATE/zookeeper/zk$n/data/myid ]]; then
        log "zk$n has no data dir in $STATE/zookeeper; start the ensemble with '$0 up zookeeper'"
        return 1
      fi
      zk_require_free_ports "$n"
      zk_launch "$n"
      # Serving means it has joined a quorum: with every other server down it never will.
      wait_until 30 "zk$n on 127.0.0.1:$(zk_client_port "$n")" zk_serving "$n" ||
        { grep -v 'Processing srvr command' "$STATE/zookeeper/zk$n.log" | tail -n 5 >&2; return 1; }
      pid_alive "$pidfile" || { log "zk$n exited; see $STATE/zookeeper/zk$n.log"; return 1; }
      log "zk$n up again on 127.0.0.1:$(zk_client_port "$n") (pid $(cat "$pidfile"), $(zk_mode "$n"))"
      ;;
  esac
}

# --- PostgreSQL: one server from Debian's postgresql package ------------------------------------
# Binaries live in /usr/lib/postgresql/<version>/bin (not on PATH); the newest version is used.
# PostgreSQL refuses to run as root, so as root the server runs as the package's `postgres` user.
# Data in $STATE/postgres (fsync off: a test server, but crash-restarts keep committed data as
# long as the host stays up). The server's own PID file is the PID record.
pg_bindir() {
  local dirs; dirs=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
  [[ -n $dirs ]] || { log "PostgreSQL binaries not found (install Debian's postgresql)"; return 1; }
  echo "$dirs"
}
as_pg() { # run a PostgreSQL program as the postgres user when we are root
  if [[ $(id -u) -eq 0 ]]; then runuser -u postgres -- "$@"; else "$@"; fi
}
# Every function takes the server's name (postgres or register), its port and its database.
pg_dir() { echo "$STATE/$1"; }
pg_pid() { head -1 "$(pg_dir "$1")/data/postmaster.pid" 2>/dev/null; }
pg_ready() { "$(pg_bindir)/pg_isready" -q -h 127.0.0.1 -p "$2" -d "$3" -U fencelock; }
pg_start() { # pg_start <name> <port> <database>
  local bin dir; bin=$(pg_bindir); dir=$(pg_dir "$1")
  as_pg "$bin/pg_ctl" start -w -t 30 -D "$dir/data" -l "$dir/postgres.log" \
    -o "-p $2 -c listen_addresses=127.0.0.1 -k $dir -c fsync=off -c max_connections=300" \
    >/dev/null
  wait_until 20 "$1 on $2" pg_ready "$@"
  pg_pid "$1" >"$STATE/$1.pid"
}
pg_up() { # pg_up <name> <port> <database>
  if pid_alive "$STATE/$1.pid" && pg_ready "$@"; then log "$1 already up on $2"; return; fi
  require_free_port "$2" "$1"
  local bin dir; bin=$(pg_bindir); dir=$(pg_dir "$1")
  rm -rf "$dir" && mkdir -p "$dir"
  [[ $(id -u) -eq 0 ]] && chown postgres: "$dir"
  as_pg "$bin/initdb" -D "$dir/data" -U fencelock --auth=trust -E UTF8 --no-sync >"$dir/initdb.log" 2>&1 ||
    { log "initdb failed; see $dir/initdb.log"; return 1; }
  pg_start "$@" || { tail -20 "$dir/postgres.log" >&2; return 1; }
  "$bin/psql" -q -h 127.0.0.1 -p "$2" -U fencelock -d postgres -c "CREATE DATABASE $3" >/dev/null
  log "$1 up on 127.0.0.1:$2 (PostgreSQL, database $3, user fencelock)"
}
pg_down() { # pg_down <name>
  if pid_alive "$STATE/$1.pid"; then
    kill -CONT "$(cat "$STATE/$1.pid")" 2>/dev/null || true
    as_pg "$(pg_bindir)/pg_ctl" stop -D "$(pg_dir "$1")/data" -m immediate -w -t 20 >/dev/null 2>&1 || true
  fi
  stop_pidfile "$1"
}
pg_status() { # pg_status <name> <port> <database>
  if pid_alive "$STATE/$1.pid" && pg_ready "$@"; then
    echo "$1: up on 127.0.0.1:$2 (pid $(cat "$STATE/$1.pid"))"
  else
    echo "$1: down"
  fi
}
postgres_up() { pg_up postgres "$PG_PORT" fencelock; }
postgres_down() { pg_down postgres; }
postgres_status() { pg_status postgres "$PG_PORT" fencelock; }
register_up() { pg_up register "$REGISTER_PORT" register; }
register_down() { pg_down register; }
register_status() { pg_status register "$REGISTER_PORT" register; }
# --- PgBouncer: transaction-mode poolers in front of the PostgreSQL server ----------------------
# Debian's pgbouncer package, run by hand (not its system service), twice: `pgbouncer` on
# $PGBOUNCER_PORT with the defaults, which refuses the startup parameter statement_timeout, and
# `pgbouncer-ignoring` on $PGBOUNCER_IGNORING_PORT with `ignore_startup_parameters =
# extra_float_digits,statement_timeout`, as production set-ups often have it: a client that sends
# them is let in (the setting is dropped) and cannot tell the pooler from the server by a refusal.
# Config, log and PID in $STATE/<name>, listening on 127.0.0.1 only (no Unix socket). Database
# fencelock is forwarded to the postgres engine on $PG_PORT as user fencelock; `auth_type = any`
# takes any user name without a password (loopback tests only). pool_mode = transaction: a server
# connection belongs to a client for one transaction, so no session state (SET, LISTEN, advisory
# locks, startup parameters such as statement_timeout) carries over. PgBouncer refuses to run as
# root, so as root it runs as the postgres user, like the server. It starts without the server
# being up (it connects on the first client's transaction). The engine `pgbouncer` is both.
pgbouncer_ready() { # pgbouncer_ready <port>
  "$(pg_bindir)/psql" -qAt -h 127.0.0.1 -p "$1" -U fencelock -d pgbouncer \
    -c 'SHOW VERSION' >/dev/null
}
pgbouncer_start() { # pgbouncer_start <name> <port> [extra pgbouncer.ini line...]
  local name=$1 port=$2; shift 2
  if pid_alive "$STATE/$name.pid"; then log "$name already up on $port"; return; fi
  command -v pgbouncer >/dev/null 2>&1 ||
    { log "pgbouncer not found: run scripts/install-engines.sh"; return 1; }
  require_free_port "$port" "$name"
  local dir=$STATE/$name
  rm -rf "$dir" && mkdir -p "$dir"
  {
    echo "[databases]"
    echo "fencelock = host=127.0.0.1 port=$PG_PORT dbname=fencelock user=fencelock"
    echo "[pgbouncer]"
    echo "listen_addr = 127.0.0.1"
    echo "listen_port = $port"
    echo "unix_socket_dir ="
    echo "auth_type = any"
    echo "admin_users = fencelock"
    echo "pool_mode = transaction"
    echo "max_client_conn = 1000"
    echo "default_pool_size = 20"
    echo "server_login_retry = 1"
    echo "pidfile = $dir/pgbouncer.pid"
    echo "logfile = $dir/pgbouncer.log"
    local line; for line in "$@"; do echo "$line"; done
  } >"$dir/pgbouncer.ini"
  [[ $(id -u) -eq 0 ]] && chown -R postgres: "$dir"
  as_pg pgbouncer -d -q "$dir/pgbouncer.ini" ||
    { log "$name did not start; see $dir/pgbouncer.log"; return 1; }
  wait_until 20 "$name on $port" pgbouncer_ready "$port" ||
    { tail -5 "$dir/pgbouncer.log" >&2; return 1; }
  cp "$dir/pgbouncer.pid" "$STATE/$name.pid"
  log "$name up on 127.0.0.1:$port (transaction mode, database fencelock ->" \
    "127.0.0.1:$PG_PORT)"
}
pgbouncer_status_of() { # pgbouncer_status_of <name> <port>
  if pid_alive "$STATE/$1.pid" && pgbouncer_ready "$2"; then
    echo "$1: up on 127.0.0.1:$2 (pid $(cat "$STATE/$1.pid")," \
      "transaction mode -> 127.0.0.1:$PG_PORT)"
  else
    echo "$1: down"
  fi
}
pgbouncer_up() {
  pgbouncer_start pgbouncer "$PGBOUNCER_PORT"
  pgbouncer_start pgbouncer-ignoring "$PGBOUNCER_IGNORING_PORT" \
    "ignore_startup_parameters = extra_float_digits,statement_timeout"
}
pgbouncer_down() { stop_pidfile pgbouncer; stop_pidfile pgbouncer-ignoring; }
pgbouncer_status() {
  pgbouncer_status_of pgbouncer "$PGBOUNCER_PORT"
  pgbouncer_status_of pgbouncer-ignoring "$PGBOUNCER_IGNORING_PORT"
}

pg_server() { # pg_server restart-immediate|kill-backends
  local bin dir; bin=$(pg_bindir); dir=$(pg_dir postgres)
  case ${1:-} in
    # Crash-restart: no shutdown checkpoint, recovery from the WAL on start.
    restart-immediate)
      as_pg "$bin/pg_ctl" stop -D "$dir/data" -m immediate -w -t 20 >/dev/null
      pg_start postgres "$PG_PORT" fencelock
      ;;
    # Terminate every client backend of the fencelock database (a lost connection).
    kill-backends)
      "$bin/psql" -q -h 127.0.0.1 -p "$PG_PORT" -U fencelock -d postgres -c \
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = 'fencelock' AND pid <> pg_backend_pid()" >/dev/null
      ;;
    *) echo "usage: $0 pg-server restart-immediate|kill-backends" >&2; exit 2 ;;
  esac
}

main() {
  local cmd=${1:-status}; shift || true
  mkdir -p "$STATE"
  if [[ $cmd == etcd-member ]]; then etcd_member "$@"; return; fi
  if [[ $cmd == zk-member ]]; then zk_member "$@"; return; fi
  if [[ $cmd == redlock-node ]]; then redlock_node "$@"; return; fi
  if [[ $cmd == redis-server ]]; then redis_server "$@"; return; fi
  if [[ $cmd == pg-server ]]; then pg_server "$@"; return; fi
  local engines=("$@"); ((${#engines[@]})) || engines=("${ENGINES[@]}")
  case $cmd in
    up) for e in "${engines[@]}"; do "${e}_up"; done ;;
    down) for e in "${engines[@]}"; do "${e}_down"; done ;;
    status) for e in "${engines[@]}"; do "${e}_status"; done ;;
    *)
      echo "usage: $0 up|down|status [${ENGINES[*]}]" >&2
      echo "       $0 etcd-member stop|kill|start|pause|resume <1|2|3>" >&2
      echo "       $0 zk-member stop|kill|start|pause|resume <1|2|3>" >&2
      echo "       $0 redlock-node stop|kill|start|restart-empty|pause|resume <1..5>" >&2
      echo "       $0 redis-server restart-empty" >&2
      echo "       $0 pg-server restart-immediate|kill-backends" >&2
      exit 2
      ;;
  esac
}

main "$@"
