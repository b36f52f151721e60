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

#[cfg(target_arch = "wasm32")]
fn main() {
    shardlab::web::start();
}
