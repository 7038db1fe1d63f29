#!/usr/bin/env bash
# Install the engines (and the browser) the integration tests need, from Debian's packages. As
# root with apt-get it installs what is missing; otherwise it prints the exact command and fails.
set -euo pipefail

# command (or file, by absolute path) the tests run -> Debian package that provides it.
# ZooKeeper: scripts/services.sh runs the server class straight from the package's jar with
# `java` (the package depends on default-jre; default-jre-headless is named in case java is
# missing). The package starts no system service and listens on no port of its own.
declare -A PACKAGES=(
  [redis-server]=redis-server
  [redis-cli]=redis-tools
  [redis-sentinel]=redis-sentinel
  [nft]=nftables
  [etcd]=etcd-server
  [etcdctl]=etcd-client
  [java]=default-jre-headless
  [/usr/share/java/zookeeper.jar]=zookeeper
  # PostgreSQL's server binaries are not on PATH; scripts/services.sh finds the newest version.
  ['/usr/lib/postgresql/*/bin/initdb']=postgresql
  # PgBouncer (transaction-mode pooler tests): scripts/services.sh runs it by hand with its own
  # config. The package's system service is stopped and disabled right after the install, below.
  [pgbouncer]=pgbouncer
  # The torture harness's client clock jumps (F6a) preload libfaketime into the Node clients;
  # `faketime` is its command-line wrapper, handy for trying a jump by hand.
  ['/usr/lib/*-linux-gnu/faketime/libfaketime.so.1']=libfaketime
  [faketime]=faketime
  # The docs site's browser test (test/integration/docs) drives Debian's Chromium headless through
  # playwright-core, which downloads no browser of its own.
  [/usr/bin/chromium]=chromium
)

# Optional, for the bench only (`bash scripts/install-engines.sh --bench`, which `npm run bench`
# runs itself when they are missing): Apache Curator's jars and a JDK, to build the Curator
# contender. The tests never need them.
if [[ ${1:-} == --bench ]]; then
  PACKAGES=(
    [javac]=default-jdk-headless
    [/usr/share/java/curator-recipes.jar]=libcurator-recipes-java
    [/usr/share/java/slf4j-nop.jar]=libslf4j-java
  )
fi

missing=()
for cmd in "${!PACKAGES[@]}"; do
  if [[ $cmd == /* ]]; then
    compgen -G "$cmd" >/dev/null || missing+=("${PACKAGES[$cmd]}")
  else
    command -v "$cmd" >/dev/null 2>&1 || missing+=("${PACKAGES[$cmd]}")
  fi
done
((${#missing[@]})) || exit 0
mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)

if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
  echo "install-engines: installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  if [[ " ${missing[*]} " == *" pgbouncer "* ]]; then
    # Debian's pgbouncer enables and starts a system service on install (systemd, or its init
    # script through invoke-rc.d where no policy-rc.d forbids it), listening on localhost:6432
    # and /var/run/postgresql. The tests run their own on another port: stop and disable that
    # one so nothing is left running or started at boot.
    if [[ -d /run/systemd/system ]]; then
      systemctl disable --now pgbouncer.service pgbouncer.socket >/dev/null 2>&1 || true
    else
      /etc/init.d/pgbouncer stop >/dev/null 2>&1 || true
      update-rc.d pgbouncer disable >/dev/null 2>&1 || true
      deb-systemd-helper disable pgbouncer.service >/dev/null 2>&1 || true
    fi
    echo "install-engines: stopped and disabled the pgbouncer system service" >&2
  fi
else
  echo "install-engines: missing ${missing[*]}; install them with:" >&2
  echo "  sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi
