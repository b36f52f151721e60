"""Runs SPMD rule cases through PaddlePaddle's own PHI rules and writes what Paddle inferred,
in the schema of tests/oracle/paddle/spmd_cases.json (`expected` or `error`).

    python3 -m venv target/paddle && target/paddle/bin/pip install paddlepaddle==3.3.1
    target/paddle/bin/python scripts/paddle/spmd_probe.py CASES.json > OUT.json

CASES.json holds cases without `expected`: {id, op, rule?, direction, note, mesh_shape, attrs,
attr_order, list_input, inputs: [{shape, dims_mapping}], outputs (backward)}.
"""
import json
import sys

import numpy as np
from paddle.distributed.fleet import auto
from paddle.framework import core
from paddle.distributed.auto_parallel.static.dist_attribute import TensorDistAttr

REDUCE = {0: "SUM", 1: "MAX", 2: "MIN", 3: "PROD", 4: "AVG"}


def spec(t, mesh):
    attr = TensorDistAttr()
    attr.process_mesh = mesh
    attr.dims_mapping = t["dims_mapping"]
    if t.get("partial_dims"):
        attr._set_partial_dims(t["partial_dims"])
    return core.DistTensorSpec(t["shape"], attr)


def flat(results):
    out = []
    for r in results:
        out.extend(r if isinstance(r, list) else [r])
    return out


def describe(a):
    partial = sorted(a._partial_dims())
    # str() prints `partial: [Partial(dims:1, MAX), ...]`.
    text = str(a).replace(" ", "")
    reduce = {}
    for d in partial:
        for name in REDUCE.values():
            if f"Partial(dims:{d},{name})" in text:
                reduce[str(d)] = name
    multi = [list(m) for m in a.multi_dims_mapping]
    return a.dims_mapping, partial, reduce, multi


def run(case):
    ids = np.arange(int(np.prod(case["mesh_shape"]))).reshape(case["mesh_shape"])
    names = [f"d{i}" for i in range(len(case["mesh_shape"]))]
    mesh = auto.ProcessMesh(ids.tolist(), dim_names=names)
    ins = [spec(t, mesh) for t in case["inputs"]]
    attrs = [case["attrs"][k] for k in case.get("attr_order", [])]
    if case.get("list_input"):
        ins = [ins]
    try:
        # `rule` names the registered PHI rule where it differs from the op (max_reduce ->
        # reduce_base); otherwise the op's own name.
        rule = core.get_phi_spmd_rule(case.get("rule") or case["op"])
        if case["direction"] == "forward":
            res = rule.infer_forward(*ins, *attrs)
        else:
            outs = [spec(t, mesh) for t in case["outputs"]]
            if case.get("list_output"):
                outs = [outs]
            res = rule.infer_backward(*ins, *outs, *attrs)
    except Exception as e:  # Paddle raised: record it
        return {"error": {"type": type(e).__name__, "message": str(e).split("\n")[0]}}
    inputs, outputs = flat(res[0]), flat(res[1])
    di = [describe(a) for a in inputs]
    do = [describe(a) for a in outputs]
    co = any(any(len(m) > 1 for m in d[3]) for d in di + do)
    exp = {
        "inputs": [d[0] for d in di],
        "inputs_partial_dims": [d[1] for d in di],
        "outputs": [
            {"dims_mapping": d[0], "partial_dims": d[1], "partial_reduce": d[2]}
            | ({"multi_dims_mapping": d[3]} if co else {})
            for d in do
        ],
        "co_shard": co,
    }
    if co:
        exp["inputs_multi_dims_mapping"] = [d[3] for d in di]
    return {"expected": exp}


cases = json.load(open(sys.argv[1]))
for c in cases:
    c.update(run(c))
json.dump(cases, sys.stdout, indent=1)
