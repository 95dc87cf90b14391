"""Fusions of the kinds XLA GPU writes in backend_config run as the computations they call, and a
cuDNN fusion's workspace allocation (custom-call __nop) runs (no JAX needed)."""
from __future__ import annotations

import numpy as np
import pytest

from hlo_cli.interpreter import run


# ============================================================================ fusion kinds

@pytest.mark.parametrize("kind", ["__cudnn$fusion", "__triton", "__triton_gemm", "__triton_nested_gemm_fusion",
                                  "__custom_fusion", "__dynamic_memcpy"])
def test_gpu_fusion_kinds_run_their_computation(kind):
    """A fusion of any kind XLA GPU writes in backend_config runs as the computation it calls."""
    extra = ',"custom_fusion_config":{"name":"cutlass_gemm"}' if kind == "__custom_fusion" else ""
    text = "\n".join([
        "HloModule m", "fc {", "  a = f32[4,3] parameter(0)", "  b = f32[3,2] parameter(1)",
        "  ROOT d = f32[4,2] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}", "}",
        "ENTRY e {", "  a = f32[4,3] parameter(0)", "  b = f32[3,2] parameter(1)",
        f"  ROOT f = f32[4,2] fusion(a, b), kind=kCustom, calls=fc, backend_config={{\"fusion_backend_config\":"
        f"{{\"kind\":\"{kind}\"{extra}}}}}", "}"])
    a = np.arange(12, dtype=np.float32).reshape(4, 3)
    b = np.arange(6, dtype=np.float32).reshape(3, 2)
    np.testing.assert_array_equal(run(text, a, b, numerics="cpu"), a @ b)


def test_cudnn_fusion_with_workspace_root():
    """A cuDNN fusion whose computation returns (result, workspace from custom-call __nop) runs; the
    workspace is zeros (XLA's CuDnnFusionExecutionTest.CompilerSupportsFusionsWithWorkspace)."""
    text = "\n".join([
        "HloModule m", "f {", "  a = f32[4,3] parameter(0)", "  b = f32[3,2] parameter(1)",
        "  d = f32[4,2] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}",
        "  c = s8[64] custom-call(), custom_call_target=\"__nop\"", "  ROOT t = (f32[4,2], s8[64]) tuple(d, c)", "}",
        "ENTRY e {", "  a = f32[4,3] parameter(0)", "  b = f32[3,2] parameter(1)",
        "  r = (f32[4,2], s8[64]) fusion(a, b), kind=kCustom, calls=f, backend_config={\"fusion_backend_config\":"
        "{\"kind\":\"__cudnn$fusion\",\"cudnn_fusion_config\":{\"plan_id\":\"0\"}}}",
        "  ROOT g = f32[4,2] get-tuple-element(r), index=0", "}"])
    a = np.arange(12, dtype=np.float32).reshape(4, 3)
    b = np.arange(6, dtype=np.float32).reshape(3, 2)
    np.testing.assert_array_equal(run(text, a, b, numerics="cpu"), a @ b)
