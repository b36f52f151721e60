//! Finite-difference checks of every grad kernel in f64: for one op feeding
//! `loss = Σ_k (k+1) · mean(out_k²)`, the backward pass's parameter gradients equal central
//! differences of the loss (relative 1e-6 of the largest gradient, plus 1e-8).
#![cfg(not(target_arch = "wasm32"))]

use shardlab::exec::comm::CoopComm;
use shardlab::exec::init::{initial_value, InitOptions};
use shardlab::exec::interp::Rank;
use shardlab::exec::tensor::Tensor;
use shardlab::ir::{parse_program, DType, Program};
use shardlab::passes::backward::append_backward;
use std::collections::HashMap;

/// Appends `loss = Σ_k (k+1)·mean(out_k²)` to `body` (which declares its own vars).
fn with_loss(body: &str, outs: &[(&str, &str)]) -> String {
    let mut text = body.to_string();
    let mut terms = Vec::new();
    for (k, (name, ty)) in outs.iter().enumerate() {
        text.push_str(&format!(
            "var {name}.sq: {ty} activation\nvar {name}.m: f64[] activation\nvar {name}.t: f64[] activation\n\
             op square(X={name}) -> (Out={name}.sq)\nop mean(X={name}.sq) -> (Out={name}.m)\n\
             op scale(X={name}.m) -> (Out={name}.t) {{scale={}.0}}\n",
            k + 1
        ));
        terms.push(format!("{name}.t"));
    }
    let mut acc = terms[0].clone();
    for (i, t) in terms.iter().enumerate().skip(1) {
        let next = if i + 1 == terms.len() {
            "loss".to_string()
        } else {
            format!("acc{i}")
        };
        text.push_str(&format!("var {next}: f64[] activation\nop elementwise_add(X={acc}, Y={t}) -> (Out={next}) role={}\n", if next == "loss" { "loss" } else { "forward" }));
        acc = next;
    }
    if terms.len() == 1 {
        text.push_str(&format!(
            "var loss: f64[] activation\nop assign(X={acc}) -> (Out=loss) role=loss\n"
        ));
    }
    text
}

fn run(program: &Program, env: &[Option<Tensor>]) -> Vec<Option<Tensor>> {
    let mut rank = Rank::new(0, program, env.to_vec(), None);
    rank.step(&CoopComm::default()).unwrap();
    rank.env
}

fn values(program: &Program, feeds: &HashMap<&str, Vec<f64>>) -> Vec<Option<Tensor>> {
    program
        .vars()
        .iter()
        .map(|v| match feeds.get(&*v.name) {
            Some(vals) => Some(Tensor::float(v.ty.dtype, v.ty.shape.to_vec(), vals.clone())),
            None => initial_value(
                program,
                v,
                &InitOptions {
                    seed: 3,
                    ..Default::default()
                },
            ),
        })
        .collect()
}

/// Checks every parameter's gradient against central differences.
fn check(name: &str, body: &str, outs: &[(&str, &str)], feeds: &[(&str, Vec<f64>)]) {
    let text = with_loss(body, outs);
    let forward = parse_program(&text).unwrap_or_else(|e| panic!("{name}: {e:?}\n{text}"));
    assert!(
        shardlab::ir::verify_program(&forward).is_empty(),
        "{name}: {:?}",
        shardlab::ir::verify_program(&forward)
    );
    let bw = append_backward(&forward).unwrap();
    let feeds: HashMap<&str, Vec<f64>> = feeds.iter().cloned().collect();
    let env = values(&bw.program, &feeds);
    let out = run(&bw.program, &env);
    let loss_of = |env: &[Option<Tensor>]| {
        run(&forward, &env[..forward.vars().len()])[bw.loss.index()]
            .as_ref()
            .unwrap()
            .scalar()
    };
    for &(param, grad) in &bw.param_grads {
        let analytic = out[grad.index()].as_ref().unwrap().to_f64();
        let base = env[param.index()].clone().unwrap();
        let eps = 1e-6;
        let mut numeric = Vec::new();
        for i in 0..base.numel() {
            let probe = |delta: f64| {
                let mut e = env.clone();
                let mut v = base.to_f64();
                v[i] += delta;
                e[param.index()] = Some(Tensor::float(DType::F64, base.shape.clone(), v));
                loss_of(&e)
            };
            numeric.push((probe(eps) - probe(-eps)) / (2.0 * eps));
        }
        let scale = numeric.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        let diff = analytic
            .iter()
            .zip(&numeric)
            .fold(0.0f64, |m, (a, b)| m.max((a - b).abs()));
        let pname = &bw.program.var(param).name;
        assert!(
            diff <= 1e-6 * scale + 1e-8,
            "{name}: d loss / d {pname}: analytic {analytic:?} numeric {numeric:?} (diff {diff})"
        );
    }
}

