#!/usr/bin/env bash
# `npm run test:all`: install and start every engine the tests need, run lint and every test
# (unit, contract, integration, demo), and stop the engines, whatever the outcome.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install-engines.sh
trap 'bash scripts/services.sh down' EXIT
bash scripts/services.sh up
npm run lint
npm run build
npx vitest run
