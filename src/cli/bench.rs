//! `shardlab bench`: timings of the planner on growing models, as medians over repeated
//! runs, with time per op so flatness is visible. Not a test: numbers, not assertions.

use crate::models::scenarios::megatron_shards;
use crate::models::{Model, ModelConfig};
use crate::passes::complete;
use crate::plan::{parse_mesh_spec, parse_shard_spec, Plan};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Paddle 3.3.1's Python Completer on this machine class (forward completion), from the
/// issue: (layers, forward ops, seconds).
const PADDLE_COMPLETE: [(usize, usize, f64); 5] = [
    (2, 65, 0.10),
    (8, 239, 0.42),
    (24, 703, 1.65),
    (48, 1399, 4.87),
    (96, 2791, 18.3),
];

/// A preset model built from `cfg` on `mesh`, annotated with `shards`.
fn preset_plan(
    model: Model,
    cfg: &ModelConfig,
    mesh: &str,
    shards: &[String],
) -> Result<Plan, String> {
    let program = model.build(cfg).map_err(|e| e.to_string())?;
    let mesh = Arc::new(parse_mesh_spec(mesh)?);
    let annotations = shards
        .iter()
        .map(|s| parse_shard_spec(s, &program, &mesh))
        .collect::<Result<_, _>>()?;
    Ok(Plan {
        meshes: crate::dist::MeshTable::single(mesh),
        program,
        annotations,
        options: Default::default(),
        stages: Vec::new(),
    })
}

/// The gpt preset on a `[2, 4]` mesh with dp on the batch and Megatron mp.
pub fn gpt_dp_mp_plan(layers: usize) -> Result<Plan, String> {
    let mut shards = vec!["x=dp,-,-".to_string()];
    shards.extend(megatron_shards(layers, "mp"));
    let cfg = ModelConfig {
        layers,
        ..Model::Gpt.default_config()
    };
    preset_plan(Model::Gpt, &cfg, "2x4:dp,mp", &shards)
}

/// The median of `repeat` timings of `f`.
pub fn median(
    repeat: usize,
    mut f: impl FnMut() -> Result<(), String>,
) -> Result<Duration, String> {
    let mut times = Vec::with_capacity(repeat);
    for _ in 0..repeat.max(1) {
        let start = Instant::now();
        f()?;
        times.push(start.elapsed());
    }
    times.sort_unstable();
    Ok(times[times.len() / 2])
}

/// The whole pipeline (completion, backward, optimizer, partition for all 8 ranks, ledger)
/// of gpt at each layer count.
pub fn bench_pipeline(layers: &[usize], repeat: usize) -> Result<String, String> {
    use crate::passes::driver::{run_passes, PassOptions};
    let mut out = String::from(
        "whole pipeline of gpt on [2, 4] (dp x Megatron mp), all 8 ranks, median of runs\n",
    );
    out.push_str(&format!(
        "{:>6} {:>6} {:>8} {:>12} {:>12} {:>12} {:>10}\n",
        "layers", "fwd ops", "all ops", "median", "per op", "cost model", "cost/plan"
    ));
    let topo = crate::cost::device::Topology::preset("h100x8").map_err(|e| e.to_string())?;
    for &l in layers {
        let plan = gpt_dp_mp_plan(l)?;
        let p = run_passes(&plan, &PassOptions::default()).map_err(|e| e.to_string())?;
        let ops: usize = p.full.program.ops().len();
        // Planning and costing alternate, so both see the same machine state.
        let (mut plan_t, mut cost_t) = (Vec::new(), Vec::new());
        for _ in 0..repeat.max(1) {
            plan_t.push(median(1, || {
                run_passes(&plan, &PassOptions::default())
                    .map(|_| ())
                    .map_err(|e| e.to_string())
            })?);
            cost_t.push(median(1, || {
                let opts = crate::cost::estimate::CostOptions::default();
                crate::cost::estimate::estimate(&p, &topo, topo.default_dtype, opts)
                    .map(|_| ())
                    .map_err(|e| e.to_string())
            })?);
        }
        plan_t.sort_unstable();
        cost_t.sort_unstable();
        let (t, c) = (plan_t[plan_t.len() / 2], cost_t[cost_t.len() / 2]);
        out.push_str(&format!(
            "{l:>6} {:>6} {ops:>8} {:>10.3}ms {:>10.2}us {:>10.3}ms {:>9.1}%\n",
            plan.program.ops().len(),
            t.as_secs_f64() * 1e3,
            t.as_secs_f64() * 1e6 / ops as f64,
            c.as_secs_f64() * 1e3,
            100.0 * c.as_secs_f64() / t.as_secs_f64()
        ));
    }
    out.push_str("cost model: the step simulated on h100x8 and every rank's memory timeline\n");
    Ok(out)
}

