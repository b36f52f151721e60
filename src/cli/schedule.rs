//! `shardlab schedule`: a pipeline schedule's jobs per stage, laid out in time, with each
//! stage's bubble.

use super::options::Format;
use crate::cost::pipeline::{pipeline_timeline, JobTimes, Timeline};
use crate::cost::pipeline_cost::{chart_row, letter};
use crate::passes::pipeline::schedule::{JobKind, Schedule};
use clap::{Args, ValueEnum};
use serde_json::json;
use std::process::ExitCode;

/// The schedule flag.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ScheduleName {
    Fthenb,
    #[value(name = "1f1b")]
    OneFOneB,
    Vpp,
    Zbh1,
    #[value(name = "zbh1_paper")]
    Zbh1Paper,
}

#[derive(Args, Debug)]
pub(crate) struct ScheduleArgs {
    /// The schedule: fthenb (GPipe), 1f1b, vpp (interleaved 1F1B) or zbh1 (zero bubble).
    #[arg(long, value_enum, default_value_t = ScheduleName::OneFOneB)]
    schedule: ScheduleName,
    /// Pipeline stages.
    #[arg(long, default_value_t = 4)]
    stages: usize,
    /// Micro-batches per step.
    #[arg(long, default_value_t = 8)]
    micro_batches: usize,
    /// Model chunks per stage (vpp).
    #[arg(long, default_value_t = 2)]
    chunks: usize,
    /// A stage's forward time per micro-batch (any unit).
    #[arg(long, default_value_t = 1.0)]
    forward_time: f64,
    /// A stage's backward time per micro-batch.
    #[arg(long, default_value_t = 2.0)]
    backward_time: f64,
    /// The weight-gradient part of the backward (what zbh1 defers).
    #[arg(long, default_value_t = 1.0)]
    weight_time: f64,
    /// Moving an activation or gradient between stages.
    #[arg(long, default_value_t = 0.0)]
    send_recv_time: f64,
    /// A hand-written job order instead of a named schedule: stages separated by `|`, jobs
    /// F<m> forward, B<m> backward, b<m>/W<m> its input and weight halves, `.c` for chunk c
    /// (e.g. "F0 F1 B0 B1 | F0 B0 F1 B1"). Checked: a deadlock is reported with its cycle.
    #[arg(long, value_name = "ORDER")]
    jobs: Option<String>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
}

/// The most jobs a command lays out (stages × micro-batches × chunks × 4).
const MAX_JOBS: usize = 1 << 20;

impl ScheduleArgs {
    fn checked(&self) -> Result<(Schedule, JobTimes), String> {
        let schedule = match self.schedule {
            ScheduleName::Fthenb => Schedule::FThenB,
            ScheduleName::OneFOneB => Schedule::OneFOneB,
            ScheduleName::Vpp => Schedule::Vpp {
                chunks: self.chunks,
            },
            ScheduleName::Zbh1 => Schedule::ZbH1,
            ScheduleName::Zbh1Paper => Schedule::ZbH1Paper,
        };
        let jobs = self
            .stages
            .checked_mul(self.micro_batches)
            .and_then(|n| n.checked_mul(self.chunks.max(1)))
            .and_then(|n| n.checked_mul(4));
        if jobs.is_none_or(|n| n > MAX_JOBS) {
            return Err(format!(
                "--stages {} × --micro-batches {} × --chunks {}: more than {MAX_JOBS} jobs",
                self.stages, self.micro_batches, self.chunks
            ));
        }
        let times = [
            ("--forward-time", self.forward_time),
            ("--backward-time", self.backward_time),
            ("--weight-time", self.weight_time),
            ("--send-recv-time", self.send_recv_time),
        ];
        if let Some((flag, t)) = times.iter().find(|(_, t)| !(t.is_finite() && *t >= 0.0)) {
            return Err(format!("{flag} {t}: expected a finite time of at least 0"));
        }
        if self.weight_time > self.backward_time {
            return Err(format!(
                "--weight-time {} is more than --backward-time {}",
                self.weight_time, self.backward_time
            ));
        }
        Ok((
            schedule,
            JobTimes {
                forward: self.forward_time,
                backward: self.backward_time,
                backward_w: self.weight_time,
                send_recv: self.send_recv_time,
                optimizer: 0.0,
            },
        ))
    }
}

