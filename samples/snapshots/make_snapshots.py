"""Regenerate the HloSnapshots of this directory with JAX / XLA CPU (run from the repository root):

    python samples/snapshots/make_snapshots.py

Each `<name>.snapshot.pb` is a file XLA CPU itself wrote while JAX ran the program below, with
XLA_FLAGS="--xla_dump_to=DIR --xla_dump_hlo_snapshots": the module after XLA's optimizations, the
arguments of that execution and its result.  `mlp.hlo_unoptimized_snapshot.pb` is what
--xla_dump_hlo_unoptimized_snapshots writes (module_NNNN.NAME.execution_NNNN.hlo_unoptimized_snapshot.pb):
the module before optimizations and the arguments, no result; `hlo run FILE --reference xla`
compares it with XLA.  `hlo run <name>.snapshot.pb` replays it and compares
with the stored result.  `<name>.hlo` is the same function's text before optimizations (JAX's
lowering), which `hlo run <name>.hlo --reference xla` can hand back to XLA (texts after
optimizations, like the snapshots' modules, XLA often cannot compile again).
"""
import glob
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))

PROGRAM = r'''
import sys
import jax, jax.numpy as jnp, numpy as np
jax.config.update("jax_enable_x64", False)

def mlp(x, w1, b1, w2):
    h = jnp.maximum(x @ w1 + b1, 0.0)
    logits = h @ w2
    return jax.nn.softmax(logits, axis=-1), jnp.argmax(logits, axis=-1).astype(jnp.int32)

def narrow(a, b, c):
    s = (a.astype(jnp.float32) * 1.5).astype(jnp.bfloat16) + a      # bf16 rounding
    wrap = b + jnp.int8(100)                                          # int8 wraps around
    e = jnp.exp(c)                                                    # f16 exp, overflows to inf
    return s, wrap, e

def loop(x, n):
    def body(i, carry):
        v, acc = carry
        v = jnp.sin(v) * 1.1 + 0.01 * i
        return v, acc + jnp.sum(v)
    return jax.lax.fori_loop(0, n, body, (x, jnp.float32(0)))

rng = np.random.default_rng(0)
cases = {
    "mlp": (mlp, (rng.standard_normal((4, 8), np.float32), rng.standard_normal((8, 16), np.float32) / 3,
                  rng.standard_normal((16,), np.float32) / 10, rng.standard_normal((16, 5), np.float32) / 4)),
    "narrow": (narrow, (jnp.asarray(rng.standard_normal((3, 4)), jnp.bfloat16),
                        np.array([-128, -1, 0, 27, 28, 127], np.int8),
                        np.array([-20, 0, 1.5, 10, 11.5, 12], np.float16))),
    "loop": (loop, (rng.standard_normal((6,), np.float32), np.int32(7))),
}
name = sys.argv[1]
fn, args = cases[name]
fn.__name__ = name
jitted = jax.jit(fn)
print(jitted.lower(*args).as_text("hlo"))
jax.block_until_ready(jitted(*args))
'''


def _dump(name: str, tmp: str, flag: str) -> str:
    env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS=f"--xla_dump_to={tmp} {flag}")
    r = subprocess.run([sys.executable, "-c", PROGRAM, name], env=env, capture_output=True, text=True, check=True)
    return r.stdout


def make(name: str):
    with tempfile.TemporaryDirectory() as tmp:
        text = _dump(name, tmp, "--xla_dump_hlo_snapshots")
        snaps = sorted(glob.glob(os.path.join(tmp, f"module_*.jit_{name}.snapshot.*.pb")))
        if not snaps:
            raise SystemExit(f"XLA wrote no snapshot for jit_{name}")
        with open(os.path.join(HERE, f"{name}.hlo"), "w") as f:
            f.write(text.strip() + "\n")
        shutil.copy(snaps[0], os.path.join(HERE, f"{name}.snapshot.pb"))
        print(f"{name}: {os.path.basename(snaps[0])} ({os.path.getsize(snaps[0])} bytes)")
    if name == "mlp":      # (XLA writes one kind of snapshot per run)
        with tempfile.TemporaryDirectory() as tmp:
            _dump(name, tmp, "--xla_dump_hlo_unoptimized_snapshots")
            un = sorted(glob.glob(os.path.join(tmp, f"module_*.jit_{name}.execution_*.hlo_unoptimized_snapshot.pb")))
            if not un:
                raise SystemExit(f"XLA wrote no unoptimized snapshot for jit_{name}")
            shutil.copy(un[0], os.path.join(HERE, f"{name}.hlo_unoptimized_snapshot.pb"))
            print(f"{name}: {os.path.basename(un[0])} ({os.path.getsize(un[0])} bytes)")


if __name__ == "__main__":
    for n in sys.argv[1:] or ["mlp", "narrow", "loop"]:
        make(n)
