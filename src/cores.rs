//! The machine's cores, read once per process: the standard library reads them from the
//! cgroup files on every call (several `open`s and `read`s), and the planner asks for every
//! partition it runs (a fifth of the auto-planner's system calls went to it).

use std::sync::OnceLock;

/// How many threads can run at once (1 in the browser, or where it cannot be told).
pub fn cores() -> usize {
    static CORES: OnceLock<usize> = OnceLock::new();
    *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}
