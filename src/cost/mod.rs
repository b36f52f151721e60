//! What a plan costs: the work of every op (FLOPs and bytes, `work.rs`), the time of every
//! collective under an α-β model (`collective.rs`), devices and links as presets
//! (`device.rs`), a step simulated rank by rank (`simulate.rs`), and every rank's memory
//! over the step (`memory.rs`); `estimate.rs` puts them together for a planned pipeline;
//! `diff.rs` compares two plans; `pipeline.rs` lays a pipeline schedule out in time. Pure core: it reads rank programs and returns numbers.

pub mod classes;
pub mod collective;
pub mod compute;
pub mod device;
pub mod diff;
pub mod estimate;
pub mod hardware;
pub mod memory;
pub mod mfu;
pub mod pipeline;
pub mod pipeline_cost;
pub mod placement;
pub mod simulate;
pub mod throughput;
pub mod work;
