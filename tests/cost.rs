//! The cost model's parts against hand-computed values: FLOPs and bytes of single ops, the
//! α-β times of the collectives (NCCL's bus-bandwidth factors, and the ledger's bytes), and
//! a memory timeline traced by hand.
#![cfg(not(target_arch = "wasm32"))]

mod common;

use common::{preset_plan, standard_configs};
use shardlab::cost::collective::{time, Link, Primitive};
use shardlab::cost::memory::{live_ranges, memory, Category, Live, Sizing};
use shardlab::cost::work::{op_work, ElementBytes, Work};
use shardlab::ir::{parse_program, OpType, Program};
use shardlab::models::Model;
use shardlab::passes::backward::append_backward;
use shardlab::passes::driver::{run_passes, PassOptions};

const F32: ElementBytes = ElementBytes(4.0);

fn program(text: &str) -> Program {
    parse_program(text).unwrap_or_else(|e| panic!("{e:?}"))
}

fn work_of(p: &Program, ty: OpType) -> Work {
    let op = p.ops().iter().find(|o| o.ty == ty).expect("the op");
    op_work(p, op, F32)
}

#[test]
fn matmul_counts_two_flops_per_term_and_reads_its_operands_once() {
    let p = program(
        "var x: f32[8, 12] input\nvar w: f32[12, 16] parameter persistable\n\
         var y: f32[8, 16] activation\nop matmul_v2(X=x, Y=w) -> (Out=y)\n",
    );
    // m·n·k = 8·16·12; bytes = (96 + 192 + 128) elements · 4.
    assert_eq!(
        work_of(&p, OpType::MatmulV2),
        Work {
            flops: 2.0 * 8.0 * 16.0 * 12.0,
            bytes: (96.0 + 192.0 + 128.0) * 4.0
        }
    );
    // Transposed X: [12, 8]ᵀ · [12, 16]: k is X's first dim.
    let t = program(
        "var x: f32[12, 8] input\nvar w: f32[12, 16] parameter persistable\n\
         var y: f32[8, 16] activation\nop matmul_v2(X=x, Y=w) -> (Out=y) {trans_x=true}\n",
    );
    assert_eq!(work_of(&t, OpType::MatmulV2).flops, 2.0 * 8.0 * 16.0 * 12.0);
    // The grad runs two matmuls of the same size.
    let b = append_backward(&program(
        "var x: f32[8, 12] input\nvar w: f32[12, 16] parameter persistable\n\
         var y: f32[8, 16] activation\nvar l: f32[] activation\n\
         op matmul_v2(X=x, Y=w) -> (Out=y)\nop mean(X=y) -> (Out=l) role=loss\n",
    ))
    .unwrap();
    assert_eq!(
        work_of(&b.program, OpType::MatmulV2Grad).flops,
        4.0 * 8.0 * 16.0 * 12.0
    );
}

#[test]
fn elementwise_normalisation_and_embedding_counts() {
    let p = program(
        "var ids: i64[4, 6] input\nvar table: f32[100, 8] parameter persistable\n\
         var e: f32[4, 6, 8] activation\nvar s: f32[8] parameter persistable\n\
         var b: f32[8] parameter persistable\nvar n: f32[4, 6, 8] activation\n\
         var mean: f32[4, 6] activation\nvar var: f32[4, 6] activation\n\
         var g: f32[4, 6, 8] activation\nvar sm: f32[4, 6, 8] activation\n\
         op lookup_table_v2(W=table, Ids=ids) -> (Out=e)\n\
         op layer_norm(X=e, Scale=s, Bias=b) -> (Y=n, Mean=mean, Variance=var) {begin_norm_axis=2}\n\
         op gelu(X=n) -> (Out=g)\nop softmax(X=g) -> (Out=sm) {axis=-1}\n",
    );
    // The embedding gathers 24 rows of 8: no FLOPs; reads the ids (8 bytes each) and the
    // 192 gathered elements, not the 800-element table, and writes 192.
    assert_eq!(
        work_of(&p, OpType::LookupTableV2),
        Work {
            flops: 0.0,
            bytes: 24.0 * 8.0 + 192.0 * 4.0 + 192.0 * 4.0
        }
    );
    // layer_norm: 8 per element; reads X, scale, bias; writes Y, mean, variance.
    assert_eq!(
        work_of(&p, OpType::LayerNorm),
        Work {
            flops: 8.0 * 192.0,
            bytes: (192.0 + 8.0 + 8.0 + 192.0 + 24.0 + 24.0) * 4.0
        }
    );
    assert_eq!(work_of(&p, OpType::Gelu).flops, 5.0 * 192.0);
    assert_eq!(work_of(&p, OpType::Softmax).flops, 5.0 * 192.0);
}

