#!/usr/bin/env python
"""How far hlo is from XLA GPU's recorded results, per shared GPU case, stage and numerics.

For every NAME.json in the given folders (default samples/gpu/cases and samples/gpu/cases_cublas; the
shared /work/shared/gpu/cases* hold more), runs NAME.pre.hlo and NAME.post.hlo on NAME.inputs.npz under
each numerics and prints, against NAME.expected.npz: the largest |hlo - GPU| over the outputs (NaN
where both hold NaN counts as equal), the sum of |hlo - GPU|, the fraction of output values equal bit
for bit, and whether all are within NAME.json's rtol/atol.  A case that does not run prints the first
line of its error.

`--tf32 rne|rna|trunc` sets the TF32 rounding of XLA-emitted dots (numerics.TF32_ROUNDING) and
`--cublas-tf32` that of cuBLAS calls: the measurement that chose them.

Usage (from the repository root):
  python scripts/gpu_case_errors.py [FOLDER ...] [--numerics gpu,cpu] [--tf32 R] [--cublas-tf32 R]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np


def _load(base: Path, stage: str):
    from hlo_cli import parse_file
    from hlo_cli.interpreter.values import np_dtype
    module = parse_file(f"{base}.{stage}.hlo")
    params = sorted((i for i in module.computation_map[module.entry].instructions if i.opcode == "parameter"),
                    key=lambda i: i.parameter_number)
    with np.load(f"{base}.inputs.npz") as z:
        raw = [z[f"arg{k}"] for k in range(len(params))]
    args = [a.view(np_dtype(p.shape)) if a.dtype.kind == "V" else a.astype(np_dtype(p.shape))
            for a, p in zip(raw, params)]
    return module, args


def measure(base: Path, stage: str, mode: str) -> str:
    from hlo_cli.errors import HloError
    from hlo_cli.interpreter import RunOptions, run_module
    tol = json.loads(Path(f"{base}.json").read_text())
    try:
        module, args = _load(base, stage)
        out = run_module(module, args, RunOptions(numerics=mode))
    except HloError as e:
        return "does not run: " + str(e).splitlines()[0][:120]
    outs = list(out) if isinstance(out, tuple) else [out]
    with np.load(f"{base}.expected.npz") as z:
        want = [z[f"out{k}"] for k in range(len(outs))]
    worst, total, equal, count, ok = 0.0, 0.0, 0, 0, True
    for o, e in zip(outs, want):
        e = e.view(o.dtype) if e.dtype.kind == "V" else e
        o64, e64 = np.asarray(o).astype(np.float64), e.astype(np.float64)
        both_nan = np.isnan(o64) & np.isnan(e64)
        diff = np.where(both_nan, 0.0, np.abs(o64 - e64))
        worst = max(worst, float(np.max(diff)) if diff.size else 0.0)
        total += float(np.nansum(diff))
        equal += int(((o64 == e64) | both_nan).sum())
        count += diff.size
        with np.errstate(invalid="ignore"):
            ok &= bool(np.all(both_nan | (diff <= tol["atol"] + tol["rtol"] * np.abs(e64))))
    return (f"max {worst:.3g}  sum {total:.4g}  exact {equal / max(count, 1):.1%}  "
            f"{'within' if ok else 'OUTSIDE'} rtol={tol['rtol']} atol={tol['atol']}")


def main() -> int:
    root = Path(__file__).resolve().parent.parent
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folders", nargs="*", default=[str(root / "samples/gpu/cases"),
                                                   str(root / "samples/gpu/cases_cublas")])
    ap.add_argument("--numerics", default="gpu,cpu")
    ap.add_argument("--tf32", choices=["rne", "rna", "trunc"])
    ap.add_argument("--cublas-tf32", choices=["rne", "rna", "trunc"])
    opts = ap.parse_args()
    from hlo_cli.interpreter.ops import numerics
    if opts.tf32:
        numerics.TF32_ROUNDING = opts.tf32
    if opts.cublas_tf32:
        numerics.CUBLAS_TF32_ROUNDING = opts.cublas_tf32
    for folder in opts.folders:
        for meta in sorted(Path(folder).glob("*.json")):
            base = meta.with_suffix("")
            for stage in ("pre", "post"):
                for mode in opts.numerics.split(","):
                    print(f"{base.parent.name}/{base.name} {stage:4s} {mode}: {measure(base, stage, mode)}",
                          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
