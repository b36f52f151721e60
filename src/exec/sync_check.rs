//! The structural half of verification: every rank that holds a parameter's gradient
//! synchronises it with the same ops (the same reductions over groups of the same size,
//! the same 1/N scale).
//!
//! Why a structural check beside the numeric one: under ZeRO each gradient shard has one
//! owner, so no replica can disagree with it, and a gradient that is analytically zero
//! (the attention key bias's) is rounding noise that a missing 1/N scale leaves within its
//! tolerance of 0. A rank whose program reduces or scales a gradient differently from the
//! other ranks holding it is wrong whatever the values say: the rank programs of one stage
//! are SPMD.

use super::verify::Check;
use crate::ir::{OpType, Program, Purpose, VarKind};
use crate::passes::driver::Passes;
use std::collections::BTreeMap;

/// What a rank does to one gradient, in program order: `all_reduce(SUM, 4 ranks)`, ...
type Signature = Vec<String>;

/// The parameter-gradient name (`w@GRAD`) a synchronisation op acts on, if it acts on one.
fn gradient_of(program: &Program, full: &Program, op: &crate::ir::Op) -> Option<String> {
    let purpose = op.purpose()?;
    let syncs = matches!(
        op.ty,
        OpType::AllReduce
            | OpType::ReduceScatter
            | OpType::AllGather
            | OpType::AllToAll
            | OpType::Scale
    );
    if !syncs
        || !matches!(
            purpose,
            Purpose::DataParallel | Purpose::Sharding | Purpose::TensorParallel
        )
    {
        return None;
    }
    let &x = op.input("X").first()?;
    let (param, _) = program.var(x).name.split_once("@GRAD")?;
    is_parameter(full, param).then(|| format!("{param}@GRAD"))
}

/// Whether `name` is a parameter of the serial program.
fn is_parameter(full: &Program, name: &str) -> bool {
    full.var_id(name)
        .is_some_and(|v| full.var(v).kind == VarKind::Parameter)
}

/// One op as its signature shows it.
fn describe(op: &crate::ir::Op) -> String {
    let group = op.attr_ints("group").map_or(0, <[i64]>::len);
    if op.ty == OpType::Scale {
        format!("scale({})", op.attr_float("scale", 1.0))
    } else {
        format!(
            "{}({}, {group} ranks)",
            op.ty,
            op.attr_str("reduce_type").unwrap_or("-")
        )
    }
}

/// Each parameter gradient's signature on each rank that declares the gradient.
fn signatures(p: &Passes) -> BTreeMap<String, Vec<(usize, Signature)>> {
    let full = &p.full.program;
    let mut out: BTreeMap<String, Vec<(usize, Signature)>> = BTreeMap::new();
    for r in &p.partitioned.ranks {
        let program = &r.program;
        // A rank holds a gradient when one of its ops writes it (a rank program declares
        // the other stages' variables too).
        let mut mine: BTreeMap<String, Signature> = BTreeMap::new();
        for op in program.ops() {
            for &v in op.outputs.iter().flatten() {
                let name = &program.var(v).name;
                if let Some((param, "")) = name.split_once("@GRAD") {
                    if is_parameter(full, param) {
                        mine.entry(name.to_string()).or_default();
                    }
                }
            }
        }
        for op in program.ops() {
            if let Some(g) = gradient_of(program, full, op) {
                mine.entry(g).or_default().push(describe(op));
            }
        }
        for (g, sig) in mine {
            out.entry(g).or_default().push((r.rank as usize, sig));
        }
    }
    out
}

/// `[0, 1, 2, 4]` as "ranks 0-2, 4".
fn rank_list(ranks: &[usize]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < ranks.len() {
        let mut j = i;
        while j + 1 < ranks.len() && ranks[j + 1] == ranks[j] + 1 {
            j += 1;
        }
        parts.push(if j == i {
            ranks[i].to_string()
        } else {
            format!("{}-{}", ranks[i], ranks[j])
        });
        i = j + 1;
    }
    let noun = if ranks.len() == 1 { "rank" } else { "ranks" };
    format!("{noun} {}", parts.join(", "))
}

/// "runs scale(0.25)" for one rank, "run ..." for several.
fn runs(ranks: &[usize], sig: &Signature) -> String {
    let verb = if ranks.len() == 1 { "runs" } else { "run" };
    if sig.is_empty() {
        format!("{verb} nothing")
    } else {
        format!("{verb} {}", sig.join(", "))
    }
}

/// A failing check for every parameter gradient that the ranks holding it synchronise
/// differently, naming the ranks that differ from the most common signature.
pub fn gradient_sync_checks(p: &Passes) -> Vec<Check> {
    let mut checks = Vec::new();
    for (grad, by_rank) in signatures(p) {
        let mut groups: Vec<(&Signature, Vec<usize>)> = Vec::new();
        for (rank, sig) in &by_rank {
            match groups.iter_mut().find(|(s, _)| *s == sig) {
                Some((_, ranks)) => ranks.push(*rank),
                None => groups.push((sig, vec![*rank])),
            }
        }
        if groups.len() < 2 {
            continue;
        }
        // The most common signature first (the lowest rank breaks ties).
        crate::sort::sort_by_key(&mut groups, |g| (std::cmp::Reverse(g.1.len()), g.1[0]));
        let (common, common_ranks) = &groups[0];
        let odd: Vec<String> = groups[1..]
            .iter()
            .map(|(sig, ranks)| format!("{} {}", rank_list(ranks), runs(ranks, sig)))
            .collect();
        checks.push(Check {
            tensor: format!("{grad} synchronisation"),
            max_abs_diff: f64::NAN,
            tolerance: f64::NAN,
            copies: by_rank.len(),
            replica_diff: f64::NAN,
            pass: false,
            note: Some(format!(
                "the ranks synchronise `{grad}` differently: {}, where {} {}",
                odd.join("; "),
                rank_list(common_ranks),
                runs(common_ranks, common)
            )),
        });
    }
    checks
}

#[cfg(test)]
mod tests {
    use super::rank_list;

    #[test]
    fn rank_lists_are_compressed_into_runs() {
        assert_eq!(rank_list(&[5]), "rank 5");
        assert_eq!(rank_list(&[0, 1, 2, 4, 6, 7]), "ranks 0-2, 4, 6-7");
    }
}