#[test]
fn optimizer_and_accumulation_counts() {
    let pipeline = run_passes(
        &preset_plan(Model::Mlp, 0, "1:dp", &[]),
        &common::with_optimizer("adam", false, None),
    )
    .unwrap();
    let p = &pipeline.full.program;
    for op in p.ops().iter().filter(|o| o.ty == OpType::Adam) {
        let param = p.var(op.input("Param")[0]).ty.numel() as f64;
        let w = op_work(p, op, F32);
        assert_eq!(w.flops, 12.0 * param);
        // Param, grad, moment 1 and 2 read and written back (grad only read); the learning
        // rate and the two beta powers are scalars read and the powers written.
        let io: f64 = op
            .all_inputs()
            .chain(op.all_outputs())
            .map(|v| p.var(v).ty.numel() as f64 * 4.0)
            .sum();
        assert_eq!(w.bytes, io);
    }
}

#[test]
fn collectives_are_priced_by_the_alpha_beta_model_not_as_work() {
    let pipeline = run_passes(
        &{
            let (_, mesh, shards) = standard_configs(Model::Mlp, 0).remove(2);
            preset_plan(Model::Mlp, 0, mesh, &shards)
        },
        &PassOptions::default(),
    )
    .unwrap();
    let r = &pipeline.partitioned.ranks[0].program;
    let all_reduce = r
        .ops()
        .iter()
        .find(|o| o.ty == OpType::AllReduce)
        .expect("an all-reduce");
    assert_eq!(op_work(r, all_reduce, F32), Work::default());
}

/// NCCL's bus bandwidth factors (nccl-tests, PERFORMANCE.md): with no latency, a collective
/// over n ranks moving S bytes at bus bandwidth β takes factor·S/β.
#[test]
fn collective_times_follow_the_ring_formulas() {
    let link = Link {
        alpha_s: 0.0,
        beta_bytes_per_s: 100e9,
    };
    let s = 1e9;
    let n = 8;
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-12 * b.abs().max(1.0);
    assert!(close(
        time(Primitive::AllReduce, n, s, link),
        2.0 * 7.0 / 8.0 * s / 100e9
    ));
    assert!(close(
        time(Primitive::AllGather, n, s, link),
        7.0 / 8.0 * s / 100e9
    ));
    assert!(close(
        time(Primitive::ReduceScatter, n, s, link),
        7.0 / 8.0 * s / 100e9
    ));
    assert!(close(
        time(Primitive::AllToAll, n, s, link),
        7.0 / 8.0 * s / 100e9
    ));
    assert!(close(time(Primitive::SendRecv, 2, s, link), s / 100e9));
    // Latency: one α per ring step.
    let slow = Link {
        alpha_s: 1e-5,
        beta_bytes_per_s: 1e30,
    };
    assert!(close(time(Primitive::AllReduce, n, s, slow), 14.0 * 1e-5));
    assert!(close(time(Primitive::AllGather, n, s, slow), 7.0 * 1e-5));
    assert!(close(time(Primitive::SendRecv, 2, s, slow), 1e-5));
    // One rank: nothing moves.
    assert_eq!(time(Primitive::AllReduce, 1, s, link), 0.0);
}

