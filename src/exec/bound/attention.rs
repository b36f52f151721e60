//! The bounds of `flash_attn` and its grad, composed from the pieces the decomposed
//! attention bounds separately (`q·kᵀ`, the softmax, `p·v`), with every sum bounded by its
//! length times its largest term (the max norm has no better general bound).

use super::At;
use crate::ir::VarId;

/// `(n_q, n_k, d, heads per key head)` from the operands' values.
fn sizes(a: &At) -> (f64, f64, f64, f64) {
    let dim = |slot: &str, i: usize| {
        a.val(slot)
            .and_then(|t| t.shape.get(i).copied())
            .unwrap_or(1)
    };
    let group = dim("Q", 2) / dim("K", 2).max(1);
    (
        dim("Q", 1) as f64,
        dim("K", 1) as f64,
        dim("Q", 3) as f64,
        group.max(1) as f64,
    )
}

/// The scores' bound: `(q·kᵀ)/√d` over `d` terms.
fn scores(a: &At, d: f64) -> f64 {
    let (mq, mk) = (a.m("Q"), a.m("K"));
    (d * (a.e("Q") * mk + mq * a.e("K")) + d * a.u * mq * mk) / d.sqrt()
}

/// Out moves by at most `E(v)` plus the probabilities' relative change times `max|v|`
/// (`Σ p = 1`, and `|Δp_i| ≤ 2 p_i E(s)`); the log-sum-exp moves with the scores.
pub(super) fn forward(a: &At) -> Vec<(VarId, f64)> {
    let (_, nk, d, _) = sizes(a);
    let es = scores(a, d);
    let rho = 2.0 * es + (nk + 4.0) * a.u;
    let mv = a.m("V");
    let mut v = a.stored("Out", a.e("V") + rho * mv + nk * a.u * mv);
    v.extend(a.stored(
        "SoftmaxLse",
        es + (nk + 4.0) * a.u * (1.0 + a.m_out("SoftmaxLse")),
    ));
    v
}

/// The grad: `p = exp(s − lse)` moves relatively by `E(s) + E(lse)`; `dp = do·vᵀ` and
/// `D = Σ do·out` over `d` terms; `ds = p (dp − D)/√d`; `dq`, `dk`, `dv` sum over the
/// keys, the queries (of every head sharing the key head) and the queries.
pub(super) fn grad(a: &At) -> Vec<(VarId, f64)> {
    let (nq, nk, d, group) = sizes(a);
    let u = a.u;
    let rho = scores(a, d) + a.e("SoftmaxLse") + (d + 4.0) * u;
    let (mdo, edo) = (a.m("Out@GRAD"), a.e("Out@GRAD"));
    let (mv, mo, mq, mk) = (a.m("V"), a.m("Out"), a.m("Q"), a.m("K"));
    let mdp = d * mdo * mv;
    let md = d * mdo * mo;
    let edp = d * (edo * mv + mdo * a.e("V")) + d * u * mdo * mv;
    let ed = d * (edo * mo + mdo * a.e("Out")) + d * u * mdo * mo;
    let scale = 1.0 / d.sqrt();
    let mds = scale * (mdp + md);
    let eds = scale * (rho * (mdp + md) + edp + ed + 3.0 * u * (mdp + md));
    let mut v = a.stored(
        "Q@GRAD",
        nk * (eds * mk + mds * a.e("K") + d * u * mds * mk),
    );
    let rows = nq * group;
    v.extend(a.stored(
        "K@GRAD",
        rows * (eds * mq + mds * a.e("Q") + d * u * mds * mq),
    ));
    v.extend(a.stored("V@GRAD", rows * (edo + rho * mdo + u * mdo)));
    v
}
