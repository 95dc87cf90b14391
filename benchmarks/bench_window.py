"""Pooling-style ops at convnet sizes: each op alone, hlo's execution against XLA CPU's, same text.

The modules are written by JAX (max pooling 3x3 stride 2 SAME over f32[32,112,112,64] and its
gradient (select-and-scatter), average pooling 3x3 stride 1 and 2x2 stride 2, global 7x7 average
pooling, pad of f32[32,112,112,96], reverse of a 3x3 kernel and of an activation).  Times are the
best of --repeat runs of the execution alone (parse and compile excluded), in this process; the
results are compared bit for bit with XLA's.  XLA's time is the jitted function's on
inputs already on the device (jax.block_until_ready), so transfers are not counted.

    python benchmarks/bench_window.py [--repeat 5] [--only maxpool ...]

Prints a Markdown table (op, shape, XLA ms, hlo ms, ratio, same bits); hlo's first run (its
module-level preparation) is not counted either.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from timing import best_of

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))


def _cases():
    import jax
    import jax.numpy as jnp
    import ml_dtypes
    from jax import lax

    def maxpool(x):
        return lax.reduce_window(x, np.array(-np.inf, x.dtype), lax.max, (1, 3, 3, 1), (1, 2, 2, 1), "SAME")

    def avgpool(win, stride, pad):
        def f(x):
            # the window sums alone: XLA rewrites the division by the window size into a multiply
            # by its reciprocal (an elementwise matter, not the window's)
            return lax.reduce_window(x, 0.0, lax.add, (1, win, win, 1), (1, stride, stride, 1), pad)
        return f

    def maxpool_grad(x, g):
        return jax.vjp(maxpool, x)[1](g)[0]

    def maxpool_nchw(x):            # PyTorch/XLA's layout: the window over the two minor dimensions
        return lax.reduce_window(x, np.array(-np.inf, x.dtype), lax.max, (1, 1, 3, 3), (1, 1, 2, 2),
                                 ((0, 0), (0, 0), (1, 1), (1, 1)))

    def maxpool_nchw_grad(x, g):
        return jax.vjp(maxpool_nchw, x)[1](g)[0]

    def avgpool_grad(g):
        x = jnp.zeros((32, 112, 112, 64), jnp.float32)
        return jax.vjp(avgpool(3, 2, "SAME"), x)[1](g)[0]

    f32 = np.float32
    rng = np.random.default_rng(0)
    big = rng.standard_normal((32, 112, 112, 64)).astype(f32)
    relu = np.maximum(big, 0)
    return [
        ("maxpool 3x3/2 SAME", "f32[32,112,112,64]", maxpool, [relu]),
        ("maxpool grad (select-and-scatter)", "f32[32,112,112,64]", maxpool_grad,
         [relu, rng.standard_normal((32, 56, 56, 64)).astype(f32)]),
        ("maxpool 3x3/2 SAME bf16", "bf16[32,112,112,64]", maxpool, [relu.astype(ml_dtypes.bfloat16)]),
        ("maxpool grad bf16", "bf16[32,112,112,64]", maxpool_grad,
         [relu.astype(ml_dtypes.bfloat16), rng.standard_normal((32, 56, 56, 64)).astype(ml_dtypes.bfloat16)]),
        ("maxpool NCHW 3x3/2 pad 1", "f32[32,64,112,112]", maxpool_nchw, [relu.transpose(0, 3, 1, 2).copy()]),
        ("maxpool NCHW grad", "f32[32,64,112,112]", maxpool_nchw_grad,
         [relu.transpose(0, 3, 1, 2).copy(), rng.standard_normal((32, 64, 56, 56)).astype(f32)]),
        ("avgpool 3x3/1 SAME", "f32[32,56,56,64]", avgpool(3, 1, "SAME"),
         [rng.standard_normal((32, 56, 56, 64)).astype(f32)]),
        ("avgpool 2x2/2 VALID", "f32[32,56,56,256]", avgpool(2, 2, "VALID"),
         [rng.standard_normal((32, 56, 56, 256)).astype(f32)]),
        ("global avgpool 7x7", "f32[32,7,7,1280]", avgpool(7, 7, "VALID"),
         [rng.standard_normal((32, 7, 7, 1280)).astype(f32)]),
        ("avgpool 3x3/2 grad", "f32[32,112,112,64]", avgpool_grad,
         [rng.standard_normal((32, 56, 56, 64)).astype(f32)]),
        ("pad 1 (conv SAME)", "f32[32,112,112,96]", lambda x: jnp.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0))),
         [rng.standard_normal((32, 112, 112, 96)).astype(f32)]),
        ("pad interior 1 + edge", "f32[32,56,56,64]",
         lambda x: lax.pad(x, 0.0, ((0, 0, 0), (1, 1, 1), (1, 1, 1), (0, 0, 0))),
         [rng.standard_normal((32, 56, 56, 64)).astype(f32)]),
        ("reverse kernel", "f32[3,3,96,96]", lambda w: jnp.flip(w, (0, 1)),
         [rng.standard_normal((3, 3, 96, 96)).astype(f32)]),
        ("reverse activation", "f32[32,56,56,64]", lambda x: jnp.flip(x, (1, 2)),
         [rng.standard_normal((32, 56, 56, 64)).astype(f32)]),
    ]




def main(argv=None):
    import jax
    from hlo_cli.interpreter.evaluator import run_module
    from hlo_cli.parser import parse
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--dump", help="directory to write the modules' HLO text into")
    ap.add_argument("--json", help="also write the rows to this JSON file")
    a = ap.parse_args(argv)
    rows = []
    print("| op | shape | XLA ms | hlo ms | hlo / XLA | same bits |")
    print("|---|---|---:|---:|---:|---|")
    for name, shape, fn, args in _cases():
        if a.only and not any(o in name for o in a.only):
            continue
        text = jax.jit(fn).lower(*args).as_text("hlo")
        if a.dump:
            Path(a.dump, name.split()[0] + ".hlo").write_text(text)
        jitted = jax.jit(fn)
        dev = [jax.device_put(x) for x in args]
        jax.block_until_ready(jitted(*dev))
        tx, want = best_of(lambda: jax.block_until_ready(jitted(*dev)), a.repeat)
        want = [np.asarray(w) for w in (want if isinstance(want, (tuple, list)) else [want])]
        module = parse(text)
        run_module(module, args)
        th, got = best_of(lambda: run_module(module, args), a.repeat)
        got = list(got) if isinstance(got, (tuple, list)) else [got]
        same = all(np.array_equal(np.ascontiguousarray(g).view(np.uint8), np.ascontiguousarray(w).view(np.uint8))
                   for g, w in zip(got, want))
        print(f"| {name} | {shape} | {tx * 1e3:.1f} | {th * 1e3:.1f} | {th / tx:.2f} | {'yes' if same else 'NO'} |",
              flush=True)
        rows.append({"op": name, "shape": shape, "xla_ms": round(tx * 1e3, 2), "hlo_ms": round(th * 1e3, 2),
                     "same_bits": bool(same)})
    if a.json:
        import json
        import platform
        Path(a.json).write_text(json.dumps({"machine": platform.processor() or platform.machine(),
                                            "repeat": a.repeat, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
