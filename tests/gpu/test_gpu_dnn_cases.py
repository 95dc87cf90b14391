"""The shared XLA GPU cases with cuDNN calls (samples/gpu/cases, made on an H200) against the GPU's
recorded results, before and after XLA GPU's optimizations, and the convnet dump's stages."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import hlo_cli
from hlo_cli.interpreter import run

from .dnn_cases import DNN_CASES, load, run_case


# ============================================================================ shared GPU cases

@pytest.mark.parametrize("case", DNN_CASES)
@pytest.mark.parametrize("stage", ["pre", "post"])
def test_shared_case_matches_gpu(case, stage):
    """Each case before and after XLA GPU's optimizations (auto numerics) matches the GPU's results
    within the case's tolerance."""
    _, expected, tol = load(case)
    got = run_case(case, stage, None)
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g.astype(np.float64), e.astype(np.float64), rtol=tol["rtol"], atol=tol["atol"])


def test_depthwise_post_is_f32_exact_under_gpu_numerics():
    """XLA chose cuDNN algorithms with math_type DEFAULT_MATH (no tensor cores) for the depthwise
    convolutions: f32 products, so GPU numerics give what CPU numerics give, 6e-5 from the GPU
    (TF32 products would be 0.3 away)."""
    _, expected, _ = load("depthwise_conv_grad")
    got = run_case("depthwise_conv_grad", "post", "gpu")
    err = max(float(np.max(np.abs(g - e))) for g, e in zip(got, expected))
    assert err < 1e-3


def test_convnet_dump_stages_agree():
    """The convnet step's optimized stage (cuDNN forward, backward-input and backward-filter
    convolutions, Triton fusions) agrees with its stage before optimizations."""
    d = Path(__file__).resolve().parents[2] / "samples" / "gpu" / "dumps"
    pre = hlo_cli.parse_file(str(d / "module_541803.jit_dump_convnet_step.before_optimizations.txt"))
    post = hlo_cli.parse_file(str(d / "module_541803.jit_dump_convnet_step.sm_9.0a_gpu_after_optimizations.txt"))
    assert any(i.attrs.get("custom_call_target") == "__cudnn$convBackwardInput" for c in post.computations for i in c.instructions)
    rng = np.random.default_rng(0)
    args = [rng.standard_normal(p.shape.dims).astype(np.float32) if p.shape.element_type == "f32"
            else rng.integers(0, 10, p.shape.dims).astype(np.int32) for p in pre.entry_computation.parameters]
    a = run(pre, *args, numerics="cpu")
    b = run(post, *args, numerics="cpu")
    for x, y in zip(a, b):
        np.testing.assert_allclose(y, x, rtol=1e-4, atol=1e-4)