/// The model's bytes are the ledger's, for every collective of a planned gpt.
#[test]
fn collective_bytes_are_the_ledgers() {
    let (_, mesh, shards) = standard_configs(Model::Gpt, 1).remove(2);
    let p = run_passes(
        &preset_plan(Model::Gpt, 1, mesh, &shards),
        &PassOptions::default(),
    )
    .unwrap();
    let mut checked = 0;
    for e in &p.ledger {
        let r = p
            .partitioned
            .ranks
            .iter()
            .find(|r| r.rank == e.rank)
            .unwrap();
        let op = &r.program.ops()[e.op_index];
        let size = |slot: &str, out: bool| {
            let vars = if out { op.output(slot) } else { op.input(slot) };
            vars.first().map_or(0.0, |&v| {
                let t = &r.program.var(v).ty;
                t.bytes() as f64
            })
        };
        let n = e.group.len();
        let (prim, s) = match op.ty {
            OpType::AllReduce => (Primitive::AllReduce, size("X", false)),
            OpType::AllGather => (Primitive::AllGather, size("Out", true)),
            OpType::ReduceScatter => (Primitive::ReduceScatter, size("X", false)),
            OpType::AllToAll => (Primitive::AllToAll, size("X", false)),
            _ => continue,
        };
        let model = prim.bytes_per_rank(n, s);
        assert!(
            (model - e.bytes_per_rank).abs() <= 1e-9 * model.max(1.0),
            "rank {} op{}: model {model}, ledger {}",
            e.rank,
            e.op_index,
            e.bytes_per_rank
        );
        checked += 1;
    }
    assert!(checked > 10, "{checked} collectives compared");
}

/// A four-op program traced by hand (4-element f32 tensors, 16 bytes each):
///
/// ```text
/// op0 a = x * w      live: x w a        48
/// op1 b = relu(a)    live: x w a b      64   <- peak
/// op2 c = b + x      live: x w b c      64
/// op3 l = mean(c)    live: x w c l      52   (l is a 4-byte scalar)
/// ```
#[test]
fn memory_timeline_by_hand() {
    let p = program(
        "var x: f32[4] input\nvar w: f32[4] parameter persistable\n\
         var a: f32[4] activation\nvar b: f32[4] activation\nvar c: f32[4] activation\n\
         var l: f32[] activation\n\
         op elementwise_mul(X=x, Y=w) -> (Out=a)\nop relu(X=a) -> (Out=b)\n\
         op elementwise_add(X=b, Y=x) -> (Out=c)\nop mean(X=c) -> (Out=l)\n",
    );
    let m = memory(
        &p,
        Sizing {
            elem: F32,
            mixed_precision: false,
            zero: None,
        },
    );
    assert_eq!(m.at_op, vec![48.0, 64.0, 64.0, 52.0]);
    assert_eq!((m.peak, m.peak_op), (64.0, 1));
    let id = |n: &str| p.var_id(n).unwrap();
    let live = live_ranges(&p);
    assert_eq!(live[id("a").index()], Some(Live { first: 0, last: 1 }));
    assert_eq!(live[id("x").index()], Some(Live { first: 0, last: 3 }));
    assert_eq!(live[id("l").index()], Some(Live { first: 3, last: 3 }));
    assert_eq!(
        m.peak_breakdown(),
        vec![
            (Category::Parameter, 16.0),
            (Category::Activation, 32.0),
            (Category::Input, 16.0)
        ]
    );
    // x, w, a and b are live at the peak (op 1); c and l are not yet written.
    let at_peak = |n: &str| live[id(n).index()].is_some_and(|l| l.contains(m.peak_op));
    assert!(["x", "w", "a", "b"].into_iter().all(at_peak));
    assert!(!["c", "l"].into_iter().any(at_peak));
}

mod simulation {
    use super::*;
    use shardlab::cost::collective::Link;
    use shardlab::cost::device::{ComputeDType, CpuCalibration, Topology};
    use shardlab::cost::simulate::{mfu, model_flops, simulate};
    use shardlab::passes::partition::RankProgram;
    use std::sync::Arc;

    fn rank(r: u32, rows: usize) -> RankProgram {
        let text = format!(
            "var x: f32[{rows}, 64] input\nvar w: f32[64, 64] parameter persistable\n\
             var y: f32[{rows}, 64] activation\nvar g: f32[8, 64] activation\n\
             op matmul_v2(X=x, Y=w) -> (Out=y)\n\
             op fill_constant() -> (Out=g) {{shape=[8, 64], value=1.0, dtype=\"f32\"}}\n\
             op all_reduce(X=g) -> (Out=g) {{group=[0, 1], ring_id=0, reduce_type=\"SUM\"}}\n"
        );
        RankProgram {
            rank: r,
            program: program(&text),
            attrs: Arc::new(Vec::new().into()),
            origin: Arc::new(Vec::new()),
            op_chunks: Default::default(),
        }
    }

