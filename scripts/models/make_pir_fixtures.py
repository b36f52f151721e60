"""Writes the Paddle-program import fixtures (PIR text) into tests/models/ (run by hand,
not in CI; the virtual environment is make_fixtures.py's):

    target/modelsenv/bin/python scripts/models/make_pir_fixtures.py

Each fixture is a training program from Paddle's own layer code, as Paddle 3 prints it
(`print(program)`), with its loss:
- mlp_block.pir: LayerNorm, Linear, GELU, Linear and the mean of the output, built in
  static mode (`paddle.static.program_guard`);
- llama_causal_2l.pir: PaddleFormers' `LlamaForCausalLM` at a shrunk config, its head and
  its own criterion (the masked cross-entropy), traced by `paddle.jit.to_static`;
- llama3_8b.pir: the same code at Llama 3 8B's published config (32 layers, hidden 4096,
  vocabulary 128,256; batch 8 of 8,192 tokens), built under `paddle.LazyGuard`, so no
  weight is ever allocated: the graph only.

Beside each, a `.pir.json` records what the framework reports: the trainable parameter count,
the program's operators by name, its inputs, the package versions, and for the shrunk Llama
`paddle.flops`'s per-layer table (each Linear layer's multiply-adds and its input and output
shapes).

Two workarounds, neither changing what is computed: dy2static recurses forever through
`PretrainedConfig.__getattribute__`, so the head and the criterion get the config as a
plain dict; and `LlamaForCausalLM.forward` is called through its parts (model, head,
criterion) exactly as it calls them itself.
"""
import ast
import contextlib
import io
import json
import os
from collections import Counter

import paddle

OUT = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "models")
KW = dict(fuse_rms_norm=False, use_fused_rms_norm=False, use_fused_rope=False, use_flash_attention=False)


def versions():
    import paddleformers
    return {"paddlepaddle": paddle.__version__, "paddleformers": paddleformers.__version__}


def add_layer_flops(name, m, config, batch, seq):
    """Adds Paddle's per-layer report to `name`'s record, keyed by the weights' names in
    the written program. A forward pass creates buffers that would change the program, so
    it runs last, on a second instance of the same config; its Linear layers are the
    first's, in order."""
    from paddleformers.transformers import LlamaForCausalLM
    twin = LlamaForCausalLM(config)
    table = layer_flops(twin, batch, seq, config.vocab_size)
    linears = lambda model: [l for l in model.sublayers() if isinstance(l, paddle.nn.Linear)]
    layers = {a.weight.name: table[b.full_name()] for a, b in zip(linears(m), linears(twin))}
    path = os.path.join(OUT, name + ".pir.json")
    with open(path) as f:
        record = json.load(f)
    record["framework_layers"] = layers
    with open(path, "w") as f:
        json.dump(record, f, indent=1, sort_keys=True)
        f.write("\n")


def layer_flops(m, batch, seq, vocab):
    """Paddle's own per-layer report (`paddle.flops`, hooks on each layer type it knows:
    here the Linear layers, counted as multiply-adds), parsed from its table: each layer's
    FLOPs and its input and output shapes."""

    class Ids(paddle.nn.Layer):
        # paddle.flops feeds a float tensor of `input_size`; the model wants token ids.
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, x):
            ids = (x.abs() * 1000).astype("int64") % vocab
            return self.m.lm_head(self.m.model(ids, return_dict=False)[0])

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        paddle.flops(Ids(m), [batch, seq], print_detail=True)
    layers = {}
    for line in out.getvalue().splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == 5 and cells[0].startswith("linear_"):
            layers[cells[0]] = {"input": ast.literal_eval(cells[1]), "output": ast.literal_eval(cells[2]),
                                "flops": int(cells[4])}
    return layers


def write(name, program, params, inputs, config=None):
    ops = Counter(op.name() for op in program.global_block().ops)
    with open(os.path.join(OUT, name + ".pir"), "w") as f:
        f.write(str(program))
    record = {
        "framework_parameters": int(params),
        "pir_ops": dict(sorted(ops.items())),
        "inputs": inputs,
        "versions": versions(),
    }
    if config is not None:
        record["config"] = config
    with open(os.path.join(OUT, name + ".pir.json"), "w") as f:
        json.dump(record, f, indent=1, sort_keys=True)
        f.write("\n")
    print(name, sum(ops.values()), "ops,", params, "parameters")


def count(layer):
    """Trainable parameters from their shapes (lazy ones have no storage)."""
    n = 0
    for p in layer.parameters():
        if not p.stop_gradient:
            k = 1
            for d in p.shape:
                k *= d
            n += k
    return n


def mlp():
    paddle.enable_static()
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup):
        x = paddle.static.data("x", [8, 16, 64], "float32")
        norm, fc1, fc2 = paddle.nn.LayerNorm(64), paddle.nn.Linear(64, 256), paddle.nn.Linear(256, 64)
        y = fc2(paddle.nn.GELU()(fc1(norm(x))))
        y.mean()
    params = sum(count(l) for l in (norm, fc1, fc2))
    paddle.disable_static()
    write("mlp_block", main, params, {"x": [8, 16, 64]})


class PlainConfig(dict):
    """The config as a plain dict (dy2static recurses through PretrainedConfig)."""

    def __getattr__(self, k):
        try:
            return self[k]
        except KeyError:
            raise AttributeError(k)


class CausalLM(paddle.nn.Layer):
    """LlamaForCausalLM.forward's training path: model, head, criterion."""

    def __init__(self, m):
        super().__init__()
        self.m = m
        for sub in (m.lm_head, m.criterion):
            if hasattr(sub, "config"):
                sub.config = PlainConfig(m.config.to_dict())

    def forward(self, ids, labels):
        h = self.m.model(ids, return_dict=False)[0]
        return self.m.criterion(self.m.lm_head(h), labels)[0]


def llama(name, config, batch, seq, lazy):
    from paddleformers.transformers import LlamaForCausalLM
    if lazy:
        with paddle.LazyGuard():
            m = LlamaForCausalLM(config)
    else:
        m = LlamaForCausalLM(config)
    w = CausalLM(m)
    w.eval()
    specs = [paddle.static.InputSpec([batch, seq], "int64", "input_ids"),
             paddle.static.InputSpec([batch, seq], "int64", "labels")]
    st = paddle.jit.to_static(w, input_spec=specs, full_graph=True)
    program = st.forward.concrete_program.main_program
    cfg = {k: getattr(config, k) for k in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                                           "num_attention_heads", "num_key_value_heads", "tie_word_embeddings")}
    write(name, program, count(m), {"input_ids": [batch, seq], "labels": [batch, seq]}, cfg)
    return m


if __name__ == "__main__":
    from paddleformers.transformers import LlamaConfig
    os.makedirs(OUT, exist_ok=True)
    paddle.seed(0)
    mlp()
    small = LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64, **KW)
    small_model = llama("llama_causal_2l", small, 2, 16, lazy=False)
    # Meta Llama 3 8B's config.json (meta-llama/Meta-Llama-3-8B).
    big = LlamaConfig(vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                      num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=8192,
                      rms_norm_eps=1e-5, rope_theta=500000.0, tie_word_embeddings=False, **KW)
    llama("llama3_8b", big, 8, 8192, lazy=True)
    add_layer_flops("llama_causal_2l", small_model, small, 2, 16)
