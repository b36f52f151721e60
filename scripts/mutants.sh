#!/usr/bin/env bash
# Mutation testing of the core with cargo-mutants (crates.io), not in CI: each mutant of
# src/dist, src/spmd, src/passes and src/exec is built and every native suite is run
# against it; a mutant no test catches is a survivor.
#   scripts/mutants.sh [extra cargo-mutants args, e.g. --shard 1/8]
#   MUTANTS_DIRS="src/dist" scripts/mutants.sh      (a subset of the four directories)
# Results land in mutants.out/ (caught.txt, missed.txt, timeout.txt, unviable.txt).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v cargo-mutants >/dev/null; then
  cargo install cargo-mutants --locked
fi
export PROPTEST_CASES="${PROPTEST_CASES:-32}"
FILES=()
for d in ${MUTANTS_DIRS:-src/dist src/spmd src/passes src/exec}; do FILES+=(-f "$d/**"); done
# Every native suite (PROPTEST_CASES keeps the property tests short): a mutant only the
# session or CLI tests catch still counts as caught.
cargo mutants "${FILES[@]}" --timeout 300 --jobs 1 "$@"