    /// Two ranks, one with 8× the matmul of the other, then an all-reduce (traced by hand):
    /// rank 0 computes 2·64·64·64 FLOPs = 524.288 µs at 1 GFLOP/s, rank 1 2·8·64·64 =
    /// 65.536 µs and waits 458.752 µs; the all-reduce of 8·64·4 = 2,048 bytes over two ranks
    /// takes 2·α + 2,048 B / 1 GB/s = 2 + 2.048 µs.
    #[test]
    fn a_collective_waits_for_its_last_member() {
        let topo = Topology::cpu(CpuCalibration {
            devices: 2,
            flops: 1e9,
            mem_bandwidth: 1e15,
            kernel_rate: 1e30,
            kernel_rate_small: 1e30,
            gemm_call_s: 0.0,
            crowding: 1.0,
            mem_capacity: 1e9,
            link: Link {
                alpha_s: 1e-6,
                beta_bytes_per_s: 1e9,
            },
        });
        let s = simulate(&[rank(0, 64), rank(1, 8)], &topo, ComputeDType::F32).unwrap();
        let close = |a: f64, b: f64| (a - b).abs() <= 1e-6 * b.abs().max(1e-9);
        let (r0, r1) = (&s.ranks[0], &s.ranks[1]);
        assert!(close(r0.compute_s, 524.288e-6), "{}", r0.compute_s);
        assert!(close(r1.compute_s, 65.536e-6));
        assert!(close(r0.idle_s, 0.0));
        assert!(close(r1.idle_s, 458.752e-6), "{}", r1.idle_s);
        assert!(close(r0.comm_s, 4.048e-6) && close(r1.comm_s, 4.048e-6));
        assert!(close(s.step_s, 528.336e-6));
        assert_eq!(s.critical_rank, 0);
    }

    /// A planned gpt on every preset: each rank's compute, communication and idle time add
    /// up to its finish, and MFU is a fraction.
    #[test]
    fn a_planned_step_adds_up_on_every_preset() {
        let (_, mesh, shards) = standard_configs(Model::Gpt, 2).remove(2);
        let plan = preset_plan(Model::Gpt, 2, mesh, &shards);
        let p = run_passes(&plan, &PassOptions::default()).unwrap();
        for name in ["cpu", "h100x8", "h100x8x4", "tpu-v5e-16"] {
            let topo = Topology::preset(name).unwrap();
            let dtype = topo.default_dtype;
            let s = simulate(&p.partitioned.ranks, &topo, dtype).unwrap();
            assert_eq!(s.ranks.len(), 8);
            for r in &s.ranks {
                let sum = r.compute_s + r.comm_s + r.idle_s;
                assert!(
                    (sum - r.total_s).abs() <= 1e-9 * r.total_s,
                    "{name} rank {}",
                    r.rank
                );
                assert!(r.comm_s > 0.0, "{name}: dp x mp communicates");
            }
            let u = mfu(
                model_flops(&p.full.program, dtype),
                s.step_s,
                8,
                &topo,
                dtype,
            );
            assert!(u > 0.0 && u <= 1.0, "{name}: MFU {u}");
        }
    }

    /// On the CPU, an op other than a matmul takes at least its elements over the executor's
    /// kernel rate: the fill of 8·64 elements at 10⁶ elements/s takes 512 µs; the matmul is
    /// unaffected.
    #[test]
    fn the_cpu_kernel_rate_bounds_non_matmul_ops() {
        use shardlab::cost::simulate::compute_time;
        let topo = Topology::cpu(CpuCalibration {
            devices: 2,
            flops: 1e9,
            mem_bandwidth: 1e15,
            kernel_rate: 1e6,
            kernel_rate_small: 1e6,
            gemm_call_s: 0.0,
            crowding: 1.0,
            mem_capacity: 1e9,
            link: Link {
                alpha_s: 0.0,
                beta_bytes_per_s: 1e9,
            },
        });
        let r = rank(0, 8);
        let ops = r.program.ops();
        let t = |i: usize| compute_time(&r.program, &ops[i], &topo, ComputeDType::F32);
        assert!((t(0) - 65.536e-6).abs() < 1e-12, "{}", t(0));
        assert!((t(1) - 512e-6).abs() < 1e-12, "{}", t(1));
    }

