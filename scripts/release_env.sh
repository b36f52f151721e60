# Sourced before `trunk build --release` (scripts/serve.sh, scripts/test.sh, the benchmark
# scripts): the playground's release wasm rebuilds the standard library with our size
# profile. `optimize_for_size` gives std its small sort and formatting code, and the
# `immediate-abort` panic strategy drops the panic-message machinery (a panic traps; the
# fuzzed invariant is that nothing panics, and debug builds and the browser tests keep the
# messages). Together about 9% off the gzipped page module (docs/benchmarks.md, "The playground").
#
# `-Z build-std` is unstable; RUSTC_BOOTSTRAP=1 lets the pinned stable 1.95 toolchain use
# it with its own std source (the `rust-src` component, which scripts/setup.sh installs),
# so no second toolchain is needed. Set SHARDLAB_PLAIN_STD=1 to build with the prebuilt
# std instead (a larger wasm, same behaviour).
if [ "${SHARDLAB_PLAIN_STD:-0}" != 1 ]; then
  export RUSTC_BOOTSTRAP=1
  export CARGO_UNSTABLE_BUILD_STD=std,panic_abort
  export CARGO_UNSTABLE_BUILD_STD_FEATURES=optimize_for_size
  export CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUSTFLAGS="-Zunstable-options -Cpanic=immediate-abort"
fi
