#!/usr/bin/env bash
# The long fuzz run: every target of tests/fuzz.rs (plan texts from the grammar, mutated
# preset plans, mesh and shard specs, ONNX files, Paddle programs, playground links) and random command lines with random seeds, in the test
# profile, which keeps overflow checks on. A panic anywhere fails the run.
#   scripts/fuzz.sh [CASES_PER_TARGET]   (default 250000: a million inputs in all)
set -euo pipefail
cd "$(dirname "$0")/.."
unset PROPTEST_RNG_SEED
CASES="${1:-250000}"
START=$(date +%s)
PROPTEST_CASES="$CASES" cargo test --test fuzz -- --test-threads=2
echo "fuzz: 6 targets x $CASES inputs in $(( $(date +%s) - START ))s"
# Command lines, a process each: fewer, but every flag of every subcommand.
START=$(date +%s)
FLAG_FUZZ_CASES="${FLAG_FUZZ_CASES:-20000}" cargo test --test cli flag_fuzz
echo "fuzz: ${FLAG_FUZZ_CASES:-20000} command lines in $(( $(date +%s) - START ))s"
# `check` OK implies `plan --stage all`, `cost` and `run` OK, on random plans with random
# options: four processes a case, so a sample (20,000 cases: about 5 minutes on 2 cores).
START=$(date +%s)
CHECK_IMPLIES_CASES="${CHECK_IMPLIES_CASES:-20000}" cargo test --test check_implies_plan
echo "fuzz: ${CHECK_IMPLIES_CASES:-20000} plans, check against every later command, in $(( $(date +%s) - START ))s"