    /// Two ranks of 1 GFLOP/s, memory and kernels never the bound, joined by a 10 MB/s link
    /// with 1 µs of latency: collectives long enough to hide compute behind.
    fn slow_pair() -> Topology {
        Topology::cpu(CpuCalibration {
            devices: 2,
            flops: 1e9,
            mem_bandwidth: 1e15,
            kernel_rate: 1e30,
            kernel_rate_small: 1e30,
            gemm_call_s: 0.0,
            crowding: 1.0,
            mem_capacity: 1e9,
            link: Link {
                alpha_s: 1e-6,
                beta_bytes_per_s: 1e7,
            },
        })
    }

    /// Ranks 0 and 1, each running the program `text`.
    fn pair_of(text: &str) -> Vec<RankProgram> {
        (0..2)
            .map(|r| RankProgram {
                rank: r,
                program: program(text),
                attrs: Arc::new(Vec::new().into()),
                origin: Arc::new(Vec::new()),
                op_chunks: Default::default(),
            })
            .collect()
    }

    /// Overlap, traced by hand: a gradient's all-reduce (1,640.4 µs: 2·1 µs + 16,384 B at
    /// 10 MB/s) runs beside the 524.288 µs matmul after it, and the update waits for it. In
    /// order, the step is fill + all-reduce + matmul + sgd; overlapped, fill + all-reduce +
    /// sgd, the matmul hidden, and the rank idles while the all-reduce finishes.
    #[test]
    fn overlapped_gradient_sync_hides_behind_later_compute() {
        use shardlab::cost::simulate::{compute_time, simulate_with, SimOptions};
        let topo = slow_pair();
        let text = "var x: f32[64, 64] input\nvar w: f32[64, 64] parameter persistable\n\
             var g: f32[64, 64] gradient\nvar y: f32[64, 64] activation\n\
             var lr: f32[] optimizer_state persistable\n\
             op fill_constant() -> (Out=g) {shape=[64, 64], value=1.0, dtype=\"f32\"} role=backward\n\
             op all_reduce(X=g) -> (Out=g) {group=[0, 1], ring_id=0, reduce_type=\"SUM\"} role=backward scope=\"/auto_parallel/data_parallel\"\n\
             op matmul_v2(X=x, Y=w) -> (Out=y) role=backward\n\
             op sgd(Param=w, Grad=g, LearningRate=lr) -> (ParamOut=w) role=optimize\n";
        let ranks = pair_of(text);
        let ops = ranks[0].program.ops();
        let t = |i: usize| compute_time(&ranks[0].program, &ops[i], &topo, ComputeDType::F32);
        let comm = 2e-6 + 16384.0 / 1e7;
        let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * b.abs().max(1e-9);
        let plain = simulate(&ranks, &topo, ComputeDType::F32).unwrap();
        assert!(
            close(plain.step_s, t(0) + comm + t(2) + t(3)),
            "{}",
            plain.step_s
        );
        let on = SimOptions {
            overlap_grad_sync: true,
        };
        let over = simulate_with(&ranks, &topo, ComputeDType::F32, on).unwrap();
        assert!(close(over.step_s, t(0) + comm + t(3)), "{}", over.step_s);
        let r = &over.ranks[0];
        assert!(close(r.comm_s, comm));
        assert!(close(r.idle_s, comm - t(2)), "{}", r.idle_s);
        assert!(close(t(2), 524.288e-6));
        // Gradient sync that is not backward (or not data parallel) is not overlapped.
        let tp = text.replace("data_parallel", "tensor_parallel");
        let tp_ranks = pair_of(&tp);
        let tp_over = simulate_with(&tp_ranks, &topo, ComputeDType::F32, on).unwrap();
        assert!(close(tp_over.step_s, plain.step_s));
    }

