# ---------------------------------------------------------------------------------------
# The runtime every exported script carries (shardlab/src/export/prelude.py): the ops in
# jax.numpy with ShardLab's semantics, the seeded initial values, putting each rank's
# piece together, and counting XLA's collectives. Nothing in it depends on the plan.
# ---------------------------------------------------------------------------------------
import argparse
import json
import re

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

FLOAT = {"f32": np.float32, "f64": np.float64}
RUN = {"dtype": np.float32, "int": np.int32}


def dt(name):
    """A plan dtype name as the dtype this run computes in (floats follow --dtype)."""
    if name == "i64":
        return RUN["int"]
    return RUN["dtype"]


# --- elementwise -----------------------------------------------------------------------
def binary(kind, x, y, y_shape):
    y = jnp.reshape(y, y_shape)
    if kind == "add":
        return x + y
    if kind == "sub":
        return x - y
    if kind == "mul":
        return x * y
    if kind == "div":
        return x / y
    return jnp.maximum(x, y)


SQRT_2_OVER_PI = 0.7978845608028654


def gelu(x, approximate):
    if approximate:
        return 0.5 * x * (1.0 + jnp.tanh(SQRT_2_OVER_PI * (x + 0.044715 * x * x * x)))
    return 0.5 * x * (1.0 + jax.scipy.special.erf(x / np.sqrt(2.0).astype(x.dtype)))


def silu(x):
    return x / (1.0 + jnp.exp(-x))


def scale(x, s, bias, bias_after):
    return s * x + bias if bias_after else s * (x + bias)


def vjp(f, primals, dout):
    """The gradients of f at primals for the output gradient dout (a grad op's math)."""
    return jax.vjp(f, *primals)[1](dout)


# --- shapes ----------------------------------------------------------------------------
def split(x, axis, sizes):
    cuts = np.cumsum(sizes)[:-1].tolist()
    return tuple(jnp.split(x, cuts, axis=axis))


def slice_(x, axis, start, size):
    return lax.dynamic_slice_in_dim(x, start, size, axis=axis)


def flatten_pad(x, numel):
    flat = jnp.reshape(x, (-1,))
    return jnp.pad(flat, (0, numel - flat.shape[0]))


def unpad_reshape(x, shape):
    n = int(np.prod(shape, dtype=np.int64))
    return jnp.reshape(x[:n], shape)


def coalesce(xs):
    return jnp.concatenate([jnp.reshape(x, (-1,)) for x in xs])


def uncoalesce(fused, likes):
    out, start = [], 0
    for like in likes:
        n = like.size
        out.append(jnp.reshape(fused[start:start + n], like.shape))
        start += n
    return tuple(out)


# --- normalisation and losses ----------------------------------------------------------
def softmax(x, axis):
    return jax.nn.softmax(x, axis=axis)


def causal_softmax(x):
    rows, cols = x.shape[-2], x.shape[-1]
    keep = np.arange(cols)[None, :] <= np.arange(rows)[:, None]
    return jax.nn.softmax(jnp.where(keep, x, -jnp.inf), axis=-1)


