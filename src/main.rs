//! The `shardlab` binary: the command-line tool natively (feature `native`), the
//! playground in the browser (wasm32).

/// mimalloc for the command-line tool: the planner's many small allocations made glibc's
/// malloc a fifth of `suggest`'s time (see Cargo.toml).
#[cfg(all(feature = "native", not(target_arch = "wasm32")))]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[cfg(all(feature = "native", not(target_arch = "wasm32")))]
fn main() -> std::process::ExitCode {
    shardlab::cli::main()
}

/// TLSF for the playground's page: the same O(1) allocation as the default dlmalloc in
/// about 1.6 KB of code instead of 9.6 KB (the page's module has a 400 KB budget).
#[cfg(all(target_arch = "wasm32", not(target_feature = "atomics")))]
#[global_allocator]
static ALLOCATOR: rlsf::GlobalTlsf = rlsf::GlobalTlsf::new();

#[cfg(target_arch = "wasm32")]
fn main() {
    shardlab::web::start();
}
