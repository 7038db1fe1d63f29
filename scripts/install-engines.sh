#!/usr/bin/env bash
# Install the engines the integration tests need, from Debian's packages. As root with apt-get
# it installs what is missing; otherwise it prints the exact command and fails.
set -euo pipefail

# command the tests run -> Debian package that provides it
declare -A PACKAGES=(
  [redis-server]=redis-server
  [redis-cli]=redis-tools
  [etcd]=etcd-server
  [etcdctl]=etcd-client
)

missing=()
for cmd in "${!PACKAGES[@]}"; do
  command -v "$cmd" >/dev/null 2>&1 || missing+=("${PACKAGES[$cmd]}")
done
((${#missing[@]})) || exit 0
mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)

if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
  echo "install-engines: installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  echo "install-engines: missing ${missing[*]}; install them with:" >&2
  echo "  sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi
