//! Which preset model a plan's program is, and at what sizes: the search rebuilds the model
//! at other depths and micro-batch sizes, so it needs the recipe, not just the program. A
//! program is accepted only if the preset rebuilt at the sizes read from it prints the same.

use crate::ir::{DType, Program};
use crate::models::{Model, ModelConfig};

fn shape(p: &Program, name: &str) -> Option<Vec<usize>> {
    let v = p.var_id(name)?;
    Some(p.var(v).ty.shape.to_vec())
}

fn dtype(p: &Program, name: &str) -> Option<DType> {
    let v = p.var_id(name)?;
    Some(p.var(v).ty.dtype)
}

/// The number of transformer blocks (`h<i>.ln_1.scale` parameters).
fn layers(p: &Program) -> usize {
    (0..)
        .take_while(|i| p.var_id(&format!("h{i}.ln_1.scale")).is_some())
        .count()
}

/// The number of llama blocks (`h<i>.input_norm.scale` parameters).
fn llama_layers(p: &Program) -> usize {
    (0..)
        .take_while(|i| p.var_id(&format!("h{i}.input_norm.scale")).is_some())
        .count()
}

/// A llama's sizes read from its embedding, block 0's key heads and SwiGLU width.
fn llama_guess(p: &Program, ids: &[usize], wte: &[usize]) -> Option<(Model, ModelConfig)> {
    let base = Model::Llama.default_config();
    let ([b, s], [v, h]) = (ids, wte) else {
        return None;
    };
    let kv_heads = shape(p, "h0.attn.k.heads").and_then(|s| s.get(2).copied());
    let ffn = shape(p, "h0.mlp.gate.w").and_then(|s| s.get(1).copied());
    Some((
        Model::Llama,
        ModelConfig {
            batch: *b,
            seq: *s,
            vocab: *v,
            hidden: *h,
            layers: llama_layers(p),
            heads: heads(p, base.heads),
            kv_heads: kv_heads.unwrap_or(base.kv_heads),
            ffn: ffn.unwrap_or(base.ffn),
            dtype: dtype(p, "wte").unwrap_or(DType::F32),
            ..base
        },
    ))
}

/// The heads of block 0's attention (`h0.attn.q.heads` is `[batch, seq, heads, dim]`).
fn heads(p: &Program, base: usize) -> usize {
    shape(p, "h0.attn.q.heads")
        .and_then(|s| s.get(2).copied())
        .unwrap_or(base)
}

/// `embedding_lm` or `gpt_lm` (which has a position table `wpe`) at the sizes of its token
/// ids and table.
fn lm_guess(p: &Program, ids: &[usize], wte: &[usize]) -> Option<(Model, ModelConfig)> {
    let base = Model::EmbeddingLm.default_config();
    let ([b, s], [v, h]) = (ids, wte) else {
        return None;
    };
    let model = match shape(p, "wpe") {
        Some(_) => Model::GptLm,
        None => Model::EmbeddingLm,
    };
    Some((
        model,
        ModelConfig {
            batch: *b,
            seq: *s,
            vocab: *v,
            hidden: *h,
            layers: layers(p),
            heads: heads(p, base.heads),
            dtype: dtype(p, "wte").unwrap_or(DType::F32),
            ..base
        },
    ))
}

/// The candidates' sizes read from the program (the micro-batch's batch).
fn guesses(p: &Program) -> Vec<(Model, ModelConfig)> {
    let mut out = Vec::new();
    if let (Some(ids), Some(wte)) = (shape(p, "ids"), shape(p, "wte")) {
        out.extend(llama_guess(p, &ids, &wte));
        out.extend(lm_guess(p, &ids, &wte));
    }
    if let Some(x) = shape(p, "x") {
        let dt = dtype(p, "x").unwrap_or(DType::F32);
        match &x[..] {
            [b, s, h] => {
                let base = Model::Gpt.default_config();
                out.push((
                    Model::Gpt,
                    ModelConfig {
                        batch: *b,
                        seq: *s,
                        hidden: *h,
                        layers: layers(p),
                        heads: heads(p, base.heads),
                        dtype: dt,
                        ..base
                    },
                ));
            }
            [b, f] => {
                let hidden = shape(p, "linear_0.w_0").and_then(|s| s.get(1).copied());
                let classes = shape(p, "linear_1.w_0").and_then(|s| s.get(1).copied());
                if let (Some(hidden), Some(classes)) = (hidden, classes) {
                    out.push((
                        Model::Mlp,
                        ModelConfig {
                            batch: *b,
                            features: *f,
                            hidden,
                            classes,
                            dtype: dt,
                            ..Model::Mlp.default_config()
                        },
                    ));
                }
            }
            _ => {}
        }
    }
    if let (Some(x), Some(w1), Some(w2)) = (
        shape(p, "batch.x"),
        shape(p, "params.W1"),
        shape(p, "params.W2"),
    ) {
        if let ([b, f], [_, h], [_, c]) = (&x[..], &w1[..], &w2[..]) {
            out.push((
                Model::MlpMse,
                ModelConfig {
                    batch: *b,
                    features: *f,
                    hidden: *h,
                    classes: *c,
                    dtype: dtype(p, "batch.x").unwrap_or(DType::F32),
                    ..Model::MlpMse.default_config()
                },
            ));
        }
    }
    out
}

/// A program that is no preset model at any size read from it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "suggest searches over the layouts of the preset models (mlp, mlp_mse, gpt, \
     embedding_lm, gpt_lm, llama); this plan's program is not one of them at any size read from it. \
     Price your own plan with `shardlab cost`, or search from --preset with the same sizes"
)]
pub struct NotAPreset;

/// The preset and sizes `program` was built from (its batch is the micro-batch's).
pub fn identify(program: &Program) -> Result<(Model, ModelConfig), NotAPreset> {
    let text = program.to_string();
    for (model, cfg) in guesses(program) {
        if model.build(&cfg).is_ok_and(|p| p.to_string() == text) {
            return Ok((model, cfg));
        }
    }
    Err(NotAPreset)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_preset_is_recognised_at_its_sizes() {
        for model in Model::ALL {
            let cfg = ModelConfig {
                batch: 8,
                layers: 3,
                ..model.default_config()
            };
            let cfg = if matches!(model, Model::Mlp | Model::MlpMse) {
                ModelConfig {
                    layers: model.default_config().layers,
                    ..cfg
                }
            } else {
                cfg
            };
            let p = model.build(&cfg).expect("preset builds");
            let (m, c) = identify(&p).expect("recognised");
            assert_eq!(m, model);
            assert_eq!(c.batch, 8);
            assert_eq!(c.hidden, cfg.hidden);
            if matches!(
                model,
                Model::Gpt | Model::EmbeddingLm | Model::GptLm | Model::Llama
            ) {
                assert_eq!(c.layers, 3);
                assert_eq!(c.heads, cfg.heads);
            }
            if model == Model::Llama {
                assert_eq!((c.kv_heads, c.ffn), (cfg.kv_heads, cfg.ffn));
            }
        }
    }

    #[test]
    fn an_edited_program_is_refused() {
        let p = Model::Gpt
            .build(&Model::Gpt.default_config())
            .expect("builds");
        let mut edited = p.clone();
        edited.remove_op(p.ops().len() - 1);
        assert!(identify(&edited).is_err());
    }
}
