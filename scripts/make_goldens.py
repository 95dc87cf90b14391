"""Golden files for the interpreter's per-opcode programs, computed by XLA itself.

For every tests/programs/**/NAME.hlo this writes NAME.npz holding the inputs (`arg0`, `arg1`, ...)
and XLA CPU's results (`out0`, `out1`, ... : the result's leaves, depth-first).  Inputs come from
NAME.inputs.py if present (a file defining `inputs() -> list of arrays`), else from a deterministic,
edge-case-rich generator for each parameter's element type (zeros, signed zeros, extremes, NaN,
inf, subnormals, integer minima and maxima, ...).

    python scripts/make_goldens.py [--force] [FILE.hlo ...]
"""
from __future__ import annotations

import argparse
import runpy
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hlo_cli.parser import parse  # noqa: E402
from hlo_cli.interpreter.values import np_dtype  # noqa: E402
from hlo_cli.tools.xla_reference import run_with_xla  # noqa: E402


def edge_values(shape, seed: int):
    """Deterministic values for one parameter, the interesting ones first."""
    rng = np.random.default_rng(seed)
    dt = np_dtype(shape)
    n = int(np.prod(shape.dims)) if shape.dims else 1
    et = shape.element_type
    if et == "pred":
        base = np.array([True, False])
        vals = np.concatenate([base, rng.integers(0, 2, max(n, 1)).astype(bool)])
    elif et[0] in "su" and et not in ("u1", "s1") and dt.kind in "iu":
        info = np.iinfo(dt)
        base = np.array([0, 1, -1, 2, -2, 7, -7, info.max, info.min, info.max - 1, info.min + 1, 31, 32, 33, 63, 64],
                        dtype=np.int64 if dt.kind == "i" else np.uint64).astype(dt) if dt.kind == "i" else \
            np.array([0, 1, 2, 3, 7, 31, 32, 33, 63, 64, info.max, info.max - 1], dtype=np.uint64).astype(dt)
        vals = np.concatenate([base, rng.integers(info.min, info.max, max(n, 1), dtype=np.int64 if dt.kind == "i"
                                                  else np.uint64, endpoint=True).astype(dt)])
    elif dt.kind == "c":
        re = edge_values(shape.__class__.array("f32" if et == "c64" else "f64", shape.dims), seed)
        im = edge_values(shape.__class__.array("f32" if et == "c64" else "f64", shape.dims), seed + 1)
        return (re.astype(np.complex128) + 1j * im.astype(np.complex128)).astype(dt)
    else:
        specials = np.array([0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 1.5, 2.5, -2.5, 3.0, 1e-3, 100.0, -100.0,
                             np.inf, -np.inf, np.nan, 1e30, -1e30, 1e-40, 65504.0, 70000.0, 0.1, 3.14159])
        vals = np.concatenate([specials, rng.standard_normal(max(n, 1)) * 4])
        with np.errstate(over="ignore", invalid="ignore"):
            vals = vals.astype(np.float32).astype(dt)
    if n == 0:
        return np.zeros(shape.dims, dt)
    # rotate so that different parameters do not line up identically
    vals = np.roll(vals, seed * 3)
    reps = -(-n // len(vals))
    return np.tile(vals, reps)[:n].reshape(shape.dims).astype(dt)


def make(path: Path, force: bool) -> str:
    out = path.with_suffix(".npz")
    if out.exists() and not force and out.stat().st_mtime >= path.stat().st_mtime:
        return "up to date"
    text = path.read_text()
    module = parse(text, str(path))
    params = module.entry_computation.parameters
    custom = path.with_name(path.stem + ".inputs.py")
    if custom.exists():
        args = runpy.run_path(str(custom))["inputs"]()
    else:
        args = [edge_values(p.shape, k) for k, p in enumerate(params)]
    results = run_with_xla(text, args)
    payload = {f"arg{k}": a for k, a in enumerate(args)}
    payload.update({f"out{k}": r for k, r in enumerate(results)})
    np.savez(out, **{k: _storable(v) for k, v in payload.items()})
    return f"wrote {out.relative_to(ROOT)}"


def _storable(a):
    a = np.asarray(a)
    if a.dtype.kind == "V" or a.dtype.name.startswith(("bfloat", "float8", "float6", "float4", "int4", "uint4",
                                                       "int2", "uint2", "int1", "uint1")):
        # ml_dtypes arrays do not round-trip through .npz: store raw bytes, the reader views them back
        return a.view(np.dtype(f"V{a.dtype.itemsize}"))
    return a


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="*")
    ap.add_argument("--force", action="store_true")
    args = ap.parse_args()
    files = [Path(f).resolve() for f in args.files] or sorted((ROOT / "tests" / "programs").rglob("*.hlo"))
    for f in files:
        try:
            print(f"{f.relative_to(ROOT)}: {make(f, args.force)}")
        except Exception as e:  # report and go on
            print(f"{f.relative_to(ROOT)}: FAILED: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")


if __name__ == "__main__":
    main()