    /// ZeRO-3's parameter all-gather, prefetched (traced by hand): it runs on the
    /// communication stream from the step's start, beside the matmul before it in program
    /// order, and the matmul that reads it starts when both are done. In order the step is
    /// matmul + all-gather + matmul; prefetched, max(matmul, all-gather) + matmul.
    #[test]
    fn zero3_parameter_gathers_are_prefetched_under_overlap() {
        use shardlab::cost::simulate::{compute_time, simulate_with, SimOptions};
        let topo = slow_pair();
        let text = "var x: f32[64, 64] input\nvar w0: f32[64, 64] parameter persistable\n\
             var s1: f32[32, 64] parameter persistable\nvar w1: f32[64, 64] activation\n\
             var y: f32[64, 64] activation\nvar z: f32[64, 64] activation\n\
             op matmul_v2(X=x, Y=w0) -> (Out=y)\n\
             op all_gather(X=s1) -> (Out=w1) {group=[0, 1], ring_id=0, axis=0} scope=\"/auto_parallel/sharding\"\n\
             op matmul_v2(X=y, Y=w1) -> (Out=z)\n";
        let ranks = pair_of(text);
        let ops = ranks[0].program.ops();
        let mm = compute_time(&ranks[0].program, &ops[0], &topo, ComputeDType::F32);
        // All-gather of a 16,384-byte output over 2: 1 step, half the bytes.
        let comm = 1e-6 + 8192.0 / 1e7;
        assert!(
            comm > mm,
            "the gather is the longer of the two: {comm} vs {mm}"
        );
        let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * b.abs().max(1e-9);
        let plain = simulate(&ranks, &topo, ComputeDType::F32).unwrap();
        assert!(close(plain.step_s, mm + comm + mm), "{}", plain.step_s);
        let on = SimOptions {
            overlap_grad_sync: true,
        };
        let over = simulate_with(&ranks, &topo, ComputeDType::F32, on).unwrap();
        assert!(close(over.step_s, comm + mm), "{}", over.step_s);
        // A tensor-parallel all-gather is not prefetched.
        let tp = text.replace("sharding", "reshard");
        let tp_ranks = pair_of(&tp);
        let tp_over = simulate_with(&tp_ranks, &topo, ComputeDType::F32, on).unwrap();
        assert!(close(tp_over.step_s, plain.step_s));
    }

    /// On the TPU slice's 2-D torus a group that spans both dimensions runs its collective
    /// along both at once: twice one link's bandwidth; along one dimension, one link's.
    #[test]
    fn torus_groups_spanning_both_dimensions_get_both_links() {
        let tpu = Topology::preset("tpu-v5e-16").unwrap();
        let beta = |g: &[u32]| tpu.effective_link(g).unwrap().beta_bytes_per_s;
        let world: Vec<u32> = (0..16).collect();
        assert_eq!(beta(&world), 90e9);
        assert_eq!(beta(&[0, 1, 2, 3]), 45e9, "a row");
        assert_eq!(beta(&[1, 5, 9, 13]), 45e9, "a column");
        assert_eq!(beta(&[0, 1, 4, 5]), 90e9, "a 2 x 2 block");
        // The scaling book's all-reduce of S bytes over the 16 chips: 2·15·α + 2·15/16·S/(2β).
        let s = 64e6;
        let t = shardlab::cost::collective::time(
            Primitive::AllReduce,
            16,
            s,
            tpu.effective_link(&world).unwrap(),
        );
        assert!(
            (t - (30.0 * 5e-6 + 30.0 / 16.0 * s / 90e9)).abs() < 1e-12,
            "{t}"
        );
        // A v5p slice is 3-D: 64 chips are 4 x 4 x 4; a group over all three axes gets three
        // links, one along z one link.
        let v5p = Topology::preset("tpu-v5p-128").unwrap();
        let beta = |g: &[u32]| v5p.effective_link(g).unwrap().beta_bytes_per_s;
        assert_eq!(beta(&(0..64).collect::<Vec<u32>>()), 270e9);
        assert_eq!(beta(&[0, 1, 2, 3]), 90e9);
        assert_eq!(beta(&[0, 4, 16, 20]), 180e9);
        // NVLink at NCCL's share of its line rate (hardware.rs).
        let h100 = Topology::preset("h100x8").unwrap();
        assert_eq!(
            h100.effective_link(&[0, 1, 2, 3, 4, 5, 6, 7])
                .unwrap()
                .beta_bytes_per_s,
            450e9 * shardlab::cost::hardware::NVLINK_BUS_EFFICIENCY
        );
    }