fn p(name: &str, shape: &str) -> String {
    format!("var {name}: f64[{shape}] parameter persistable\n")
}

#[test]
fn matmul_grads() {
    let cases = [
        ("3, 4", "4, 5", "3, 5", "{trans_x=false, trans_y=false}"),
        ("4, 3", "4, 5", "3, 5", "{trans_x=true, trans_y=false}"),
        ("3, 4", "5, 4", "3, 5", "{trans_x=false, trans_y=true}"),
        ("4, 3", "5, 4", "3, 5", "{trans_x=true, trans_y=true}"),
        ("2, 3, 4", "4, 5", "2, 3, 5", "{}"),
        ("2, 1, 3, 4", "3, 4, 2", "2, 3, 3, 2", "{}"),
        ("4", "4, 5", "5", "{}"),
        ("3, 4", "4", "3", "{}"),
    ];
    for (x, y, o, attrs) in cases {
        let body = format!(
            "{}{}var o: f64[{o}] activation\nop matmul_v2(X=x, Y=y) -> (Out=o) {attrs}\n",
            p("x", x),
            p("y", y)
        );
        check(
            &format!("matmul {x} @ {y} {attrs}"),
            &body,
            &[("o", &format!("f64[{o}]"))],
            &[],
        );
    }
}

#[test]
fn elementwise_grads() {
    for op in [
        "elementwise_add",
        "elementwise_sub",
        "elementwise_mul",
        "elementwise_div",
    ] {
        let body = format!(
            "{}{}var o: f64[3, 4] activation\nop {op}(X=x, Y=y) -> (Out=o)\n",
            p("x", "3, 4"),
            p("y", "4")
        );
        check(
            op,
            &body,
            &[("o", "f64[3, 4]")],
            &[("y", vec![1.5, 1.2, 1.9, 1.1])],
        );
    }
    let body = format!(
        "{}{}var o: f64[2, 3, 4] activation\nop elementwise_mul(X=x, Y=y) -> (Out=o) {{axis=1}}\n",
        p("x", "2, 3, 4"),
        p("y", "3")
    );
    check("mul with axis", &body, &[("o", "f64[2, 3, 4]")], &[]);
}

#[test]
fn activation_grads() {
    let ops = [
        ("relu", "{}"),
        ("gelu", "{approximate=true}"),
        ("gelu", "{approximate=false}"),
        ("silu", "{}"),
        ("square", "{}"),
        ("scale", "{bias=0.3, scale=1.5}"),
        ("scale", "{bias=0.3, bias_after_scale=false, scale=1.5}"),
        ("cast", "{out_dtype=\"f64\"}"),
        ("assign", "{}"),
    ];
    for (op, attrs) in ops {
        let body = format!(
            "{}var o: f64[3, 4] activation\nop {op}(X=x) -> (Out=o) {attrs}\n",
            p("x", "3, 4")
        );
        check(&format!("{op} {attrs}"), &body, &[("o", "f64[3, 4]")], &[]);
    }
    let body = format!("{}var o: f64[3, 4] activation\nvar m: f64[3, 4] activation\nop dropout(X=x) -> (Out=o, Mask=m) {{dropout_prob=0.3, seed=7}}\n", p("x", "3, 4"));
    check("dropout", &body, &[("o", "f64[3, 4]")], &[]);
}