/// Planning with pipeline stages: gpt (global batch 64) on [4, 2, 4] (pp, dp, mp), 16
/// micro-batches of 4, 1F1B — every rank planned (4 stage templates built, 28 ranks
/// stamped) and the schedule laid out — against the same model on [2, 4] (dp, mp) without
/// stages, alternating in one process so both see the same machine.
pub fn bench_stages(layers: &[usize], repeat: usize) -> Result<String, String> {
    use crate::passes::driver::{run_passes, PassOptions};
    let mut out = String::from(
        "whole pipeline of gpt (batch 64) with stages on [4, 2, 4] (pp, dp, mp), 16 \
         micro-batches, 1f1b, all 32 ranks + the schedule, against [2, 4] (dp, mp) without \
         stages, all 8 ranks; medians\n",
    );
    out.push_str(&format!(
        "{:>6} {:>12} {:>12} {:>8}\n",
        "layers", "with stages", "without", "ratio"
    ));
    for &l in layers {
        let mut shards = vec!["x=dp,-,-".to_string()];
        shards.extend(megatron_shards(l, "mp"));
        let whole = ModelConfig {
            layers: l,
            batch: 64,
            ..Model::Gpt.default_config()
        };
        let flat = preset_plan(Model::Gpt, &whole, "2x4:dp,mp", &shards)?;
        let micro = ModelConfig {
            batch: 64 / 16,
            ..whole.clone()
        };
        let mut staged = preset_plan(Model::Gpt, &micro, "4x2x4:pp,dp,mp", &shards)?;
        staged.options.micro_batches = 16;
        staged.options.schedule = crate::plan::ScheduleKind::OneFOneB;
        let plan_only = |plan: &Plan| -> Result<(), String> {
            run_passes(plan, &PassOptions::from_plan(&plan.options))
                .map(|_| ())
                .map_err(|e| e.to_string())
        };
        let planned = run_passes(&staged, &PassOptions::from_plan(&staged.options))
            .map_err(|e| e.to_string())?;
        let schedule_only = || -> Result<(), String> {
            crate::cost::pipeline_cost::pipeline_cost(
                &planned,
                None,
                crate::cost::work::ElementBytes(4.0),
            )
            .map(|_| ())
            .map_err(|e| e.to_string())
        };
        let (mut a, mut b, mut c) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..repeat.max(1) {
            a.push(median(1, || plan_only(&staged))?);
            c.push(median(1, schedule_only)?);
            b.push(median(1, || plan_only(&flat))?);
        }
        for v in [&mut a, &mut b, &mut c] {
            v.sort_unstable();
        }
        let (a, b, c) = (a[a.len() / 2], b[b.len() / 2], c[c.len() / 2]);
        let staged_total = a + c;
        out.push_str(&format!(
            "{l:>6} {:>10.2}ms {:>10.2}ms {:>7.2}x   (planning {:.2}ms + schedule {:.2}ms)\n",
            staged_total.as_secs_f64() * 1e3,
            b.as_secs_f64() * 1e3,
            staged_total.as_secs_f64() / b.as_secs_f64(),
            a.as_secs_f64() * 1e3,
            c.as_secs_f64() * 1e3,
        ));
    }
    Ok(out)
}

