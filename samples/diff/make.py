"""Make the modules of samples/diff with JAX (XLA CPU): a small model before and after XLA's
optimizations, its inputs and XLA's results, and deliberately broken copies for `hlo diff`'s tests.

    python samples/diff/make.py        (writes next to this file)

model.hlo          jax.jit(f).lower(...).as_text("hlo"): before optimizations
model.opt.hlo      .compile().as_text(): after them (fusions, copies, layouts, metadata)
inputs.npz         arg0, arg1, arg2
expected.npz       XLA's results, out0, out1
model.broken.hlo   model.hlo with the add of x @ w + b turned into a subtract
model.opt.broken.hlo  model.opt.hlo with the loop body's multiply by 0.9 turned into an add
"""
from __future__ import annotations

import re
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

HERE = Path(__file__).resolve().parent


def f(x, w, b):
    h = jnp.tanh(x @ w + b)

    def body(i, c):
        return c * 0.9 + jnp.sin(c)
    h = lax.fori_loop(0, 3, body, h)
    return jnp.sum(h * h, axis=1), jax.nn.softmax(h.T, axis=0)


def main():
    rng = np.random.default_rng(7)
    args = [rng.standard_normal((4, 8)).astype(np.float32), rng.standard_normal((8, 6)).astype(np.float32),
            rng.standard_normal((6,)).astype(np.float32)]
    lowered = jax.jit(f).lower(*args)
    before = lowered.as_text("hlo")
    after = lowered.compile().as_text()
    out = jax.jit(f)(*args)
    (HERE / "model.hlo").write_text(before)
    (HERE / "model.opt.hlo").write_text(after)
    np.savez(HERE / "inputs.npz", **{f"arg{k}": a for k, a in enumerate(args)})
    np.savez(HERE / "expected.npz", **{f"out{k}": np.asarray(o) for k, o in enumerate(out)})
    broken, n = re.subn(r"^(  add\.\d+ = f32\[4,6\]\{1,0\} )add\(dot_general", r"\1subtract(dot_general", before,
                        count=1, flags=re.M)
    assert n == 1, "no add of the dot in the text before optimizations"
    (HERE / "model.broken.hlo").write_text(broken)
    broken, n = re.subn(r"(%mul\.\d+ = f32\[4,6\]\{1,0\} )multiply\((%param_[\d.]+, %broadcast)", r"\1add(\2",
                        after, count=1)
    assert n == 1, "no multiply in the loop body after optimizations"
    (HERE / "model.opt.broken.hlo").write_text(broken)


if __name__ == "__main__":
    main()
