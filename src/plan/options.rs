//! The planning options a plan file carries, so a file reproduces a whole plan:
//!
//! ```text
//! options optimizer=adam amp clip_norm=1 megatron_sums zero=2
//! ```
//!
//! Printed canonically: keys in the order of [`KEYS`], defaults left out, no statement at
//! all when every option has its default. Command-line flags override the file's values.

use crate::ir::text::lexer::Tok;
use crate::ir::text::{Cursor, ParseError};
use serde::Serialize;
use std::fmt;

/// The update rule a plan trains with.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum OptimizerKind {
    #[default]
    Sgd,
    Momentum,
    Adam,
    AdamW,
}

impl OptimizerKind {
    pub const ALL: [OptimizerKind; 4] = [
        OptimizerKind::Sgd,
        OptimizerKind::Momentum,
        OptimizerKind::Adam,
        OptimizerKind::AdamW,
    ];

    /// The name in plan text and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            OptimizerKind::Sgd => "sgd",
            OptimizerKind::Momentum => "momentum",
            OptimizerKind::Adam => "adam",
            OptimizerKind::AdamW => "adamw",
        }
    }

    pub fn from_name(name: &str) -> Option<OptimizerKind> {
        OptimizerKind::ALL.into_iter().find(|k| k.name() == name)
    }
}

/// Activation recomputation (Korthikanti et al. 2022).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Recompute {
    /// Keep every activation the backward reads.
    #[default]
    Off,
    /// Re-run each transformer layer's forward in backward from the layer's input.
    Full,
    /// Re-run only attention's core: the scores, their scaling and the softmax.
    Selective,
}

impl Recompute {
    pub fn name(self) -> &'static str {
        match self {
            Recompute::Off => "off",
            Recompute::Full => "full",
            Recompute::Selective => "selective",
        }
    }

    pub fn from_name(name: &str) -> Option<Recompute> {
        [Recompute::Off, Recompute::Full, Recompute::Selective]
            .into_iter()
            .find(|r| r.name() == name)
    }
}

/// A pipeline schedule (`passes::pipeline::schedule` lays out its jobs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub enum ScheduleKind {
    /// Every forward, then every backward (GPipe). The default: it is the one schedule
    /// that runs with the default single micro-batch on any number of stages.
    #[default]
    FThenB,
    OneFOneB,
    /// Interleaved 1F1B over `chunks` model chunks per stage.
    Vpp,
    /// Zero bubble (ZB-H1) in Paddle's order: backwards split into input- and
    /// weight-gradient jobs.
    ZbH1,
    /// Zero bubble (ZB-H1) in the paper's order (every backward split).
    ZbH1Paper,
}

impl ScheduleKind {
    pub const ALL: [ScheduleKind; 5] = [
        ScheduleKind::FThenB,
        ScheduleKind::OneFOneB,
        ScheduleKind::Vpp,
        ScheduleKind::ZbH1,
        ScheduleKind::ZbH1Paper,
    ];

    /// Paddle's name, used in plan text and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            ScheduleKind::FThenB => "fthenb",
            ScheduleKind::OneFOneB => "1f1b",
            ScheduleKind::Vpp => "vpp",
            ScheduleKind::ZbH1 => "zbh1",
            ScheduleKind::ZbH1Paper => "zbh1_paper",
        }
    }

    pub fn from_name(name: &str) -> Option<ScheduleKind> {
        ScheduleKind::ALL.into_iter().find(|k| k.name() == name)
    }
}

/// The most micro-batches or chunks a plan may ask for.
pub const MAX_MICRO_BATCHES: usize = 1 << 16;

/// The largest ZeRO stage.
pub const MAX_ZERO: u8 = 3;

/// The options statement's values.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PlanOptions {
    pub optimizer: OptimizerKind,
    /// AMP dynamic loss scaling.
    pub amp: bool,
    /// Clip gradients to this global norm (finite, positive).
    pub clip_norm: Option<f64>,
    /// Megatron's backward: summed column-parallel input gradients all-reduced once.
    pub megatron_sums: bool,
    /// Do not scale data-parallel gradients by 1/N.
    pub no_grad_scale: bool,
    /// ZeRO / sharding stage, 0 (off) to 3.
    pub zero: u8,
    /// Activation recomputation.
    pub recompute: Recompute,
    /// Fuse data-parallel gradient all-reduces into buckets of this many MiB (DDP's
    /// `bucket_cap_mb`).
    pub bucket_mb: Option<f64>,
    /// The pipeline schedule (meaningful with a `pp` mesh axis).
    pub schedule: ScheduleKind,
    /// Micro-batches per step (1: no gradient accumulation).
    pub micro_batches: usize,
    /// Model chunks per pipeline stage (virtual stages; `vpp` needs more than 1).
    pub chunks: usize,
}

