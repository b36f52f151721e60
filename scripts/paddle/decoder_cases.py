"""Writes the SPMD cases of the modern decoder's ops (rms_norm, rotary embedding) for
spmd_probe.py, which asks PaddlePaddle 3.3.1 for its answers:

    target/paddle/bin/python scripts/paddle/decoder_cases.py > /tmp/cases.json
    target/paddle/bin/python scripts/paddle/spmd_probe.py /tmp/cases.json > OUT.json

Paddle registers rms_norm's rule as `fused_rms_norm` (x, scale; epsilon, begin_norm_axis)
and the rotary embedding's as `fused_rotary_position_embedding` (q, k, v, sin, cos,
position_ids; use_neox_rotary_style, time_major, rotary_emb_base). ShardLab's rotary op
rotates one tensor, so k, v and position_ids are empty here.
"""
import json

cases = []


def t(shape, dm):
    return {"shape": shape, "dims_mapping": dm, "partial_dims": []}


EMPTY = t([0], [-1])


def rms(note, x, scale, begin, direction="forward", outputs=None, mesh=(2, 4)):
    case = {
        "id": 5000 + len(cases),
        "op": "rms_norm",
        "rule": "fused_rms_norm",
        "direction": direction,
        "note": note,
        "mesh_shape": list(mesh),
        "attrs": {"epsilon": 1e-6, "begin_norm_axis": begin},
        "attr_order": ["epsilon", "begin_norm_axis"],
        "list_input": False,
        "inputs": [x, scale],
    }
    if outputs:
        case["outputs"] = outputs
    cases.append(case)


def rope(note, q, sin, cos, neox=False, direction="forward", outputs=None, mesh=(2, 4)):
    case = {
        "id": 5000 + len(cases),
        "op": "fused_rotary_position_embedding",
        "rule": "fused_rotary_position_embedding",
        "direction": direction,
        "note": note,
        "mesh_shape": list(mesh),
        "attrs": {"use_neox_rotary_style": neox, "time_major": False, "rotary_emb_base": 10000.0},
        "attr_order": ["use_neox_rotary_style", "time_major", "rotary_emb_base"],
        "list_input": False,
        "inputs": [q, EMPTY, EMPTY, sin, cos, EMPTY],
    }
    if outputs:
        case["outputs"] = outputs
    cases.append(case)


X = [8, 16, 64]
rms("batch and seq split, hidden replicated", t(X, [0, 1, -1]), t([64], [-1]), 2)
rms("hidden split: forced replicated", t(X, [0, -1, 1]), t([64], [-1]), 2)
rms("scale split: forced replicated", t(X, [-1, -1, -1]), t([64], [1]), 2)
rms("one mesh axis on two dims", t(X, [0, 1, 1]), t([64], [0]), 2)
rms("mesh [4]: batch split", t(X, [0, -1, -1]), t([64], [-1]), 2, mesh=(4,))
rms("rank 2", t([32, 64], [1, 0]), t([64], [-1]), 1)
# Paddle's rule keeps x's dims from begin_norm_axis to the last split (see deviations.rs).
rms("begin_norm_axis before the last dim", t(X, [0, 1, -1]), t([1024], [-1]), 1)
rms(
    "backward from y and invvar",
    t(X, [-1, -1, -1]),
    t([64], [-1]),
    2,
    "backward",
    [t(X, [0, 1, -1]), t([8, 16], [0, 1])],
)
rms(
    "backward: y's hidden split is dropped",
    t(X, [-1, -1, -1]),
    t([64], [-1]),
    2,
    "backward",
    [t(X, [1, -1, 0]), t([8, 16], [1, -1])],
)

Q = [2, 16, 8, 32]
SC = [1, 16, 1, 32]
R = t(SC, [-1, -1, -1, -1])
rope("batch and heads split", t(Q, [0, -1, 1, -1]), R, R)
rope("head_dim split: forced replicated", t(Q, [0, -1, -1, 1]), R, R)
rope("seq split: kept, sin and cos follow", t(Q, [-1, 1, -1, -1]), R, R)
rope("sin split on seq, q replicated", t(Q, [-1, -1, -1, -1]), t(SC, [-1, 0, -1, -1]), R)
rope("neox style", t(Q, [0, 1, -1, -1]), R, R, neox=True)
rope("mesh [4]: heads split", t(Q, [-1, -1, 0, -1]), R, R, mesh=(4,))
rope(
    "backward from out_q",
    t(Q, [-1, -1, -1, -1]),
    R,
    R,
    direction="backward",
    outputs=[t(Q, [0, 1, -1, -1]), EMPTY, EMPTY],
)
rope(
    "backward: head_dim split dropped",
    t(Q, [-1, -1, -1, -1]),
    R,
    R,
    direction="backward",
    outputs=[t(Q, [0, -1, 1, 1]), EMPTY, EMPTY],
)
json.dump(cases, __import__("sys").stdout, indent=1)
