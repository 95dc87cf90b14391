"""Regenerate the fixtures of this directory with JAX / XLA CPU (run from the repository root):

    python samples/protos/make_fixtures.py

- `<name>.hlo.pb`: XLA's serialized HloModuleProto of samples/<...>.hlo (as_serialized_hlo_module_proto);
  `<name>.xla.txt`: the text XLA prints for the module it reads back from that proto (the reference
  the tests compare our read of the proto with).
- `sort.pbtxt`: the same kind of proto in protobuf's text format (written with our schema).
- `jit_f.snapshot.pb` / `jit_f.cpu_after_optimizations.hlo.pb`: real files XLA CPU writes with
  XLA_FLAGS="--xla_dump_to=DIR --xla_dump_hlo_snapshots --xla_dump_hlo_as_proto" (the snapshot holds
  the optimized module, the arguments of the execution and its result; the after-optimizations
  dump is an HloProto: the module and its buffer assignment).
- `jit_f.hlo_unoptimized_snapshot.pb`: --xla_dump_hlo_unoptimized_snapshots (the module before
  optimizations and the arguments, no result).
"""
import glob
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCES = {"literals": "samples/protos/literals.hlo", "sort": "samples/ops/sort.hlo", "resnet_tiny": "samples/convnets/resnet_tiny.hlo",
           "convolution": "samples/ops/convolution.feature_group_count.hlo", "async": "samples/ops/async-start.hlo", "while_loop_opt": "samples/tensorflow/while_loop.opt.hlo",
           "mesh_groups": "samples/spmd/handwritten/mesh_groups.hlo"}

SNAPSHOT_PROGRAM = """
import jax, jax.numpy as jnp, numpy as np
@jax.jit
def f(x, y, n):
    z = jnp.tanh(x @ y) + 1.0
    return z, (x * 2).astype(jnp.bfloat16), jnp.cumsum(n)
x = (np.arange(6, dtype=np.float32).reshape(2, 3) - 2.5) / 7
y = np.linspace(-1, 1, 6, dtype=np.float32).reshape(3, 2)
n = np.array([3, -1, 4, 1, -5], np.int32)
jax.block_until_ready(f(x, y, n))
"""


def main():
    sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "sources"))
    from proto_compare import xla_proto_and_text
    for name, path in SOURCES.items():
        pb, text = xla_proto_and_text(open(path).read())
        open(os.path.join(HERE, f"{name}.hlo.pb"), "wb").write(pb)
        open(os.path.join(HERE, f"{name}.xla.txt"), "w").write(text)
    from google.protobuf import text_format
    from hlo_cli.sources.proto_schema import messages
    m = messages()["HloModuleProto"]()
    m.ParseFromString(open(os.path.join(HERE, "sort.hlo.pb"), "rb").read())
    open(os.path.join(HERE, "sort.pbtxt"), "w").write(text_format.MessageToString(m))
    with tempfile.TemporaryDirectory() as d:
        env = dict(os.environ, XLA_FLAGS=f"--xla_dump_to={d} --xla_dump_hlo_snapshots --xla_dump_hlo_as_proto")
        subprocess.run([sys.executable, "-c", SNAPSHOT_PROGRAM], env=env, check=True)
        snap = glob.glob(os.path.join(d, "*jit_f.snapshot.*.pb"))[0]
        shutil.copy(snap, os.path.join(HERE, "jit_f.snapshot.pb"))
        shutil.copy(glob.glob(os.path.join(d, "*jit_f.cpu_after_optimizations.hlo.pb"))[0],
                    os.path.join(HERE, "jit_f.cpu_after_optimizations.hlo.pb"))
    with tempfile.TemporaryDirectory() as d:
        env = dict(os.environ, XLA_FLAGS=f"--xla_dump_to={d} --xla_dump_hlo_unoptimized_snapshots")
        subprocess.run([sys.executable, "-c", SNAPSHOT_PROGRAM], env=env, check=True)
        shutil.copy(glob.glob(os.path.join(d, "*jit_f.execution_*.hlo_unoptimized_snapshot.pb"))[0],
                    os.path.join(HERE, "jit_f.hlo_unoptimized_snapshot.pb"))


if __name__ == "__main__":
    main()
