//! Where ShardLab's SPMD rules deliberately differ from PaddlePaddle 3.3.1, case by case,
//! with the reason. The oracle test checks that each listed case still differs.

/// A deliberate deviation from Paddle on oracle cases (matched by op and note; an empty
/// note matches every case of the op).
#[derive(Clone, Copy, Debug)]
pub struct Deviation {
    pub op: &'static str,
    pub note: &'static str,
    pub ours: &'static str,
    pub reason: &'static str,
}

/// Every deliberate deviation.
pub const DEVIATIONS: &[Deviation] = &[
    Deviation {
        op: "matmul",
        note: "broadcast batch [4,1] vs [8]",
        ours: "batch dims broadcast to [4, 8]; x keeps its batch shard",
        reason: "Paddle raises `ValueError vector::_M_fill_insert`, a crash in its notation code, \
                 on a valid numpy broadcast; we infer the broadcast",
    },
    Deviation {
        op: "slice",
        note: "slice with decrease_axis",
        ours: "output [0, 1]: the decreased axis is dropped",
        reason: "Paddle returns a 3-dim mapping for a 2-dim output (it ignores decrease_axis), \
                 which no tensor can carry",
    },
    Deviation {
        op: "lookup_table_v2",
        note: "vocab parallel with padding_idx=0",
        ours: "the same error, naming the mesh dimension that splits the rows",
        reason: "Paddle's message prints the table's rank (2) where it says \"mesh dimension\" \
                 (embedding.cc passes weight_ndim); the rejection itself agrees",
    },
    Deviation {
        op: "max",
        note: "",
        ours: "a MAX partial over the reduced split axes",
        reason: "Paddle registers `max` to the generic ReductionInferSpmd, which marks the \
                 output SUM-partial, but reducing partial maxima needs MAX (Paddle's own \
                 `max_reduce` says MAX); checked on a case written from rules.cc",
    },
    Deviation {
        op: "rms_norm",
        note: "begin_norm_axis before the last dim",
        ours: "x [0,-1,-1], y [0,-1,-1], inv_var [0]: every normalised dim replicated",
        reason: "Paddle 3.3.1's rms_norm rule (`fused_rms_norm`) replicates only the last dim \
                 whatever begin_norm_axis says, and gives inv_var a mapping as long as x's \
                 rank − 1; its kernel normalises from begin_norm_axis on, so a split dim \
                 inside the normalised range would normalise each shard alone",
    },
];
