"""Writes the ONNX import fixtures into tests/models/ (run by hand, not in CI):

    python3 -m venv target/modelsenv
    target/modelsenv/bin/pip install paddlepaddle paddleformers paddle2onnx onnx
    target/modelsenv/bin/python scripts/models/make_fixtures.py

Each fixture is built from Paddle's own layer code with random weights (no download) and
exported by paddle2onnx (`paddle.onnx.export`). Beside each `.onnx` a `.json` records what
the framework itself reports of the model (its parameter count, its operators by type, its
input and output shapes) and the package versions, which tests/import_onnx.rs holds the
import to.
"""
import json
import os
import sys
from collections import Counter

import numpy as np
import onnx
import paddle

OUT = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "models")


def versions():
    import paddle2onnx
    out = {"paddlepaddle": paddle.__version__, "paddle2onnx": paddle2onnx.__version__, "onnx": onnx.__version__}
    try:
        import paddleformers
        out["paddleformers"] = paddleformers.__version__
    except Exception as e:  # recorded, not fatal: the MLP fixture needs only Paddle
        out["paddleformers"] = "unavailable: %s" % e
    return out


def export(name, layer, specs):
    layer.eval()
    path = os.path.join(OUT, name)
    paddle.onnx.export(layer, path, input_spec=specs, opset_version=17)
    model = onnx.load(path + ".onnx")
    ops = Counter(n.op_type for n in model.graph.node)
    params = int(sum(np.prod(p.shape) for p in layer.parameters()))
    record = {
        "framework_parameters": params,
        "onnx_ops": dict(sorted(ops.items())),
        "inputs": {i.name: [d.dim_value or d.dim_param for d in i.type.tensor_type.shape.dim] for i in model.graph.input},
        "outputs": {o.name: [d.dim_value or d.dim_param for d in o.type.tensor_type.shape.dim] for o in model.graph.output},
        "versions": versions(),
    }
    with open(path + ".json", "w") as f:
        json.dump(record, f, indent=1, sort_keys=True)
        f.write("\n")
    print(name, record["onnx_ops"], params)


class Mlp(paddle.nn.Layer):
    """A transformer block's MLP from Paddle's own layers: LayerNorm, Linear, GELU, Linear."""

    def __init__(self, hidden, ffn):
        super().__init__()
        self.norm = paddle.nn.LayerNorm(hidden)
        self.fc1 = paddle.nn.Linear(hidden, ffn)
        self.act = paddle.nn.GELU()
        self.fc2 = paddle.nn.Linear(ffn, hidden)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(self.norm(x))))


def llama():
    """PaddleFormers' Llama decoder (`LlamaModel`: embedding, 2 blocks, final norm) at a
    shrunk config, for its operator census. The fused RMSNorm and rotary kernels have no
    CPU float32 version, so they are off; `LlamaForCausalLM` (with its head) makes
    paddle2onnx recurse past Python's limit and crash, so the head is left out."""
    from paddleformers.transformers import LlamaConfig, LlamaModel
    config = LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                         fuse_rms_norm=False, use_fused_rms_norm=False, use_fused_rope=False,
                         use_flash_attention=False)
    export("llama_model_2l", LlamaModel(config), [paddle.static.InputSpec([2, 16], "int64", "input_ids")])


if __name__ == "__main__":
    os.makedirs(OUT, exist_ok=True)
    sys.setrecursionlimit(100000)
    paddle.seed(0)
    export("mlp_block", Mlp(64, 256), [paddle.static.InputSpec([None, 16, 64], "float32", "x")])
    try:
        llama()
    except Exception as e:
        print("llama: not exported:", e, file=sys.stderr)