    /// The CPU's kernel rate moves log-linearly from its in-cache figure to its
    /// from-memory one between the two sizes calibration measures; a batched matmul pays
    /// the per-call cost once per batch (twice for its grad), a matrix weight once.
    #[test]
    fn the_cpu_model_has_a_cache_curve_and_a_gemm_call_cost() {
        use shardlab::cost::device::{CpuKernels, LARGE_KERNEL_ELEMS, SMALL_KERNEL_ELEMS};
        use shardlab::cost::simulate::compute_time;
        let k = CpuKernels {
            rate_small: 4e8,
            rate_large: 1e8,
            gemm_call_s: 1e-6,
            crowding: 1.0,
        };
        assert_eq!(k.rate(100.0), 4e8);
        assert_eq!(k.rate(LARGE_KERNEL_ELEMS * 2.0), 1e8);
        let mid = (SMALL_KERNEL_ELEMS * LARGE_KERNEL_ELEMS).sqrt();
        assert!((k.rate(mid) - 2e8).abs() < 1.0, "{}", k.rate(mid));
        let topo = Topology::cpu(CpuCalibration {
            devices: 1,
            flops: 1e9,
            mem_bandwidth: 1e15,
            kernel_rate: 1e30,
            kernel_rate_small: 1e30,
            gemm_call_s: 1e-6,
            crowding: 1.0,
            mem_capacity: 1e9,
            link: Link {
                alpha_s: 0.0,
                beta_bytes_per_s: 1e9,
            },
        });
        let p = program(
            "var q: f32[2, 3, 4, 8] input\nvar k: f32[2, 3, 8, 4] input\n\
             var s: f32[2, 3, 4, 4] activation\nvar x: f32[2, 4, 8] input\n\
             var w: f32[8, 8] parameter persistable\nvar y: f32[2, 4, 8] activation\n\
             op matmul_v2(X=q, Y=k) -> (Out=s)\nop matmul_v2(X=x, Y=w) -> (Out=y)\n",
        );
        let t = |i: usize| compute_time(&p, &p.ops()[i], &topo, ComputeDType::F32);
        // 6 batches of 2·4·4·8 FLOPs at 1 GFLOP/s, plus 6 calls; the weight's one call.
        assert!(
            (t(0) - (6.0 * 256.0 / 1e9 + 6e-6)).abs() < 1e-15,
            "{}",
            t(0)
        );
        assert!(
            (t(1) - (2.0 * 8.0 * 8.0 * 8.0 / 1e9 + 1e-6)).abs() < 1e-15,
            "{}",
            t(1)
        );
    }

    #[test]
    fn a_rank_beyond_the_preset_is_an_error() {
        let plan = preset_plan(Model::Mlp, 0, "16:dp", &["x=dp,-".to_string()]);
        let p = run_passes(&plan, &PassOptions::default()).unwrap();
        let topo = Topology::preset("h100x8").unwrap();
        let e = simulate(&p.partitioned.ranks, &topo, ComputeDType::Bf16).unwrap_err();
        assert!(e.to_string().contains("h100x8 has 8 devices"), "{e}");
    }
}