#[test]
fn softmax_and_norm_grads() {
    for axis in [0, 1] {
        let body = format!(
            "{}var o: f64[3, 4] activation\nop softmax(X=x) -> (Out=o) {{axis={axis}}}\n",
            p("x", "3, 4")
        );
        check(
            &format!("softmax axis {axis}"),
            &body,
            &[("o", "f64[3, 4]")],
            &[],
        );
    }
    let body = format!(
        "{}var o: f64[2, 4, 4] activation\nop fused_softmax_mask_upper_triangle(X=x) -> (Out=o)\n",
        p("x", "2, 4, 4")
    );
    check("causal softmax", &body, &[("o", "f64[2, 4, 4]")], &[]);
    let body = format!(
        "{}{}{}var y: f64[2, 3, 4] activation\nvar m: f64[2, 3] activation\nvar v: f64[2, 3] activation\n\
         op layer_norm(X=x, Scale=s, Bias=b) -> (Y=y, Mean=m, Variance=v) {{begin_norm_axis=2, epsilon=1e-5}}\n",
        p("x", "2, 3, 4"),
        p("s", "4"),
        p("b", "4")
    );
    check("layer_norm", &body, &[("y", "f64[2, 3, 4]")], &[]);
    let body = format!(
        "{}{}var y: f64[3, 4] activation\nvar m: f64[3] activation\nvar v: f64[3] activation\n\
         op layer_norm(X=x, Scale=s) -> (Y=y, Mean=m, Variance=v) {{begin_norm_axis=1}}\n",
        p("x", "3, 4"),
        p("s", "4")
    );
    check("layer_norm without bias", &body, &[("y", "f64[3, 4]")], &[]);
}

#[test]
fn embedding_and_cross_entropy_grads() {
    for pad in [-1, 2] {
        let body = format!("{}var ids: i64[3, 2] input\nvar o: f64[3, 2, 4] activation\nop lookup_table_v2(W=w, Ids=ids) -> (Out=o) {{padding_idx={pad}}}\n", p("w", "10, 4"));
        check(
            &format!("lookup padding {pad}"),
            &body,
            &[("o", "f64[3, 2, 4]")],
            &[("ids", vec![1.0, 2.0, 2.0, 7.0, 9.0, 1.0])],
        );
    }
    let body = format!("{}var label: i64[3, 1] label\nvar sm: f64[3, 5] activation\nvar l: f64[3, 1] activation\nop softmax_with_cross_entropy(Logits=x, Label=label) -> (Softmax=sm, Loss=l)\n", p("x", "3, 5"));
    check(
        "cross-entropy hard",
        &body,
        &[("l", "f64[3, 1]")],
        &[("label", vec![0.0, 4.0, 2.0])],
    );
    let body = format!("{}var label: f64[3, 5] label\nvar sm: f64[3, 5] activation\nvar l: f64[3, 1] activation\nop softmax_with_cross_entropy(Logits=x, Label=label) -> (Softmax=sm, Loss=l) {{soft_label=true}}\n", p("x", "3, 5"));
    // Soft labels summing to 1 per row, and rows that do not (1.8, 1.5, 0.6): the gradient is
    // p · Σlabel − label, so a kernel that assumes Σlabel = 1 fails the second.
    for labels in [
        vec![0.2; 15],
        vec![
            0.1, 0.5, 0.3, 0.7, 0.2, 0.0, 0.0, 1.5, 0.0, 0.0, 0.3, 0.0, 0.1, 0.0, 0.2,
        ],
    ] {
        check(
            "cross-entropy soft",
            &body,
            &[("l", "f64[3, 1]")],
            &[("label", labels)],
        );
    }
}

