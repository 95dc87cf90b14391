"""Dots of every element-type family against XLA CPU: committed goldens (tests/data/dot, made by
make_goldens.py there) checked through both accumulation paths, the chunked product checked
against parallel.matmul, and (slow, needs JAX) live differential runs at sizes that take the
fast paths by themselves.

What XLA CPU does (jaxlib 0.10.2, x86-64): bf16, f16 and the f8 types are converted to f32 and
multiplied with f32 accumulation (YNNPACK / Eigen, blocked in an order we do not reproduce);
integers multiply exactly and wrap.  So:
- integer results are compared bit for bit (whether they went through f64 BLAS or int64);
- f32 results agree within 4 f32 roundings of sum|a*b| (measured: up to 2.1);
- results rounded to bf16/f16/f8 agree to one ulp of that type (measured: bit for bit but for a
  few f16 elements at k = 1024-8192).
"""
from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from hlo_cli.interpreter import parallel
from hlo_cli.interpreter.ops import linalg as la
from hlo_cli.ir.dtypes import ELEMENT_TYPES

DATA = Path(__file__).resolve().parents[1] / "data" / "dot"


def _load_module(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


mg = _load_module(DATA / "make_goldens.py", "dot_goldens")


def _dtype(name):
    return np.dtype(ELEMENT_TYPES[name].numpy)


def _load(name, lt, rt, ot):
    z = np.load(DATA / f"{name}.npz")
    a, b, out = z["a"], z["b"], z["out"]
    view = lambda x, t: x.view(_dtype(t)) if x.dtype != _dtype(t) else x   # noqa: E731
    return view(a, lt), view(b, rt), view(out, ot)


def assert_close_to_xla(ours, want, a, b, lb, lc, rb, rc):
    """See the module docstring for the bounds."""
    assert ours.dtype == want.dtype and ours.shape == want.shape
    if want.dtype.kind in "iub":
        assert np.array_equal(ours, want)
        return
    wide = np.complex128 if want.dtype.kind == "c" else np.float64
    aa = np.abs(a.astype(wide)).astype(np.float64)
    bb = np.abs(b.astype(wide)).astype(np.float64)
    s = np.einsum(_spec(a.ndim, b.ndim, lb, lc, rb, rc), aa, bb)
    eps = 2.0 ** -52 if want.dtype in (np.float64, np.complex128) else 2.0 ** -23
    tol = 4 * eps * s * (2 if want.dtype.kind == "c" else 1)
    x, y = ours.astype(wide), want.astype(wide)
    if want.dtype not in (np.float32, np.float64, np.complex64, np.complex128):
        fi = np.finfo(want.dtype) if want.dtype == np.float16 else __import__("ml_dtypes").finfo(want.dtype)
        mag = np.maximum(np.abs(x), np.abs(y)).astype(np.float64)
        ulp = 2.0 ** (np.floor(np.log2(np.maximum(mag, float(fi.smallest_normal)))) - int(fi.nmant))
        tol = tol + ulp
    err = np.abs(x - y)
    assert (err <= tol).all(), f"{int((err > tol).sum())} elements off, worst {float(np.max(err / np.maximum(tol, 1e-300)))} x tol"


def _spec(na, nb, lb, lc, rb, rc):
    letters = iter("abcdefghijklmnop")
    la_, lb_ = [None] * na, [None] * nb
    for x, y in zip(lb, rb):
        la_[x] = lb_[y] = next(letters)
    for x, y in zip(lc, rc):
        la_[x] = lb_[y] = next(letters)
    for i in range(na):
        la_[i] = la_[i] or next(letters)
    for i in range(nb):
        lb_[i] = lb_[i] or next(letters)
    out = [la_[x] for x in lb] + [la_[i] for i in range(na) if i not in lb and i not in lc] + \
          [lb_[i] for i in range(nb) if i not in rb and i not in rc]
    return f"{''.join(la_)},{''.join(lb_)}->{''.join(out)}"


DIMS = ((0,), (2,), (0,), (1,))


@pytest.mark.parametrize("blas", [False, True], ids=["small-path", "blas-path"])
@pytest.mark.parametrize("case", mg.CASES, ids=[c[0] for c in mg.CASES])
def test_dot_golden(case, blas, monkeypatch):
    """Each family against XLA's result, through the f64 (exact-sum) path and, with the size
    threshold lowered, through the f32 BLAS path the large dots take."""
    name, lt, rt, ot = case
    a, b, want = _load(name, lt, rt, ot)
    if blas:
        monkeypatch.setattr(la, "F32_BLAS_MIN_MACS", 0)
    ours = la.dot_values(a, b, *DIMS, _dtype(ot))
    assert_close_to_xla(ours, want, a, b, *DIMS)


@pytest.mark.parametrize("lt, rt, ot, lo, hi", [
    ("s8", "s8", "s32", -128, 127), ("u8", "u8", "u32", 0, 255), ("s32", "s32", "s32", -2 ** 20, 2 ** 20),
    ("s32", "s32", "s32", -2 ** 31, 2 ** 31 - 1), ("u32", "u32", "u64", 0, 2 ** 32 - 1),
    ("s16", "s8", "s16", -2 ** 15, 2 ** 15 - 1), ("s64", "s64", "s64", -2 ** 40, 2 ** 40)])
def test_integer_dot_paths_agree(lt, rt, ot, lo, hi):
    """Through f64 BLAS (when k * max|a| * max|b| < 2^53) or int64, the wrapped sum is exact."""
    rng = np.random.default_rng(7)
    a = rng.integers(lo, hi, (3, 17, 70), endpoint=True).astype(_dtype(lt))
    b = rng.integers(max(lo, -128) if rt == "s8" else lo, min(hi, 127) if rt == "s8" else hi,
                     (3, 70, 9), endpoint=True).astype(_dtype(rt))
    ours = la.dot_values(a, b, *DIMS, _dtype(ot))
    exact = np.einsum("bmk,bkn->bmn", a.astype(object), b.astype(object))
    bits = np.dtype(_dtype(ot)).itemsize * 8
    wrapped = np.vectorize(lambda v: ((int(v) + 2 ** (bits - 1)) % 2 ** bits) - 2 ** (bits - 1)
                           if ot[0] == "s" else int(v) % 2 ** bits, otypes=[object])(exact)
    assert np.array_equal(ours.astype(object), wrapped)


@pytest.mark.parametrize("out", ["bf16", "f32", "f16"])
def test_chunked_products_are_parallel_matmul(out, monkeypatch):
    """_products cuts a large product into parallel.matmul's pieces and rounds each piece as it
    is made: the same bits as rounding parallel.matmul's whole f32 result."""
    monkeypatch.setattr(la, "SPLIT_MIN_MACS", 0)
    monkeypatch.setattr(parallel, "SPLIT_MIN_MACS", 0)
    rng = np.random.default_rng(3)
    for b, m in ((1, 1100), (3, 300), (4, 40)):
        x = rng.standard_normal((b, m, 50)).astype(np.float32)
        y = rng.standard_normal((b, 50, 30)).astype(np.float32)
        dt = _dtype(out)
        got = la._products(x, y, False, lambda p: p.astype(dt), dt)
        want = parallel.matmul(x, y).astype(dt)
        assert got.dtype == dt and np.array_equal(got.view(np.uint8), want.view(np.uint8))


def test_large_narrow_dot_is_the_f32_dot_rounded():
    """Above the threshold, a bf16/f8 dot is the f32 BLAS dot of the exactly converted operands
    (transposed contracting dims, as in the fp8 GEMM of issue 12), rounded once."""
    import ml_dtypes
    rng = np.random.default_rng(5)
    a = rng.standard_normal((300, 256)).astype(ml_dtypes.float8_e5m2)
    b = rng.standard_normal((200, 256)).astype(ml_dtypes.float8_e4m3fn)
    assert la.f32_blas(1, 300, 256, 200)
    got = la.dot_values(a, b, (), (1,), (), (1,), np.dtype(ml_dtypes.bfloat16))
    ref = parallel.matmul(a.astype(np.float32)[None], b.astype(np.float32).T[None])[0]
    assert np.array_equal(got.astype(np.float32), ref.astype(ml_dtypes.bfloat16).astype(np.float32))


@pytest.mark.slow
@pytest.mark.parametrize("case", mg.CASES, ids=[c[0] for c in mg.CASES])
def test_dot_against_xla_at_blas_sizes(case):
    """Live against XLA CPU at a size every float family takes the f32 BLAS path by itself."""
    pytest.importorskip("jax")
    from hlo_cli.tools.xla_reference import run_with_xla
    name, lt, rt, ot = case
    rng = np.random.default_rng(11)
    shape_a, shape_b = (2, 96, 512), (2, 512, 64)
    a, b = mg.operand(rng, lt, shape_a), mg.operand(rng, rt, shape_b)
    text = mg.text(lt, rt, ot).replace(f"[{mg.B},{mg.M},{mg.K}]", "[2,96,512]") \
        .replace(f"[{mg.B},{mg.K},{mg.N}]", "[2,512,64]").replace(f"[{mg.B},{mg.M},{mg.N}]", "[2,96,64]")
    want = run_with_xla(text, [a, b])[0]
    ours = la.dot_values(a, b, *DIMS, _dtype(ot))
    assert_close_to_xla(ours, want, a, b, *DIMS)


@pytest.mark.slow
def test_fp8_gemm_of_issue_12_against_xla():
    """The issue's dot, scaled down: f8e5m2[M,1024] x f8e4m3fn[N,1024] -> bf16 over dim 1 of both."""
    pytest.importorskip("jax")
    import ml_dtypes
    from hlo_cli.tools.xla_reference import run_with_xla
    rng = np.random.default_rng(12)
    m, n, k = 1024, 512, 1024
    a = rng.standard_normal((m, k), np.float32).astype(ml_dtypes.float8_e5m2)
    b = rng.standard_normal((n, k), np.float32).astype(ml_dtypes.float8_e4m3fn)
    text = (f"HloModule m\nENTRY e {{\n  a = f8e5m2[{m},{k}] parameter(0)\n  b = f8e4m3fn[{n},{k}] parameter(1)\n"
            f"  ROOT d = bf16[{m},{n}] dot(a, b), lhs_contracting_dims={{1}}, rhs_contracting_dims={{1}}\n}}\n")
    want = run_with_xla(text, [a, b])[0]
    ours = la.dot_values(a, b, (), (1,), (), (1,), np.dtype(ml_dtypes.bfloat16))
    assert_close_to_xla(ours, want, a, b, (), (1,), (), (1,))
