#!/usr/bin/env bash
# Sets up the tools, builds the playground (release) and serves it on 127.0.0.1, gzip-
# compressed (scripts/serve.mjs).
#   ./scripts/serve.sh            # http://127.0.0.1:8080/
#   PORT=9000 ./scripts/serve.sh
#   WATCH=1 ./scripts/serve.sh    # trunk serve instead: rebuilds on change, no gzip
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
source scripts/env.sh
PORT="${PORT:-8080}"
echo
echo "ShardLab playground: http://127.0.0.1:$PORT/"
echo
source scripts/release_env.sh
if [ "${WATCH:-0}" = 1 ]; then
  exec trunk serve --release --address 127.0.0.1 --port "$PORT"
fi
trunk build --release
exec node scripts/serve.mjs "$PORT"
