"""Element-wise ops and conversions on large bf16/f16/f8 arrays: hlo's execution against XLA CPU's,
same text, same inputs, bit for bit.

The issue's fp8 GEMM loop spends its iterations in `acc = add(acc, d)` of bf16[32768,8192]; this
measures such single ops at that size (268M elements; --rows to change it): bf16 add, subtract,
multiply, maximum, compare + select, converts bf16 <-> f32, f16 add, f8 <-> bf16/f32 converts and an
f8 add.  XLA's time is the jitted function's on inputs already on the device; hlo's is run_module's
(parse and compile excluded), best of --repeat, with an optional comparison against the code of
another checkout (--before DIR: a directory holding an `hlo_cli` package, run in a subprocess).

    python benchmarks/bench_narrow.py [--repeat 5] [--rows 32768] [--only add ...] [--before DIR]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from timing import best_of

HERE = Path(__file__).resolve().parent


def _cases(rows: int):
    import jax.numpy as jnp
    import ml_dtypes
    bf, f8a, f8b = ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2
    rng = np.random.default_rng(0)
    shape = (rows, 8192)

    def normal(dt):
        return lambda: rng.standard_normal(shape, dtype=np.float32).astype(dt)

    def pair(dt):
        return lambda: (normal(dt)(), normal(dt)())
    bf16_pair = pair(bf)
    return [                                       # inputs made when the case runs (memory)
        ("bf16 add", lambda x, y: x + y, bf16_pair),
        ("bf16 subtract", lambda x, y: x - y, bf16_pair),
        ("bf16 multiply", lambda x, y: x * y, bf16_pair),
        ("bf16 maximum", jnp.maximum, bf16_pair),
        ("bf16 relu (max with 0)", lambda x: jnp.maximum(x, jnp.zeros((), x.dtype)), lambda: (normal(bf)(),)),
        ("bf16 select(x > 0, x, y)", lambda x, y: jnp.where(x > 0, x, y), bf16_pair),
        ("convert bf16 -> f32", lambda x: x.astype(jnp.float32), lambda: (normal(bf)(),)),
        ("convert f32 -> bf16", lambda x: x.astype(jnp.bfloat16), lambda: (normal(np.float32)(),)),
        ("f16 add", lambda x, y: x + y, pair(np.float16)),
        ("convert f8e4m3fn -> bf16", lambda x: x.astype(jnp.bfloat16), lambda: (normal(f8a)(),)),
        ("convert f8e5m2 -> f32", lambda x: x.astype(jnp.float32), lambda: (normal(f8b)(),)),
        ("convert bf16 -> f8e4m3fn", lambda x: x.astype(f8a), lambda: (normal(bf)(),)),
        ("convert f32 -> f8e5m2", lambda x: x.astype(f8b), lambda: (normal(np.float32)(),)),
        ("f8e4m3fn add", lambda x, y: x + y, pair(f8a)),
    ]




def _hlo_times(pkg: str, texts: dict, inputs: Path, repeat: int) -> dict:
    """run_module's best times with the hlo_cli package found in `pkg` (a subprocess)."""
    code = f"""
import sys, time, json, numpy as np
sys.path.insert(0, {pkg!r})
from hlo_cli.interpreter.evaluator import run_module
from hlo_cli.parser import parse
texts = json.loads(sys.stdin.read())
data = np.load({str(inputs)!r}, allow_pickle=False)
out = {{}}
for name, text in texts.items():
    m = parse(text)
    args = [data[f"{{name}}|{{k}}"] for k in range(len(m.entry_computation.parameters))]
    from hlo_cli.interpreter.values import np_dtype
    args = [a.view(np_dtype(p.shape)) if a.dtype.kind == "V" else a for a, p in zip(args, m.entry_computation.parameters)]
    best = float("inf")
    for _ in range({repeat}):
        t = time.perf_counter(); r = run_module(m, args); best = min(best, time.perf_counter() - t); del r
    out[name] = best
print(json.dumps(out))
"""
    res = subprocess.run([sys.executable, "-c", code], input=json.dumps(texts), capture_output=True, text=True,
                         check=True)
    return json.loads(res.stdout.strip().splitlines()[-1])


def main(argv=None):
    import jax
    sys.path.insert(0, str(HERE.parent))
    from hlo_cli.interpreter.evaluator import run_module
    from hlo_cli.parser import parse
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--rows", type=int, default=32768)
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--before", nargs="*", default=[],
                    help="directories holding hlo_cli packages to time too, each in a subprocess "
                         "(e.g. a checkout of the previous commit, and this one for the same conditions)")
    a = ap.parse_args(argv)
    cases = [c for c in _cases(a.rows) if not a.only or any(o in c[0] for o in a.only)]
    rows = []
    texts, stash = {}, {}
    for name, fn, make in cases:
        args = make()
        text = jax.jit(fn).lower(*args).as_text("hlo")
        jitted = jax.jit(fn)
        dev = [jax.device_put(x) for x in args]
        jax.block_until_ready(jitted(*dev))
        tx, want = best_of(lambda: jax.block_until_ready(jitted(*dev)), a.repeat)
        want = np.asarray(want)
        del dev
        module = parse(text)
        th, got = best_of(lambda: run_module(module, list(args)), a.repeat)
        got = np.asarray(got)
        same = np.array_equal(np.ascontiguousarray(got).view(np.uint8), np.ascontiguousarray(want).view(np.uint8))
        del got, want
        rows.append([name, tx, th, same])
        if a.before:
            texts[name] = text
            for k, x in enumerate(args):
                stash[f"{name}|{k}"] = x.view(f"V{x.dtype.itemsize}") if x.dtype.kind not in "biuf" or \
                    x.dtype.type.__module__.startswith("ml_dtypes") else x
    before = []
    if a.before:
        inputs = Path("/tmp") / "bench_narrow_inputs.npz"
        np.savez(inputs, **stash)
        del stash
        before = [_hlo_times(d, texts, inputs, a.repeat) for d in a.before]
        inputs.unlink()
    shape = f"[{a.rows},8192]"
    heads = "".join(f"{Path(d).name} ms (subprocess) | " for d in a.before)
    print(f"| op (shape {shape}) | XLA ms | {heads}hlo ms | hlo / XLA | same bits |")
    print("|---|---:|" + "---:|" * len(a.before) + "---:|---:|---|")
    for name, tx, th, same in rows:
        b = "".join(f"{t[name] * 1e3:.0f} | " for t in before)
        print(f"| {name} | {tx * 1e3:.0f} | {b}{th * 1e3:.0f} | {th / tx:.2f} | {'yes' if same else 'NO'} |", flush=True)


if __name__ == "__main__":
    main()
