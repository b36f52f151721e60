//! A candidate priced by the cost model: its plan built, planned (`run_passes`) and
//! estimated (`cost::estimate`), the same path as `shardlab cost`. A family of candidates
//! (one planned mesh) is planned once; its axis orders are priced as relabellings of the
//! ranks onto devices, its schedules by re-laying the same jobs.

use super::bound::BoundWeights;
use super::links::{link_signature, symmetric_classes, ClassCache, LinkKey};
use super::space::{Axis, Candidate, Family, MeshShape};
use super::terms::{peak_of, terms_with};
use super::Refusal;
use crate::cost::device::{ComputeDType, Topology};
use crate::cost::estimate::Estimate;
use crate::cost::pipeline_cost::StageJobs;
use crate::ir::Purpose;
use crate::models::{Model, ModelConfig};
use crate::passes::driver::{run_passes, PassOptions, Passes};
use crate::plan::{parse_mesh_spec, parse_shard_spec, Plan, PlanOptions, ScheduleKind};
use std::sync::Arc;

/// What the search is over: a preset model at its global sizes, the training options every
/// candidate keeps (optimizer, AMP, clipping), and the devices.
#[derive(Clone, Debug)]
pub struct Problem {
    pub model: Model,
    /// The global batch and the full depth.
    pub config: ModelConfig,
    /// Options kept from the user (optimizer, AMP, clipping); the search sets the rest.
    pub base: PlanOptions,
    pub topology: Topology,
    /// How many of the topology's devices the plans use (ranks 0 to N - 1).
    pub devices: usize,
    pub dtype: ComputeDType,
    /// The most bytes a rank may hold at its peak.
    pub budget_bytes: f64,
    /// The model's programs built so far (shared by the problem's clones).
    pub models: ModelCache,
}

/// The model's programs by depth and batch, each built once per search: a search plans
/// and rebatches many families at the same few sizes (a program's copy shares its
/// variables and ops).
#[derive(Clone, Debug, Default)]
pub struct ModelCache(Arc<std::sync::Mutex<Vec<Built>>>);

/// A model program and its (depth, batch).
type Built = ((usize, usize), crate::ir::Program);

impl Problem {
    /// The model's program at `layers` blocks and a batch of `batch`.
    pub fn program(&self, layers: usize, batch: usize) -> Result<crate::ir::Program, Refusal> {
        let key = (layers, batch);
        let cache = &self.models.0;
        let found = cache
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, p)| p.clone());
        if let Some(p) = found {
            return Ok(p);
        }
        let config = ModelConfig {
            layers,
            batch,
            ..self.config.clone()
        };
        let program = self.model.build(&config).map_err(Refusal::from)?;
        cache
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((key, program.clone()));
        Ok(program)
    }
}

/// A plan's step time and peak memory, and where the time goes.
#[derive(Clone, Debug, PartialEq)]
pub struct Terms {
    pub step_s: f64,
    /// The busiest rank's compute over the step (every micro-batch).
    pub compute_s: f64,
    /// The busiest rank's communication over the step, by purpose (non-zero ones, in
    /// [`Purpose::ALL`] order).
    pub comm_s: Vec<(Purpose, f64)>,
    /// The rest of the step on the busiest rank: pipeline bubbles and waiting.
    pub bubble_s: f64,
    /// The largest peak over the ranks; with a pipeline, the activations of every
    /// micro-batch a stage holds at once included.
    pub peak_bytes: f64,
}

impl Terms {
    pub fn comm_total(&self) -> f64 {
        // Folded from +0.0: an empty `sum` of floats is -0.0, printed "-0.0us".
        self.comm_s.iter().fold(0.0, |t, (_, s)| t + s)
    }
}

/// The plan of `family` at `layers` blocks (the full depth, or a reduced one to
/// extrapolate from), its axes in canonical order.
pub fn family_plan(problem: &Problem, family: &Family, layers: usize) -> Result<Plan, Refusal> {
    let candidate = family.candidate(family.mesh.clone(), ScheduleKind::FThenB);
    candidate_plan(problem, &candidate, layers)
}

/// The plan text's plan for `candidate` at `layers` blocks: the preset at the micro-batch's
/// size, the mesh, the annotations and the options.
pub fn candidate_plan(problem: &Problem, c: &Candidate, layers: usize) -> Result<Plan, Refusal> {
    let m = c.micro_batches.max(1);
    let program = problem.program(layers, problem.config.batch / m)?;
    let mesh = Arc::new(parse_mesh_spec(&c.mesh.spec()).map_err(Refusal::from)?);
    let mut plan = Plan::from_program(program);
    plan.set_mesh(mesh.clone());
    for spec in c.shards(problem.model, layers) {
        plan.annotations
            .push(parse_shard_spec(&spec, &plan.program, &mesh).map_err(Refusal::from)?);
    }
    plan.options = PlanOptions {
        megatron_sums: c.megatron_sums,
        zero: c.zero,
        recompute: c.recompute,
        micro_batches: m,
        schedule: c.schedule,
        ..problem.base.clone()
    };
    Ok(plan)
}