impl Default for PlanOptions {
    fn default() -> Self {
        PlanOptions {
            optimizer: OptimizerKind::default(),
            amp: false,
            clip_norm: None,
            megatron_sums: false,
            no_grad_scale: false,
            zero: 0,
            recompute: Recompute::default(),
            bucket_mb: None,
            schedule: ScheduleKind::default(),
            micro_batches: 1,
            chunks: 1,
        }
    }
}

/// The keys of the options statement, in canonical order.
pub const KEYS: [&str; 11] = [
    "optimizer",
    "amp",
    "clip_norm",
    "megatron_sums",
    "no_grad_scale",
    "zero",
    "recompute",
    "bucket_mb",
    "schedule",
    "micro_batches",
    "chunks",
];

impl PlanOptions {
    /// Whether every option has its default (no statement is printed).
    pub fn is_default(&self) -> bool {
        *self == PlanOptions::default()
    }

    /// Checks a clip norm: finite and positive.
    pub fn check_clip_norm(norm: f64) -> Result<(), OptionError> {
        if norm.is_finite() && norm > 0.0 {
            Ok(())
        } else {
            Err(OptionError::ClipNorm(norm))
        }
    }

    /// Checks a bucket size in MiB: finite, above 0, at most 1 TiB.
    pub fn check_bucket_mb(mb: f64) -> Result<f64, OptionError> {
        if mb.is_finite() && mb > 0.0 && mb <= 1024.0 * 1024.0 {
            Ok(mb)
        } else {
            Err(OptionError::BucketMb(mb))
        }
    }

    /// The bucket size in bytes (0: no buckets).
    pub fn bucket_bytes(&self) -> u64 {
        self.bucket_mb
            .map_or(0, |mb| (mb * 1024.0 * 1024.0).ceil() as u64)
    }

    /// Checks a micro-batch or chunk count: 1 to [`MAX_MICRO_BATCHES`].
    pub fn check_count(what: &str, n: i64) -> Result<usize, OptionError> {
        usize::try_from(n)
            .ok()
            .filter(|&n| (1..=MAX_MICRO_BATCHES).contains(&n))
            .ok_or_else(|| OptionError::Count {
                what: what.to_string(),
                n,
            })
    }

    /// Checks a ZeRO stage.
    pub fn check_zero(stage: i64) -> Result<u8, OptionError> {
        u8::try_from(stage)
            .ok()
            .filter(|&s| s <= MAX_ZERO)
            .ok_or(OptionError::Zero(stage))
    }
}

impl fmt::Display for PlanOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("options")?;
        if self.optimizer != OptimizerKind::default() {
            write!(f, " optimizer={}", self.optimizer.name())?;
        }
        if self.amp {
            f.write_str(" amp")?;
        }
        if let Some(c) = self.clip_norm {
            // `{:?}` prints the shortest text that parses back to the same f64.
            write!(f, " clip_norm={c:?}")?;
        }
        if self.megatron_sums {
            f.write_str(" megatron_sums")?;
        }
        if self.no_grad_scale {
            f.write_str(" no_grad_scale")?;
        }
        if self.zero != 0 {
            write!(f, " zero={}", self.zero)?;
        }
        if self.recompute != Recompute::Off {
            write!(f, " recompute={}", self.recompute.name())?;
        }
        if let Some(mb) = self.bucket_mb {
            write!(f, " bucket_mb={mb:?}")?;
        }
        if self.schedule != ScheduleKind::default() {
            write!(f, " schedule={}", self.schedule.name())?;
        }
        if self.micro_batches != 1 {
            write!(f, " micro_batches={}", self.micro_batches)?;
        }
        if self.chunks != 1 {
            write!(f, " chunks={}", self.chunks)?;
        }
        Ok(())
    }
}

/// Parses the rest of an `options` statement into `into`: space-separated `key` or
/// `key=value`, each key at most once.
pub fn parse_options(cur: &mut Cursor, into: &mut PlanOptions) -> Result<(), ParseError> {
    let mut seen: Vec<String> = Vec::new();
    while !cur.at_end() {
        let (key, col) = cur.ident("an option name")?;
        if seen.contains(&key) {
            return Err(cur.error_at(col, format!("option `{key}` is given twice")));
        }
        let value = if cur.eat('=') {
            Some(value_text(cur)?)
        } else {
            None
        };
        set(into, &key, value.as_deref()).map_err(|e| cur.error_at(col, e.to_string()))?;
        seen.push(key);
    }
    Ok(())
}

