#!/usr/bin/env python
"""Generate while loops with loop-invariant work, with JAX (XLA CPU), into samples/loops/.

For every case this writes

  <case>.hlo            HLO text before optimization (``Lowered.as_text("hlo")``): the loop body
                        still computes the invariant values (XLA's WhileLoopInvariantCodeMotion
                        has not run), which is what hlo_cli/interpreter/hoist.py moves
  <case>.opt.hlo        HLO text after optimization by XLA CPU (``Compiled.as_text()``)
  <case>.inputs.npz     inputs, keys arg0, arg1, ... in entry-parameter order
  <case>.expected.npz   XLA CPU's outputs, keys out0, out1, ... (result leaves, depth-first)

Narrow float arrays (bfloat16, float8_*) are stored as unsigned integers of their width; the
element types are in MANIFEST.json ("inputs" / "outputs": dtype names), with the case's
description.  Deterministic (fixed seeds); each executable is run twice to check that XLA's
outputs are reproducible.

Usage (from the repository root):  python scripts/gen_loop_samples.py [--out samples/loops] [--only CASE ...]

`--bench M N K STEPS` instead times the f8 GEMM loop at that size (acc(bf16[M,N]) += dot(f8e5m2[M,K],
f8e4m3fn[N,K]^T), STEPS iterations; the text JAX lowers, before XLA's optimizations): XLA CPU's
execute time, and `hlo run`'s (run_module: excess precision, hoisting, compilation and the run)
with loop-invariant hoisting and without it (HLO_HOIST=0); best of --repeat runs each.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402
from jax import lax  # noqa: E402

CASES: dict = {}


def case(name):
    def deco(fn):
        CASES[name] = fn
        return fn
    return deco


def _normal(rng, shape, scale=1.0, dtype=np.float32):
    return (rng.standard_normal(shape) * scale).astype(dtype)


def f8_gemm_loop_fn(steps: int):
    """The issue's loop: `steps` times acc += dot(a, b^T) with f8 operands that never change, into bf16."""
    def f8_gemm_loop(a, b):
        acc0 = jnp.zeros((a.shape[0], b.shape[0]), jnp.bfloat16)

        def body(i, acc):
            d = lax.dot_general(a, b, (((1,), (1,)), ((), ())), preferred_element_type=jnp.bfloat16)
            return acc + d
        return lax.fori_loop(0, steps, body, acc0)
    return f8_gemm_loop


