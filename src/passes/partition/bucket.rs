//! Gradient buckets (PyTorch DDP's `bucket_cap_mb`, Paddle's fused all-reduce): the
//! data-parallel all-reduces of several gradients fused into one over a flat buffer, so a
//! step pays the collective's latency once per bucket instead of once per parameter.
//!
//! Gradients join the open bucket of their group (the same mesh axes) in the order the
//! backward produces them; a bucket is closed when it holds at least the cap, and every
//! open bucket is closed before the optimizer. Closing emits, in
//! `/auto_parallel/data_parallel`:
//!
//! ```text
//! op coalesce_tensor(Input=[g1, g2, ...]) -> (FusedOutput=buffer)
//! op all_reduce(X=buffer) -> (Out=buffer) {reduce_type="SUM", group=[...]}
//! op scale(X=buffer) -> (Out=buffer) {scale=1/N}
//! op uncoalesce_tensor(FusedOutput=buffer, Input=[g1, g2, ...]) -> (Output=[g1, g2, ...])
//! ```
//!
//! A bucket of one gradient is synchronised in place, as without buckets. DDP's buckets
//! are views of one allocation; ours copy into the buffer and back (the memory model counts
//! the buffer while it lives). ZeRO's reduce-scatters are per parameter and not bucketed.

use super::rank::RankBuilder;
use crate::dist::MeshAxis;
use crate::ir::{Attr, Attrs, Op, OpType, Purpose, VarId};
use crate::passes::dist_program::DistProgram;

struct Bucket {
    axes: Vec<MeshAxis>,
    grads: Vec<VarId>,
    bytes: f64,
}

/// The open buckets of one rank's backward.
pub struct Buckets {
    cap_bytes: f64,
    open: Vec<Bucket>,
    /// The data-parallel scale's attributes (`None`: no scale).
    scale: Option<Attrs>,
}

impl Buckets {
    /// Buckets of at least `cap_bytes` (0: no buckets).
    pub fn new(cap_bytes: u64) -> Buckets {
        Buckets {
            cap_bytes: cap_bytes as f64,
            open: Vec::new(),
            scale: None,
        }
    }

    /// Whether gradients are bucketed.
    pub fn enabled(&self) -> bool {
        self.cap_bytes > 0.0
    }

    /// Adds gradient `g`, partial over `axes`, scaled by `scale` after its sum; closes its
    /// bucket once it is full.
    pub fn add(
        &mut self,
        b: &mut RankBuilder,
        g: VarId,
        axes: Vec<MeshAxis>,
        scale: Option<Attrs>,
    ) {
        self.scale = scale;
        let ty = &b.program.var(g).ty;
        let bytes = ty.bytes() as f64;
        let k = match self.open.iter().position(|o| o.axes == axes) {
            Some(k) => k,
            None => {
                self.open.push(Bucket {
                    axes,
                    grads: Vec::new(),
                    bytes: 0.0,
                });
                self.open.len() - 1
            }
        };
        let bucket = &mut self.open[k];
        bucket.grads.push(g);
        bucket.bytes += bytes;
        if bucket.bytes >= self.cap_bytes {
            let full = self.open.remove(k);
            self.close(b, full);
        }
    }

    /// Closes every open bucket (before the optimizer reads the gradients).
    pub fn close_all(&mut self, b: &mut RankBuilder) {
        for bucket in std::mem::take(&mut self.open) {
            self.close(b, bucket);
        }
    }

    fn close(&self, b: &mut RankBuilder, bucket: Bucket) {
        let grads = bucket.grads;
        let Some(&first) = grads.first() else {
            return;
        };
        let scope = || Purpose::DataParallel.namescope().into();
        let target = if grads.len() == 1 {
            first
        } else {
            // A bucket holds what one rank's gradients hold, so its size is an index here.
            let total: u64 = grads.iter().map(|&g| b.program.var(g).ty.numel()).sum();
            let total = usize::try_from(total).unwrap_or(usize::MAX);
            let flat = b.flat_temp(first, total, "BUCKET");
            let mut pack = Op::new(OpType::CoalesceTensor);
            pack.inputs = crate::slots![grads.clone()];
            pack.outputs = crate::slots![[flat]];
            pack.namescope = scope();
            b.local(pack);
            flat
        };
        for &axis in &bucket.axes {
            b.collective(
                OpType::AllReduce,
                target,
                target,
                &[axis],
                vec![("reduce_type", Attr::Str("SUM".into()))],
                Purpose::DataParallel,
            );
        }
        if let Some(attrs) = &self.scale {
            let mut s = Op::new(OpType::Scale);
            s.inputs = crate::slots![[target]];
            s.outputs = crate::slots![[target]];
            s.attrs = attrs.clone();
            s.namescope = scope();
            b.local(s);
        }
        if grads.len() > 1 {
            let mut unpack = Op::new(OpType::UncoalesceTensor);
            unpack.inputs = crate::slots![[target], grads.clone()];
            unpack.outputs = crate::slots![grads.clone()];
            unpack.namescope = scope();
            b.local(unpack);
        }
        for g in grads {
            b.cur[g.index()] = DistProgram::settled(&b.cur[g.index()]);
        }
    }
}