/// The ZeRO paper's mixed-precision Adam (Rajbhandari et al. 2020, §3.1): parameters,
/// gradients and optimizer state take (2 + 2 + 12)·Ψ bytes at bf16. On one rank with AMP,
/// at the first update every parameter's gradient is still live, and the breakdown there
/// is 6Ψ of parameters (bf16 + fp32 master), 2Ψ of gradients and 8Ψ of moments (plus the
/// beta powers and loss-scaling scalars).
#[test]
fn mixed_precision_adam_takes_sixteen_bytes_per_parameter() {
    let plan = preset_plan(Model::Gpt, 2, "1:dp", &[]);
    let p = run_passes(&plan, &common::with_optimizer("adam", true, None)).unwrap();
    let r = &p.partitioned.ranks[0].program;
    let psi: f64 = r
        .vars()
        .iter()
        .filter(|v| v.kind == shardlab::ir::VarKind::Parameter)
        .map(|v| v.ty.numel() as f64)
        .sum();
    let first_update = r.ops().iter().position(|o| o.ty == OpType::Adam).unwrap();
    let sizing = Sizing {
        elem: ElementBytes(2.0),
        mixed_precision: true,
        zero: None,
    };
    let live = shardlab::cost::memory::live_ranges(r);
    let live_at = |c: Category| -> f64 {
        (0..r.vars().len())
            .filter(|&i| live[i].is_some_and(|l| l.contains(first_update)))
            .map(|i| shardlab::ir::VarId(i as u32))
            .filter(|&v| {
                let kind = r.var(v).kind;
                match c {
                    Category::Parameter => kind == shardlab::ir::VarKind::Parameter,
                    Category::Gradient => kind == shardlab::ir::VarKind::Gradient,
                    Category::OptimizerState => kind == shardlab::ir::VarKind::OptimizerState,
                    Category::Activation | Category::Input => false,
                }
            })
            .map(|v| sizing.bytes(r, v))
            .sum()
    };
    assert_eq!(live_at(Category::Parameter), 6.0 * psi);
    assert_eq!(live_at(Category::Gradient), 2.0 * psi);
    let states = live_at(Category::OptimizerState);
    assert!(
        states >= 8.0 * psi && states <= 8.0 * psi + 4.0 * 1024.0,
        "moments {states} for Ψ = {psi}"
    );
    // Without AMP everything is at the compute dtype: (2 + 2 + 4)·Ψ at bf16.
    let plain = Sizing {
        elem: ElementBytes(2.0),
        mixed_precision: false,
        zero: None,
    };
    let params: f64 = r
        .vars()
        .iter()
        .enumerate()
        .filter(|(_, v)| v.kind == shardlab::ir::VarKind::Parameter)
        .map(|(i, _)| plain.bytes(r, shardlab::ir::VarId(i as u32)))
        .sum();
    assert_eq!(params, 2.0 * psi);
}

/// The decoder ops' declared FLOPs, and a llama's matmul FLOPs against the closed form
/// `2·tokens·(params in the projections) + 4·batch·heads·seq²·head_dim` per layer (the
/// scores and the context), with the LM head's `2·tokens·hidden·vocab`.
#[test]
fn decoder_op_counts_and_llama_matmul_flops() {
    let p = program(
        "var x: f32[2, 4, 8] activation\nvar s: f32[8] parameter persistable\n\
         var y: f32[2, 4, 8] activation\nvar r: f32[2, 4] activation\n\
         var q: f32[2, 4, 2, 4] activation\nvar sin: f32[1, 4, 1, 4] input\n\
         var cos: f32[1, 4, 1, 4] input\nvar o: f32[2, 4, 2, 4] activation\n\
         var rep: f32[2, 4, 6, 4] activation\n\
         op rms_norm(X=x, Scale=s) -> (Y=y, InvVar=r) {begin_norm_axis=2}\n\
         op fused_rotary_position_embedding(X=q, Sin=sin, Cos=cos) -> (Out=o)\n\
         op repeat_interleave(X=o) -> (Out=rep) {repeats=3, axis=2}\n",
    );
    // rms_norm: square-add, then two multiplies, per element; reads X and scale, writes Y
    // and one statistic per row.
    assert_eq!(
        work_of(&p, OpType::RmsNorm),
        Work {
            flops: 4.0 * 64.0,
            bytes: (64.0 + 8.0 + 64.0 + 8.0) * 4.0
        }
    );
    assert_eq!(
        work_of(&p, OpType::FusedRotaryPositionEmbedding).flops,
        3.0 * 64.0
    );
    assert_eq!(work_of(&p, OpType::RepeatInterleave).flops, 0.0);

    let model = Model::Llama;
    let cfg = model.default_config();
    let program = model.build(&cfg).unwrap();
    let tokens = (cfg.batch * cfg.seq) as f64;
    let (h, f, v) = (cfg.hidden as f64, cfg.ffn as f64, cfg.vocab as f64);
    let head_dim = h / cfg.heads as f64;
    let kv = cfg.kv_heads as f64 * head_dim;
    let per_layer = 2.0 * tokens * (h * h + 2.0 * h * kv + h * h + 3.0 * h * f)
        + 4.0 * (cfg.batch * cfg.heads) as f64 * (cfg.seq * cfg.seq) as f64 * head_dim;
    let want = cfg.layers as f64 * per_layer + 2.0 * tokens * h * v;
    let got: f64 = program
        .ops()
        .iter()
        .filter(|o| o.ty == OpType::MatmulV2)
        .map(|o| op_work(&program, o, F32).flops)
        .sum();
    assert_eq!(got, want);
}