/// f32 GEMM throughput (matrixmultiply's sgemm, one thread) at n = 256, 512, 1024.
pub fn bench_gemm(repeat: usize) -> Result<String, String> {
    use crate::exec::kernels::matmul::matmul;
    use crate::exec::tensor::Tensor;
    use crate::ir::DType;
    let mut out =
        String::from("f32 GEMM n x n x n (matrixmultiply sgemm, one thread), median of runs\n");
    for n in [256usize, 512, 1024] {
        let a = Tensor::float(
            DType::F32,
            vec![n, n],
            (0..n * n).map(|i| (i % 7) as f64 * 0.1).collect(),
        );
        let b = a.clone();
        let t = median(repeat, || {
            matmul(&a, &b, false, false)
                .map(|_| ())
                .map_err(|e| e.to_string())
        })?;
        let gflops = 2.0 * (n * n * n) as f64 / t.as_secs_f64() / 1e9;
        out.push_str(&format!(
            "  n={n:>5}  {:>9.3} ms  {gflops:>7.2} GFLOP/s\n",
            t.as_secs_f64() * 1e3
        ));
    }
    Ok(out)
}

/// Forward completion of gpt at each layer count: median time, time per op, and the ratio
/// to Paddle's Python Completer.
pub fn bench_complete(layers: &[usize], repeat: usize) -> Result<String, String> {
    let mut out =
        String::from("forward completion of gpt on [2, 4] (dp x Megatron mp), median of runs\n");
    out.push_str(&format!(
        "{:>6} {:>6} {:>12} {:>12} {:>14}\n",
        "layers", "ops", "median", "per op", "vs Paddle"
    ));
    for &l in layers {
        let plan = gpt_dp_mp_plan(l)?;
        let ops = plan.program.ops().len();
        let t = median(repeat, || {
            complete(&plan).map(|_| ()).map_err(|e| e.to_string())
        })?;
        let paddle = PADDLE_COMPLETE
            .iter()
            .find(|p| p.0 == l)
            .map_or("-".to_string(), |p| {
                format!("{:.0}x faster", p.2 / t.as_secs_f64())
            });
        out.push_str(&format!(
            "{l:>6} {ops:>6} {:>10.3}ms {:>10.2}us {paddle:>14}\n",
            t.as_secs_f64() * 1e3,
            t.as_secs_f64() * 1e6 / ops as f64
        ));
    }
    Ok(out)
}

/// A gpt of width 256 with 8 heads (the step and cost benchmarks): `layers` blocks on
/// `mesh` with `shards`.
pub(super) fn gpt_plan(layers: usize, mesh: &str, shards: &[String]) -> Result<Plan, String> {
    let cfg = ModelConfig {
        layers,
        hidden: 256,
        heads: 8,
        ..Model::Gpt.default_config()
    };
    preset_plan(Model::Gpt, &cfg, mesh, shards)
}

