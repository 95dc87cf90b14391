"""Convolutions of convnet training steps: hlo's convolution rule against XLA CPU, one convolution
per module (forward, input gradient, weight gradient), MobileNetV2 and ResNet shapes.

Each module is JAX's text for one convolution (lax.conv_general_dilated) or its transpose
(jax.linear_transpose: the input gradient is an lhs-dilated convolution of the output gradient
with the reversed kernel, the weight gradient a convolution whose kernel is the output gradient),
NHWC ("jax") or NCHW ("torch", PyTorch/XLA's layout).  XLA and hlo (the module run in-process,
parse excluded) run in turns after a warm-up, best of --repeat each, so that other load on the
machine weighs on both alike.  --before measures the exact tap / output-position loops that ran
every convolution before the fast strategies (convolution._fast_path turned off).

    python benchmarks/bench_conv_strategies.py [--batch 32] [--repeat 3] [--only NAME ...]
        [--layout jax|torch] [--label after] [--before] [--out benchmarks/results/conv_strategies.json]

Prints a Markdown table (conv, XLA ms, hlo ms, ratio, max |hlo - XLA| / sum |products| scale) and
appends its rows under --label to the JSON file.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

# name: (H=W of the input, C in, C out, kernel, stride, padding, feature groups)
SHAPES = {
    "mbv2_stem_3x3s2_3-32": (224, 3, 32, 3, 2, 1, 1),
    "mbv2_dw_3x3_96": (112, 96, 96, 3, 1, 1, 96),
    "mbv2_dw_3x3s2_96": (112, 96, 96, 3, 2, 1, 96),
    "mbv2_pw_1x1_16-96": (112, 16, 96, 1, 1, 0, 1),
    "resnet_stem_7x7s2_3-64": (224, 3, 64, 7, 2, 3, 1),
    "resnet_3x3_64-64": (56, 64, 64, 3, 1, 1, 1),
    "resnet_1x1s2_256-512": (56, 256, 512, 1, 2, 0, 1),
}


def conv_fn(shape, layout):
    from jax import lax
    h, ci, co, k, s, p, g = shape
    dn = ("NHWC", "HWIO", "NHWC") if layout == "jax" else ("NCHW", "OIHW", "NCHW")

    def f(x, w):
        return lax.conv_general_dilated(x, w, (s, s), ((p, p), (p, p)), dimension_numbers=dn,
                                        feature_group_count=g)
    return f


def shapes_of(shape, layout, batch):
    h, ci, co, k, s, p, g = shape
    oh = (h + 2 * p - k) // s + 1
    if layout == "jax":
        return (batch, h, h, ci), (k, k, ci // g, co), (batch, oh, oh, co)
    return (batch, ci, h, h), (co, ci // g, k, k), (batch, co, oh, oh)


def module(name, form, layout, batch):
    """(HLO text, input arrays) of one convolution: form = fwd | dgrad | wgrad."""
    import jax
    import jax.numpy as jnp
    shape = SHAPES[name]
    f = conv_fn(shape, layout)
    xs, ws, ys = shapes_of(shape, layout, batch)
    rng = np.random.default_rng(0)
    x = rng.standard_normal(xs, dtype=np.float32)
    w = (rng.standard_normal(ws, dtype=np.float32) / np.sqrt(np.prod(ws[1:]))).astype(np.float32)
    gy = rng.standard_normal(ys, dtype=np.float32)
    if form == "fwd":
        fn, args = f, (x, w)
    elif form == "dgrad":
        def fn(gy, w):
            return jax.linear_transpose(lambda x: f(x, w), jnp.zeros(xs, jnp.float32))(gy)[0]
        args = (gy, w)
    else:
        def fn(x, gy):
            return jax.linear_transpose(lambda w: f(x, w), jnp.zeros(ws, jnp.float32))(gy)[0]
        args = (x, gy)
    text = jax.jit(fn).lower(*args).as_text("hlo")
    return text, args


def best_of_turns(fa, fb, repeat):
    """Best times of fa and fb run in turns, and their last results."""
    ta = tb = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        ra = fa()
        ta = min(ta, time.perf_counter() - t)
        t = time.perf_counter()
        rb = fb()
        tb = min(tb, time.perf_counter() - t)
    return ta, ra, tb, rb


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--forms", nargs="*", default=["fwd", "dgrad", "wgrad"])
    ap.add_argument("--layout", default="jax", choices=["jax", "torch"])
    ap.add_argument("--label", default="after")
    ap.add_argument("--before", action="store_true")
    ap.add_argument("--out", default=str(HERE / "results" / "conv_strategies.json"))
    args = ap.parse_args()
    from hlo_cli.interpreter import RunOptions, run_module
    from hlo_cli.interpreter.inputs import bind
    from hlo_cli.parser import parse
    from hlo_cli.tools.xla_reference import XlaExecutable
    if args.before:
        from hlo_cli.interpreter.ops import convolution
        convolution._fast_path = lambda *a: None
    rows = []
    print("| conv | form | XLA ms | hlo ms | ratio | max err / scale |")
    print("| --- | --- | --: | --: | --: | --: |")
    for name in SHAPES:
        if args.only and name not in args.only:
            continue
        for form in args.forms:
            text, inputs = module(name, form, args.layout, args.batch)
            exe = XlaExecutable(text)
            exe(inputs)
            mod = parse(text, name)
            bound = bind(mod.entry_computation.parameters, list(inputs))
            t_xla, want, t_hlo, got = best_of_turns(lambda: exe(inputs),
                                                    lambda: run_module(mod, bound, RunOptions()), args.repeat)
            got = np.asarray(got[0] if isinstance(got, (tuple, list)) else got, np.float64)
            want = np.asarray(want[0], np.float64)
            scale = float(np.abs(want).max()) or 1.0
            err = float(np.abs(got - want).max()) / scale
            row = {"conv": name, "form": form, "layout": args.layout, "batch": args.batch,
                   "xla_ms": t_xla * 1e3, "hlo_ms": t_hlo * 1e3, "ratio": t_hlo / t_xla, "max_rel_err": err}
            rows.append(row)
            print(f"| {name} | {form} | {t_xla * 1e3:.1f} | {t_hlo * 1e3:.1f} | {t_hlo / t_xla:.2f}x | {err:.1e} |",
                  flush=True)
    out = Path(args.out)
    data = json.loads(out.read_text()) if out.exists() else {}
    import jax
    data.setdefault("meta", {"cpus": os.cpu_count(), "jax": jax.__version__})
    data[f"{args.label}_{args.layout}_b{args.batch}"] = rows
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=2) + "\n")


if __name__ == "__main__":
    main()