/// An option's value as text: a name or a number.
fn value_text(cur: &mut Cursor) -> Result<String, ParseError> {
    match cur.peek() {
        Some(Tok::Ident(_) | Tok::Int(_) | Tok::Float(_)) => {}
        Some(Tok::Str(_) | Tok::Punct(_)) | None => {
            return Err(cur.expected("the option's value (a name or a number)"))
        }
    }
    let at = cur.col();
    Ok(match cur.bump() {
        Some(Tok::Ident(s)) => s,
        Some(Tok::Int(i)) => {
            // `1f1b` lexes as `1` then `f1b`: join a name written right after the number.
            let digits = i.to_string();
            match cur.peek() {
                Some(Tok::Ident(rest)) if cur.col() == at + digits.len() => {
                    let joined = format!("{digits}{rest}");
                    cur.bump();
                    joined
                }
                _ => digits,
            }
        }
        Some(Tok::Float(x)) => format!("{x:?}"),
        Some(Tok::Str(s)) => s,
        Some(Tok::Punct(c)) => c.to_string(),
        None => String::new(),
    })
}

/// What is wrong with an option of the `options` statement, or of the flag that sets it.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum OptionError {
    #[error("option `{key}` needs a value: {key}={what}")]
    NeedsValue { key: String, what: &'static str },
    #[error("option `{key}` takes no value (found `={value}`)")]
    TakesNoValue { key: String, value: String },
    #[error("unknown option `{key}`: expected one of {}", KEYS.join(", "))]
    Unknown { key: String },
    /// A value that is not one of the option's words or not a number.
    #[error("{key} `{value}`: expected {expected}")]
    BadValue {
        key: String,
        value: String,
        expected: &'static str,
    },
    #[error("unknown optimizer `{0}`: expected sgd, momentum, adam or adamw")]
    Optimizer(String),
    #[error("clip_norm {0}: expected a finite number above 0")]
    ClipNorm(f64),
    #[error("bucket_mb {0}: expected a size in MiB above 0 and at most 1048576")]
    BucketMb(f64),
    #[error("{what} {n}: expected a count from 1 to {MAX_MICRO_BATCHES}")]
    Count { what: String, n: i64 },
    #[error("zero {0}: expected a stage from 0 to {MAX_ZERO}")]
    Zero(i64),
}

/// The words of `zero`, for a value that is not a number (`MAX_ZERO` is 3).
const ZERO_STAGES: &str = "a stage from 0 to 3";

fn set(o: &mut PlanOptions, key: &str, value: Option<&str>) -> Result<(), OptionError> {
    let needs = |what: &'static str| OptionError::NeedsValue {
        key: key.to_string(),
        what,
    };
    let bad = |v: &str, expected: &'static str| OptionError::BadValue {
        key: key.to_string(),
        value: v.to_string(),
        expected,
    };
    let flag = |v: Option<&str>| match v {
        None => Ok(true),
        Some(v) => Err(OptionError::TakesNoValue {
            key: key.to_string(),
            value: v.to_string(),
        }),
    };
    match key {
        "optimizer" => {
            let v = value.ok_or_else(|| needs("sgd|momentum|adam|adamw"))?;
            o.optimizer =
                OptimizerKind::from_name(v).ok_or_else(|| OptionError::Optimizer(v.to_string()))?;
        }
        "amp" => o.amp = flag(value)?,
        "megatron_sums" => o.megatron_sums = flag(value)?,
        "no_grad_scale" => o.no_grad_scale = flag(value)?,
        "clip_norm" => {
            let v = value.ok_or_else(|| needs("NORM"))?;
            let c: f64 = v.parse().map_err(|_| bad(v, "a number"))?;
            PlanOptions::check_clip_norm(c)?;
            o.clip_norm = Some(c);
        }
        "zero" => {
            let v = value.ok_or_else(|| needs("0|1|2|3"))?;
            let s: i64 = v.parse().map_err(|_| bad(v, ZERO_STAGES))?;
            o.zero = PlanOptions::check_zero(s)?;
        }
        "bucket_mb" => {
            let v = value.ok_or_else(|| needs("MIB"))?;
            let mb: f64 = v.parse().map_err(|_| bad(v, "a number of MiB"))?;
            o.bucket_mb = Some(PlanOptions::check_bucket_mb(mb)?);
        }
        "recompute" => {
            let v = value.ok_or_else(|| needs("off|full|selective"))?;
            o.recompute =
                Recompute::from_name(v).ok_or_else(|| bad(v, "off, full or selective"))?;
        }
        "schedule" => {
            let v = value.ok_or_else(|| needs("fthenb|1f1b|vpp|zbh1"))?;
            o.schedule = ScheduleKind::from_name(v)
                .ok_or_else(|| bad(v, "fthenb, 1f1b, vpp, zbh1 or zbh1_paper"))?;
        }
        "micro_batches" | "chunks" => {
            let v = value.ok_or_else(|| needs("N"))?;
            let n: i64 = v.parse().map_err(|_| bad(v, "a whole number"))?;
            let n = PlanOptions::check_count(key, n)?;
            if key == "chunks" {
                o.chunks = n;
            } else {
                o.micro_batches = n;
            }
        }
        _ => {
            return Err(OptionError::Unknown {
                key: key.to_string(),
            })
        }
    }
    Ok(())
}