/// The cost model against this machine: each distinct matmul of a plan's rank 0, predicted
/// by the roofline with the measured peak against the executor's kernel, and whole steps
/// predicted by the simulation against the executor's threads (the time of one more step:
/// (3 steps − 1 step) / 2, so set-up is not counted). Ratios are predicted / measured.
pub fn bench_cost(repeat: usize) -> Result<String, String> {
    use crate::cost::simulate::simulate;
    use crate::exec::run::{run_distributed, RunOptions};
    use crate::passes::driver::{run_passes, PassOptions};
    let mut out = String::from(
        "cost model vs executor on this machine (predicted / measured; medians of runs)\n",
    );
    let plans = cost_plans()?;
    out.push_str(&format!(
        "{:<28} {:>12} {:>12} {:>7}\n",
        "step", "predicted", "measured", "ratio"
    ));
    let mut matmuls: Vec<(String, f64, f64)> = Vec::new();
    let mut checked: Vec<bool> = Vec::new();
    let within = |ratio: f64| (1.0 / 1.5..=1.5).contains(&ratio);
    let mark = |ratio: f64| if within(ratio) { "ok" } else { "OFF" };
    for (name, plan) in &plans {
        let p = run_passes(plan, &PassOptions::default()).map_err(|e| e.to_string())?;
        let topo = super::cost::cpu_topology(p.partitioned.ranks.len());
        let dtype = topo.default_dtype;
        let predicted = simulate(&p.partitioned.ranks, &topo, dtype)
            .map_err(|e| e.to_string())?
            .step_s;
        let time_steps = |steps: usize| {
            median(repeat, || {
                let opts = RunOptions {
                    steps,
                    record: false,
                    ..RunOptions::default()
                };
                run_distributed(&p, &opts, true)
                    .map(|_| ())
                    .map_err(|e| e.to_string())
            })
        };
        let measured = (time_steps(3)?.as_secs_f64() - time_steps(1)?.as_secs_f64()) / 2.0;
        let ratio = predicted / measured;
        checked.push(within(ratio));
        out.push_str(&format!(
            "{name:<28} {:>10.2}ms {:>10.2}ms {:>7.2} {}\n",
            predicted * 1e3,
            measured * 1e3,
            ratio,
            mark(ratio)
        ));
        if p.partitioned.ranks.len() == 1 {
            matmuls.extend(matmul_checks(
                &p.partitioned.ranks[0].program,
                &topo,
                repeat,
            )?);
        }
    }
    out.push_str(&format!(
        "\n{:<40} {:>12} {:>12} {:>7}\n",
        "matmul (one rank)", "predicted", "measured", "ratio"
    ));
    for (what, predicted, measured) in matmuls {
        let ratio = predicted / measured;
        checked.push(within(ratio));
        out.push_str(&format!(
            "{what:<40} {:>10.1}us {:>10.1}us {:>7.2} {}\n",
            predicted * 1e6,
            measured * 1e6,
            ratio,
            mark(ratio)
        ));
    }
    out.push_str(&format!(
        "\n{} of {} predictions within 1.5x of the measurement\n",
        checked.iter().filter(|&&c| c).count(),
        checked.len()
    ));
    Ok(out)
}

/// The plans `bench --what cost` predicts and measures.
fn cost_plans() -> Result<Vec<(&'static str, Plan)>, String> {
    let mut mp = vec!["x=dp,-,-".to_string()];
    mp.extend(megatron_shards(4, "mp"));
    Ok(vec![
        ("gpt 2 layers, 1 rank", gpt_plan(2, "1:dp", &[])?),
        (
            "gpt 4 layers, dp 2",
            gpt_plan(4, "2:dp", &["x=dp,-,-".to_string()])?,
        ),
        (
            "gpt 4 layers, mp 4",
            gpt_plan(4, "4:mp", &megatron_shards(4, "mp"))?,
        ),
        ("gpt 4 layers, dp 2 x mp 4", gpt_plan(4, "2x4:dp,mp", &mp)?),
    ])
}

/// Each distinct matmul and matmul grad of `program`: the roofline's prediction and the
/// executor's kernel on tensors of the same shapes.
fn matmul_checks(
    program: &crate::ir::Program,
    topo: &crate::cost::device::Topology,
    repeat: usize,
) -> Result<Vec<(String, f64, f64)>, String> {
    use crate::cost::simulate::compute_time;
    use crate::exec::kernels::matmul::{matmul, matmul_grad};
    use crate::exec::tensor::Tensor;
    use crate::ir::{DType, OpType};
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::new();
    let tensor = |v: crate::ir::VarId| {
        let shape = program.var(v).ty.shape.to_vec();
        let n = shape.iter().product::<usize>();
        Tensor::float(
            DType::F32,
            shape,
            (0..n).map(|i| (i % 7) as f64 * 0.1).collect(),
        )
    };
    for op in program.ops() {
        if op.ty != OpType::MatmulV2 && op.ty != OpType::MatmulV2Grad {
            continue;
        }
        let (tx, ty) = (
            op.attr_bool("trans_x", false),
            op.attr_bool("trans_y", false),
        );
        let (Some(&x), Some(&y)) = (op.input("X").first(), op.input("Y").first()) else {
            continue;
        };
        let (xs, ys) = (&program.var(x).ty.shape, &program.var(y).ty.shape);
        let key = format!(
            "{} {:?}{} x {:?}{}",
            op.ty,
            xs.as_slice(),
            if tx { "ᵀ" } else { "" },
            ys.as_slice(),
            if ty { "ᵀ" } else { "" }
        );
        if !seen.insert(key.clone()) {
            continue;
        }
        let predicted = compute_time(program, op, topo, topo.default_dtype);
        let (a, b) = (tensor(x), tensor(y));
        let measured = if op.ty == OpType::MatmulV2 {
            median(repeat, || {
                matmul(&a, &b, tx, ty)
                    .map(|_| ())
                    .map_err(|e| e.to_string())
            })?
        } else {
            let Some(&d) = op.input("Out@GRAD").first() else {
                continue;
            };
            let dout = tensor(d);
            median(repeat, || {
                matmul_grad(&a, &b, &dout, tx, ty)
                    .map(|_| ())
                    .map_err(|e| e.to_string())
            })?
        };
        out.push((key, predicted, measured.as_secs_f64()));
    }
    Ok(out)
}