def attn_positions(n, offset, length, zigzag):
    # Original positions of stored rows [offset, offset+length) (ir::ops::attention); the
    # offset may be a rank's traced value.
    t = offset + jnp.arange(length)
    if zigzag <= 1:
        return t
    c = n // zigzag
    i, w = t // c, t % c
    orig = jnp.where(i % 2 == 0, i // 2, zigzag - 1 - (i - 1) // 2)
    return orig * c + w


def attn_scores(q, k, causal, zigzag, q_off, k_off, seq):
    # [b, h, s_q, s_k] scores of q against k (key heads repeated), masked by position.
    d, h = q.shape[3], q.shape[2]
    k = jnp.repeat(k, h // k.shape[2], axis=2)
    s = jnp.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(d)
    if causal:
        n = q.shape[1] if seq is None else seq
        qp = attn_positions(n, q_off, q.shape[1], zigzag)
        kp = attn_positions(n, k_off, k.shape[1], zigzag)
        s = jnp.where(kp[None, :] <= qp[:, None], s, -jnp.inf)
    return s


def attn_block(q, k, v, causal, zigzag, q_off=0, k_off=0, seq=None):
    # Out and log-sum-exp of one block; a row that sees no key gets 0 and -inf.
    s = attn_scores(q, k, causal, zigzag, q_off, k_off, seq)
    m = jnp.max(s, axis=-1)
    m = jnp.where(jnp.isfinite(m), m, 0.0)
    p = jnp.exp(s - m[..., None])
    z = jnp.sum(p, axis=-1)
    some = z > 0
    zs = jnp.where(some, z, 1.0)
    lse = jnp.where(some, m + jnp.log(zs), -jnp.inf)
    v = jnp.repeat(v, q.shape[2] // v.shape[2], axis=2)
    out = jnp.einsum("bhqk,bkhd->bqhd", p / zs[..., None], v)
    return out, lse


def flash_attn(q, k, v, causal, zigzag):
    return attn_block(q, k, v, causal, zigzag)


def flash_attn_grad(q, k, v, dout, causal, zigzag):
    f = lambda a, b, c: flash_attn(a, b, c, causal, zigzag)[0]
    return jax.vjp(f, q, k, v)[1](dout)


def attn_merge(o1, l1, o2, l2):
    # The online softmax: two partial results of the same rows as one.
    top = jnp.maximum(l1, l2)
    top = jnp.where(jnp.isfinite(top), top, 0.0)
    w1, w2 = jnp.exp(l1 - top), jnp.exp(l2 - top)
    z = w1 + w2
    some = z > 0
    zs = jnp.where(some, z, 1.0)
    lse = jnp.where(some, top + jnp.log(zs), -jnp.inf)
    a1 = jnp.transpose(w1 / zs, (0, 2, 1))[..., None]
    a2 = jnp.transpose(w2 / zs, (0, 2, 1))[..., None]
    return o1 * a1 + o2 * a2, lse


def ring_attn_block(q, k, v, acc, acc_lse, q_off, kv_off, seq, zigzag, causal):
    out, lse = attn_block(q, k, v, causal, zigzag, q_off, kv_off, seq)
    if acc is None:
        return out, lse
    return attn_merge(acc, acc_lse, out, lse)


def ring_attn_block_grad(q, k, v, out, lse, dout, dq, dk, dv, q_off, kv_off, seq, zigzag, causal):
    b, sk, hk, d = k.shape
    h = q.shape[2]
    g = h // hk
    s = attn_scores(q, k, causal, zigzag, q_off, kv_off, seq)
    p = jnp.exp(s - lse[..., None])
    big_d = jnp.transpose(jnp.sum(dout * out, axis=-1), (0, 2, 1))
    kr, vr = jnp.repeat(k, g, axis=2), jnp.repeat(v, g, axis=2)
    dp = jnp.einsum("bqhd,bkhd->bhqk", dout, vr)
    ds = p * (dp - big_d[..., None]) / np.sqrt(d)
    gq = jnp.einsum("bhqk,bkhd->bqhd", ds, kr)
    gk = jnp.einsum("bhqk,bqhd->bkhd", ds, q).reshape(b, sk, hk, g, d).sum(3)
    gv = jnp.einsum("bhqk,bqhd->bkhd", p, dout).reshape(b, sk, hk, g, d).sum(3)
    add = lambda acc, x: x if acc is None else acc + x
    return add(dq, gq), add(dk, gk), add(dv, gv)


def softmax_grad(y, dy, axis):
    return y * (dy - jnp.sum(dy * y, axis=axis, keepdims=True))


def layer_norm(x, s, b, begin, eps):
    axes = tuple(range(begin, x.ndim))
    mean = jnp.mean(x, axis=axes, keepdims=True)
    var = jnp.mean((x - mean) ** 2, axis=axes, keepdims=True)
    y = (x - mean) / jnp.sqrt(var + eps)
    width = x.shape[begin:]
    if s is not None:
        y = y * jnp.reshape(s, width)
    if b is not None:
        y = y + jnp.reshape(b, width)
    stats = x.shape[:begin]
    return y, jnp.reshape(mean, stats), jnp.reshape(var, stats)


def layer_norm_grad(x, s, b, dy, begin, eps):
    """(dX, dScale, dBias): the vjp of layer_norm's Y."""
    prim = [a for a in (x, s, b) if a is not None]

    def f(*args):
        it = iter(args)
        xx = next(it)
        ss = next(it) if s is not None else None
        bb = next(it) if b is not None else None
        return layer_norm(xx, ss, bb, begin, eps)[0]

    grads = iter(vjp(f, prim, dy))
    dx = next(grads)
    ds = next(grads) if s is not None else None
    db = next(grads) if b is not None else None
    return dx, ds, db


def rms_norm(x, s, begin, eps):
    axes = tuple(range(begin, x.ndim))
    inv = 1.0 / jnp.sqrt(jnp.mean(x * x, axis=axes, keepdims=True) + eps)
    y = x * inv * jnp.reshape(s, x.shape[begin:])
    return y, jnp.reshape(inv, x.shape[:begin])


def rms_norm_grad(x, s, dy, begin, eps):
    """(dX, dScale): the vjp of rms_norm's Y."""
    return vjp(lambda xx, ss: rms_norm(xx, ss, begin, eps)[0], (x, s), dy)


def rope(x, sin, cos, neox):
    """The rotary embedding of x [batch, seq, heads, head_dim] by sin and cos
    [1, seq, 1, head_dim]: adjacent pairs rotate together in the neox style, the two halves
    otherwise (rotate_half)."""
    if neox:
        pairs = jnp.reshape(x, x.shape[:-1] + (x.shape[-1] // 2, 2))
        rotated = jnp.reshape(jnp.stack([-pairs[..., 1], pairs[..., 0]], axis=-1), x.shape)
    else:
        half = x.shape[-1] // 2
        rotated = jnp.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return x * cos + rotated * sin


def lookup(w, ids, padding_idx):
    rows = jnp.take(w, jnp.clip(ids, 0, w.shape[0] - 1), axis=0)
    return jnp.where((ids == padding_idx)[..., None], 0.0, rows).astype(w.dtype)


def c_embedding(w, ids, start):
    local = ids - start
    inside = (local >= 0) & (local < w.shape[0])
    rows = jnp.take(w, jnp.clip(local, 0, w.shape[0] - 1), axis=0)
    return jnp.where(inside[..., None], rows, 0.0).astype(w.dtype)


def moe_top_k(x, k):
    """The k largest along the last axis, ties to the lower index, as k argmaxes: XLA
    partitions a sort (lax.top_k) by gathering its other dims, an argmax not."""
    values, indices = [], []
    for _ in range(k):
        i = jnp.argmax(x, axis=-1)
        values.append(jnp.take_along_axis(x, i[..., None], axis=-1)[..., 0])
        indices.append(i)
        x = jnp.where(jax.nn.one_hot(i, x.shape[-1], dtype=bool), -jnp.inf, x)
    return jnp.stack(values, axis=-1), jnp.stack(indices, axis=-1)


def moe_route(gates, k, cap, group):
    """ShardLab's drop rule (docs/moe.md): per group of `group` tokens, the choices ranked
    choice-major; a choice's position is the count of earlier choices with its expert, kept
    below `cap`. Group-major throughout (a leading group axis), so a token split into whole
    groups stays local under GSPMD. Returns (Index [k, S]: e*cap + position or -1,
    Weights [S, k])."""
    s, e = gates.shape
    g = s // group
    top_w, top_i = moe_top_k(gates.reshape(g, group, e), k)  # [g, group, k]
    expert = jnp.swapaxes(top_i, 1, 2).reshape(g, k * group)  # choice-major in a group
    choice = jax.nn.one_hot(expert, e, dtype=jnp.int32)
    pos = jnp.sum((jnp.cumsum(choice, axis=1) - 1) * choice, axis=-1)
    index = jnp.where(pos < cap, expert * cap + pos, -1).reshape(g, k, group)
    weights = jnp.where(jnp.swapaxes(index, 1, 2) >= 0, top_w, 0.0).reshape(s, k)
    return jnp.transpose(index, (1, 0, 2)).reshape(k, s), weights.astype(gates.dtype)


def moe_slots(index, weights, e, cap, group, dtype):
    """GShard's [groups, group, experts, cap] tensor of each token's kept choices: their
    weights (or ones, for the dispatch's mask) at (expert, position)."""
    k, s = index.shape
    g = s // group
    idx = jnp.transpose(index.reshape(k, g, group), (1, 2, 0))  # [g, group, k]
    w = weights.reshape(g, group, k).astype(dtype)
    at_expert = jax.nn.one_hot(jnp.where(idx >= 0, idx // cap, -1), e, dtype=dtype)
    at_slot = jax.nn.one_hot(jnp.where(idx >= 0, idx % cap, -1), cap, dtype=dtype)
    return jnp.einsum("gskE,gskC,gsk->gsEC", at_expert, at_slot, w)


def moe_dispatch(x, gates, k, cap, group):
    index, weights = moe_route(gates, k, cap, group)
    e, (s, h) = gates.shape[1], x.shape
    mask = moe_slots(index, jnp.ones_like(weights), e, cap, group, x.dtype)
    out = jnp.einsum("gsec,gsh->egch", mask, x.reshape(s // group, group, h))
    return out.reshape(e, s // group * cap, h), weights, index


def moe_combine(x, weights, index, cap, group):
    e, _, h = x.shape
    s = weights.shape[0]
    slots = moe_slots(index, weights, e, cap, group, x.dtype)
    out = jnp.einsum("gsec,egch->gsh", slots, x.reshape(e, s // group, cap, h))
    return out.reshape(s, h)


def moe_dispatch_grad(x, gates, dout, dweights, k, cap, group):
    f = lambda a, b: moe_dispatch(a, b, k, cap, group)[:2]
    out, weights = f(x, gates)
    dout = jnp.zeros_like(out) if dout is None else dout
    dweights = jnp.zeros_like(weights) if dweights is None else dweights
    return jax.vjp(f, x, gates)[1]((dout, dweights))


def moe_combine_grad(x, weights, index, dout, cap, group):
    return jax.vjp(lambda a, b: moe_combine(a, b, index, cap, group), x, weights)[1](dout)


def softmax_ce(logits, label, axis, soft):
    sm = jax.nn.softmax(logits, axis=axis)
    tiny = jnp.finfo(logits.dtype).tiny
    if soft:
        loss = -jnp.sum(label * jnp.log(jnp.maximum(sm, tiny)), axis=axis, keepdims=True)
    else:
        picked = jnp.take_along_axis(sm, label.astype(RUN["int"]), axis=axis)
        loss = -jnp.log(jnp.maximum(picked, tiny))
    return sm, loss


def softmax_ce_grad(sm, label, dloss, axis, soft):
    if soft:
        return dloss * (sm * jnp.sum(label, axis=axis, keepdims=True) - label)
    classes = lax.broadcasted_iota(RUN["int"], sm.shape, axis % sm.ndim)
    return dloss * (sm - (classes == label).astype(sm.dtype))


def c_softmax_ce(logits, label, start, axes, tag=0):
    """The vocab-parallel cross-entropy: all_reduce MAX of the row max, SUM of the target
    logit, SUM of the exp-sums, over the class axis' mesh axes."""
    logits = fence(logits, tag)
    m = kept(lax.pmax(jnp.max(logits, axis=-1, keepdims=True), axes))
    local = label - start
    inside = (local >= 0) & (local < logits.shape[-1])
    picked = jnp.take_along_axis(logits, jnp.clip(local, 0, logits.shape[-1] - 1), axis=-1)
    t = kept(lax.psum(jnp.where(inside, picked - m, 0.0).astype(logits.dtype), axes))
    e = jnp.exp(logits - m)
    s = kept(lax.psum(jnp.sum(e, axis=-1, keepdims=True), axes))
    return e / s, jnp.log(s) - t


def c_softmax_ce_grad(sm, label, dloss, start):
    cols = lax.broadcasted_iota(RUN["int"], sm.shape, sm.ndim - 1)
    return dloss * (sm - (cols == (label - start)).astype(sm.dtype))


def squared_l2_norm(x):
    return jnp.sum(x * x)


# --- optimizers and loss scaling -------------------------------------------------------
def sgd(p, g, lr):
    return p - lr * g


def momentum(p, g, v, lr, mu, nesterov):
    v = mu * v + g
    return (p - lr * (g + mu * v) if nesterov else p - lr * v), v


def adam(p, g, m1, m2, b1p, b2p, lr, beta1, beta2, eps, coeff):
    """Paddle's Adam (AdamW with coeff): returns (param, m1, m2, beta1_pow, beta2_pow)."""
    lr_t = lr * jnp.sqrt(1.0 - b2p) / (1.0 - b1p)
    if coeff != 0.0:
        p = p - lr * coeff * p
    m1 = beta1 * m1 + (1.0 - beta1) * g
    m2 = beta2 * m2 + (1.0 - beta2) * g * g
    p = p - lr_t * m1 / (jnp.sqrt(m2) + eps * jnp.sqrt(jnp.abs(1.0 - b2p)))
    return p, m1, m2, b1p * beta1, b2p * beta2


def check_finite_and_unscale(xs, s):
    found = jnp.zeros((), bool)
    for x in xs:
        found = found | ~jnp.all(jnp.isfinite(x))
    inv = 1.0 / s
    return tuple(x * inv for x in xs), found.astype(RUN["dtype"])


def update_loss_scaling(xs, found, s, good, bad, incr_every, decr_every, incr, decr):
    bad_step = found != 0
    bad1 = jnp.where(bad_step, bad + 1.0, 0.0)
    good1 = jnp.where(bad_step, 0.0, good + 1.0)
    shrink = bad_step & (bad1 >= decr_every)
    grow = (~bad_step) & (good1 >= incr_every)
    s = jnp.where(shrink, jnp.maximum(s * decr, 1.0), jnp.where(grow, s * incr, s))
    bad1 = jnp.where(shrink, 0.0, bad1)
    good1 = jnp.where(grow, 0.0, good1)
    outs = tuple(jnp.where(bad_step, jnp.zeros_like(x), x) for x in xs)
    return outs, s, good1, bad1


# --- collectives (inside shard_map; `axes` are mesh axis names) ------------------------
# XLA would merge a collective with an identical one (ZeRO-3's second gather of a
# parameter, a recomputed forward all-reduce) and drop one whose result no gradient needs
# (a bias gathered for its backward). So every collective's input gets `+ nonce * tag`
# (`nonce` a runtime zero the compiler cannot see through, `tag` the op's index: exact,
# and different for every op), and every result feeds a scalar the step returns: the
# compiled program runs exactly the collectives ShardLab planned.
TRACE = {"nonce": None, "keep": []}


def fence(x, tag):
    if TRACE["nonce"] is None or not jnp.issubdtype(x.dtype, jnp.floating):
        return x
    return x + (TRACE["nonce"] * tag).astype(x.dtype)


def kept(out):
    TRACE["keep"].append(out)
    return out


def keep_sum():
    total = jnp.zeros((), RUN["dtype"])
    for o in TRACE["keep"]:
        total = total + jnp.sum(o).astype(RUN["dtype"])
    TRACE["keep"] = []
    return total


def all_reduce(x, kind, axes, tag=0):
    x = fence(x, tag)
    if kind == "SUM":
        return kept(lax.psum(x, axes))
    if kind == "MAX":
        return kept(lax.pmax(x, axes))
    if kind == "MIN":
        return kept(lax.pmin(x, axes))
    return kept(lax.pmean(x, axes))


def all_gather(x, axis, axes, tag=0):
    x = fence(x, tag)
    return kept(lax.all_gather(x, axes, axis=axis, tiled=True))


def reduce_scatter(x, axis, axes, tag=0):
    x = fence(x, tag)
    return kept(lax.psum_scatter(x, axes, scatter_dimension=axis, tiled=True))


def all_to_all(x, split_axis, concat_axis, axes, tag=0):
    x = fence(x, tag)
    return kept(lax.all_to_all(x, axes, split_axis, concat_axis, tiled=True))


def ppermute(xs, shift, axes, tag=0):
    # Each member's tensors to the member `shift` places on along the axes' ring, in one
    # buffer (one collective-permute per op, as the ledger counts it).
    n = lax.psum(1, axes)
    perm = [(i, (i + shift) % n) for i in range(n)]
    flat = jnp.concatenate([jnp.ravel(x) for x in xs])
    got = kept(lax.ppermute(fence(flat, tag), axes, perm))
    out, at = [], 0
    for x in xs:
        out.append(got[at:at + x.size].reshape(x.shape))
        at += x.size
    return out


# --- seeded values (ShardLab's exec/init.rs: splitmix64 of the name's FNV hash) --------
M64 = (1 << 64) - 1


def name_seed(seed, name):
    h = seed ^ 0xCBF29CE484222325
    for b in name.encode():
        h = ((h ^ b) * 0x100000001B3) & M64
    return h


def uniform(seed, index):
    """ShardLab's uniform numbers in [0, 1) for flat indices (numpy uint64, wrapping)."""
    with np.errstate(over="ignore"):
        z = np.uint64(seed) + index.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    return (z >> np.uint64(11)).astype(np.float64) / float(1 << 53)


def initial_value(name, spec):
    """A source variable's initial global value from its recipe (see SOURCES)."""
    shape, dtype, (kind, a) = spec
    n = int(np.prod(shape, dtype=np.int64))
    if kind == "const":
        vals = np.full(n, a, np.float64)
    else:
        # A tied parameter's copy on a later pipeline stage (`wte@TIED@7`) starts as its
        # parameter does (exec/init.rs, passes/pipeline/tied.rs).
        base = name.split("@TIED@")[0]
        u = uniform(name_seed(SEED, base), np.arange(n, dtype=np.uint64))
        if kind == "ints":
            vals = np.minimum(np.floor(u * a), a - 1.0)
        else:
            vals = a * (2.0 * u - 1.0)
    if dtype == "i64":
        return vals.astype(np.int64).reshape(shape)
    return vals.astype(FLOAT[dtype]).reshape(shape)


def dropout_mask(seed, p, shape):
    u = uniform(seed, np.arange(int(np.prod(shape, dtype=np.int64)), dtype=np.uint64))
    return np.where(u >= p, 1.0 / (1.0 - p), 0.0).reshape(shape)


# --- the mesh and each rank's pieces ---------------------------------------------------
def make_mesh(shape, axes, ranks):
    devices = jax.devices()
    if len(devices) < len(ranks):
        raise SystemExit(
            f"error: the plan's mesh needs {len(ranks)} devices, JAX has {len(devices)} "
            f"({devices[0].platform}); set XLA_FLAGS=--xla_force_host_platform_device_count="
            f"{len(ranks)} before starting Python"
        )
    picked = np.array([devices[r] for r in ranks], dtype=object).reshape(shape)
    return Mesh(picked, axes)


def coords(pos, shape):
    return [int(c) for c in np.unravel_index(pos, shape)]


def block_index(c, axes, shape):
    b = 0
    for a in axes:
        b = b * shape[a] + c[a]
    return b


def shard(x, dims, c, shape):
    """The block of global x that mesh coordinates c hold, dims[d] splitting dim d."""
    for d, axes in enumerate(dims):
        n = int(np.prod([shape[a] for a in axes], dtype=np.int64))
        if n > 1:
            piece = x.shape[d] // n
            b = block_index(c, axes, shape)
            x = np.take(x, np.arange(b * piece, (b + 1) * piece), axis=d)
    return x


def group_members(pos, axes, shape):
    """The mesh positions of pos's group along axes, in collective order."""
    c = coords(pos, shape)
    out = []
    for q in range(int(np.prod(shape, dtype=np.int64))):
        d = coords(q, shape)
        if all(d[a] == c[a] for a in range(len(shape)) if a not in axes):
            out.append((block_index(d, axes, shape), q))
    return [q for _, q in sorted(out)]


def feed(value, recipe, pos, shape):
    """What mesh position pos starts with for one fed variable."""
    c = coords(pos, shape)
    local = shard(value, recipe["dims"], c, shape)
    zero = recipe.get("zero")
    if zero is None:
        return local
    member = group_members(pos, zero["axes"], shape).index(pos)
    flat = np.zeros(zero["shard"] * len(group_members(pos, zero["axes"], shape)), local.dtype)
    flat[: local.size] = local.reshape(-1)
    return flat[member * zero["shard"]:(member + 1) * zero["shard"]]


REDUCE = {"SUM": np.add, "AVG": np.add, "MAX": np.maximum, "MIN": np.minimum}


def gather(locals_, recipe, global_shape, shape):
    """Every replica of a variable from each mesh position's local value (ShardLab's
    exec/gather.rs): blocks placed, partial values reduced, one copy per coordinate on
    the axes that neither split nor reduce it. Coordinate 0's copy comes first."""
    zero = recipe.get("zero")
    if zero is not None:
        rebuilt = []
        for pos in range(len(locals_)):
            members = group_members(pos, zero["axes"], shape)
            flat = np.concatenate([np.reshape(locals_[q], -1) for q in members])
            rebuilt.append(flat[: zero["numel"]].reshape(zero["local_shape"]))
        locals_ = rebuilt
    dims, partial = recipe["dims"], recipe["partial"]
    split_axes = {a for axes in dims for a in axes}
    partial_axes = {a for a, _ in partial}
    kinds = {k for _, k in partial}
    op = REDUCE[kinds.pop()] if kinds else None
    copies = {}
    for pos, local in enumerate(locals_):
        c = coords(pos, shape)
        key = tuple(c[a] for a in range(len(shape)) if a not in split_axes | partial_axes)
        out = copies.setdefault(key, [np.zeros(global_shape, np.float64), None])
        index = []
        for d, axes in enumerate(dims):
            n = local.shape[d]
            b = block_index(c, axes, shape)
            index.append(slice(b * n, (b + 1) * n))
        block = np.asarray(local, np.float64)
        if op is None:
            out[0][tuple(index)] = block
        else:
            seen = out[1] if out[1] is not None else np.zeros(global_shape, bool)
            region = out[0][tuple(index)]
            out[0][tuple(index)] = np.where(seen[tuple(index)], op(region, block), block)
            seen[tuple(index)] = True
            out[1] = seen
    count = int(np.prod([shape[a] for a in partial_axes], dtype=np.int64)) if partial else 1
    result = []
    for key in sorted(copies):
        value = copies[key][0]
        if partial and partial[0][1] == "AVG":
            value = value / count
        result.append(value)
    return result


# --- XLA's collectives -----------------------------------------------------------------
KINDS = ["all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute"]
INSTR = re.compile(
    r"=\s*(\([^()]*\)|\S+)\s+(all-reduce|all-gather|reduce-scatter|all-to-all|"
    r"collective-permute)(-start)?\("
)


def mesh_groups(line):
    """Groups in Shardy's form `replica_groups=mesh['a'=2,'b'=4] {'b'}`: devices numbered
    row-major over the mesh, one group per coordinate of the axes not listed."""
    m = re.search(r"replica_groups=mesh\[([^\]]*)\]\s*\{([^}]*)\}", line)
    if not m:
        return None
    axes = re.findall(r"'([^']+)'=(\d+)", m.group(1))
    names = [a for a, _ in axes]
    sizes = [int(n) for _, n in axes]
    inside = [names.index(a) for a in re.findall(r"'([^']+)'", m.group(2)) if a in names]
    ids = np.arange(int(np.prod(sizes))).reshape(sizes)
    outside = [d for d in range(len(sizes)) if d not in inside]
    moved = ids.transpose(outside + inside)
    return moved.reshape(-1, int(np.prod([sizes[d] for d in inside]))).tolist()


def replica_groups(line, ranks):
    """The groups of one HLO collective as rank lists (explicit, iota or mesh form)."""
    named = mesh_groups(line)
    if named is not None:
        return [[ranks[i] for i in g] for g in named]
    m = re.search(r"replica_groups=\{(\{[\d,]*\}(?:,\{[\d,]*\})*)\}", line)
    if m:
        groups = [[int(x) for x in g.split(",") if x] for g in re.findall(r"\{([\d,]*)\}", m.group(1))]
    else:
        m = re.search(r"replica_groups=\[([\d,]+)\]<=\[([\d,]+)\](?:T\(([\d,]+)\))?", line)
        if not m:
            pairs = re.search(r"source_target_pairs=\{(.*?)\}\}?", line)
            if pairs:
                return [[int(a), int(b)] for a, b in re.findall(r"\{(\d+),(\d+)\}", line)]
            return [list(range(len(ranks)))]
        out = [int(x) for x in m.group(1).split(",")]
        dims = [int(x) for x in m.group(2).split(",")]
        ids = np.arange(int(np.prod(dims))).reshape(dims)
        if m.group(3):
            ids = ids.transpose([int(x) for x in m.group(3).split(",")])
        groups = ids.reshape(out).tolist()
    return [[ranks[i] for i in g] for g in groups]


def count_collectives(hlo, ranks):
    """XLA's collectives per kind from optimised HLO text: a tuple all-reduce counts as
    its logical elements (a tuple all-to-all once: its operands are the pieces for each
    peer), and the -start form of an async collective counts once.
    `backward` counts those jax.grad's backward pass emitted (gspmd mode; in shard_map
    mode our backward ops are ordinary ops to JAX)."""
    counts = {k: {"count": 0, "backward": 0, "groups": []} for k in KINDS}
    for line in hlo.splitlines():
        m = INSTR.search(line)
        if not m:
            continue
        kind = m.group(2)
        result = m.group(1)
        elements = result.count("[") if result.startswith("(") else 1
        if kind == "all-to-all":
            # A tuple all-to-all is one exchange, its operands the pieces for each peer.
            elements = 1
        if m.group(3) and kind != "all-reduce" and result.startswith("("):
            # An async all-gather (or permute) start returns (operands, results[, context]):
            # its logical count is that of its operands. all-reduce-start returns results.
            elements = max(1, elements // 2)
        counts[kind]["count"] += elements
        if "transpose(" in line:
            # jax.grad's backward: its ops carry transpose(jvp(...)) in their op_name.
            counts[kind]["backward"] += elements
        g = replica_groups(line, ranks)
        if g not in counts[kind]["groups"]:
            counts[kind]["groups"].append(g)
    return counts


def merge_counts(counts, got):
    """Adds one compiled function's collective counts to a running total."""
    for kind in KINDS:
        counts[kind]["count"] += got[kind]["count"]
        counts[kind]["backward"] += got[kind]["backward"]
        for g in got[kind]["groups"]:
            if g not in counts[kind]["groups"]:
                counts[kind]["groups"].append(g)


def report(args, losses, spread, counts):
    """The one JSON line every run prints."""
    print(json.dumps({
        "mode": MODE,
        "dtype": args.dtype,
        "steps": args.steps,
        "losses": losses,
        "max_replica_difference": spread,
        "simulated_devices": SIMULATED,
        "collectives": counts,
    }))


# --- files -----------------------------------------------------------------------------
def read_inputs(directory):
    """Global values from <var>.npy files, for the variables this plan reads."""
    import os

    found = {}
    for name in SOURCES:
        path = os.path.join(directory, name + ".npy")
        if os.path.exists(path):
            value = np.load(path)
            want = tuple(SOURCES[name][0])
            if value.shape != want:
                raise SystemExit(f"error: {path} has shape {value.shape}, `{name}` is {list(want)}")
            found[name] = value
    return found


def host(x):
    """x's global value in this process (gathered from every process's devices when the
    run spans several)."""
    if getattr(x, "is_fully_addressable", True):
        return np.asarray(x)
    from jax.experimental import multihost_utils

    return np.asarray(multihost_utils.process_allgather(x, tiled=True))


def write_npy(directory, name, value, dtype):
    import os

    os.makedirs(directory, exist_ok=True)
    np.save(os.path.join(directory, name + ".npy"), np.asarray(value, dtype=FLOAT[dtype]))


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--inputs", metavar="DIR", help="read <var>.npy global values from DIR")
    ap.add_argument("--dump", metavar="DIR", help="write loss.npy, grad.<param>.npy, <param>.npy")
    ap.add_argument("--dump-init", metavar="DIR", help="write every initial global value")
    ap.add_argument("--steps", type=int, default=1)
    ap.add_argument("--dtype", choices=["f32", "f64"], default=PLAN_DTYPE)
    ap.add_argument("--coordinator", metavar="HOST:PORT", help="process 0's address (several processes)")
    ap.add_argument("--num-processes", type=int, default=1, help="processes of one run, one per host")
    ap.add_argument("--process-id", type=int, default=0, help="this process, 0 to N-1")
    args = ap.parse_args(argv)
    if args.steps < 1:
        ap.error("--steps must be at least 1")
    if args.num_processes > 1:
        if not args.coordinator or not 0 <= args.process_id < args.num_processes:
            ap.error("--num-processes needs --coordinator and a --process-id from 0 to N-1")
        if N_DEVICES % args.num_processes:
            ap.error(f"{N_DEVICES} devices do not split over {args.num_processes} processes")
        # Collectives between processes on CPU go over gloo (TCP).
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        jax.distributed.initialize(
            coordinator_address=args.coordinator,
            num_processes=args.num_processes,
            process_id=args.process_id,
        )
    if args.dtype == "f64":
        jax.config.update("jax_enable_x64", True)
        RUN["dtype"], RUN["int"] = np.float64, np.int64
    else:
        jax.config.update("jax_enable_x64", False)
        RUN["dtype"], RUN["int"] = np.float32, np.int32
    return args


def initial_globals(args):
    given = read_inputs(args.inputs) if args.inputs else {}
    values = {}
    for name, spec in SOURCES.items():
        v = given.get(name)
        if v is None:
            v = initial_value(name, spec)
        if spec[1] == "i64":
            values[name] = np.asarray(v).astype(RUN["int"])
        else:
            values[name] = np.asarray(v).astype(RUN["dtype"])
    if args.dump_init:
        for name, v in values.items():
            import os

            os.makedirs(args.dump_init, exist_ok=True)
            np.save(os.path.join(args.dump_init, name + ".npy"), v)
    return values


def matmul(x, y, tx, ty):
    if tx and x.ndim >= 2:
        x = jnp.swapaxes(x, -1, -2)
    if ty and y.ndim >= 2:
        y = jnp.swapaxes(y, -1, -2)
    return jnp.matmul(x, y)


def add_n(xs):
    out = xs[0]
    for x in xs[1:]:
        out = out + x
    return out


# --- running -----------------------------------------------------------------------------
def stacked_feed(name, values, positions, shape):
    """Each mesh position's starting value of fed variable `name`, stacked on axis 0."""
    recipe = FEEDS[name]
    if "mask" in recipe:
        seed, p = recipe["mask"]
        whole = dropout_mask(seed, p, recipe["global_shape"]).astype(RUN["dtype"])
    else:
        whole = values[recipe["source"]]
    return np.stack([feed(whole, recipe, pos, shape) for pos in positions])


def assemble(stacked, recipe, shape):
    """Every replica of one recorded variable from its per-rank stack."""
    locals_ = [np.asarray(stacked[i]) for i in range(stacked.shape[0])]
    return gather(locals_, recipe, recipe["global_shape"], shape)


def replica_spread(copies):
    worst = 0.0
    for c in copies[1:]:
        d = np.max(np.abs(c - copies[0])) if c.size else 0.0
        worst = max(worst, float(d) if np.isfinite(d) else float("inf"))
    return worst


def record_names():
    names = [RECORDS["loss"]["var"]]
    names += [r["var"] for _, r in RECORDS["grads"]] + [r["var"] for _, r in RECORDS["params"]]
    return names


def finish(args, first, last, losses, counts, shape):
    """Writes the dump and prints the JSON line from per-rank stacks of the first step
    (`first`) and the last (`last`)."""
    spread = 0.0
    dump = {}
    copies = assemble(first[RECORDS["loss"]["var"]], RECORDS["loss"], shape)
    spread = max(spread, replica_spread(copies))
    dump["loss"] = copies[0]
    for param, r in RECORDS["grads"]:
        copies = assemble(first[r["var"]], r, shape)
        spread = max(spread, replica_spread(copies))
        dump["grad." + param] = copies[0]
    for param, r in RECORDS["params"]:
        copies = assemble(last[r["var"]], r, shape)
        spread = max(spread, replica_spread(copies))
        dump[param] = copies[0]
    if args.dump:
        for name, value in dump.items():
            write_npy(args.dump, name, value, args.dtype)
    report(args, losses, spread, counts)


def run_shard_map(args):
    values = initial_globals(args)
    mesh = make_mesh(MESH_SHAPE, AXES, RANKS)
    positions = range(len(RANKS))
    names = list(FEEDS)
    spec = NamedSharding(mesh, P(tuple(AXES)))
    ins = [jax.device_put(stacked_feed(k, values, positions, MESH_SHAPE), spec) for k in names]
    outs = list(dict.fromkeys(STATE + record_names()))

    ins.append(jax.device_put(np.zeros(len(RANKS), RUN["dtype"]), spec))

    def body(*xs):
        TRACE["nonce"], TRACE["keep"] = xs[-1][0], []
        v = {k: x[0] for k, x in zip(names, xs)}
        v = rank_step(v, lax.axis_index(tuple(AXES)))
        return tuple(v[k][None] for k in outs) + (keep_sum()[None],)

    step = jax.jit(jax.shard_map(
        body, mesh=mesh, in_specs=(P(tuple(AXES)),) * (len(names) + 1),
        out_specs=(P(tuple(AXES)),) * (len(outs) + 1), check_vma=False))
    counts = count_collectives(step.lower(*ins).compile().as_text(), RANKS)
    first, losses = None, []
    loss_var = RECORDS["loss"]
    for s in range(args.steps):
        got = dict(zip(outs, step(*ins)[:-1]))
        got = {k: host(x) for k, x in got.items()}
        losses.append(float(assemble(got[loss_var["var"]], loss_var, MESH_SHAPE)[0]))
        if first is None:
            first = got
        ins = [jax.device_put(got[k], spec) if k in STATE else x for k, x in zip(names, ins[:-1])]
        ins.append(jax.device_put(np.zeros(len(RANKS), RUN["dtype"]), spec))
    finish(args, first, got, losses, counts, MESH_SHAPE)


CURRENT = {}


def constrain(x, spec):
    """Pins x to a layout (gspmd mode): XLA must honour it at this point."""
    return lax.with_sharding_constraint(x, NamedSharding(CURRENT["mesh"], P(*spec)))


def padded_shape(shape, spec):
    """shape with each dim rounded up to a multiple of the shards its spec cuts it into: XLA
    needs even shards at a jit boundary, so an uneven dim (torch.chunk's rule, ShardLab's)
    crosses it padded with zeros and is sliced back inside."""
    out = []
    for d, n in enumerate(shape):
        axes = spec[d] if d < len(spec) else None
        axes = () if axes is None else ((axes,) if isinstance(axes, str) else tuple(axes))
        k = int(np.prod([MESH_SHAPE[AXES.index(a)] for a in axes], dtype=np.int64))
        out.append(-(-n // k) * k)
    return tuple(out)


def pad_to(x, shape):
    """x zero-padded at the end of each dim to shape (numpy outside jit, jnp inside)."""
    widths = [(0, t - n) for n, t in zip(x.shape, shape)]
    if all(w == 0 for _, w in widths):
        return x
    return (np if isinstance(x, np.ndarray) else jnp).pad(x, widths)


def unpad(x, shape):
    """The first shape[d] elements of each dim of x (the real ones of a padded array)."""
    if tuple(x.shape) == tuple(shape):
        return x
    return x[tuple(slice(0, n) for n in shape)]


def run_gspmd(args):
    values = initial_globals(args)
    mesh = make_mesh(MESH_SHAPE, AXES, RANKS)
    CURRENT["mesh"] = mesh

    def sh(spec):
        return NamedSharding(mesh, P(*spec))

    for name, (seed, p, shape) in MASKS.items():
        values[name] = dropout_mask(seed, p, shape).astype(RUN["dtype"])
    shapes = {k: tuple(np.shape(values[k])) for k in {**STATE, **CONSTS}}
    padded = {k: padded_shape(shapes[k], s) for k, s in {**STATE, **CONSTS}.items()}
    state = {k: jax.device_put(pad_to(np.asarray(values[k]), padded[k]), sh(s)) for k, s in STATE.items()}
    consts = {k: jax.device_put(pad_to(np.asarray(values[k]), padded[k]), sh(s)) for k, s in CONSTS.items()}

    def train_step(state, consts):
        state = {k: unpad(x, shapes[k]) for k, x in state.items()}
        consts = {k: unpad(x, shapes[k]) for k, x in consts.items()}
        params = {k: state[k] for k in PARAMS}
        rest = dict(consts)
        rest.update({k: x for k, x in state.items() if k not in params})

        def loss_fn(params):
            v = forward({**rest, **params})
            return v[LOSS], v[REPORTED]

        (_, reported), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
        v = {**rest, **params, REPORTED: reported}
        for p, g in GRADS.items():
            v[g] = grads[p]
        v = optimizer(v)
        return (
            {k: pad_to(v[k], padded[k]) for k in STATE},
            v[REPORTED],
            {p: pad_to(v[g], padded[p]) for p, g in GRADS.items()},
        )

    state_sh = {k: sh(s) for k, s in STATE.items()}
    step = jax.jit(
        train_step,
        in_shardings=(state_sh, {k: sh(s) for k, s in CONSTS.items()}),
        out_shardings=(state_sh, sh(()), {p: state_sh[p] for p in GRADS}),
    )
    counts = count_collectives(step.lower(state, consts).compile().as_text(), RANKS)
    losses, dump = [], {}
    for s in range(args.steps):
        state, loss, grads = step(state, consts)
        losses.append(float(host(loss)))
        if s == 0:
            dump["loss"] = host(loss)
            for p, g in grads.items():
                dump["grad." + p] = unpad(host(g), shapes[p])
    for p in GRADS:
        dump[p] = unpad(host(state[p]), shapes[p])
    if args.dump:
        for name, value in dump.items():
            write_npy(args.dump, name, value, args.dtype)
    report(args, losses, 0.0, counts)


def run_pipeline_shard_map(args):
    """Stage by stage: each job's pieces jitted on the stage's devices, sends moved to the
    receiving stage with device_put, micro-batches in order, then the optimizer jobs in
    lockstep (the host runs the collectives that span stages between their pieces)."""
    if args.num_processes > 1:
        raise SystemExit("error: a pipelined plan runs in one process (the host drives its stages)")
    values = initial_globals(args)
    meshes = [make_mesh(st["shape"], st["axes"], st["ranks"]) for st in STAGES]
    specs = [NamedSharding(m, P(tuple(st["axes"]))) for m, st in zip(meshes, STAGES)]
    n_stages = len(STAGES)
    env = [{} for _ in STAGES]
    for s, st in enumerate(STAGES):
        positions = range(len(st["ranks"]))
        for name, recipe in FEEDS[s].items():
            if recipe.get("micro_batch"):
                continue
            env[s][name] = jax.device_put(
                stacked_feed_of(FEEDS[s], name, values, positions, st["shape"]), specs[s])
    compiled, counts = {}, {k: {"count": 0, "backward": 0, "groups": []} for k in KINDS}
    fns = globals()

    def jitted(s, piece):
        name = piece["fn"]
        if name not in compiled:
            body_fn, ins, outs = fns[name], piece["ins"], piece["outs"]
            axes = tuple(STAGES[s]["axes"])

            def body(*xs):
                TRACE["nonce"], TRACE["keep"] = xs[-1][0], []
                v = {k: x[0] for k, x in zip(ins, xs)}
                v = body_fn(v, lax.axis_index(axes))
                return tuple(v[k][None] for k in outs) + (keep_sum()[None],)

            compiled[name] = jax.jit(jax.shard_map(
                body, mesh=meshes[s], in_specs=(P(axes),) * (len(ins) + 1),
                out_specs=(P(axes),) * (len(outs) + 1), check_vma=False))
            compiled[name + ".counted"] = False
        return compiled[name]

    def run_piece(s, piece, m, mb, mailbox):
        per_mb = set(PER_MICRO_BATCH[s])
        args_ = []
        for k in piece["ins"]:
            if k.startswith("__recv_op"):
                args_.append(mailbox.pop((s, k, m)))
            elif k in per_mb and m is not None:
                args_.append(mb[m][s][k])
            else:
                args_.append(env[s][k])
        fn = jitted(s, piece)
        args_.append(jax.device_put(np.zeros(len(STAGES[s]["ranks"]), RUN["dtype"]), specs[s]))
        if not compiled[piece["fn"] + ".counted"]:
            got = count_collectives(fn.lower(*args_).compile().as_text(), STAGES[s]["ranks"])
            merge_counts(counts, got)
            compiled[piece["fn"] + ".counted"] = True
        for k, x in zip(piece["outs"], fn(*args_)[:-1]):
            if k.startswith("__send_op"):
                t, recv = ROUTES[(s, k)]
                mailbox[(t, recv, m)] = jax.device_put(x, specs[t])
            elif k in per_mb and m is not None:
                mb[m][s][k] = x
            else:
                env[s][k] = x

    def run_host(pieces_by_stage):
        """One collective spanning stages: every rank's value reduced over its group. Each
        stage names its own operand (a tied parameter's copies have their own names)."""
        xs = {s: p["x"] for s, p in pieces_by_stage}
        for s, p in pieces_by_stage:
            red = REDUCE[p["host"]]
            out = []
            for pos, group in enumerate(p["groups"]):
                acc = None
                for t, q in group:
                    x = np.asarray(env[t][xs[t]])[q]
                    acc = x if acc is None else red(acc, x)
                if p["host"] == "AVG":
                    acc = acc / len(group)
                out.append(acc)
            env[s]["__host_" + p["out"]] = np.stack(out)
        for s, p in pieces_by_stage:
            env[s][p["out"]] = jax.device_put(env[s].pop("__host_" + p["out"]), specs[s])

    def run_optimizer(mb, mailbox):
        """Each stage's optimizer job: its jitted pieces in order, and each host-run
        collective once every stage its groups span has reached its own (a tied
        parameter's all-reduce spans only the tied stages, the global norm's all of them)."""
        at = [0] * n_stages
        while True:
            for s in range(n_stages):
                job = JOBS[s]["optimizer"]
                while at[s] < len(job) and "host" not in job[at[s]]:
                    run_piece(s, job[at[s]], None, mb, mailbox)
                    at[s] += 1
            waiting = {s: JOBS[s]["optimizer"][at[s]] for s in range(n_stages) if at[s] < len(JOBS[s]["optimizer"])}
            if not waiting:
                return
            spans = {s: sorted({t for g in p["groups"] for t, _ in g}) for s, p in waiting.items()}
            ready = [s for s in waiting if all(t in waiting and spans[t] == spans[s] for t in spans[s])]
            if not ready:
                raise RuntimeError("host-run collectives wait on each other: %r" % spans)
            span = spans[ready[0]]
            run_host([(t, waiting[t]) for t in span])
            for t in span:
                at[t] += 1

    losses, first = [], None
    whole = {k: values[k] for k in values}
    for step in range(args.steps):
        mb = [[{} for _ in STAGES] for _ in range(MICRO_BATCHES)]
        mailbox, acc = {}, [{} for _ in STAGES]
        for m in range(MICRO_BATCHES):
            for s, st in enumerate(STAGES):
                positions = range(len(st["ranks"]))
                for name, recipe in FEEDS[s].items():
                    if recipe.get("micro_batch"):
                        full = whole[recipe["source"]]
                        rows = full.shape[0] // MICRO_BATCHES
                        piece = full[m * rows:(m + 1) * rows]
                        mb[m][s][name] = jax.device_put(np.stack(
                            [feed(piece, recipe, pos, st["shape"]) for pos in positions]), specs[s])
            for c in range(CHUNKS):
                for s in range(n_stages):
                    for piece in JOBS[s]["forward%d" % c]:
                        run_piece(s, piece, m, mb, mailbox)
            for c in reversed(range(CHUNKS)):
                for s in reversed(range(n_stages)):
                    for piece in JOBS[s]["backward%d" % c]:
                        run_piece(s, piece, m, mb, mailbox)
            for s in range(n_stages):
                for k in ACCUMULATED[s]:
                    if k in mb[m][s]:
                        acc[s][k] = mb[m][s][k] if k not in acc[s] else acc[s][k] + mb[m][s][k]
        for s in range(n_stages):
            env[s].update(acc[s])
        ls = LOSS_STAGE
        env[ls][LOSS] = sum(mb[m][ls][LOSS] for m in range(MICRO_BATCHES)) / MICRO_BATCHES
        run_optimizer(mb, mailbox)
        snap = [{k: np.asarray(x) for k, x in e.items()} for e in env]
        rec = RECORDS["loss"]
        losses.append(float(gather([snap[rec["stage"]][rec["var"]][i] for i in range(len(STAGES[rec["stage"]]["ranks"]))], rec, rec["global_shape"], STAGES[rec["stage"]]["shape"])[0]))
        if first is None:
            first = snap
    finish_staged(args, first, snap, losses, counts)


def stacked_feed_of(feeds, name, values, positions, shape):
    recipe = feeds[name]
    if "mask" in recipe:
        seed, p = recipe["mask"]
        whole = dropout_mask(seed, p, recipe["global_shape"]).astype(RUN["dtype"])
    else:
        whole = values[recipe["source"]]
    return np.stack([feed(whole, recipe, pos, shape) for pos in positions])


def finish_staged(args, first, last, losses, counts):
    def value(snap, rec):
        st = STAGES[rec["stage"]]
        stacked = snap[rec["stage"]][rec["var"]]
        copies = gather([stacked[i] for i in range(stacked.shape[0])], rec, rec["global_shape"], st["shape"])
        return copies

    spread, dump = 0.0, {}
    for key, snap, rec in [("loss", first, RECORDS["loss"])] + [
            ("grad." + p, first, r) for p, r in RECORDS["grads"]] + [
            (p, last, r) for p, r in RECORDS["params"]]:
        copies = value(snap, rec)
        spread = max(spread, replica_spread(copies))
        dump[key] = copies[0]
    if args.dump:
        for name, v in dump.items():
            write_npy(args.dump, name, v, args.dtype)
    report(args, losses, spread, counts)


def run_pipeline_gspmd(args):
    """Each virtual stage's forward jitted on its stage's devices, its backward the vjp of
    the same function (recomputing the forward), activations and their gradients moved
    between stages with device_put; gradients summed over micro-batches; the optimizer
    step jitted once over the whole mesh."""
    if args.num_processes > 1:
        raise SystemExit("error: a pipelined plan runs in one process (the host drives its stages)")
    values = initial_globals(args)
    full = make_mesh(MESH_SHAPE, AXES, RANKS)
    CURRENT["mesh"] = full
    meshes = [make_mesh(st["shape"], st["axes"], st["ranks"]) for st in STAGES]
    data = [k for k in SPECS if k in SOURCES]

    def on(mesh, spec):
        return NamedSharding(mesh, P(*spec))

    def spec_of(name):
        return STATE.get(name, CONSTS.get(name, SPECS.get(name, ())))

    for name, (seed, p, shape) in MASKS.items():
        values[name] = dropout_mask(seed, p, shape).astype(RUN["dtype"])
    state = {k: jax.device_put(values[k], on(full, s)) for k, s in STATE.items()}
    consts = {k: jax.device_put(values[k], on(full, s)) for k, s in CONSTS.items() if k not in data}
    counts = {k: {"count": 0, "backward": 0, "groups": []} for k in KINDS}
    compiled = {}

    def add_counts(fn, a, ranks):
        got = count_collectives(fn.lower(*a).compile().as_text(), ranks)
        merge_counts(counts, got)

    def stage_fns(k):
        if k in compiled:
            return compiled[k]
        vs = VSTAGES[k]
        body, diff = globals()[vs["fn"]], vs["diff"]
        rest = [n for n in vs["ins"] if n not in diff]

        def fwd(d, r):
            v = body({**dict(zip(rest, r)), **dict(zip(diff, d))})
            return tuple(v[n] for n in vs["outs"])

        def bwd(d, r, cts):
            return jax.vjp(lambda dd: fwd(dd, r), d)[1](cts)[0]

        CURRENT["mesh"] = meshes[vs["stage"]]
        compiled[k] = (jax.jit(fwd), jax.jit(bwd), rest)
        return compiled[k]

    losses, dump = [], {}
    for step in range(args.steps):
        acc = {}
        reported = []
        for m in range(MICRO_BATCHES):
            acts = {}
            for name in data:
                whole = values[name]
                rows = whole.shape[0] // MICRO_BATCHES
                acts[name] = whole[m * rows:(m + 1) * rows]
            saved = []
            for k, vs in enumerate(VSTAGES):
                fwd, _, rest = stage_fns(k)
                mesh = meshes[vs["stage"]]

                def get(n):
                    x = state[n] if n in state else consts[n] if n in consts else acts[n]
                    return jax.device_put(x, on(mesh, spec_of(n)))

                d = tuple(get(n) for n in vs["diff"])
                r = tuple(get(n) for n in rest)
                CURRENT["mesh"] = mesh
                if step == 0 and m == 0:
                    add_counts(fwd, (d, r), STAGES[vs["stage"]]["ranks"])
                outs = fwd(d, r)
                acts.update(zip(vs["outs"], outs))
                saved.append((d, r, outs))
            reported.append(np.asarray(acts[REPORTED]))
            cts = {LOSS: None}
            for k in reversed(range(len(VSTAGES))):
                vs = VSTAGES[k]
                _, bwd, _ = stage_fns(k)
                mesh = meshes[vs["stage"]]
                d, r, outs = saved[k]
                ct = []
                for n, o in zip(vs["outs"], outs):
                    if n == LOSS:
                        ct.append(jnp.full(o.shape, 1.0 / MICRO_BATCHES, o.dtype))
                    elif cts.get(n) is not None:
                        ct.append(jax.device_put(cts[n], o.sharding))
                    else:
                        ct.append(jnp.zeros(o.shape, o.dtype))
                CURRENT["mesh"] = mesh
                if step == 0 and m == 0:
                    add_counts(bwd, (d, r, tuple(ct)), STAGES[vs["stage"]]["ranks"])
                grads = bwd(d, r, tuple(ct))
                for n, g in zip(vs["diff"], grads):
                    if n in GRADS:
                        acc[n] = g if n not in acc else acc[n] + g
                    else:
                        prev = cts.get(n)
                        cts[n] = g if prev is None else jax.device_put(prev, g.sharding) + g
        CURRENT["mesh"] = full
        grads_full = {p: jax.device_put(acc[p], on(full, STATE[p])) for p in GRADS}
        loss_full = jax.device_put(np.mean(np.stack(reported), axis=0).astype(RUN["dtype"]), on(full, ()))

        if "opt" not in compiled:
            def opt_step(state, consts, grads, reported_loss):
                v = {**consts, **state, REPORTED: reported_loss}
                for p, g in GRADS.items():
                    v[g] = grads[p]
                v = optimizer(v)
                return {k: v[k] for k in STATE}, {p: v[g] for p, g in GRADS.items()}

            compiled["opt"] = jax.jit(opt_step)
            add_counts(compiled["opt"], (state, consts, grads_full, loss_full), RANKS)
        state, final_grads = compiled["opt"](state, consts, grads_full, loss_full)
        losses.append(float(np.asarray(loss_full)))
        if step == 0:
            dump["loss"] = np.asarray(loss_full)
            for p, g in final_grads.items():
                dump["grad." + p] = np.asarray(g)
    for p in GRADS:
        dump[p] = np.asarray(state[p])
    if args.dump:
        for name, value in dump.items():
            write_npy(args.dump, name, value, args.dtype)
    report(args, losses, 0.0, counts)