/// Whether the search's plannings run the planner's self-checks
/// (`PartitionOptions::verify`): in debug builds, as the tests are, only.
const SELF_CHECKS: bool = cfg!(debug_assertions);

/// A family planned once.
pub struct Planned {
    pub pipeline: Passes,
    /// The stages' jobs, cut once on first use (every order and schedule prices them).
    stage_jobs: Option<Vec<StageJobs>>,
    /// Whether its partitions run the stages on all cores (a planning alone on the
    /// machine: [`Planned::alone`]); re-partitions do the same.
    parallel_stages: bool,
}

impl Planned {
    /// The family planned at `layers` blocks, to be priced in `orders`. When every order's
    /// links are symmetric ([`super::links::symmetric_links`]), only each stage's first rank is
    /// partitioned and simulated. On one core: the screen's workers fill the others.
    pub fn new(
        problem: &Problem,
        family: &Family,
        layers: usize,
        orders: &[MeshShape],
    ) -> Result<Planned, Refusal> {
        Self::plan_with(problem, family, layers, orders, false)
    }

    /// [`Planned::new`] with the stages partitioned on all cores, for a planning that runs
    /// alone (the exact pass's single family).
    pub fn alone(
        problem: &Problem,
        family: &Family,
        layers: usize,
        orders: &[MeshShape],
    ) -> Result<Planned, Refusal> {
        Self::plan_with(problem, family, layers, orders, true)
    }

    fn plan_with(
        problem: &Problem,
        family: &Family,
        layers: usize,
        orders: &[MeshShape],
        parallel_stages: bool,
    ) -> Result<Planned, Refusal> {
        let plan = family_plan(problem, family, layers)?;
        let mut opts = PassOptions::from_plan(&plan.options);
        opts.partition.verify = SELF_CHECKS;
        opts.partition.parallel_stages = parallel_stages;
        if let Some(mesh) = plan.mesh() {
            let mut classes = ClassCache::default();
            let symmetric = orders.iter().all(|o| {
                let mut topo = problem.topology.clone();
                topo.devices_of_ranks = o.devices_of_ranks().map(Arc::from);
                symmetric_classes(&topo, classes.of(&o.canonical()))
            });
            if symmetric {
                let stages = crate::dist::Stages::of(mesh, plan.options.chunks);
                let firsts = (0..stages.stages)
                    .filter_map(|s| stages.ranks_of(mesh, s).first().copied())
                    .collect();
                opts.partition.ranks = Some(firsts);
            }
        }
        let pipeline = run_passes(&plan, &opts).map_err(Refusal::from)?;
        Ok(Planned {
            pipeline,
            stage_jobs: None,
            parallel_stages,
        })
    }

    /// The same planning with ZeRO stage `zero`: ZeRO changes only the partition (the
    /// completed, differentiated and optimized program is the same), so only that is
    /// redone, for the ranks partitioned before. Equal to planning afresh (tested).
    pub fn rezero(&mut self, zero: u8) -> Result<(), Refusal> {
        let p = &mut self.pipeline;
        p.plan.options.zero = zero;
        let mut opts = PassOptions::from_plan(&p.plan.options).partition;
        opts.verify = SELF_CHECKS;
        opts.parallel_stages = self.parallel_stages;
        if !p.is_fully_partitioned() {
            opts.ranks = Some(p.partitioned.ranks.iter().map(|r| r.rank).collect());
        }
        p.repartition(&opts).map_err(Refusal::from)?;
        self.stage_jobs = None;
        Ok(())
    }

    /// The same planning for `family`, another micro-batch count and ZeRO stage of the
    /// family it was planned for: rebatched (`passes::pipeline::rebatch`) when the micro-batch count
    /// differs, then re-partitioned once. Equal to planning afresh (tested). On an error
    /// the planning is spent: plan afresh.
    pub fn replan(
        &mut self,
        problem: &Problem,
        family: &Family,
        layers: usize,
    ) -> Result<(), Refusal> {
        let m = family.micro_batches.max(1);
        if self.pipeline.micro_batches() == m {
            if self.pipeline.plan.options.zero != family.zero {
                self.rezero(family.zero)?;
            }
            return Ok(());
        }
        let forward = problem.program(layers, problem.config.batch / m)?;
        crate::passes::pipeline::rebatch::rebatch(&mut self.pipeline, &forward, m)?;
        self.rezero(family.zero)
    }

