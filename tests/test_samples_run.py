"""Whole-module correctness: every JAX sample, before and after XLA's optimizations, run by hlo on its
committed inputs, against the outputs XLA CPU computed for them (samples/jax/<case>.expected.npz,
written by scripts/gen_samples.py).  No JAX needed: the golden files are XLA's.

Every output is compared bit for bit (NaN positions equal, signed zeros equal, integers and preds
exact) unless TOLERANCES below gives it a tolerance, each with the reason XLA's float result cannot
be reproduced bit for bit.  The tolerances were measured (the largest |ours - XLA| over the
.hlo and .opt.hlo runs, then about 2-4x that as margin) and are kept as tight as that allows.
A tolerance entry applies to the outputs whose pytree path (MANIFEST.json "path") matches its
regular expression; it is used as |ours - xla| <= atol + rtol * |xla| with NaN positions and
infinities still required to agree.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from hlo_cli.interpreter import run
from hlo_cli.interpreter.values import leaves, np_dtype
from hlo_cli import parse_file

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples" / "jax"
MANIFEST = json.loads((SAMPLES / "MANIFEST.json").read_text())["cases"]

_DOT = "dot products and reductions: XLA CPU accumulates in its own blocked order (Eigen/ynn kernels, " \
       "tree-shaped reductions), NumPy in another, so float sums differ in the last bits"
_TRANSCENDENTAL = "exp/log/tanh/sin/cos/rsqrt: XLA CPU uses its own polynomial approximations, within " \
                  "a few ulp of the correctly rounded values NumPy computes"

# case -> [(path regex, rtol, atol, reason)]; outputs no entry matches are compared bit for bit.
# The comments give what was measured (jaxlib 0.10.2, x86-64): the largest rtol needed at that atol.
TOLERANCES: dict[str, list[tuple[str, float, float, str]]] = {
    # 2-layer MLP, log-softmax, gradients: <= 4 ulp everywhere (needed rtol 7.5e-8 at atol 1e-8)
    # (the b2 gradient, a sum of FMA-contracted products, is bit-exact in both texts)
    "mlp_train_step": [(r"^(?!\[1\]\['b2'\]$)", 3e-7, 1e-8, f"{_DOT}; {_TRANSCENDENTAL} (log-softmax)")],
    # convolutions forward and backward, a mean: gradients with tiny entries (|x| ~ 1e-4) lose
    # relative accuracy to cancellation (needed rtol 2.3e-7 at atol 3e-8)
    "cnn": [(r".*", 1e-6, 3e-8, f"convolutions and their gradients are sums too: {_DOT}")],
    # layernorm (rsqrt), softmax (exp), 6 matmuls: outputs up to 4.0 (needed rtol 9.3e-7 at atol 3e-7)
    "attention": [(r".*", 2e-6, 3e-7, f"{_DOT}; {_TRANSCENDENTAL}")],
    # 16 steps of tanh(x W + h U + b): differences of an ulp compound through the recurrence
    # (needed rtol 1.3e-6 at atol 3e-7)
    # (on an AMD EPYC with AVX2, XLA's kernels differ more: 6e-7 on an entry of 0.09, so atol 1e-6)
    "scan_loop": [(r".*", 3e-6, 1e-6, f"{_DOT}, compounded over 16 recurrent steps; {_TRANSCENDENTAL} (tanh)")],
    # y = sin(y) * 1.5 + ... repeated 10 and 7 times: 1-2 ulp (needed rtol 1.9e-7 at atol 0);
    # [0][0] and [1][0] are bit-exact (their multiply-adds contracted into FMAs as XLA does);
    # the data-dependent while_loop ([2], [3]) multiplies by 0.7 exactly as XLA does: bit-exact
    "fori_loop": [(r"^\[[01]\]\[1\]$", 5e-7, 1e-8, f"{_TRANSCENDENTAL} (sin), iterated")],
    # [0] = sin or 2 cos, [3] = exp (1 ulp, needed rtol 7.8e-8), [1][1] = a 12-element sum;
    # the other branches (v + 1, v * v, -v) are exact
    "cond_switch": [(r"^\[0\]$|^\[3\]$", 3e-7, 0.0, _TRANSCENDENTAL),
                    (r"^\[1\]\[1\]$", 3e-7, 1e-8, _DOT)],
    # sorting, gathers, scatters (duplicates applied in XLA's order), dynamic slices: all exact
    "sort_gather_scatter": [],
    # every narrow type, convert, bitcast, integer wrap-around and division: exact, except a bf16
    # dot accumulated in f32 (1 ulp, needed rtol 7.8e-8) and complex division (1 ulp, 2.6e-8)
    "mixed_dtypes": [(r"^\['bf_dot_f32'\]$", 3e-7, 1e-8, _DOT),
                     (r"^\['c_div'\]$", 1e-7, 1e-8, "complex division: XLA scales the divisor (Smith's "
                                                    "algorithm) where NumPy divides directly")],
    "fft_linalg": [
        # FFTs: XLA runs DUCC, NumPy pocketfft: different butterflies (needed rtol 2.1e-7 at atol 3e-7;
        # irfft has entries near 0, needed rtol 2.6e-8 at atol 1e-7)
        (r"fft", 1e-6, 3e-7, "FFT: XLA CPU's DUCC and NumPy's pocketfft order their butterflies differently"),
        # eigh: an iterative eigensolver; eigenvector entries near 0 and the reconstruction
        # v diag(w) v^T (|x| up to 10) differ by up to ~40 ulp (needed rtol 4.2e-6 at atol 1e-6)
        (r"eigh", 1e-5, 1e-6, "eigh: XLA calls LAPACK's syevd, whose iterations we cannot replay in "
                              "the same floating-point order"),
        # cholesky, triangular solves, QR, SVD and the products of their factors: <= 10 ulp
        # (needed rtol 9.7e-7 at atol 1e-8, 0 at atol 1e-7).  XLA's own results move with the
        # processor: on an AMD EPYC (AVX2) XLA CPU's qr_r differs from these expected values (made
        # on another x86-64) by 2.4e-7 on an entry of 0.0037, where hlo matches that XLA exactly
        (r"cholesky|solve_triangular|qr_|svd", 1e-6, 5e-7, f"LAPACK factorizations (potrf, trsm, geqrf, "
                                                           f"gesdd) block their loops differently, and "
                                                           f"differently on each processor; {_DOT}"),
    ],
    # threefry, rng-bit-generator bits, keys and uniform floats are exact; rbg's normal samples go
    # through log/sqrt (erf_inv): 2 ulp on one element (needed rtol 2.1e-7 at atol 0)
    "rng": [(r"\['normal'\]", 5e-7, 0.0, f"{_TRANSCENDENTAL} (the inverse error function of normal samples)")],
    # max/min/arg*/any/all/cumulative ops/integer reductions/reduce-precision are exact; float sums
    # over several elements are not (needed rtol 1.8e-7 at atol 0)
    "reductions": [(r"sum_|mean_|var_|logsumexp", 5e-7, 1e-8, f"{_DOT}; {_TRANSCENDENTAL} (logsumexp)")],
}


def _sample_files():
    return sorted(p for p in SAMPLES.glob("*.hlo"))


def _case_of(path: Path) -> str:
    return path.name.split(".")[0]


def tolerance_for(case: str, path: str):
    """(rtol, atol, reason) for an output of `case` at pytree `path`, or None for bit-exact."""
    for pattern, rtol, atol, reason in TOLERANCES.get(case, []):
        if re.search(pattern, path):
            return rtol, atol, reason
    return None


def _float64(a: np.ndarray) -> np.ndarray:
    return a.astype(np.complex128 if a.dtype.kind == "c" else np.float64)


def _is_float(a: np.ndarray) -> bool:
    return a.dtype.kind in "fc" or (a.dtype.kind == "V" and a.dtype.name.startswith(("bfloat", "float")))


def assert_matches_xla(ours: np.ndarray, xla: np.ndarray, tol, what: str):
    """Bit for bit (tol None) or within (rtol, atol, reason); NaN positions must agree either way."""
    assert ours.dtype == xla.dtype, f"{what}: dtype {ours.dtype}, XLA {xla.dtype}"
    assert ours.shape == xla.shape, f"{what}: shape {ours.shape}, XLA {xla.shape}"
    if not _is_float(ours):
        bad = ours != xla
        assert not bad.any(), (f"{what}: {int(bad.sum())} of {ours.size} values differ, first at "
                               f"{np.argwhere(bad)[0].tolist()}: ours {ours[tuple(np.argwhere(bad)[0])]}, "
                               f"XLA {xla[tuple(np.argwhere(bad)[0])]}")
        return
    a, b = _float64(ours), _float64(xla)
    nan_a, nan_b = np.isnan(a), np.isnan(b)
    assert np.array_equal(nan_a, nan_b), f"{what}: NaN at {np.argwhere(nan_a != nan_b)[0].tolist()} in one only"
    if tol is None:
        # bit for bit outside NaNs: signed zeros, denormals, every last bit
        n = ours.dtype.itemsize
        ba = np.ascontiguousarray(ours).view(np.uint8).reshape(ours.shape + (n,))
        bb = np.ascontiguousarray(xla).view(np.uint8).reshape(xla.shape + (n,))
        bad = (ba != bb).any(axis=-1) & ~nan_a
        if bad.any():
            i = tuple(np.argwhere(bad)[0])
            raise AssertionError(f"{what}: {int(bad.sum())} of {ours.size} values are not bit-identical to "
                                 f"XLA's, first at {list(i)}: ours {a[i]!r}, XLA {b[i]!r} (max |diff| "
                                 f"{np.nanmax(np.abs(a - b)):.3g})")
        return
    rtol, atol, reason = tol
    np.testing.assert_allclose(a, b, rtol=rtol, atol=atol, equal_nan=True,
                               err_msg=f"{what} (tolerance because {reason})")


def load_inputs(case: str, params) -> list[np.ndarray]:
    """The case's inputs in parameter order; raw |V2/|V1 records read as the parameter's type."""
    with np.load(SAMPLES / f"{case}.inputs.npz") as z:
        args = [z[f"arg{k}"] for k in range(len(params))]
    out = []
    for a, p in zip(args, params):
        want = np_dtype(p.shape)
        out.append(a.view(want) if a.dtype.kind == "V" else a)
    return out


def load_expected(case: str, n: int) -> list[np.ndarray]:
    outputs = MANIFEST[case]["outputs"]
    with np.load(SAMPLES / f"{case}.expected.npz") as z:
        assert sorted(z.files, key=lambda k: int(k[3:])) == [f"out{k}" for k in range(n)]
        exp = [z[f"out{k}"] for k in range(n)]
    out = []
    for a, meta in zip(exp, outputs):
        if a.dtype.kind == "V":
            import ml_dtypes
            a = a.view(getattr(ml_dtypes, meta["dtype"]))
        out.append(a)
    return out


def test_every_sample_is_in_the_manifest():
    cases = {_case_of(p) for p in _sample_files()}
    assert cases == set(MANIFEST), "samples/jax and its MANIFEST.json disagree"
    assert set(TOLERANCES) == set(MANIFEST), "every case needs an entry in TOLERANCES (possibly empty)"
    for case in MANIFEST:
        for suffix in (".hlo", ".opt.hlo", ".inputs.npz", ".expected.npz"):
            assert (SAMPLES / f"{case}{suffix}").is_file(), f"{case}{suffix} is missing"


def test_every_tolerance_names_outputs():
    """A tolerance that matches no output is a typo that would silently leave nothing tolerated."""
    for case, entries in TOLERANCES.items():
        paths = [o["path"] for o in MANIFEST[case]["outputs"]]
        for pattern, rtol, atol, reason in entries:
            assert any(re.search(pattern, p) for p in paths), f"{case}: {pattern!r} matches no output"
            assert 0 <= rtol <= 1e-5 and 0 <= atol <= 1e-6 and reason


@pytest.mark.parametrize("path", _sample_files(), ids=lambda p: p.name)
def test_sample_matches_xla(path: Path):
    case = _case_of(path)
    module = parse_file(str(path), use_cache=False)
    params = module.entry_computation.parameters
    meta = MANIFEST[case]
    assert len(params) == len(meta["parameters"])
    args = load_inputs(case, params)
    outs = [np.asarray(o) for o in leaves(run(module, *args))]
    expected = load_expected(case, len(meta["outputs"]))
    assert len(outs) == len(expected), f"{len(outs)} results, XLA gave {len(expected)}"
    failures = []
    for k, (ours, xla, out_meta) in enumerate(zip(outs, expected, meta["outputs"])):
        what = f"{path.name} out{k} {out_meta['path']} ({out_meta['hlo_shape']})"
        try:
            assert_matches_xla(ours, xla, tolerance_for(case, out_meta["path"]), what)
        except AssertionError as e:
            failures.append(str(e).strip())
    assert not failures, f"{len(failures)} of {len(outs)} outputs differ from XLA's:\n" + "\n".join(failures)

