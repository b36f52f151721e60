//! ShardLab: SPMD auto-parallel planning in the style of PaddlePaddle's static planner.
//!
//! A user describes a process mesh, a program and a few annotations (a [`plan::Plan`]);
//! the planner completes the distributed attributes of every tensor and operator, builds
//! the backward program, partitions it into one program per rank and inserts the
//! communication. The same core runs natively (the `shardlab` command-line tool, feature
//! `native`) and in the browser (the Yew playground under [`web`], wasm32 only).
//!
//! Modules, in dependency order:
//! - [`ir`]: the program IR, shape inference, text format, verifier.
//! - [`dist`]: process meshes, dist attrs, groups, local shapes, notations.
//! - [`plan`]: a mesh + program + annotations, as one text file.
//! - [`models`]: preset programs.
//! - [`cost`]: FLOPs, bytes, collective times and memory per rank.
//! - [`protocol`]: the messages between the playground's page and its engine, below
//!   [`session`] (which makes jobs) and [`engine`] (which does them).
//! - `cli` (native) and `web` (wasm32): thin shells over the above.

// No catch-all arm in a match over an enum (`OpType` above all): a new variant must be
// handled everywhere, not folded silently into a default.
#![deny(clippy::wildcard_enum_match_arm)]

pub mod cores;
pub mod cost;
pub mod dist;
pub mod engine;
pub mod exec;
pub mod export;
pub mod import;
pub mod ir;
pub mod models;
pub mod passes;
pub mod plan;
pub mod protocol;
pub mod report;
pub mod session;
pub mod sort;
pub mod spmd;
pub mod suggest;

#[cfg(all(feature = "native", not(target_arch = "wasm32")))]
pub mod cli;

#[cfg(target_arch = "wasm32")]
pub mod web;
