#!/usr/bin/env python
"""Generate the modules `hlo isolate`, `hlo extract` and `hlo shrink` are tested on (tests/data/tools/).

``nan_train_step``
    One SGD step of a two-layer MLP with a softmax written without its max subtraction
    (exp(logits) / sum(exp(logits))), on inputs large enough that exp overflows: a real NaN from
    JAX's own lowering (inf / inf), in the forward pass of a training step.  XLA CPU gives the same
    NaN (checked below).

For each: <name>.hlo (Lowered.as_text("hlo")), <name>.inputs.npz (arg0...), <name>.expected.npz
(XLA's results, out0...).

Usage: python scripts/gen_tool_samples.py [--out tests/data/tools]
"""
from __future__ import annotations

import argparse
import os

import numpy as np


def nan_train_step():
    import jax
    import jax.numpy as jnp

    def loss(params, x, y):
        h = jnp.tanh(x @ params["w1"] + params["b1"])
        logits = h @ params["w2"] * params["scale"]
        e = jnp.exp(logits)                         # no max subtraction: overflows for large logits
        p = e / jnp.sum(e, axis=-1, keepdims=True)
        return -jnp.mean(jnp.sum(y * jnp.log(p + 1e-9), axis=-1))

    def step(params, x, y):
        l, g = jax.value_and_grad(loss)(params, x, y)
        new = jax.tree_util.tree_map(lambda p, d: p - 0.1 * d, params, g)
        return l, new

    rng = np.random.default_rng(0)
    params = {"w1": rng.normal(size=(8, 16)).astype(np.float32), "b1": np.zeros(16, np.float32),
              "w2": rng.normal(size=(16, 4)).astype(np.float32), "scale": np.float32(60.0)}
    x = rng.normal(size=(6, 8)).astype(np.float32)
    y = np.eye(4, dtype=np.float32)[rng.integers(0, 4, 6)]
    return jax.jit(step), (params, x, y)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests", "data", "tools"))
    a = ap.parse_args()
    import jax
    os.makedirs(a.out, exist_ok=True)
    for name, make in (("nan_train_step", nan_train_step),):
        fn, args = make()
        text = fn.lower(*args).as_text("hlo")
        leaves = jax.tree_util.tree_leaves(args)
        outs = jax.tree_util.tree_leaves(fn(*args))
        assert any(not np.all(np.isfinite(np.asarray(o))) for o in outs), "the step was meant to make a NaN"
        with open(os.path.join(a.out, f"{name}.hlo"), "w") as f:
            f.write(text)
        np.savez(os.path.join(a.out, f"{name}.inputs.npz"), **{f"arg{i}": np.asarray(v) for i, v in enumerate(leaves)})
        np.savez(os.path.join(a.out, f"{name}.expected.npz"), **{f"out{i}": np.asarray(v) for i, v in enumerate(outs)})
        print(name, len(text.splitlines()), "lines;", sum(not np.all(np.isfinite(np.asarray(o))) for o in outs),
              "of", len(outs), "results non-finite")


if __name__ == "__main__":
    main()
