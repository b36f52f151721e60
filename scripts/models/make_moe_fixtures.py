"""Writes the Mixture-of-Experts import fixtures (PIR text) into tests/models/ (run by hand,
not in CI):

    target/modelsenv/bin/pip install --no-deps --target target/pf041 paddleformers==0.4.1
    PYTHONPATH=target/pf041 target/modelsenv/bin/python scripts/models/make_moe_fixtures.py

The model is PaddleFormers' `Qwen2MoeForCausalLM` (0.4.1; 1.x needs `paddlefleet`, which is
not on PyPI): its embedding, attention, RMSNorms, experts, shared expert and its gate, head
and criterion are PaddleFormers' own code. One method is replaced, the sparse block's
`forward`: PaddleFormers' MoE blocks route with data-dependent shapes (`paddle.where` per
expert, `int(capacity)` from a count, `.tolist()`), which no static program can hold, and
Paddle's fused `moe_gate_dispatch` has no CPU kernel to build with. The replacement routes
as GShard does, with a fixed capacity, in Paddle's primitive ops (top-k, one-hot, cumsum,
the dispatch and combine einsums) and the block's own layers; `shardlab import` recognises
that routing and fuses it into `moe_dispatch`/`moe_combine`.

Writes:
- qwen2_moe_block.pir: the sparse block alone (router, 4 experts top-2, shared expert and
  its gate) on 32 tokens of width 64, trained on the mean of its output, with
  qwen2_moe_block.values/ (its weights and input) and Paddle's loss: every value the
  program reads is an input or a weight, so `shardlab run --inputs` computes exactly what
  Paddle did, and the fused routing is held to Paddle's own arithmetic;
- qwen2_moe_2l.pir: 2 layers, hidden 64, 4 experts (top-2, expert FFN 32, shared expert 64),
  batch 2 of 16 tokens, capacity = tokens · k / experts (factor 1.0: tokens over it drop);
- qwen2_moe_2l.values/: the model's parameters and a batch (`.npy`, f32/i64), beside
  `loss` and the count of dropped choices in the record, from Paddle's own forward;
- qwen1.5_moe_a2.7b.pir: Qwen1.5-MoE-A2.7B's published config (24 layers, hidden 2048, 60
  experts top-4, expert FFN 1408, shared expert 5632, vocabulary 151,936), batch 4 of 4,096
  tokens, built under `paddle.LazyGuard` (the graph only).
Each `.pir.json` records the framework's parameter count, the operator census, the inputs,
the versions and (shrunk) `paddle.flops`'s per-Linear table.
"""
import json
import os
import sys

import numpy as np
import paddle
import paddle.nn.functional as F

sys.path.insert(0, os.path.dirname(__file__))
from make_pir_fixtures import OUT, CausalLM, PlainConfig, count, layer_flops, write  # noqa: E402

from paddleformers.transformers.qwen2_moe import modeling as qm  # noqa: E402
from paddleformers.transformers.qwen2_moe.configuration import Qwen2MoeConfig  # noqa: E402

FLAGS = dict(use_flash_attention=False, fuse_rms_norm=False, use_fused_rms_norm=False, use_fused_rope=False)


def amend(name, **fields):
    """Adds `fields` to `name`'s `.pir.json` record."""
    path = os.path.join(OUT, name + ".pir.json")
    with open(path) as f:
        record = json.load(f)
    record.update(fields)
    with open(path, "w") as f:
        json.dump(record, f, indent=1, sort_keys=True)
        f.write("\n")


