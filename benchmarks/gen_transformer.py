#!/usr/bin/env python
"""Generate large HLO benchmark dumps with JAX (XLA CPU) into benchmarks/data/.

Three modules are produced:

``transformer``
    One training step (cross-entropy loss + jax.grad + Adam update) of a small
    decoder-only transformer whose layers are an *unrolled* Python loop (not a
    scan), so that the HLO text is large.  Layers vary a little (activation,
    number of heads, rotary embeddings, RMSNorm/LayerNorm, GLU) and every
    layer has three threefry dropouts (attention probabilities, attention
    output, MLP output; key passed as the last argument), which XLA expands
    into long integer-arithmetic sequences -- together these make the
    after-optimization text > 10 MB with only 24 small layers.
``transformer_512``
    The same training step at a realistic width (8 layers, d_model 512, 8 heads, feed-forward
    2048, 8 sequences of 128 tokens, vocabulary 2048): about 160 GFLOP, so that the time goes to
    arithmetic rather than to the number of instructions.
``scan2000``
    A 2000-step ``lax.scan`` of a small GRU-like cell (a while loop in HLO).

For each module ``<name>.hlo`` (before optimization), ``<name>.opt.hlo``
(after XLA CPU optimization), ``<name>.inputs.npz`` (keys arg0.. in entry
parameter order) and ``<name>.expected.npz`` (XLA's outputs, keys out0.. =
flattened result leaves) are written.  Sizes and the time XLA's own parser
(``jaxlib._hlo.hlo_module_from_text``, best of 3) takes on each text are
printed.  The after-optimization transformer text is required to be at least
``--min-opt-mb`` MB (default 10).

Usage:
    python benchmarks/gen_transformer.py [--out benchmarks/data] [--layers 24]
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402
from jaxlib import _hlo  # noqa: E402

_REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
jax.config.update("jax_hlo_source_file_canonicalization_regex", "^" + re.escape(_REPO_ROOT + os.sep))

# --------------------------------------------------------------------------
# transformer
# --------------------------------------------------------------------------

ACTIVATIONS = [
    ("gelu", lambda x: jax.nn.gelu(x, approximate=True)),
    ("relu", jax.nn.relu),
    ("silu", jax.nn.silu),
    ("gelu_erf", lambda x: jax.nn.gelu(x, approximate=False)),
]
HEAD_FACTORS = [1, 0.5, 2, 1]  # times --heads
N_HEADS = 4


def layer_config(i):
    """Per-layer variety so that layers are not structurally identical."""
    return {
        "act": ACTIVATIONS[i % len(ACTIVATIONS)],
        "heads": max(1, int(N_HEADS * HEAD_FACTORS[(i // 2) % len(HEAD_FACTORS)])),
        "rmsnorm": i % 3 == 2,
        "rotary": i % 2 == 1,
        "glu": i % 5 == 4,
    }


def init_transformer(rng, layers, d, vocab, seq, ff):
    def n(shape, scale):
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    params = {
        "embed": n((vocab, d), 0.02),
        "pos": n((seq, d), 0.01),
        "ln_f": {"g": np.ones(d, np.float32), "b": np.zeros(d, np.float32)},
        "layers": [],
    }
    for i in range(layers):
        cfg = layer_config(i)
        layer = {
            "ln1": {"g": (1 + n((d,), 0.02)).astype(np.float32), "b": n((d,), 0.02)},
            "wqkv": n((d, 3 * d), d**-0.5),
            "bqkv": n((3 * d,), 0.02),
            "wo": n((d, d), d**-0.5 / np.sqrt(2 * layers)),
            "ln2": {"g": (1 + n((d,), 0.02)).astype(np.float32), "b": n((d,), 0.02)},
            "w1": n((d, ff * (2 if cfg["glu"] else 1)), d**-0.5),
            "b1": n((ff * (2 if cfg["glu"] else 1),), 0.02),
            "w2": n((ff, d), ff**-0.5 / np.sqrt(2 * layers)),
            "b2": n((d,), 0.02),
        }
        params["layers"].append(layer)
    return params


def _norm(x, p, rms):
    if rms:
        return x * lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + 1e-6) * p["g"]
    mu = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.var(x, axis=-1, keepdims=True)
    return (x - mu) * lax.rsqrt(var + 1e-5) * p["g"] + p["b"]


def _rotary(x):  # x: [B, T, H, Dh]
    t, dh = x.shape[1], x.shape[-1]
    half = dh // 2
    freqs = 1.0 / (10000.0 ** (jnp.arange(half, dtype=jnp.float32) / half))
    ang = jnp.arange(t, dtype=jnp.float32)[:, None] * freqs[None, :]
    cos, sin = jnp.cos(ang)[None, :, None, :], jnp.sin(ang)[None, :, None, :]
    x1, x2 = x[..., :half], x[..., half:]
    return jnp.concatenate([x1 * cos - x2 * sin, x1 * sin + x2 * cos], axis=-1)


def _dropout(key, x, rate):
    keep = jax.random.bernoulli(key, 1.0 - rate, x.shape)
    return jnp.where(keep, x / (1.0 - rate), 0.0)


def transformer_loss(params, tokens, key, dropout=0.1):
    inputs, targets = tokens[:, :-1], tokens[:, 1:]
    b, t = inputs.shape
    d = params["embed"].shape[1]
    x = params["embed"][inputs] + params["pos"][None, :t]
    mask = jnp.tril(jnp.ones((t, t), bool))
    for i, lp in enumerate(params["layers"]):
        cfg = layer_config(i)
        nh = cfg["heads"]
        dh = d // nh
        h = _norm(x, lp["ln1"], cfg["rmsnorm"])
        qkv = h @ lp["wqkv"] + lp["bqkv"]
        q, k, v = jnp.split(qkv, 3, axis=-1)
        q, k, v = (a.reshape(b, t, nh, dh) for a in (q, k, v))
        if cfg["rotary"]:
            q, k = _rotary(q), _rotary(k)
        s = jnp.einsum("bthd,bshd->bhts", q, k) * (dh**-0.5)
        s = jnp.where(mask, s, -1e9)
        a = jax.nn.softmax(s, axis=-1)
        lkey = jax.random.fold_in(key, i)
        if dropout:
            a = _dropout(jax.random.fold_in(lkey, 0), a, dropout)
        o = jnp.einsum("bhts,bshd->bthd", a, v).reshape(b, t, d)
        o = o @ lp["wo"]
        if dropout:
            o = _dropout(jax.random.fold_in(lkey, 2), o, dropout)
        x = x + o
        h = _norm(x, lp["ln2"], cfg["rmsnorm"])
        u = h @ lp["w1"] + lp["b1"]
        act = cfg["act"][1]
        if cfg["glu"]:
            u1, u2 = jnp.split(u, 2, axis=-1)
            u = act(u1) * u2
        else:
            u = act(u)
        u = u @ lp["w2"] + lp["b2"]
        if dropout:
            u = _dropout(jax.random.fold_in(lkey, 1), u, dropout)
        x = x + u
    x = _norm(x, params["ln_f"], False)
    logits = x @ params["embed"].T  # tied embeddings
    logp = jax.nn.log_softmax(logits, axis=-1)
    nll = -jnp.take_along_axis(logp, targets[..., None], axis=-1)[..., 0]
    return jnp.mean(nll)


def adam_update(params, grads, opt_state, lr=1e-3, b1=0.9, b2=0.999, eps=1e-8):
    """One Adam step: (gradient norm, new parameters, new optimizer state)."""
    step = opt_state["step"] + 1
    m = jax.tree.map(lambda m, g: b1 * m + (1 - b1) * g, opt_state["m"], grads)
    v = jax.tree.map(lambda v, g: b2 * v + (1 - b2) * g * g, opt_state["v"], grads)
    t = step.astype(jnp.float32)
    c1, c2 = 1 - b1**t, 1 - b2**t
    new_params = jax.tree.map(lambda p, m, v: p - lr * (m / c1) / (jnp.sqrt(v / c2) + eps), params, m, v)
    gnorm = jnp.sqrt(sum(jnp.sum(g * g) for g in jax.tree.leaves(grads)))
    return gnorm, new_params, {"m": m, "v": v, "step": step}


def adam_train_step(params, opt_state, tokens, key_data, lr=1e-3, b1=0.9, b2=0.999, eps=1e-8):
    key = jax.random.wrap_key_data(key_data)  # threefry2x32
    loss, grads = jax.value_and_grad(transformer_loss)(params, tokens, key)
    gnorm, new_params, state = adam_update(params, grads, opt_state, lr, b1, b2, eps)
    return loss, gnorm, new_params, state


def build_transformer(layers, d, heads, seq, batch, vocab, ff, seed=0):
    global N_HEADS
    N_HEADS = heads
    rng = np.random.default_rng(seed)
    params = init_transformer(rng, layers, d, vocab, seq, ff)
    zeros = jax.tree.map(np.zeros_like, params)
    # Non-trivial optimizer state (as after a few steps).
    m = jax.tree.map(lambda p: (rng.standard_normal(p.shape) * 1e-3).astype(np.float32), params)
    v = jax.tree.map(lambda p: (rng.random(p.shape) * 1e-6).astype(np.float32), zeros)
    opt_state = {"m": m, "v": v, "step": np.int32(3)}
    tokens = rng.integers(0, vocab, size=(batch, seq + 1)).astype(np.int32)
    key_data = np.array([0, seed + 1234], np.uint32)  # dropout key (threefry2x32 key data)
    return adam_train_step, (params, opt_state, tokens, key_data)


# --------------------------------------------------------------------------
# scan2000
# --------------------------------------------------------------------------


def build_scan2000(steps=2000, batch=4, d_in=8, d_h=16, seed=1):
    rng = np.random.default_rng(seed)

    def n(shape, scale):
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    params = {
        "wz": n((d_in + d_h, d_h), 0.3),
        "wr": n((d_in + d_h, d_h), 0.3),
        "wh": n((d_in + d_h, d_h), 0.3),
        "bz": n((d_h,), 0.1),
        "br": n((d_h,), 0.1),
        "bh": n((d_h,), 0.1),
    }
    h0 = n((batch, d_h), 0.5)
    xs = n((steps, batch, d_in), 1.0)

    def scan2000(p, h0, xs):
        def cell(carry, x):
            h, acc = carry
            xh = jnp.concatenate([x, h], axis=-1)
            z = jax.nn.sigmoid(xh @ p["wz"] + p["bz"])
            r = jax.nn.sigmoid(xh @ p["wr"] + p["br"])
            hh = jnp.tanh(jnp.concatenate([x, r * h], axis=-1) @ p["wh"] + p["bh"])
            h = (1 - z) * h + z * hh
            return (h, acc + jnp.sum(h * h)), jnp.max(h, axis=-1)

        (h, acc), ys = lax.scan(cell, (h0, jnp.float32(0)), xs)
        return h, acc, ys

    return scan2000, (params, h0, xs)


# --------------------------------------------------------------------------
# driver
# --------------------------------------------------------------------------


def _best_of(n, f):
    best = float("inf")
    for _ in range(n):
        t0 = time.perf_counter()
        f()
        best = min(best, time.perf_counter() - t0)
    return best


def _mb(nbytes):
    return f"{nbytes / 1e6:8.2f} MB"


def dump(name, fn, args, out_dir):
    jitted = jax.jit(fn, keep_unused=True)
    in_leaves = [np.asarray(a) for a in jax.tree.leaves(args)]

    t0 = time.perf_counter()
    lowered = jitted.lower(*args)
    text = lowered.as_text("hlo")
    t1 = time.perf_counter()
    compiled = lowered.compile()
    opt_text = compiled.as_text()
    t2 = time.perf_counter()
    out = compiled(*args)
    jax.block_until_ready(out)
    t3 = time.perf_counter()
    out2 = compiled(*args)
    jax.block_until_ready(out2)
    t4 = time.perf_counter()
    out_leaves = [np.asarray(a) for a in jax.tree.leaves(out)]
    for i, (a, b) in enumerate(zip(out_leaves, jax.tree.leaves(out2), strict=True)):
        if np.asarray(b).tobytes() != a.tobytes():
            raise RuntimeError(f"{name}: output {i} differs between two runs")

    mod = _hlo.hlo_module_from_text(text)
    pshape = _hlo.XlaComputation(mod.as_serialized_hlo_module_proto()).program_shape()
    if len(pshape.parameter_shapes()) != len(in_leaves):
        raise RuntimeError(f"{name}: entry parameter count != input leaf count")

    paths = {
        "hlo": os.path.join(out_dir, f"{name}.hlo"),
        "opt_hlo": os.path.join(out_dir, f"{name}.opt.hlo"),
        "inputs": os.path.join(out_dir, f"{name}.inputs.npz"),
        "expected": os.path.join(out_dir, f"{name}.expected.npz"),
    }
    with open(paths["hlo"], "w") as f:
        f.write(text)
    with open(paths["opt_hlo"], "w") as f:
        f.write(opt_text)
    np.savez(paths["inputs"], **{f"arg{i}": a for i, a in enumerate(in_leaves)})
    np.savez(paths["expected"], **{f"out{i}": a for i, a in enumerate(out_leaves)})

    parse = {k: _best_of(3, lambda t=t: _hlo.hlo_module_from_text(t)) for k, t in (("hlo", text), ("opt_hlo", opt_text))}
    print(f"== {name}: {len(in_leaves)} inputs, {len(out_leaves)} outputs; "
          f"lower {t1 - t0:.2f}s, compile {t2 - t1:.2f}s, run {t3 - t2:.3f}s / {t4 - t3:.3f}s")
    for k, p in paths.items():
        size = os.path.getsize(p)
        extra = f"   XLA parse (best of 3): {parse[k]:.3f}s" if k in parse else ""
        print(f"   {os.path.basename(p):28s} {_mb(size)}{extra}")
    return os.path.getsize(paths["opt_hlo"])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(_REPO_ROOT, "benchmarks", "data"))
    ap.add_argument("--layers", type=int, default=24)
    ap.add_argument("--d-model", type=int, default=64)
    ap.add_argument("--heads", type=int, default=4, help="base number of heads (layers use x1, x0.5, x2)")
    ap.add_argument("--seq", type=int, default=32)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--vocab", type=int, default=256)
    ap.add_argument("--ff", type=int, default=256)
    ap.add_argument("--scan-steps", type=int, default=2000)
    ap.add_argument("--only", choices=["transformer", "transformer_512", "scan2000"], help="generate only one")
    ap.add_argument("--name", default="transformer", help="file name of the transformer module")
    ap.add_argument("--min-opt-mb", type=float, default=10.0,
                    help="fail if the after-optimization transformer text is smaller than this (0 disables)")
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    print(f"jax {jax.__version__}, devices {jax.devices()}")

    if args.only in (None, "transformer"):
        fn, fargs = build_transformer(args.layers, args.d_model, args.heads, args.seq, args.batch, args.vocab, args.ff)
        opt_size = dump(args.name, fn, fargs, args.out)
        if args.min_opt_mb and opt_size < args.min_opt_mb * 1e6:
            print(f"error: {args.name}.opt.hlo is {opt_size} bytes < {args.min_opt_mb} MB; increase --layers",
                  file=sys.stderr)
            return 1
    if args.only in (None, "transformer_512"):
        # the same training step at a realistic width, where the arithmetic, not the number of
        # instructions, decides the time (8 layers, d_model 512, 8 heads, 128 tokens x 8 sequences)
        fn, fargs = build_transformer(8, 512, 8, 128, 8, 2048, 2048)
        dump("transformer_512", fn, fargs, args.out)
    if args.only in (None, "scan2000"):
        fn, fargs = build_scan2000(steps=args.scan_steps)
        dump("scan2000", fn, fargs, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
