#!/usr/bin/env bash
# The playground's re-plan time in headless Chromium (the release build, as served):
#   ./scripts/bench_replan.sh [LAYERS...]     # default: 12 24
# Needs the tools of scripts/setup.sh (trunk, Chromium, the e2e node modules).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh

layers=("$@")
[ $# -gt 0 ] || layers=(12 24)
(source scripts/release_env.sh && trunk build --release 2>&1 | tail -n 1)
cargo build --release --quiet
plans=target/bench_replan
mkdir -p "$plans"
for n in "${layers[@]}"; do
  shards=(--shard x=dp,-,-)
  for ((i = 0; i < n; i++)); do
    for col in attn.q attn.k attn.v mlp.fc1; do
      shards+=(--shard "h$i.$col.w=-,mp" --shard "h$i.$col.b=mp")
    done
    for row in attn.o mlp.fc2; do shards+=(--shard "h$i.$row.w=mp,-"); done
  done
  ./target/release/shardlab print --preset gpt --layers "$n" --mesh 2x4:dp,mp "${shards[@]}" >"$plans/gpt_$n.plan"
done
node tests/e2e/bench_replan.mjs "$plans" "${layers[@]}"
