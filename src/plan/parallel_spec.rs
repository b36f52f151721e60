//! Parsing a `--parallel` spec (`dp=8,tp=8,pp=2,sp`): Megatron's arguments as one string,
//! each degree checked, with the reason a spec is refused.

use super::parallel::{CpMode, Parallel};

/// Why a `--parallel` spec is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ParallelError {
    #[error("`{0}` is not NAME=DEGREE (e.g. dp=8,tp=8,pp=2)")]
    NotAPair(String),
    #[error("`{key}={value}`: a degree is a whole number from 1 to {max}")]
    BadDegree {
        key: String,
        value: String,
        max: usize,
    },
    #[error("`{0}` is given twice")]
    Twice(String),
    #[error("unknown parallelism `{0}`; --parallel takes dp, tp, pp, ep, cp, vpp, sp, flash and cp_mode")]
    Unknown(String),
    #[error("cp_mode `{0}` is not one of ring, ring_contiguous, ulysses, auto")]
    BadCpMode(String),
    #[error("cp_mode needs cp > 1")]
    CpModeWithoutCp,
    #[cfg(feature = "context-parallel")]
    #[error("vpp=V interleaves V model chunks per pipeline stage, so it needs pp > 1")]
    VirtualWithoutPipeline,
    #[error("`sp` splits the sequence over the tensor-parallel group, so it needs tp > 1")]
    SequenceParallelWithoutTp,
    #[error("`sp` takes no degree: it is sequence parallelism over the tp group")]
    SequenceParallelDegree,
    #[error("ep={ep} must divide dp={dp}: the experts are laid on the data-parallel ranks")]
    ExpertsNotOnDataParallel { ep: usize, dp: usize },
    #[error("dp × cp × tp × pp = {0} devices, more than a mesh holds ({max})", max = crate::dist::MAX_MESH_SIZE)]
    TooLarge(usize),
}

impl Parallel {
    /// Parses `dp=8,tp=8,pp=2` (any order; a missing degree is 1). Not inlined: the
    /// playground's module calls it once, from a link, and is on a size budget.
    #[inline(never)]
    pub fn parse(spec: &str) -> Result<Parallel, ParallelError> {
        let mut p = Parallel::SERIAL;
        let mut seen: Vec<&str> = Vec::new();
        for item in spec.split(',').map(str::trim) {
            // `flash` and `vpp` are the command line's (the cost model at cluster scale):
            // the playground's module, on a size budget, refuses them as unknown.
            #[cfg(feature = "context-parallel")]
            if item == "flash" {
                if p.flash {
                    return Err(ParallelError::Twice(item.into()));
                }
                p.flash = true;
                continue;
            }
            if item == "sp" {
                if p.sp {
                    return Err(ParallelError::Twice(item.into()));
                }
                p.sp = true;
                continue;
            }
            let (key, value) = item
                .split_once('=')
                .ok_or_else(|| ParallelError::NotAPair(item.to_string()))?;
            let (key, value) = (key.trim(), value.trim());
            if key == "cp_mode" || key == "cp-mode" {
                if seen.contains(&"cp_mode") {
                    return Err(ParallelError::Twice("cp_mode".into()));
                }
                seen.push("cp_mode");
                p.cp_mode =
                    CpMode::parse(value).ok_or_else(|| ParallelError::BadCpMode(value.into()))?;
                continue;
            }
            let max = crate::dist::MAX_MESH_SIZE;
            let degree = value
                .parse::<usize>()
                .ok()
                .filter(|d| (1..=max).contains(d))
                .ok_or_else(|| ParallelError::BadDegree {
                    key: key.to_string(),
                    value: value.to_string(),
                    max,
                })?;
            if seen.contains(&key) {
                return Err(ParallelError::Twice(key.to_string()));
            }
            seen.push(key);
            match key {
                "dp" => p.dp = degree,
                "tp" => p.tp = degree,
                "pp" => p.pp = degree,
                "ep" => p.ep = degree,
                "cp" => p.cp = degree,
                #[cfg(feature = "context-parallel")]
                "vpp" => p.vpp = degree,
                "sp" => return Err(ParallelError::SequenceParallelDegree),
                other => return Err(ParallelError::Unknown(other.to_string())),
            }
        }
        p.check()?;
        Ok(p)
    }

    /// The degrees' constraints on each other, once every item is read.
    fn check(&self) -> Result<(), ParallelError> {
        let p = self;
        if p.sp && p.tp == 1 {
            return Err(ParallelError::SequenceParallelWithoutTp);
        }
        if !p.dp.is_multiple_of(p.ep) {
            return Err(ParallelError::ExpertsNotOnDataParallel { ep: p.ep, dp: p.dp });
        }
        if p.cp_mode != CpMode::Auto && p.cp == 1 {
            return Err(ParallelError::CpModeWithoutCp);
        }
        #[cfg(feature = "context-parallel")]
        if p.vpp > 1 && p.pp == 1 {
            return Err(ParallelError::VirtualWithoutPipeline);
        }
        let devices =
            p.dp.saturating_mul(p.tp)
                .saturating_mul(p.pp)
                .saturating_mul(p.cp);
        if devices > crate::dist::MAX_MESH_SIZE {
            return Err(ParallelError::TooLarge(devices));
        }
        Ok(())
    }
}
