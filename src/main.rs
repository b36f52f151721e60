//! The `shardlab` binary: the command-line tool natively (feature `native`), the
//! playground in the browser (wasm32).

#[cfg(all(feature = "native", not(target_arch = "wasm32")))]
fn main() -> std::process::ExitCode {
    shardlab::cli::main()
}

#[cfg(target_arch = "wasm32")]
fn main() {
    shardlab::web::start();
}