    /// The family planned at `layers` blocks with every rank partitioned and simulated:
    /// the reference [`Planned::new`]'s shortcut is tested against.
    pub fn every_rank(
        problem: &Problem,
        family: &Family,
        layers: usize,
    ) -> Result<Planned, Refusal> {
        let plan = family_plan(problem, family, layers)?;
        let pipeline =
            run_passes(&plan, &PassOptions::from_plan(&plan.options)).map_err(Refusal::from)?;
        Ok(Planned {
            pipeline,
            stage_jobs: None,
            parallel_stages: false,
        })
    }

    /// The estimate with the mesh's axes in `order` and `schedule`.
    pub fn estimate(
        &mut self,
        problem: &Problem,
        order: &MeshShape,
        schedule: ScheduleKind,
    ) -> Result<Estimate, Refusal> {
        let mut out = self.estimates(problem, std::slice::from_ref(order), &[schedule]);
        out.pop().map_or(Err(Refusal::NothingPriced), |(_, _, e)| e)
    }

    /// Estimates for every order × schedule, sharing what they share: the memory (one per
    /// planning: orders relabel ranks, schedules reorder jobs) and the simulated step (one
    /// per order whose groups all run over the same links as an earlier order's: the
    /// simulation sees only those links). Each is what [`estimate`] returns for it.
    pub fn estimates(
        &mut self,
        problem: &Problem,
        orders: &[MeshShape],
        schedules: &[ScheduleKind],
    ) -> Vec<(usize, usize, Result<Estimate, Refusal>)> {
        let flops = crate::cost::simulate::model_flops(&self.pipeline.full.program, problem.dtype)
            * self.pipeline.micro_batches() as f64;
        let mut out = Vec::new();
        self.walk(problem, orders, schedules, |o, s, priced| {
            let e = priced.map(|w| Estimate {
                topology: w.topo.name.into(),
                placement: w.topo.placement.into(),
                dtype: problem.dtype,
                step: w.step.clone(),
                memory: w.memory.to_vec(),
                mfu: crate::cost::simulate::mfu(
                    flops,
                    w.step_s(),
                    problem.devices,
                    w.topo,
                    problem.dtype,
                ),
                overlap_grad_sync: false,
                pipeline: w.pipeline,
            });
            out.push((o, s, e));
        });
        out
    }

    /// What screening needs of every order × schedule, without building estimates: the
    /// step time, the peak, and the step's lower bound at `layers_per_stage` blocks (valid
    /// when this planning has one block per stage).
    pub fn points(
        &mut self,
        problem: &Problem,
        orders: &[MeshShape],
        schedules: &[ScheduleKind],
        layers_per_stage: usize,
    ) -> Vec<(usize, usize, Result<Screen, Refusal>)> {
        let weights = BoundWeights::of(&self.pipeline);
        let mut out = Vec::new();
        self.walk(problem, orders, schedules, |o, s, priced| {
            let r = priced.map(|w| {
                let point = Point {
                    step_s: w.step_s(),
                    peak_bytes: peak_of(&w.step.ranks, w.memory, w.pipeline.as_ref()),
                };
                let bound = weights.bound(w.step, w.pipeline.is_some(), layers_per_stage);
                (point, bound)
            });
            out.push((o, s, r));
        });
        out
    }

    /// Every order × schedule priced as [`Planned::estimate`] would at this depth, as the
    /// point the screen ranks by and the row's terms: when the screen plans a family at
    /// the full depth, its points are exact and the finalists among them need no second
    /// planning.
    pub fn exact_points(
        &mut self,
        problem: &Problem,
        orders: &[MeshShape],
        schedules: &[ScheduleKind],
    ) -> Vec<(usize, usize, Result<Exact, Refusal>)> {
        let estimates = self.estimates(problem, orders, schedules);
        estimates
            .into_iter()
            .map(|(o, s, e)| {
                let priced = e.map(|e| {
                    let t = self.terms(&e);
                    let point = Point {
                        step_s: t.step_s,
                        peak_bytes: t.peak_bytes,
                    };
                    (point, t)
                });
                (o, s, priced)
            })
            .collect()
    }

    /// The terms of `e`, an estimate of this planning (its stages' jobs reused).
    pub fn terms(&self, e: &Estimate) -> Terms {
        terms_with(
            &self.pipeline,
            e,
            self.stage_jobs.as_deref().unwrap_or_default(),
        )
    }