def f8_gemm_inputs(m: int, n: int, k: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    a = _normal(rng, (m, k), 0.5).astype(ml_dtypes.float8_e5m2)
    b = _normal(rng, (n, k), 0.5).astype(ml_dtypes.float8_e4m3fn)
    return a, b


@case("f8_gemm_loop")
def _f8_gemm_loop():
    """20 iterations of acc(bf16) += dot(f8e5m2[64,32], f8e4m3fn[48,32]^T): the dot's operands are
    loop-invariant (the issue's 120 s case, scaled down)."""
    return f8_gemm_loop_fn(20), f8_gemm_inputs(64, 48, 32)


@case("scan_fixed_weight")
def _scan_fixed_weight():
    """lax.scan of an RNN cell whose recurrent matrix is computed in the body from closed-over
    weights (a bf16 matrix converted to f32 and scaled): the convert and the scaling are invariant."""
    rng = np.random.default_rng(1)
    w = _normal(rng, (32, 32), 0.2).astype(ml_dtypes.bfloat16)
    u = _normal(rng, (16, 32), 0.3)
    h0 = _normal(rng, (4, 32), 0.5)
    xs = _normal(rng, (12, 4, 16), 1.0)

    def scan_fixed_weight(w, u, h0, xs):
        def cell(h, x):
            wf = w.astype(jnp.float32) * jnp.float32(0.9)
            h = jnp.tanh(h @ wf + x @ u)
            return h, jnp.sum(h, axis=1)
        return lax.scan(cell, h0, xs)
    return scan_fixed_weight, (w, u, h0, xs)


@case("nested_invariant")
def _nested_invariant():
    """A fori_loop inside a fori_loop whose inner body multiplies by the product of two closed-over
    matrices: the product changes in neither loop."""
    rng = np.random.default_rng(2)
    p = _normal(rng, (24, 24), 0.2)
    q = _normal(rng, (24, 24), 0.2)
    x0 = _normal(rng, (6, 24), 1.0)

    def nested_invariant(p, q, x0):
        def outer(i, x):
            def inner(j, y):
                m = p @ q
                return jnp.sin(y @ m) + y
            return lax.fori_loop(0, 3, inner, x) * jnp.float32(0.5)
        return lax.fori_loop(0, 4, outer, x0)
    return nested_invariant, (p, q, x0)


def _raw(a: np.ndarray) -> np.ndarray:
    a = np.asarray(a)
    if a.dtype.kind == "V" or a.dtype.type.__module__.startswith("ml_dtypes"):
        return a.view(f"V{a.dtype.itemsize}")  # raw records: what `hlo run --inputs` reads as the parameter's type
    return a


def write_case(name: str, out_dir: str) -> dict:
    fn, args = CASES[name]()
    jitted = jax.jit(fn)
    lowered = jitted.lower(*args)
    compiled = lowered.compile()
    with open(os.path.join(out_dir, f"{name}.hlo"), "w") as f:
        f.write(lowered.as_text("hlo"))
    with open(os.path.join(out_dir, f"{name}.opt.hlo"), "w") as f:
        f.write(compiled.as_text())
    ins = jax.tree_util.tree_leaves(args)
    outs = [np.asarray(x) for x in jax.tree_util.tree_leaves(compiled(*args))]
    again = [np.asarray(x) for x in jax.tree_util.tree_leaves(compiled(*args))]
    assert all(_raw(a).tobytes() == _raw(b).tobytes() for a, b in zip(outs, again)), name
    np.savez(os.path.join(out_dir, f"{name}.inputs.npz"), **{f"arg{i}": _raw(a) for i, a in enumerate(ins)})
    np.savez(os.path.join(out_dir, f"{name}.expected.npz"), **{f"out{i}": _raw(a) for i, a in enumerate(outs)})
    return {"description": " ".join((CASES[name].__doc__ or "").split()),
            "inputs": [str(np.asarray(a).dtype) for a in ins],
            "outputs": [str(a.dtype) for a in outs]}


def bench(m: int, n: int, k: int, steps: int, repeat: int) -> dict:
    """Seconds (best of `repeat`) for the f8 GEMM loop: XLA, hlo with hoisting, hlo without."""
    import time

    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from hlo_cli.interpreter import run_module
    from hlo_cli.parser import parse

    a, b = f8_gemm_inputs(m, n, k)
    jitted = jax.jit(f8_gemm_loop_fn(steps))
    text = jitted.lower(a, b).as_text("hlo")
    compiled = jitted.lower(a, b).compile()
    compiled(a, b).block_until_ready()
    out: dict = {}

    def best(fn):
        times, value = [], None
        for _ in range(repeat):
            t = time.perf_counter()
            value = fn()
            times.append(time.perf_counter() - t)
        return min(times), np.asarray(value)
    out["xla"], ref = best(lambda: compiled(a, b).block_until_ready())
    results = {}
    for mode, flag in (("hlo", "1"), ("hlo_no_hoist", "0")):
        os.environ["HLO_HOIST"] = flag
        out[mode], results[mode] = best(lambda: run_module(parse(text), [a, b]))
    os.environ.pop("HLO_HOIST", None)
    out["same_bits"] = _raw(results["hlo"]).tobytes() == _raw(results["hlo_no_hoist"]).tobytes()
    diff = np.abs(results["hlo"].astype(np.float64) - ref.astype(np.float64))
    out["max_abs_diff_vs_xla"] = float(diff.max())
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="samples/loops")
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--bench", nargs=4, type=int, metavar=("M", "N", "K", "STEPS"))
    ap.add_argument("--repeat", type=int, default=3)
    opts = ap.parse_args(argv)
    if opts.bench:
        m, n, k, steps = opts.bench
        print(json.dumps({"m": m, "n": n, "k": k, "steps": steps, **bench(m, n, k, steps, opts.repeat)}))
        return
    os.makedirs(opts.out, exist_ok=True)
    path = os.path.join(opts.out, "MANIFEST.json")
    manifest = {"jax": jax.__version__, "cases": {}}
    if os.path.exists(path):
        with open(path) as f:
            manifest["cases"] = json.load(f).get("cases", {})
    for name in opts.only or CASES:
        manifest["cases"][name] = write_case(name, opts.out)
        print("wrote", name, file=sys.stderr)
    with open(path, "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
