#!/usr/bin/env bash
# The auto-planner's time in headless Chromium (the release build, as served), beside
# one costing of the winner in the same page:
#   ./scripts/bench_suggest.sh            # REPEAT=3 by default
# Needs the tools of scripts/setup.sh (trunk, Chromium, the e2e node modules).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
(source scripts/release_env.sh && trunk build --release 2>&1 | tail -n 1)
node tests/e2e/bench_suggest.mjs