fn text(args: &ScheduleArgs, tl: &Timeline, schedule: Schedule) -> String {
    let mut out = format!(
        "{} on {} stages, {} micro-batches{}: step {} (forward {}, backward {}, weight {}, transfer {})\n",
        schedule.name(),
        args.stages,
        args.micro_batches,
        match schedule {
            Schedule::Vpp { chunks } => format!(", {chunks} chunks"),
            Schedule::FThenB | Schedule::OneFOneB | Schedule::ZbH1 | Schedule::ZbH1Paper => String::new(),
        },
        tl.step,
        args.forward_time,
        args.backward_time,
        args.weight_time,
        args.send_recv_time
    );
    out.push_str(match schedule {
        Schedule::Vpp { .. } => "stage  bubble  jobs (kind, micro-batch:chunk)\n",
        Schedule::FThenB | Schedule::OneFOneB | Schedule::ZbH1 | Schedule::ZbH1Paper => {
            "stage  bubble  jobs (kind, micro-batch)\n"
        }
    });
    for (s, jobs) in tl.stages.iter().enumerate() {
        let list: Vec<String> = jobs
            .iter()
            .filter(|p| {
                !matches!(
                    p.job.kind,
                    JobKind::Optimizer | JobKind::RecvForward | JobKind::SendBackward
                )
            })
            .map(|p| match p.job.chunk {
                Some(c) => format!("{}{}:{c}", letter(p.job.kind), p.job.micro_batch),
                None => format!("{}{}", letter(p.job.kind), p.job.micro_batch),
            })
            .collect();
        out.push_str(&format!(
            "{s:>5} {:>6.1}%  {}\n",
            100.0 * tl.bubble[s],
            list.join(" ")
        ));
    }
    let shortest = [
        args.forward_time,
        args.backward_time - args.weight_time,
        args.weight_time,
    ]
    .into_iter()
    .filter(|&t| t > 0.0)
    .fold(f64::INFINITY, f64::min)
        / match schedule {
            Schedule::Vpp { chunks } => chunks.max(1) as f64,
            Schedule::FThenB | Schedule::OneFOneB | Schedule::ZbH1 | Schedule::ZbH1Paper => 1.0,
        };
    if tl.step > 0.0 && shortest.is_finite() {
        let columns = ((tl.step / shortest).ceil() as usize).clamp(1, 160);
        let width = tl.step / columns as f64;
        out.push_str(&format!(
            "time, one column per {width:.3} (F forward, B backward, b/w its input and weight halves, . idle):\n"
        ));
        for (s, jobs) in tl.stages.iter().enumerate() {
            out.push_str(&format!("{s:>5} |{}|\n", chart_row(jobs, columns, width)));
        }
    }
    out
}

/// A hand-written order laid out: its stages, micro-batches and chunks are what it names.
fn custom(order: &str, times: JobTimes) -> Result<Result<Timeline, String>, String> {
    let lists = crate::passes::pipeline::schedule_check::parse_jobs(order)
        .map_err(|e| format!("--jobs: {e}"))?;
    let jobs = lists.iter().flatten();
    let m = jobs.clone().map(|j| j.micro_batch + 1).max().unwrap_or(1);
    let chunks = jobs
        .filter_map(|j| j.chunk)
        .map(|c| c + 1)
        .max()
        .unwrap_or(1);
    Ok(
        crate::cost::pipeline::lay_out(&lists, m, chunks, &vec![times; lists.len()])
            .map_err(|e| e.to_string()),
    )
}

/// Prints the schedule.
pub fn schedule(args: &ScheduleArgs) -> Result<ExitCode, String> {
    let (schedule, times) = args.checked()?;
    if let Some(order) = &args.jobs {
        return match custom(order, times)? {
            Ok(tl) => {
                let stages: Vec<String> = tl
                    .stages
                    .iter()
                    .enumerate()
                    .map(|(s, _)| format!("{s:>5} {:>6.1}%", 100.0 * tl.bubble[s]))
                    .collect();
                super::emit(&format!(
                    "the order runs: step {}\nstage  bubble\n{}\n",
                    tl.step,
                    stages.join("\n")
                ));
                Ok(ExitCode::SUCCESS)
            }
            Err(e) => {
                eprintln!("error: {e}");
                Ok(ExitCode::from(1))
            }
        };
    }
    let tl = pipeline_timeline(schedule, args.stages, args.micro_batches, times)
        .map_err(|e| e.to_string())?;
    let out = match args.format {
        Format::Text => text(args, &tl, schedule),
        Format::Json => {
            let stages: Vec<_> = tl
                .stages
                .iter()
                .map(|jobs| {
                    jobs.iter()
                        .map(|p| {
                            json!({"type": p.job.paddle_type(), "micro_batch": p.job.micro_batch,
                                   "start": p.start, "end": p.end})
                        })
                        .collect::<Vec<_>>()
                })
                .collect();
            let doc = json!({
                "schema_version": crate::report::SCHEMA_VERSION,
                "schedule": schedule.name(),
                "stages": args.stages,
                "micro_batches": args.micro_batches,
                "times": times,
                "step": tl.step,
                "bubble": tl.bubble,
                "jobs": stages,
            });
            format!(
                "{}\n",
                serde_json::to_string_pretty(&doc).map_err(|e| e.to_string())?
            )
        }
    };
    super::emit(&out);
    Ok(ExitCode::SUCCESS)
}
