//! Pipeline parallelism: each op's stage and chunk (`stages.rs`), the schedules as Paddle's
//! per-stage job lists (`schedule.rs`) and their static check (`schedule_check.rs`), a rank
//! program cut into a schedule's jobs (`jobs.rs`; a grad op's input- and weight-grad halves
//! in `grad_parts.rs`), and a planned pipeline re-batched to another micro-batch size
//! (`rebatch.rs`), and parameters read on several stages tied by copies (`tied.rs`).

pub mod grad_parts;
pub mod jobs;
pub mod rebatch;
pub mod schedule;
pub mod schedule_check;
pub mod stages;
pub mod tied;
