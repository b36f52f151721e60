#!/usr/bin/env bash
# Installs every tool the build and the tests need, idempotently: each step checks what is
# already there (at the right version) and skips it. Safe to run again and again.
#
#   wasm32 target, Trunk 0.21.14, mdBook 0.4.52, wasm-bindgen-cli (= the wasm-bindgen in Cargo.lock),
#   Chromium + chromedriver (Debian packages), npm binaryen (wasm-opt) + playwright-core,
#   and JAX 0.10.2 (CPU) + numpy in a venv under target/jaxenv (the export suite).
#
# Source scripts/env.sh afterwards (the other scripts do) to get wasm-opt on PATH.
set -euo pipefail
cd "$(dirname "$0")/.."

TRUNK_VERSION=0.21.14
say() { printf '\033[1m[setup]\033[0m %s\n' "$*"; }

# 0. What the machine must already have: a new enough rustc with rustfmt and clippy, and
#    Node >= 20 (playwright-core needs it; Debian 12's own node is 18).
RUSTC_MIN=1.95
have_rustc=$(rustc --version | awk '{ print $2 }')
if [ "$(printf '%s\n%s\n' "$RUSTC_MIN" "$have_rustc" | sort -V | head -n1)" != "$RUSTC_MIN" ]; then
  echo "setup: rustc $have_rustc is older than $RUSTC_MIN (Cargo.toml's rust-version); run rustup update" >&2
  exit 1
fi
# rust-src: the release wasm rebuilds std for size (scripts/release_env.sh).
for component in rustfmt clippy rust-src; do
  if ! rustup component list --installed | grep -q "^$component"; then
    say "adding rustup component $component"
    rustup component add "$component"
  fi
done
NODE_MAJOR=$(node --version 2>/dev/null | sed -E 's/^v([0-9]+).*/\1/' || true)
if [ -z "$NODE_MAJOR" ] || [ "$NODE_MAJOR" -lt 20 ]; then
  # Not installed from here: the only packages of a newer Node are prebuilt downloads.
  echo "setup: Node >= 20 is needed (playwright-core requires it); found ${NODE_MAJOR:-none}." >&2
  echo "setup: machines of this kind ship Node 20; install it and re-run." >&2
  exit 1
fi

# 1. The wasm32 target.
if ! rustup target list --installed | grep -qx wasm32-unknown-unknown; then
  say "adding rustup target wasm32-unknown-unknown"
  rustup target add wasm32-unknown-unknown
fi

# 2. Trunk (0.22 needs a newer rustc than this machine has).
if [ "$(trunk --version 2>/dev/null || true)" != "trunk $TRUNK_VERSION" ]; then
  say "installing trunk $TRUNK_VERSION (takes several minutes on a fresh machine)"
  cargo install trunk --locked --version "$TRUNK_VERSION"
fi

# 2b. mdBook, which builds the user guide in docs/ (scripts/test.sh builds it).
MDBOOK_VERSION=0.4.52
if [ "$(mdbook --version 2>/dev/null || true)" != "mdbook v$MDBOOK_VERSION" ]; then
  say "installing mdbook $MDBOOK_VERSION (takes a few minutes on a fresh machine)"
  cargo install mdbook --locked --version "$MDBOOK_VERSION"
fi

# 3. wasm-bindgen-cli, exactly the version of the wasm-bindgen crate in Cargo.lock.
#    Not --locked: its lockfile wants a crate version this registry lacks.
WBG_VERSION=$(awk '/^name = "wasm-bindgen"$/ { getline; gsub(/version = |"/, ""); print; exit }' Cargo.lock)
if [ -z "$WBG_VERSION" ]; then
  echo "setup: cannot find the wasm-bindgen version in Cargo.lock" >&2
  exit 1
fi
if ! grep -q "wasm_bindgen = \"$WBG_VERSION\"" Trunk.toml; then
  echo "setup: Trunk.toml pins a wasm_bindgen other than Cargo.lock's $WBG_VERSION; update Trunk.toml" >&2
  exit 1
fi
if [ "$(wasm-bindgen --version 2>/dev/null || true)" != "wasm-bindgen $WBG_VERSION" ]; then
  say "installing wasm-bindgen-cli $WBG_VERSION (takes several minutes on a fresh machine)"
  cargo install wasm-bindgen-cli --version "=$WBG_VERSION"
fi

# 4. Chromium and its driver, from Debian (never a downloaded browser).
if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then
  say "installing chromium and chromium-driver"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium chromium-driver
fi

# 5. npm packages: wasm-opt (binaryen 132 reads what rustc 1.95 emits), playwright-core and
#    axe-core (the accessibility checks of the end-to-end suite).
if [ ! -x tests/e2e/node_modules/.bin/wasm-opt ] || [ ! -d tests/e2e/node_modules/playwright-core ] \
   || [ ! -f tests/e2e/node_modules/axe-core/axe.min.js ] \
   || [ tests/e2e/package-lock.json -nt tests/e2e/node_modules/.package-lock.json ]; then
  say "installing npm packages in tests/e2e"
  (cd tests/e2e && npm ci --no-audit --no-fund)
fi

# 6. JAX (CPU) and numpy for the export suite (tests/export_jax.rs), in a venv under target/,
#    pinned: the exported scripts and docs/export.md's XLA figures are checked against 0.10.2.
JAX_VERSION=0.10.2
JAX_ENV=target/jaxenv
if ! "$JAX_ENV/bin/python" -c "import jax, numpy; assert jax.__version__ == '$JAX_VERSION'" 2>/dev/null; then
  say "installing jax[cpu]==$JAX_VERSION and numpy into $JAX_ENV (about a minute)"
  python3 -m venv "$JAX_ENV"
  "$JAX_ENV/bin/pip" install --quiet --disable-pip-version-check "jax[cpu]==$JAX_VERSION" numpy
fi

say "tools ready: $(trunk --version), $(mdbook --version), $(wasm-bindgen --version), $(tests/e2e/node_modules/.bin/wasm-opt --version), $(chromium --version 2>/dev/null | head -n1), jax $("$JAX_ENV/bin/python" -c 'import jax; print(jax.__version__)')"
