"""Make samples/dumps/passes/: XLA CPU's pass dump of one small JAX step (a dot, tanh, softmax, a
three-trip fori_loop, a strided slice), as `hlo bisect` and `hlo info DIR --stage` read them; and
samples/dumps/protos/: the same kind of dump as HloModuleProtos (--xla_dump_hlo_as_proto) of a
smaller function, with the HloSnapshot of its execution (--xla_dump_hlo_snapshots); samples/dumps/sharded/: a function sharded over a 4x2 mesh of 8 host devices
(SPMD partitioning among the passes: the stages after it are per-device programs).

    python samples/dumps/make_pass_dump.py

XLA_FLAGS must be set before JAX starts, so the compilation runs in a subprocess.  What is kept:
every stage of module jit_step (text), its buffer assignment and one LLVM IR file (not stages: a
reader must skip them), and the smallest other module (jit_convert_element_type: a directory
holds several modules).  Seen with jax/jaxlib 0.10.x on x86-64 (CPU).
"""
from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

STEP = r'''
import jax, jax.numpy as jnp
def step(x, w, b):
    h = jnp.tanh(x @ w + b)
    h = h * 2.0 / 4.0 + jnp.zeros_like(h)
    s = jax.nn.softmax(h, axis=-1)
    def body(i, c):
        return c * 0.5 + jnp.sum(s, axis=0) / (i + 1.0)
    c = jax.lax.fori_loop(0, 3, body, jnp.zeros(s.shape[1], s.dtype))
    return s.reshape(-1)[::2], c
x = jnp.ones((4, 6), jnp.float32); w = jnp.ones((6, 5), jnp.float32); b = jnp.ones((5,), jnp.float32)
jax.jit(step)(x, w, b)
'''


SMALL = r'''
import jax, jax.numpy as jnp
def small(x):
    return jnp.sum(jnp.tanh(x * 2.0 + 1.0), axis=0)
jax.jit(small)(jnp.ones((3, 4), jnp.float32))
'''


def protos():
    out = Path(__file__).resolve().parent / "protos"
    with tempfile.TemporaryDirectory() as tmp:
        dump = Path(tmp) / "dump"
        env = {"XLA_FLAGS": f"--xla_dump_to={dump} --xla_dump_hlo_pass_re=.* --xla_dump_hlo_as_proto "
                            "--xla_dump_hlo_snapshots",
               "JAX_PLATFORMS": "cpu", "PATH": "/usr/bin:/bin"}
        subprocess.run([sys.executable, "-c", SMALL], env=env, check=True)
        keep = sorted(p.name for p in dump.iterdir() if p.is_file() and ".jit_small." in p.name
                      and p.name.endswith(".pb"))
        if out.exists():
            shutil.rmtree(out)
        out.mkdir(parents=True)
        for n in keep:
            shutil.copy(dump / n, out / n)
    print(f"{out}: {len(keep)} files")


SHARDED = r'''
import numpy as np, jax, jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
mesh = Mesh(np.array(jax.devices()).reshape(4, 2), ("x", "y"))
def f(a, w):
    h = jnp.tanh(a @ w)
    return jnp.sum(h, axis=0) * 0.5, h
a = jax.device_put(jnp.ones((8, 16), jnp.float32), NamedSharding(mesh, P("x", None)))
w = jax.device_put(jnp.ones((16, 4), jnp.float32), NamedSharding(mesh, P(None, "y")))
jax.jit(f, out_shardings=(NamedSharding(mesh, P()), NamedSharding(mesh, P("x", "y"))))(a, w)
'''


def sharded():
    out = Path(__file__).resolve().parent / "sharded"
    with tempfile.TemporaryDirectory() as tmp:
        dump = Path(tmp) / "dump"
        env = {"XLA_FLAGS": f"--xla_dump_to={dump} --xla_dump_hlo_pass_re=.* "
                            "--xla_force_host_platform_device_count=8",
               "JAX_PLATFORMS": "cpu", "PATH": "/usr/bin:/bin"}
        subprocess.run([sys.executable, "-c", SHARDED], env=env, check=True)
        keep = sorted(p.name for p in dump.iterdir() if p.is_file() and ".jit_f." in p.name
                      and p.name.endswith(".txt") and "after_optimizations-" not in p.name)
        if out.exists():
            shutil.rmtree(out)
        out.mkdir(parents=True)
        for n in keep:
            shutil.copy(dump / n, out / n)
    print(f"{out}: {len(keep)} files")


def main():
    out = Path(__file__).resolve().parent / "passes"
    with tempfile.TemporaryDirectory() as tmp:
        dump = Path(tmp) / "dump"
        env = {"XLA_FLAGS": f"--xla_dump_to={dump} --xla_dump_hlo_pass_re=.*", "JAX_PLATFORMS": "cpu",
               "PATH": "/usr/bin:/bin"}
        subprocess.run([sys.executable, "-c", STEP], env=env, check=True)
        names = sorted(p.name for p in dump.iterdir() if p.is_file())
        step = next(n.split(".")[0] for n in names if ".jit_step." in n)
        small = next(n.split(".")[0] for n in names if ".jit_convert_element_type." in n)
        keep = [n for n in names if n.startswith(step + ".") and n.endswith(".txt")
                and "buffer-assignment-values" not in n and "live-range" not in n]
        keep += [n for n in names if n.startswith(small + ".") and n.endswith(("before_optimizations.txt",
                                                                              "after_optimizations.txt"))]
        keep += [n for n in names if n.startswith(step + ".") and n.endswith(".ir-no-opt.ll")][:1]
        keep += [n for n in names if n.startswith(step + ".") and n.endswith("debug_options")]
        if out.exists():
            shutil.rmtree(out)
        out.mkdir(parents=True)
        for n in keep:
            shutil.copy(dump / n, out / n)
    print(f"{out}: {len(keep)} files")


if __name__ == "__main__":
    main()
    protos()
    sharded()
