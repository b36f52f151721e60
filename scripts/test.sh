#!/usr/bin/env bash
# Sets up the tools and runs every suite: formatting, clippy (native and wasm32), native
# tests, browser tests (wasm-bindgen-test in headless Chromium), the release build
# (Trunk + wasm-opt), the end-to-end tests (Playwright against the release build) and the
# book (mdBook).
# Fails if any step fails or any test suite ran 0 tests.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
source scripts/env.sh
# Goldens are checked, never rewritten, and property tests use a fixed seed (the long runs
# in scripts/verify_random.sh and scripts/fuzz.sh use random ones).
unset UPDATE_EXPECT
export PROPTEST_RNG_SEED="${PROPTEST_RNG_SEED:-20261202}"
export PROPTEST_CASES="${PROPTEST_CASES:-200}"

LOGS=target/test-logs
mkdir -p "$LOGS"
START=$(date +%s)
step() { printf '\n\033[1m== %s\033[0m (%ss elapsed)\n' "$*" "$(( $(date +%s) - START ))"; }
# Sums "test result: ok. N passed" over every test binary in a cargo log.
passed() { grep -E '^test result: ok\.' "$1" | awk '{ s += $4 } END { print s + 0 }'; }
# Every suite under tests/ matching $2 and not $3 (regexes) must run at least one test: writes
# "suite count" per suite to $1.suites and fails if one ran 0 (a suite compiled away by a
# cfg would otherwise pass). The browser suite is tests/web.rs; every other one is native.
per_suite() {
  awk '/Running tests\// { suite = $2 } /^test result:/ && suite != "" { print suite, $4; suite = "" }' "$1" \
    | grep -E "$2" | grep -vE "${3:-^$}" > "$1.suites" || true
  [ -s "$1.suites" ] || { echo "FAIL: no suite matching $2 ran" >&2; exit 1; }
  if awk '$2 == 0 { print "FAIL: suite " $1 " ran 0 tests" > "/dev/stderr"; bad = 1 } END { exit !bad }' "$1.suites"; then
    exit 1
  fi
  cat "$1.suites"
}
need_tests() { # suite-name count
  if [ "$2" -eq 0 ]; then echo "FAIL: the $1 suite ran 0 tests" >&2; exit 1; fi
  echo "$1: $2 tests passed"
}

step "cargo fmt --check"
cargo fmt --check

step "clippy (native)"
cargo clippy --all-targets -- -D warnings

step "clippy (wasm32)"
cargo clippy --all-targets --target wasm32-unknown-unknown --no-default-features -- -D warnings

step "native tests"
SUITE_START=$(date +%s)
cargo test 2>&1 | tee "$LOGS/native.log"
NATIVE=$(passed "$LOGS/native.log")
per_suite "$LOGS/native.log" '^tests/' '^tests/web\.rs ' 
echo "native tests: $(( $(date +%s) - SUITE_START ))s"

step "browser tests (wasm-bindgen-test, headless Chromium)"
SUITE_START=$(date +%s)
cargo test --target wasm32-unknown-unknown --no-default-features 2>&1 | tee "$LOGS/browser.log"
BROWSER=$(passed "$LOGS/browser.log")
per_suite "$LOGS/browser.log" '^tests/web\.rs '
echo "browser tests: $(( $(date +%s) - SUITE_START ))s"

step "release build (trunk build --release, wasm-opt)"
(source scripts/release_env.sh && trunk build --release 2>&1 | tail -n 5)
for WASM in dist/shardlab_bg.wasm dist/shardlab-engine_bg.wasm; do
  echo "release wasm: $WASM, $(stat -c %s "$WASM") bytes, $(gzip -9 -c "$WASM" | wc -c) bytes gzipped"
done

step "end-to-end tests (Playwright + Chromium against dist/)"
(cd tests/e2e && node --test --test-reporter=spec --test-reporter-destination=stdout \
  --test-reporter=tap --test-reporter-destination=../../"$LOGS"/e2e.tap)
E2E=$(awk '/^# pass / { print $3 }' "$LOGS/e2e.tap")

step "the book (mdbook build docs; its links are checked by tests/docs.rs)"
mdbook build docs 2>&1 | tail -n 3
[ -f target/book/index.html ] || { echo "FAIL: the book did not build" >&2; exit 1; }

step "summary"
need_tests native "$NATIVE"
need_tests browser "$BROWSER"
need_tests e2e "${E2E:-0}"
echo "all suites passed in $(( $(date +%s) - START ))s"
