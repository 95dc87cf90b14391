"""Tiny convnet training steps (samples/convnets/, JAX on XLA CPU) run by hlo against XLA's results.

MobileNetV2-style (depthwise convolutions, batch norm as reductions, ReLU6) and ResNet-style (7x7
stem, max pooling and its select-and-scatter gradient, strided and 1x1 projection convolutions)
steps with their gradients and an SGD-with-momentum update, before and after XLA's optimizations:
the convolution forms of the benchmarks (benchmarks/gen_convnets.py, which wrote these with
--tiny), small enough for the suite.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from hlo_cli.checker import check_module
from hlo_cli.interpreter import run
from hlo_cli.interpreter.values import leaves
from hlo_cli import parse_file
from test_samples_run import assert_matches_xla

SAMPLES = Path(__file__).resolve().parent.parent / "samples" / "convnets"
CASES = ("mobilenet_v2_tiny", "resnet_tiny")
# Convolutions (forward, input and weight gradients), batch-norm reductions and the classifier's
# dots: XLA CPU accumulates in its own blocked order, NumPy in another, so float sums differ in the
# last bits.  Measured (x86-64): largest |ours - XLA| 4.2e-7, relative to 1 + |XLA| 4.0e-7, on both
# texts; 9 of 85 (MobileNetV2) and 6 of 85 (ResNet) outputs bit-identical.
TOL = (2e-6, 1e-6, "convolutions, reductions and dots accumulate in XLA CPU's own order")
# what each sample must exercise (the point of having it); XLA's optimizations turn the
# select-and-scatter of the max pooling's gradient into other instructions
FORMS = {("mobilenet_v2_tiny", ".hlo"): ("feature_group_count=", "convolution("),
         ("mobilenet_v2_tiny", ".opt.hlo"): ("feature_group_count=", "convolution("),
         ("resnet_tiny", ".hlo"): ("select-and-scatter(", "reduce-window(", "size=7x7"),
         ("resnet_tiny", ".opt.hlo"): ("reduce-window(", "size=7x7")}


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("suffix", [".hlo", ".opt.hlo"])
def test_convnet_step_matches_xla(case, suffix):
    path = SAMPLES / f"{case}{suffix}"
    text = path.read_text()
    for form in FORMS[case, suffix]:
        assert form in text, f"{path.name} lost its {form!r}"
    module = parse_file(str(path), use_cache=False)
    errors = [d for d in check_module(module, text) if d.severity == "error"]
    assert not errors, errors[:3]
    with np.load(SAMPLES / f"{case}.inputs.npz") as z:
        args = [z[f"arg{k}"] for k in range(len(z.files))]
    with np.load(SAMPLES / f"{case}.expected.npz") as z:
        expected = [z[f"out{k}"] for k in range(len(z.files))]
    got = list(leaves(run(module, *args)))
    assert len(got) == len(expected)
    for k, (ours, xla) in enumerate(zip(got, expected)):
        assert_matches_xla(np.asarray(ours), xla, TOL, f"{path.name} out{k}")