#[test]
fn shape_and_reduction_grads() {
    let body = format!(
        "{}var o: f64[3, 4] activation\nop reshape2(X=x) -> (Out=o) {{shape=[3, -1]}}\n",
        p("x", "2, 6")
    );
    check("reshape", &body, &[("o", "f64[3, 4]")], &[]);
    let body = format!(
        "{}var o: f64[4, 2, 3] activation\nop transpose2(X=x) -> (Out=o) {{axis=[2, 0, 1]}}\n",
        p("x", "2, 3, 4")
    );
    check("transpose", &body, &[("o", "f64[4, 2, 3]")], &[]);
    let body = format!("{}var a: f64[4, 2] activation\nvar b: f64[4, 4] activation\nop split(X=x) -> (Out=[a, b]) {{axis=1, sections=[2, 4]}}\n", p("x", "4, 6"));
    check(
        "split",
        &body,
        &[("a", "f64[4, 2]"), ("b", "f64[4, 4]")],
        &[],
    );
    let body = format!(
        "{}{}var o: f64[2, 5] activation\nop concat(X=[a, b]) -> (Out=o) {{axis=1}}\n",
        p("a", "2, 3"),
        p("b", "2, 2")
    );
    check("concat", &body, &[("o", "f64[2, 5]")], &[]);
    let body = format!("{}var o: f64[2, 1, 4] activation\nop reduce_sum(X=x) -> (Out=o) {{dim=[1], keep_dim=true}}\n", p("x", "2, 3, 4"));
    check("reduce_sum", &body, &[("o", "f64[2, 1, 4]")], &[]);
    let body = format!(
        "{}var o: f64[3] activation\nop reduce_mean(X=x) -> (Out=o) {{dim=[0, 2]}}\n",
        p("x", "2, 3, 4")
    );
    check("reduce_mean", &body, &[("o", "f64[3]")], &[]);
    let body = format!(
        "{}var o: f64[] activation\nop mean(X=x) -> (Out=o)\n",
        p("x", "2, 3")
    );
    check("mean", &body, &[("o", "f64[]")], &[]);
}

/// The decoder ops: rms_norm (x and scale), the rotary embedding in both pairings with
/// real sine and cosine tables, and repeat_interleave over heads.
#[test]
fn decoder_grads() {
    let body = format!(
        "{}{}var y: f64[2, 3, 4] activation\nvar r: f64[2, 3] activation\n\
         op rms_norm(X=x, Scale=s) -> (Y=y, InvVar=r) {{begin_norm_axis=2, epsilon=1e-6}}\n",
        p("x", "2, 3, 4"),
        p("s", "4")
    );
    check("rms_norm", &body, &[("y", "f64[2, 3, 4]")], &[]);
    let body = format!(
        "{}{}var y: f64[3, 8] activation\nvar r: f64[3] activation\n\
         op rms_norm(X=x, Scale=s) -> (Y=y, InvVar=r) {{begin_norm_axis=1}}\n",
        p("x", "3, 8"),
        p("s", "8")
    );
    check("rms_norm rank 2", &body, &[("y", "f64[3, 8]")], &[]);
    // Positions 0..3 at the frequencies of base 10000 over a head width of 4.
    let (seq, d) = (3usize, 4usize);
    let angle =
        |t: usize, i: usize| t as f64 / 10000f64.powf((2 * (i % (d / 2))) as f64 / d as f64);
    let table = |f: fn(f64) -> f64| -> Vec<f64> {
        (0..seq)
            .flat_map(|t| (0..d).map(move |i| f(angle(t, i))))
            .collect()
    };
    for neox in [false, true] {
        let body = format!(
            "{}var sin: f64[1, 3, 1, 4] input\nvar cos: f64[1, 3, 1, 4] input\n\
             var o: f64[2, 3, 2, 4] activation\n\
             op fused_rotary_position_embedding(X=x, Sin=sin, Cos=cos) -> (Out=o) \
             {{use_neox_rotary_style={neox}}}\n",
            p("x", "2, 3, 2, 4")
        );
        check(
            &format!("rotary neox={neox}"),
            &body,
            &[("o", "f64[2, 3, 2, 4]")],
            &[("sin", table(f64::sin)), ("cos", table(f64::cos))],
        );
    }
    let body = format!(
        "{}var o: f64[2, 3, 6, 2] activation\n\
         op repeat_interleave(X=x) -> (Out=o) {{repeats=3, axis=2}}\n",
        p("x", "2, 3, 2, 2")
    );
    check("repeat_interleave", &body, &[("o", "f64[2, 3, 6, 2]")], &[]);
}
