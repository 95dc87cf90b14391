"""JAX's back-compatibility data, run with hlo and compared with what the recording machine computed.

Each case in tests/data/back_compat/ (made by scripts/convert_back_compat.py from
jax/_src/internal_test_util/export_back_compat_test_data) is a module JAX exported on a CPU, a
CUDA or ROCm GPU or a TPU, with its inputs and that machine's outputs.  The cases declare no
tolerance (JAX's test gives one per test function); we use the precision of each output's type,
relative to the largest magnitude of the output: 1e-5 for f32 / c64 and 1e-11 for f64 / c128 (the
TPU's Jacobi eigensolver, whose matmuls round more, gets 1e-4 for f32).  Where the recording's
values are not unique, the law JAX's own test checks instead:

* eigenvectors (eigh, geev): the same invariant subspace per cluster of equal eigenvalues (their
  projectors agree), since each vector's sign or phase is the library's choice;
* SVD: the same singular values and the same u diag(s) v^H, with orthonormal u and v;
* Schur: the same vs t vs^H with unitary vs.

Cases that cannot run on a CPU by their nature (a Mosaic TPU or Mosaic GPU kernel, a Triton kernel:
compiled device code) must be refused with a message that names the kernel.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from hlo_cli.errors import HloError
from hlo_cli.interpreter import run

from .gpu_cases import flat

DATA = Path(__file__).resolve().parents[1] / "data" / "back_compat"
INDEX = json.loads((DATA / "index.json").read_text())
CONVERTED = sorted(n for n, e in INDEX.items() if e["converted"])

# compiled device code, which only its device runs: (target the refusal names, what it is)
DEVICE_CODE = {
    "pallas_mosaic_boolean_constant__data_2026_02_17": ("tpu_custom_call", "Mosaic TPU"),
    "pallas_mosaic_matmul__data_2024_09_24": ("tpu_custom_call", "Mosaic TPU"),
    "pallas_mosaic_semaphore_dma__semaphore_and_dma_2024_04_22": ("tpu_custom_call", "Mosaic TPU"),
    "pallas_mosaic_gpu_add_one__data_2026_02_18": ("mosaic_gpu_v2", "Mosaic GPU"),
    "pallas_mosaic_gpu_add_one__kernel_data_2026_06_12": ("mosaic_gpu_v2", "Mosaic GPU"),
    "pallas_mosaic_gpu_add_one__kernel_data_2025_09_07": ("AllocateBuffer", "buffers"),
    "pallas_triton_add_one__data_2024_05_02": ("__gpu$xla.gpu.triton", "Triton kernel"),
}


def _tol(dtype, platform):
    real = np.dtype(dtype)
    if real.kind == "c":
        real = np.dtype(np.float32 if real == np.complex64 else np.float64)
    if real == np.float64:
        return 1e-11
    return 1e-4 if platform == "tpu" else 1e-5


def _close(got, want, tol, what):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape and got.dtype == want.dtype, (what, got.shape, got.dtype, want.shape, want.dtype)
    if got.dtype.kind not in "fc":
        np.testing.assert_array_equal(got, want, err_msg=what)
        return
    scale = max(1.0, float(np.nanmax(np.abs(want)))) if want.size else 1.0
    np.testing.assert_allclose(got.astype(np.complex128), want.astype(np.complex128), rtol=0, atol=tol * scale,
                               err_msg=what, equal_nan=True)


def _mats(x):
    x = np.asarray(x, np.complex128)
    return x.reshape((-1,) + x.shape[-2:])


def _same_subspaces(v_got, v_want, w, tol, what):
    """Per batch, the columns of v_got and v_want for each cluster of (nearly) equal eigenvalues w
    span the same space: their orthogonal projectors agree."""
    ws = np.asarray(w).reshape(-1, np.shape(w)[-1])
    for b, (vg, ve, wb) in enumerate(zip(_mats(v_got), _mats(v_want), ws)):
        scale = max(1.0, float(np.max(np.abs(wb))))
        order = np.argsort(wb.real if np.iscomplexobj(wb) else wb)
        clusters, cur = [], [order[0]]
        for i, j in zip(order[:-1], order[1:]):
            if abs(wb[j] - wb[i]) <= 1e3 * tol * scale:
                cur.append(j)
            else:
                clusters.append(cur)
                cur = [j]
        clusters.append(cur)
        for c in clusters:
            g, e = vg[:, c], ve[:, c]
            g = g / np.linalg.norm(g, axis=0, keepdims=True)
            e = e / np.linalg.norm(e, axis=0, keepdims=True)
            pg, pe = g @ np.linalg.pinv(g), e @ np.linalg.pinv(e)
            err = float(np.max(np.abs(pg - pe)))
            assert err <= 1e3 * tol, f"{what}: batch {b}, eigenvalues {wb[c]}: subspaces differ by {err:.3g}"


def _unitary(q, tol, what):
    for m in _mats(q):
        k = min(m.shape)
        gram = m.conj().T @ m if m.shape[0] >= m.shape[1] else m @ m.conj().T
        err = float(np.max(np.abs(gram - np.eye(k))))
        assert err <= 1e2 * tol, f"{what}: not orthonormal ({err:.3g})"


def _family(name):
    return name.split("__", 1)[0]


def check_case(name, outs, want, platform):
    fam = _family(name)
    tols = [_tol(w.dtype, platform) for w in want]
    if "eigh" in fam or fam == "tpu_Eigh":                                   # (v, w)
        _close(outs[1], want[1], tols[1], "eigenvalues")
        _same_subspaces(outs[0], want[0], want[1], tols[0], "eigenvectors")
        _unitary(outs[0], tols[0], "eigenvectors")
    elif "svd" in fam:                                                       # (u, s, vt)
        _close(outs[1], want[1], tols[1], "singular values")
        k = want[1].shape[-1]
        rec = lambda u, s, vt: (u[..., :, :k] * s[..., None, :]) @ vt[..., :k, :]     # noqa: E731
        _close(rec(outs[0], outs[1], outs[2]), rec(want[0], want[1], want[2]), tols[0], "u diag(s) vt")
        _unitary(outs[0], tols[0], "u")
        _unitary(outs[2], tols[2], "vt")
    elif "schur" in fam:                                                     # (t, vs)
        rec = lambda t, vs: vs @ t @ np.conj(np.swapaxes(vs, -1, -2))                 # noqa: E731
        _close(rec(outs[0], outs[1]), rec(want[0], want[1]), tols[0], "vs t vs^H")
        _unitary(outs[1], tols[1], "Schur vectors")
    elif "eig_lapack_geev" in fam:                                           # (w, vl, vr)
        _close(outs[0], want[0], tols[0], "eigenvalues")
        _same_subspaces(outs[1], want[1], want[0], tols[1], "left eigenvectors")
        _same_subspaces(outs[2], want[2], want[0], tols[2], "right eigenvectors")
    else:
        for i, (g, w, t) in enumerate(zip(outs, want, tols)):
            _close(g, w, t, f"out{i}")


def _load(name):
    ins = np.load(DATA / f"{name}.inputs.npz")
    exp = np.load(DATA / f"{name}.expected.npz")
    return [ins[f"arg{i}"] for i in range(len(ins.files))], [exp[f"out{i}"] for i in range(len(exp.files))]


def test_the_index_lists_every_recorded_case():
    assert len(INDEX) == 142
    assert not [n for n, e in INDEX.items() if not e["converted"]]
    # shape-polymorphic modules were refined to the recorded inputs' shapes
    poly = sorted(n for n, e in INDEX.items() if e.get("shape_polymorphic"))
    assert poly == ["stablehlo_dynamic_approx_top_k__data_2024_05_30",
                    "stablehlo_dynamic_rng_bit_generator__data_2023_06_17",
                    "stablehlo_dynamic_top_k__data_2023_07_16", "stablehlo_dynamic_top_k__data_2023_08_11",
                    "tpu_stablehlo_dynamic_reduce_window__data_unary_2023_06_17",
                    "tpu_stablehlo_dynamic_reduce_window__data_variadic_2023_06_17"]
    for n in poly:
        assert "?" not in (DATA / f"{n}.hlo").read_text().splitlines()[0], n


# A reduce-window whose reducer is not associative (f32 add with init 1, s32 subtract with init 2)
# and whose init is not its identity: the result depends on how the implementation groups the
# window.  XLA CPU (and hlo, bit for bit) apply the init once per window and fold the elements in
# row-major order; the TPU's grouping gave other values.  We check XLA CPU's.
IMPLEMENTATION_DEFINED = {"tpu_stablehlo_dynamic_reduce_window__data_variadic_2023_06_17"}


def _xla_cpu_variadic_reduce_window(x, y):
    f = np.array([[1 + x[i:i + 2, j:j + 3].sum() for j in range(2)] for i in range(2)], np.float32)
    s = np.array([[2 - y[i:i + 2, j:j + 3].sum() for j in range(2)] for i in range(2)], np.int32)
    return f, s


@pytest.mark.parametrize("name", [n for n in CONVERTED if INDEX[n].get("nr_devices", 1) == 1])
def test_case_runs_and_matches_the_recording(name):
    args, want = _load(name)
    text = (DATA / f"{name}.hlo").read_text()
    if name in DEVICE_CODE:
        target, what = DEVICE_CODE[name]
        with pytest.raises(HloError) as e:
            run(text, *args)
        msg = str(e.value)
        assert f"'{target}'" in msg and what in msg and "cannot run" in msg, msg
        return
    outs = flat(run(text, *args))
    assert len(outs) == len(want)
    if name in IMPLEMENTATION_DEFINED:
        assert not np.array_equal(outs[0], want[0])            # the TPU grouped the window otherwise
        want = list(_xla_cpu_variadic_reduce_window(*args))
    check_case(name, outs, want, INDEX[name]["platform"])


@pytest.mark.parametrize("name", [n for n in CONVERTED if INDEX[n].get("nr_devices", 1) > 1])
def test_multi_device_case_matches_the_recording(name):
    from click.testing import CliRunner

    from hlo_cli.cli import main
    r = CliRunner().invoke(main, ["run", str(DATA / f"{name}.hlo"), "--inputs", str(DATA / f"{name}.inputs.npz"),
                                  "--expect", str(DATA / f"{name}.expected.npz")])
    assert r.exit_code == 0, r.output