/// `suggest` on the sizes: a 24-layer gpt on 8 and 64 devices and a GPT-3 1.3B-shaped
/// embedding_lm on one 8-GPU node. Beside each median, the median of pricing its winner once
/// (plan and cost, as `shardlab cost` does) in the same process: the ratio says how many
/// costings the search is worth, which a faster or slower machine changes less.
pub fn bench_suggest(repeat: usize) -> Result<String, String> {
    use crate::cost::device::Topology;
    use crate::suggest::evaluate::Problem;
    let workers = crate::cores::cores();
    let mut out = format!(
        "suggest (medians of {} runs, {workers} worker threads)\n{:<44} {:>10} {:>12} {:>8}\n",
        repeat.max(1),
        "case",
        "search",
        "one costing",
        "ratio"
    );
    for (name, model, config, topo) in suggest_cases() {
        let topology = Topology::preset(topo).map_err(|e| e.to_string())?;
        let problem = Problem {
            model,
            config,
            base: crate::plan::PlanOptions {
                optimizer: crate::plan::OptimizerKind::Adam,
                ..crate::plan::PlanOptions::default()
            },
            dtype: topology.default_dtype,
            devices: topology.devices,
            budget_bytes: topology.device.mem_capacity,
            topology,
            models: Default::default(),
        };
        let mut plan = None;
        let search = median(repeat, || {
            let s = crate::suggest::suggest(problem.clone(), 5, None, |_, _| {})
                .map_err(|e| e.to_string())?;
            plan = Some(s.plan);
            Ok(())
        })?;
        let plan = plan.ok_or("no plan")?;
        let costing = median(repeat, || {
            let p = crate::passes::driver::run_passes(
                &plan,
                &crate::passes::driver::PassOptions::from_plan(&plan.options),
            )
            .map_err(|e| e.to_string())?;
            crate::cost::estimate::estimate(
                &p,
                &problem.topology,
                problem.dtype,
                crate::cost::estimate::CostOptions::default(),
            )
            .map(|_| ())
            .map_err(|e| e.to_string())
        })?;
        out.push_str(&format!(
            "{name:<44} {:>8.0}ms {:>10.1}ms {:>7.1}x\n",
            search.as_secs_f64() * 1e3,
            costing.as_secs_f64() * 1e3,
            search.as_secs_f64() / costing.as_secs_f64()
        ));
    }
    Ok(out)
}

/// The cases `bench --what suggest` times.
fn suggest_cases() -> [(
    &'static str,
    crate::models::Model,
    crate::models::ModelConfig,
    &'static str,
); 3] {
    use crate::models::{Model, ModelConfig};
    let gpt = ModelConfig {
        layers: 24,
        batch: 64,
        ..Model::Gpt.default_config()
    };
    let lm = ModelConfig {
        layers: 24,
        hidden: 2048,
        heads: 16,
        seq: 2048,
        vocab: 50304,
        batch: 512,
        ..Model::EmbeddingLm.default_config()
    };
    [
        (
            "gpt 24 layers, batch 64, h100x8 (8)",
            Model::Gpt,
            gpt.clone(),
            "h100x8",
        ),
        (
            "gpt 24 layers, batch 64, h100x8x8 (64)",
            Model::Gpt,
            gpt,
            "h100x8x8",
        ),
        (
            "embedding_lm GPT-3 1.3B, h100x8 (8)",
            Model::EmbeddingLm,
            lm,
            "h100x8",
        ),
    ]
}