def capacity(tokens, experts, k):
    """PaddleFormers' `_capacity` with factor 1.0 per choice: (tokens // experts) · k."""
    return (tokens // experts) * k


def routed_forward(self, hidden_states):
    """GShard's routing with a fixed capacity: each token's top-k experts; positions in an
    expert ranked choice-major (every first choice, then every second); choices at or past
    the capacity dropped; the experts' outputs weighted by the gates."""
    shape = hidden_states.shape
    h = shape[-1]
    x = hidden_states.reshape([-1, h])
    s, e, k = x.shape[0], self.num_experts, self.top_k
    cap = capacity(s, e, k)
    probs = F.softmax(self.gate(x).astype("float32"), axis=-1)
    top_w, top_i = paddle.topk(probs, k, axis=-1)
    choice = F.one_hot(top_i.transpose([1, 0]).reshape([-1]), e)  # [k*s, e], choice-major
    position = ((paddle.cumsum(choice, axis=0) - 1.0) * choice).sum(-1)
    kept = (position < cap).astype("float32")
    slot = F.one_hot(position.clip(0, cap - 1).astype("int64"), cap) * kept.unsqueeze(-1)
    entry = (choice.unsqueeze(-1) * slot.unsqueeze(1)).reshape([k, s, e, cap])
    dispatch = entry.sum(0)
    combine = (entry * top_w.transpose([1, 0]).reshape([k, s, 1, 1])).sum(0)
    routed = paddle.einsum("sec,sm->ecm", dispatch, x)
    parts = paddle.split(routed, e, axis=0)
    outs = [self.experts[i](part.reshape([cap, h])) for i, part in enumerate(parts)]
    out = paddle.einsum("sec,ecm->sm", combine, paddle.stack(outs, 0))
    shared = F.sigmoid(self.shared_expert_gate(x)) * self.shared_expert(x)
    if not paddle.in_dynamic_mode():
        return (out + shared).reshape(shape), None
    self.dropped = int(s * k - kept.sum())
    return (out + shared).reshape(shape), None


qm.Qwen2MoeSparseMoeBlock.forward = routed_forward


def plain(m):
    """Every sublayer's config as a plain dict (dy2static recurses through PretrainedConfig)."""
    cfg = PlainConfig(m.config.to_dict())
    for sub in m.sublayers():
        if hasattr(sub, "config"):
            sub.config = cfg


def build(name, config, batch, seq, lazy):
    if lazy:
        with paddle.LazyGuard():
            m = qm.Qwen2MoeForCausalLM(config)
    else:
        m = qm.Qwen2MoeForCausalLM(config)
    plain(m)
    w = CausalLM(m)
    w.eval()
    specs = [paddle.static.InputSpec([batch, seq], "int64", "input_ids"),
             paddle.static.InputSpec([batch, seq], "int64", "labels")]
    st = paddle.jit.to_static(w, input_spec=specs, full_graph=True)
    program = st.forward.concrete_program.main_program
    keys = ("vocab_size", "hidden_size", "intermediate_size", "moe_intermediate_size",
            "shared_expert_intermediate_size", "num_experts", "num_experts_per_tok", "num_hidden_layers",
            "num_attention_heads", "num_key_value_heads", "tie_word_embeddings", "norm_topk_prob")
    cfg = {k: getattr(config, k) for k in keys}
    cfg["capacity"] = capacity(batch * seq, config.num_experts, config.num_experts_per_tok)
    write(name, program, count(m), {"input_ids": [batch, seq], "labels": [batch, seq]}, cfg)
    return m, w


def values(name, m, w, config, batch, seq):
    """Paddle's own forward on a batch with the model's weights: the loss and the dropped
    choices into the record, the weights and the batch as `.npy` for `shardlab run --inputs`."""
    folder = os.path.join(OUT, name + ".values")
    os.makedirs(folder, exist_ok=True)
    paddle.seed(1)
    ids = paddle.randint(0, config.vocab_size, [batch, seq], dtype="int64")
    labels = paddle.randint(0, config.vocab_size, [batch, seq], dtype="int64")
    # The static wrapper `w` runs the program; the model's own layers run dynamically.
    loss = float(m.criterion(m.lm_head(m.model(ids, return_dict=False)[0]), labels)[0])
    dropped = [layer.mlp.dropped for layer in m.model.layers]
    np.save(os.path.join(folder, "input_ids.npy"), ids.numpy())
    np.save(os.path.join(folder, "labels.npy"), labels.numpy())
    for p in m.parameters():
        np.save(os.path.join(folder, p.name + ".npy"), p.numpy().astype(np.float32))
    amend(name, paddle_loss=loss, paddle_dropped_choices=dropped)
    print(name, "loss", loss, "dropped", dropped)


class BlockLoss(paddle.nn.Layer):
    """The sparse block trained on the mean of its output."""

    def __init__(self, block):
        super().__init__()
        self.block = block

    def forward(self, x):
        return self.block(x)[0].mean()


def block(config, tokens):
    b = qm.Qwen2MoeSparseMoeBlock(config)
    plain(b)
    w = BlockLoss(b)
    w.eval()
    paddle.seed(2)
    x = paddle.randn([tokens, config.hidden_size], dtype="float32")
    loss = float(w(x))
    dropped = b.dropped
    st = paddle.jit.to_static(w, input_spec=[paddle.static.InputSpec([tokens, config.hidden_size], "float32", "x")],
                              full_graph=True)
    program = st.forward.concrete_program.main_program
    cfg = {"capacity": capacity(tokens, config.num_experts, config.num_experts_per_tok)}
    write("qwen2_moe_block", program, count(b), {"x": [tokens, config.hidden_size]}, cfg)
    folder = os.path.join(OUT, "qwen2_moe_block.values")
    os.makedirs(folder, exist_ok=True)
    np.save(os.path.join(folder, "x.npy"), x.numpy())
    for p in b.parameters():
        np.save(os.path.join(folder, p.name + ".npy"), p.numpy().astype(np.float32))
    amend("qwen2_moe_block", paddle_loss=loss, paddle_dropped_choices=dropped)
    print("qwen2_moe_block loss", loss, "dropped", dropped)


def flops(name, config, m, batch, seq):
    """`paddle.flops`'s per-Linear table, keyed by the weights' names in the program."""
    twin = qm.Qwen2MoeForCausalLM(config)
    plain(twin)
    table = layer_flops(twin, batch, seq, config.vocab_size)
    linears = lambda model: [l for l in model.sublayers() if isinstance(l, paddle.nn.Linear)]
    layers = {a.weight.name: table[b.full_name()] for a, b in zip(linears(m), linears(twin)) if b.full_name() in table}
    amend(name, framework_layers=layers)


if __name__ == "__main__":
    paddle.seed(0)
    small = Qwen2MoeConfig(vocab_size=128, hidden_size=64, intermediate_size=128, moe_intermediate_size=32,
                           shared_expert_intermediate_size=64, num_experts=4, num_experts_per_tok=2,
                           num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                           max_position_embeddings=64, tie_word_embeddings=False, **FLAGS)
    block(small, 32)
    m, w = build("qwen2_moe_2l", small, 2, 16, lazy=False)
    values("qwen2_moe_2l", m, w, small, 2, 16)
    flops("qwen2_moe_2l", small, m, 2, 16)
    # Qwen/Qwen1.5-MoE-A2.7B's config.json.
    big = Qwen2MoeConfig(vocab_size=151936, hidden_size=2048, intermediate_size=5632, moe_intermediate_size=1408,
                         shared_expert_intermediate_size=5632, num_experts=60, num_experts_per_tok=4,
                         num_hidden_layers=24, num_attention_heads=16, num_key_value_heads=16,
                         max_position_embeddings=8192, rope_theta=1000000.0, rms_norm_eps=1e-6,
                         tie_word_embeddings=False, **FLAGS)
    build("qwen1.5_moe_a2.7b", big, 4, 4096, lazy=True)
