#!/usr/bin/env bash
# `npm run test:all`: install and start every engine the tests need, run lint and every test
# (unit, contract, integration, demo), the sidecar load test, the benchmark's and the torture
# matrix's short runs, and stop the engines, whatever the outcome.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install-engines.sh
trap 'bash scripts/services.sh down' EXIT
bash scripts/services.sh up
npm run lint
npm run build
npx vitest run
# The sidecar's bounded load test (no 5xx, no lost or duplicated grant): 10 s on Redis.
# It exits 1 on a failed check, and stops itself and its sidecar within its own deadline.
npm run bench:sidecar -- --duration 10
# The same over gRPC (fencelock.v1.Locks through `--grpc-port`).
npm run bench:sidecar-grpc -- --duration 10
npm run bench -- --quick
# The torture matrix's short schedule: one run per cell, lock and semaphore cells (about 12 minutes here); its report goes
# to a scratch folder, not docs/torture (that one is committed from a full run).
torture_out="$(mktemp -d)"
npm run torture -- --quick --out "$torture_out"
rm -rf "$torture_out"
