"""Every GPU/TPU target hlo runs, called with wrong shapes and types: each call either runs or is
refused by the target's own check (a located message naming the target), never a NumPy failure
inside the kernel ("custom-call failed: ...") and never a Python exception."""
from __future__ import annotations

import numpy as np
import pytest

from hlo_cli.errors import HloError
from hlo_cli.interpreter import run

from .test_gpu_solver import module

F, S, U = "f32", "s32", "u32"
SIGNATURES = [
    ("cusolver_potrf_ffi", [(F, (2, 3, 3))], [(F, (2, 3, 3)), (S, (2,))], "lower = true"),
    ("hipsolver_getrf_ffi", [(F, (2, 3, 4))], [(F, (2, 3, 4)), (S, (2, 3)), (S, (2,))], ""),
    ("cusolver_geqrf_ffi", [(F, (3, 4))], [(F, (3, 4)), (F, (3,))], ""),
    ("cusolver_orgqr_ffi", [(F, (4, 3)), (F, (2,))], [(F, (4, 3))], ""),
    ("cusolver_ormqr_ffi", [(F, (4, 2)), (F, (2,)), (F, (4, 3))], [(F, (4, 3))], "left = true, transpose = false"),
    ("cusolver_syevd_ffi", [(F, (3, 3))], [(F, (3, 3)), (F, (3,)), (S, ())], "algorithm = 0 : ui8, lower = true"),
    ("cusolver_sytrd_ffi", [(F, (3, 3))], [(F, (3, 3)), (F, (3,)), (F, (2,)), (F, (2,)), (S, ())], "lower = true"),
    ("cusolver_gesvdj_ffi", [(F, (4, 3))], [(F, (4, 3)), (F, (3,)), (F, (4, 4)), (F, (3, 3)), (S, ())],
     "compute_uv = true, full_matrices = true"),
    ("cusolver_gesvd_ffi", [(F, (4, 3))], [(F, (4, 3)), (F, (3,)), (F, (4, 4)), (F, (3, 3)), (S, ())],
     "compute_uv = true, full_matrices = true, transposed = false"),
    ("cusolver_syrk_ffi", [(F, (3, 2)), (F, (3, 3)), (F, ()), (F, ())], [(F, (3, 3))], "transpose = false"),
    ("cusolver_geev_ffi", [(F, (3, 3))], [(F, (3, 3)), ("c64", (3,)), (F, (3, 3)), (F, (3, 3)), (S, ())],
     "left = false, right = true"),
    ("cuhybrid_eig_real", [(F, (3, 3))], [(F, (3,)), (F, (3,)), ("c64", (3, 3)), ("c64", (3, 3)), (S, ())],
     "left = true, right = true"),
    ("cusolver_csrlsvqr_ffi", [(F, (3,)), (S, (3,)), (S, (4,)), (F, (3,))], [(F, (3,))], "reorder = 0 : i32"),
    ("cusparse_gtsv2_ffi", [(F, (4,))] * 3 + [(F, (4, 2))], [(F, (4, 2))], ""),
    ("cu_tridiagonal_solve_perturbed", [(F, (4,))] * 3 + [(F, (4, 2))], [(F, (4, 2))], ""),
    ("cu_lu_pivots_to_permutation", [(S, (3,))], [(S, (4,))], ""),
    ("cu_threefry2x32_ffi", [(U, (3,))] * 4, [(U, (3,))] * 2, ""),
    ("cu_cholesky_update_ffi", [(F, (3, 3)), (F, (3,))], [(F, (3, 3)), (F, (3,))], ""),
    ("LuDecomposition", [(F, (3, 3))], [(F, (3, 3)), (S, (3,)), (S, (3,))], ""),
    ("__cub$DeviceRadixSort", [(F, (2, 5)), (S, (2, 5))], [(F, (2, 5)), (S, (2, 5)), ("u8", (8,))], ""),
    ("__gpu$TopK", [(F, (2, 8))], [(F, (2, 3)), (S, (2, 3))], ""),
]
DT = {"f32": np.float32, "f64": np.float64, "s32": np.int32, "u32": np.uint32, "c64": np.complex64, "u8": np.uint8}


def _mutations(entries):
    for i, (t, d) in enumerate(entries):
        if d:
            yield entries[:i] + [(t, d[:-1])] + entries[i + 1:]
            yield entries[:i] + [(t, d[:-1] + (d[-1] + 1,))] + entries[i + 1:]
        yield entries[:i] + [(t, d + (2,))] + entries[i + 1:]
        yield entries[:i] + [("f64" if t != "f64" else "f32", d)] + entries[i + 1:]
    yield entries[:-1]


def _cases():
    for target, ops, res, cfg in SIGNATURES:
        for m in _mutations(ops):
            if m:
                yield pytest.param(target, m, res, cfg, id=f"{target}-op-{len(m)}-{m}")
        for m in _mutations(res):
            if m:
                yield pytest.param(target, ops, m, cfg, id=f"{target}-res-{len(m)}-{m}")


@pytest.mark.parametrize("target, ops, res, cfg", list(_cases()))
def test_wrong_shapes_never_reach_the_kernel(target, ops, res, cfg):
    text = module(target, ops, res, cfg)
    args = [np.ones(d, DT[t]) for t, d in ops]
    try:
        run(text, *args)
    except HloError as e:
        msg = str(e)
        assert "custom-call failed" not in msg, msg
    # anything else (a Python exception) fails the test by itself


@pytest.mark.parametrize("target, ops, res, cfg", SIGNATURES, ids=[s[0] for s in SIGNATURES])
def test_the_unmutated_signatures_run(target, ops, res, cfg):
    args = [np.eye(*d[-2:], dtype=DT[t]) * 4 + 1 if len(d) >= 2 and t != "s32" else np.ones(d, DT[t]) for t, d in ops]
    if target == "cusolver_csrlsvqr_ffi":
        args = [np.ones(3, np.float32), np.arange(3, dtype=np.int32), np.arange(4, dtype=np.int32), np.ones(3, np.float32)]
    if target == "cu_lu_pivots_to_permutation":
        args = [np.zeros(3, np.int32)]
    run(module(target, ops, res, cfg), *[np.broadcast_to(a, d).astype(DT[t]) for a, (t, d) in zip(args, ops)])
