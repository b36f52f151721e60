//! `lookup_table_v2`: rows of a table `W` by integer `Ids`.
//!
//! Facets outside the IR: the rule `spmd::embedding`, `DistImpl::EmbeddingVocab` (lowered
//! to `c_embedding` and an all-reduce in `passes::partition::lower`), the kernels
//! `exec::kernels::layout`, and `jnp.take` in `export::ops`.

use super::{Family, Flops, Numel, OpDef};
use crate::ir::attr::AttrKind::Int;
use crate::ir::infer::forward as infer;
use crate::ir::schema::{attr, one};

pub const LOOKUP_TABLE_V2: OpDef = OpDef {
    name: "lookup_table_v2",
    grad_name: "lookup_table_v2_grad",
    pir_name: "pd_op.embedding",
    family: Family::Embedding,
    inputs: &[one("W"), one("Ids")],
    outputs: &[one("Out")],
    // `start_index`: the vocab id of W's first row (0 unless W is a vocab shard).
    attrs: &[attr("padding_idx", Int), attr("start_index", Int)],
    infer: infer::lookup,
    saves: &[],
    differentiates: &["W"],
    shape_only: &["W"],
    // A copy forward; the grad scatters-adds each row of dOut.
    flops: Flops {
        forward: &[],
        grad: &[(1.0, Numel::In("Out@GRAD"))],
    },
};
