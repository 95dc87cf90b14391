"""Goldens for the linalg programs whose opcode XLA CPU cannot run itself.

* ragged-dot*.hlo: XLA CPU has no ragged-dot ("not supported by XLA:CPU ThunkEmitter"); the golden
  is jax.lax.ragged_dot_general with the same dimension numbers, which JAX lowers to masks and dots
  that XLA runs.
* scaled-dot.hlo: the HLO-to-StableHLO bridge rejects scaled-dot; the golden is XLA running
  scaled-dot.equivalent.hlo.txt, the decomposition XLA's ScaledDotRewriter performs.

Inputs come from the programs' .inputs.py files, as for scripts/make_goldens.py.

    python tests/programs/linalg/make_special_goldens.py
"""
from __future__ import annotations

import runpy
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))


def _inputs(name):
    return runpy.run_path(str(HERE / f"{name}.inputs.py"))["inputs"]()


def _save(name, args, outs):
    payload = {f"arg{k}": a for k, a in enumerate(args)}
    payload.update({f"out{k}": o for k, o in enumerate(outs)})
    np.savez(HERE / f"{name}.npz", **payload)
    print(f"wrote {name}.npz")


def ragged(name):
    import jax
    from jax import lax
    from hlo_cli.parser import parse
    inst = parse((HERE / f"{name}.hlo").read_text()).entry_computation.root_instruction
    a = inst.attrs
    dn = lax.RaggedDotDimensionNumbers(
        ((list(a.get("lhs_contracting_dims", ())), list(a.get("rhs_contracting_dims", ()))),
         (list(a.get("lhs_batch_dims", ())), list(a.get("rhs_batch_dims", ())))),
        list(a["lhs_ragged_dims"]), list(a.get("rhs_group_dims", ())))
    args = _inputs(name)
    out = jax.jit(lambda x, y, g: lax.ragged_dot_general(x, y, g, dn))(*args)
    _save(name, args, [np.asarray(out)])


def scaled(name):
    from hlo_cli.xla_reference import run_with_xla
    args = _inputs(name)
    _save(name, args, run_with_xla((HERE / f"{name}.equivalent.hlo.txt").read_text(), args))


if __name__ == "__main__":
    for n in ("ragged-dot", "ragged-dot.batched", "ragged-dot.contracting"):
        ragged(n)
    scaled("scaled-dot")