    /// Prices every order × schedule and hands each to `f`.
    fn walk(
        &mut self,
        problem: &Problem,
        orders: &[MeshShape],
        schedules: &[ScheduleKind],
        mut f: impl FnMut(usize, usize, Result<Walked<'_>, Refusal>),
    ) {
        let p = &mut self.pipeline;
        let stage_jobs = &mut self.stage_jobs;
        let elem = crate::cost::work::ElementBytes(problem.dtype.bytes());
        let sizing = crate::cost::memory::Sizing {
            elem,
            mixed_precision: p.plan.options.amp,
            zero: Some(&p.partitioned.zero),
        };
        let memory = crate::cost::simulate::shared_per_dataflow(&p.partitioned.ranks, |r| {
            crate::cost::memory::memory(&r.program, sizing)
        });
        let mut classes = ClassCache::default();
        let mut steps: Vec<(Vec<LinkKey>, crate::cost::simulate::StepTime)> = Vec::new();
        for (o, order) in orders.iter().enumerate() {
            let mut topo = problem.topology.clone();
            topo.devices_of_ranks = order.devices_of_ranks().map(Arc::from);
            let key = link_signature(&topo, classes.of(&order.canonical()));
            let at = match steps.iter().position(|(k, _)| *k == key) {
                Some(i) => i,
                None => match crate::cost::simulate::simulate_with(
                    &p.partitioned.ranks,
                    &topo,
                    problem.dtype,
                    crate::cost::simulate::SimOptions::default(),
                ) {
                    Ok(s) => {
                        steps.push((key, s));
                        steps.len() - 1
                    }
                    Err(e) => {
                        for s in 0..schedules.len() {
                            f(o, s, Err(Refusal::from(e.clone())));
                        }
                        continue;
                    }
                },
            };
            let step = &steps[at].1;
            for (si, &schedule) in schedules.iter().enumerate() {
                p.plan.options.schedule = schedule;
                let priced =
                    crate::passes::pipeline::stages::check_schedule(&p.stages, &p.plan.options)
                        .map_err(Refusal::from)
                        .and_then(|()| {
                            if p.is_pipelined() {
                                let jobs = match stage_jobs.take() {
                                    Some(j) => j,
                                    None => crate::cost::pipeline_cost::stage_jobs(p, elem)
                                        .map_err(Refusal::from)?,
                                };
                                let cost = crate::cost::pipeline_cost::pipeline_cost_of(
                                    p,
                                    &jobs,
                                    Some(step),
                                );
                                *stage_jobs = Some(jobs);
                                cost.map(Some).map_err(Refusal::from)
                            } else {
                                Ok(None)
                            }
                        })
                        .map(|pipeline| Walked {
                            topo: &topo,
                            step,
                            memory: &memory,
                            pipeline,
                        });
                f(o, si, priced);
            }
        }
    }
}

/// One order × schedule priced: the parts of an [`Estimate`].
struct Walked<'a> {
    topo: &'a Topology,
    step: &'a crate::cost::simulate::StepTime,
    memory: &'a [Arc<crate::cost::memory::Memory>],
    pipeline: Option<crate::cost::pipeline_cost::PipelineCost>,
}

impl Walked<'_> {
    fn step_s(&self) -> f64 {
        self.pipeline
            .as_ref()
            .map_or(self.step.step_s, |c| c.timeline.step)
    }
}

/// A point and the lower bound of its step time at full depth.
pub type Screen = (Point, f64);

/// An order × schedule priced at the full depth: its point and its terms.
pub type Exact = (Point, Terms);

/// The busiest rank so far: busy time, compute, communication by purpose.
pub(super) type Busiest = (f64, f64, Vec<(Purpose, f64)>);

/// A step time and peak at some depth.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Point {
    pub step_s: f64,
    pub peak_bytes: f64,
}

/// The value at `layers_per_stage` of the line through two depths' values (blocks per
/// stage `d1 < d2`): identical blocks add the same time and memory each.
pub fn extrapolate(a: Point, d1: usize, b: Point, d2: usize, layers_per_stage: usize) -> Point {
    let t = (layers_per_stage as f64 - d1 as f64) / (d2 as f64 - d1 as f64);
    Point {
        step_s: a.step_s + (b.step_s - a.step_s) * t,
        peak_bytes: a.peak_bytes + (b.peak_bytes - a.peak_bytes) * t,
    }
}

/// The blocks per pipeline stage of the full model.
pub fn layers_per_stage(problem: &Problem, family: &Family) -> usize {
    problem.config.layers / family.mesh.size(Axis::Pp).max(1)
}

/// Whether the model has blocks to extrapolate over.
pub fn layered(model: Model) -> bool {
    matches!(model, Model::Gpt | Model::EmbeddingLm | Model::GptLm)
}
