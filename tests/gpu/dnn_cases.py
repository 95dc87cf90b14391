"""Run the shared XLA GPU cases with cuDNN calls and measure them against the GPU's results:
`python -m tests.gpu.dnn_cases` prints, per case, stage and numerics, the largest |ours - GPU|."""
from __future__ import annotations

import json
from pathlib import Path

import ml_dtypes
import numpy as np

import hlo_cli
from hlo_cli.interpreter import run

CASES = Path(__file__).resolve().parents[2] / "samples" / "gpu" / "cases"
DNN_CASES = ("attention_cudnn_bf16", "depthwise_conv_grad")


def load(case: str):
    """(inputs in parameter order, expected results, tolerances) of a shared case."""
    with np.load(CASES / f"{case}.inputs.npz") as z:
        inputs = [z[f"arg{i}"] for i in range(len(z.files))]
    with np.load(CASES / f"{case}.expected.npz") as z:
        expected = [z[f"out{i}"] for i in range(len(z.files))]
    expected = [e.view(ml_dtypes.bfloat16) if e.dtype == np.dtype("V2") else e for e in expected]
    tol = json.loads((CASES / f"{case}.json").read_text())
    return inputs, expected, tol


def run_case(case: str, stage: str, numerics: str):
    """Our results of `case` at `stage` ("pre" or "post") under `numerics` ("cpu" or "gpu")."""
    module = hlo_cli.parse_file(str(CASES / f"{case}.{stage}.hlo"))
    inputs, _, _ = load(case)
    params = module.entry_computation.parameters
    args = []
    for p, x in zip(params, inputs):
        if x.dtype == np.dtype("V2"):
            x = x.view(ml_dtypes.bfloat16)
        if p.shape.element_type == "bf16":
            x = x.astype(ml_dtypes.bfloat16)
        elif p.shape.element_type == "f32":
            x = x.astype(np.float32)
        args.append(x)
    out = run(module, *args, numerics=numerics)
    return list(out) if isinstance(out, tuple) else [out]


def max_errors(case: str, stage: str, numerics: str) -> list[float]:
    _, expected, _ = load(case)
    got = run_case(case, stage, numerics)
    return [float(np.max(np.abs(g.astype(np.float64) - e.astype(np.float64)))) if e.size else 0.0
            for g, e in zip(got, expected)]


if __name__ == "__main__":
    for case in DNN_CASES:
        for stage in ("pre", "post"):
            for nm in ("cpu", "gpu"):
                errs = max_errors(case, stage, nm)
                print(f"{case:24s} {stage:4s} {nm}: max |ours - GPU| per output " +
                      ", ".join(f"{e:.3g}" for e in errs))
