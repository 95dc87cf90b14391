"""Regenerate the batch-norm goldens of tests/interpreter/test_batch_norm_large.py: per layout, one
input set and XLA CPU's results of batch-norm-training, -inference and -grad on it (jaxlib,
through hlo_cli.tools.xla_reference), saved as LAYOUT.npz next to this file.  The inputs have the
4096 elements from which XLA CPU sums with YNNPACK (and the interpreter takes its blocked path).

    python tests/data/batch_norm/make_goldens.py
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))

# (name, element type, shape, feature_index, ops)
LAYOUTS = [
    ("nhwc_f32", "f32", (2, 8, 8, 32), 3, ("training", "inference", "grad")),
    ("nchw_f32", "f32", (2, 32, 8, 8), 1, ("training", "inference", "grad")),
    ("cnhw_f32", "f32", (32, 2, 8, 8), 0, ("training", "grad")),
    ("nhwc_bf16", "bf16", (2, 8, 8, 32), 3, ("training", "grad")),
    ("nhwc_f64", "f64", (2, 8, 8, 32), 3, ("training",)),
]
EPSILON = 0.001


def text(op: str, et: str, shape, fi: int) -> str:
    s = ",".join(map(str, shape))
    c = f"{et}[{shape[fi]}]"
    full = f"{et}[{s}]"
    if op == "training":
        params, root = ["x", "s", "o"], f"({full}, {c}, {c}) batch-norm-training(x, s, o)"
    elif op == "inference":
        params, root = ["x", "s", "o", "m", "v"], f"{full} batch-norm-inference(x, s, o, m, v)"
    else:
        params, root = ["x", "s", "m", "v", "g"], f"({full}, {c}, {c}) batch-norm-grad(x, s, m, v, g)"
    lines = [f"  {p} = {full if p in ('x', 'g') else c} parameter({i})" for i, p in enumerate(params)]
    return (f"HloModule bn\nENTRY e {{\n" + "\n".join(lines) +
            f"\n  ROOT b = {root}, epsilon={EPSILON}, feature_index={fi}\n}}\n")


def inputs(et: str, shape, fi: int, seed: int) -> dict:
    import ml_dtypes
    dt = {"f32": np.float32, "f64": np.float64, "bf16": ml_dtypes.bfloat16}[et]
    rng = np.random.default_rng(seed)
    c = shape[fi]
    x = rng.standard_normal(shape) * 2 + 0.5
    red = tuple(d for d in range(len(shape)) if d != fi)
    return {"x": x.astype(dt), "g": rng.standard_normal(shape).astype(dt),
            "s": rng.standard_normal(c).astype(dt), "o": rng.standard_normal(c).astype(dt),
            "m": x.mean(axis=red).astype(dt), "v": (rng.random(c) + 0.5).astype(dt)}


ARGS = {"training": "xso", "inference": "xsomv", "grad": "xsmvg"}


def raw(x):
    return x.view(np.uint16) if x.dtype.name == "bfloat16" else x


def main():
    from hlo_cli.tools.xla_reference import run_with_xla
    for k, (name, et, shape, fi, ops) in enumerate(LAYOUTS):
        ins = inputs(et, shape, fi, 100 + k)
        data = {key: raw(v) for key, v in ins.items()}
        for op in ops:
            outs = run_with_xla(text(op, et, shape, fi), [ins[a] for a in ARGS[op]])
            for j, o in enumerate(outs):
                data[f"{op}{j}"] = raw(o)
        np.savez_compressed(HERE / f"{name}.npz", **data)
        print(name, sorted(data))


if __name__ == "__main__":
    main()
