"""Dots of every element-type family and batch norm at convnet sizes: each op alone, hlo's
execution against XLA CPU's, same text and inputs.

Cases: the fp8 GEMM of issue 12 (f8e5m2[M,1024] x f8e4m3fn[8192,1024] -> bf16 over dim 1 of
both; --fp8-rows sets M, 32768 in the issue), [1024,1024] x [1024,1024] dots of bf16, f16, f8,
s8, s16, s32, pred and c64, and batch-norm-training / -inference / -grad over f32[32,112,112,96]
(feature_index 3) and f32[32,96,112,112] (feature_index 1).  The modules are written by hand (JAX
has no batch-norm primitive).  Times are the best of --repeat runs of the execution alone (parse
and compile excluded); XLA's inputs are on the device before timing.  "equal" is the share of
result elements (of the first result) bit for bit equal to XLA's.

    python benchmarks/bench_linalg.py [--repeat 3] [--only fp8 bn ...] [--fp8-rows 8192]

Prints a Markdown table (op, XLA ms, hlo ms, hlo / XLA, equal).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from timing import best_of

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))


def _dot_text(lt, rt, ot, m, k, n, rhs_transposed=False):
    rshape = f"[{n},{k}]" if rhs_transposed else f"[{k},{n}]"
    rc = 1 if rhs_transposed else 0
    return (f"HloModule dot\nENTRY e {{\n  a = {lt}[{m},{k}] parameter(0)\n  b = {rt}{rshape} parameter(1)\n"
            f"  ROOT d = {ot}[{m},{n}] dot(a, b), lhs_contracting_dims={{1}}, rhs_contracting_dims={{{rc}}}\n}}\n")


def _bn_text(op, shape, fi):
    s, c = ",".join(map(str, shape)), shape[fi]
    full, vec = f"f32[{s}]", f"f32[{c}]"
    params, root = {"training": ("xso", f"({full}, {vec}, {vec}) batch-norm-training(x, s, o)"),
                    "inference": ("xsomv", f"{full} batch-norm-inference(x, s, o, m, v)"),
                    "grad": ("xsmvg", f"({full}, {vec}, {vec}) batch-norm-grad(x, s, m, v, g)")}[op]
    lines = "\n".join(f"  {p} = {full if p in 'xg' else vec} parameter({i})" for i, p in enumerate(params))
    return f"HloModule bn\nENTRY e {{\n{lines}\n  ROOT b = {root}, epsilon=0.001, feature_index={fi}\n}}\n", params


def _cases(fp8_rows):
    import ml_dtypes
    from hlo_cli.ir.dtypes import ELEMENT_TYPES
    rng = np.random.default_rng(0)

    def arr(t, shape):
        d = np.dtype(ELEMENT_TYPES[t].numpy)
        if d.kind in "iu":
            return rng.integers(-100 if d.kind == "i" else 0, 100, shape).astype(d)
        if d.kind == "b":
            return rng.random(shape) < 0.01
        if d.kind == "c":
            return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(d)
        return rng.standard_normal(shape, np.float32).astype(d)

    yield ("fp8 dot f8e5m2 x f8e4m3fn -> bf16", f"[{fp8_rows},1024] x [8192,1024]",
           _dot_text("f8e5m2", "f8e4m3fn", "bf16", fp8_rows, 1024, 8192, rhs_transposed=True),
           lambda: [arr("f8e5m2", (fp8_rows, 1024)), arr("f8e4m3fn", (8192, 1024))])
    for lt, ot in [("bf16", "f32"), ("f16", "f16"), ("f8e4m3fn", "bf16"), ("s8", "s32"), ("s16", "s32"),
                   ("s32", "s32"), ("pred", "pred"), ("c64", "c64"), ("f32", "f32")]:
        yield (f"dot {lt} -> {ot}", "[1024,1024] x [1024,1024]", _dot_text(lt, lt, ot, 1024, 1024, 1024),
               lambda lt=lt: [arr(lt, (1024, 1024)), arr(lt, (1024, 1024))])
    for shape, fi in (((32, 112, 112, 96), 3), ((32, 96, 112, 112), 1)):
        for op in ("training", "inference", "grad"):
            text, params = _bn_text(op, shape, fi)
            c = shape[fi]

            def make(params=params, shape=shape, c=c):
                vals = {"x": rng.standard_normal(shape, np.float32) * 2 + 0.5,
                        "g": rng.standard_normal(shape, np.float32), "s": rng.standard_normal(c).astype(np.float32),
                        "o": rng.standard_normal(c).astype(np.float32), "m": np.full(c, 0.5, np.float32),
                        "v": (rng.random(c) + 3.5).astype(np.float32)}
                return [vals[p].astype(np.float32) for p in params]
            yield (f"bn {op} fi={fi}", "f32[" + ",".join(map(str, shape)) + "]", text, make)




def main(argv=None):
    import jax
    from hlo_cli.interpreter.evaluator import run_module
    from hlo_cli.parser import parse
    from hlo_cli.tools.xla_reference import XlaExecutable
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--fp8-rows", type=int, default=8192)
    a = ap.parse_args(argv)
    print("| op | shape | XLA ms | hlo ms | hlo / XLA | equal |")
    print("|---|---|---:|---:|---:|---:|")
    for name, shape, text, make in _cases(a.fp8_rows):
        if a.only and not any(o in name for o in a.only):
            continue
        args = make()
        ex = XlaExecutable(text)
        dev = [jax.device_put(x, ex.device) for x in args]

        def xla():
            outs = ex.executable.execute_sharded(dev).disassemble_into_single_device_arrays()
            return [np.asarray(o[0]) for o in outs]
        xla()
        tx, want = best_of(xla, a.repeat)
        module = parse(text)
        run_module(module, args)
        th, got = best_of(lambda: run_module(module, args), a.repeat)
        got = list(got) if isinstance(got, (tuple, list)) else [got]
        g, w = np.asarray(got[0]), want[0]
        equal = np.mean(g.view(np.uint8).reshape(g.shape + (-1,)) == w.view(np.uint8).reshape(w.shape + (-1,)), -1)
        print(f"| {name} | {shape} | {tx * 1e3:.0f} | {th * 1e3:.0f} | {th / tx:.2f} | "
              f"{float(np.mean(equal == 1)):.1%} |", flush=True)
        del args, dev, got, want


if __name__ == "__main__":
    main()
