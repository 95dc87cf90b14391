"""The processor's FTZ/DAZ flags (hlo_cli/interpreter/fpenv.py) against the software flush.

The fast path of f32/f64 arithmetic lets the processor flush subnormals, as XLA CPU does; the
evaluation rules flush with extra NumPy passes.  Both must give the same bits on operands and
results around the subnormal range, and the flags must be off again afterwards."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hlo_cli.interpreter import fpenv
from hlo_cli.interpreter.kernels import flush

HW = fpenv.hardware()
needs_hw = pytest.mark.skipif(HW is None, reason="FTZ/DAZ flags are only used on x86-64 glibc")


def _near_subnormal(dt, n, rng):
    """Random values whose exponents sit in the lowest 40 binades (subnormals, the smallest normals)."""
    it = np.uint32 if dt == np.float32 else np.uint64
    ebits = 8 if dt == np.float32 else 11
    mant = np.dtype(dt).itemsize * 8 - 1 - ebits
    bits = rng.integers(0, np.iinfo(it).max, n, dtype=it, endpoint=True)
    bits &= ~(it((1 << ebits) - 1) << it(mant))
    bits |= rng.integers(0, 40, n).astype(it) << it(mant)
    return bits.view(dt)


def _with_flags(fn, *args):
    fset, on, off = HW
    fset(on)
    try:
        return fn(*args)
    finally:
        fset(off)


@needs_hw
@pytest.mark.parametrize("dt", [np.float32, np.float64])
@pytest.mark.parametrize("ufunc", [np.add, np.subtract, np.multiply, np.divide])
def test_the_flags_flush_exactly_like_the_software(dt, ufunc):
    rng = np.random.default_rng(hash((dt.__name__, ufunc.__name__)) % 2**32)
    a = _near_subnormal(dt, 200_000, rng)
    near_one = np.array([0.5, 0.75, 1.0, 1.5, 2.0, 0.999999, 1.000001, -1.0, 3.0, 0.1], dt)
    for b in (_near_subnormal(dt, a.size, rng), rng.choice(near_one, a.size)):
        with np.errstate(all="ignore"):
            hw = _with_flags(ufunc, a, b)
            sw = flush(ufunc(flush(a), flush(b)))
        same = (hw.view(np.uint8) == sw.view(np.uint8)).reshape(a.size, -1).all(1)
        assert (same | (np.isnan(hw) & np.isnan(sw))).all()


@needs_hw
@settings(max_examples=200, deadline=None)
@given(st.floats(width=32, allow_nan=False), st.floats(width=32, allow_nan=False))
def test_the_flags_flush_f32_products_like_the_software(x, y):
    a, b = np.array([x], np.float32), np.array([y], np.float32)
    with np.errstate(all="ignore"):
        hw = _with_flags(np.multiply, a, b)
        sw = flush(np.multiply(flush(a), flush(b)))
    assert hw.tobytes() == sw.tobytes()


@needs_hw
def test_the_flags_are_off_after_use_and_on_only_inside():
    sub = np.array([1e-39], np.float32)
    assert _with_flags(np.multiply, sub, np.float32(1))[0] == 0
    assert (sub * np.float32(1))[0] != 0
    with pytest.raises(TypeError):
        _with_flags(np.multiply, sub, "not a number")
    assert (sub * np.float32(1))[0] != 0                # cleared when the call raised too


def test_hlo_ftz_software_turns_the_flags_off(monkeypatch):
    monkeypatch.setattr(fpenv, "_state", False)
    monkeypatch.setenv("HLO_FTZ", "software")
    assert fpenv.hardware() is None
    monkeypatch.setattr(fpenv, "_state", False)
    monkeypatch.delenv("HLO_FTZ")
    again = fpenv.hardware()
    assert (again is None) == (HW is None)


_PROGRAM = """HloModule m
add {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT s = f32[] add(x, y)
}
ENTRY e {
  a = f32[64,300] parameter(0)
  b = f32[64,300] parameter(1)
  m = f32[64,300] multiply(a, b)
  d = f32[64,300] divide(m, b)
  s = f32[64,300] subtract(d, a)
  z = f32[] constant(0)
  r0 = f32[64] reduce(m, z), dimensions={1}, to_apply=add
  r1 = f32[300] reduce(s, z), dimensions={0}, to_apply=add
  t = f32[300,64] transpose(a), dimensions={1,0}
  p = f32[64,64] dot(a, t), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT o = (f32[64,300], f32[64], f32[300], f32[64,64]) tuple(d, r0, r1, p)
}
"""


@needs_hw
@pytest.mark.parametrize("compiled", [True, False])
def test_a_module_gives_the_same_bits_with_the_flags_and_with_the_software(monkeypatch, compiled):
    """Arithmetic, add-reductions (partial sums through the subnormal range) and a product large
    enough for f32 BLAS, on operands in the lowest binades."""
    from hlo_cli.interpreter import RunOptions, run_module
    from hlo_cli.interpreter.ops import linalg
    from hlo_cli.parser import parse
    monkeypatch.setattr(linalg, "F32_BLAS_MIN_MACS", 1000)
    rng = np.random.default_rng(7)
    a = _near_subnormal(np.float32, 64 * 300, rng).reshape(64, 300) * np.float32(2.0 ** 20)
    b = rng.choice(np.array([0.5, 1.0, -1.0, 2.0 ** -10, 3.0], np.float32), (64, 300))
    runs = []
    for state in (HW, None):
        monkeypatch.setattr(fpenv, "_state", state)
        out = run_module(parse(_PROGRAM), [a, b], RunOptions(), compiled=compiled)
        runs.append([np.asarray(v).tobytes() for v in out])
    assert runs[0][:3] == runs[1][:3]
    # the product: XLA's flags flush its partial sums too, the software only operands and result
    got = [np.frombuffer(r, np.float32) for r in (runs[0][3], runs[1][3])]
    np.testing.assert_allclose(got[0], got[1], rtol=1e-5, atol=np.finfo(np.float32).tiny * 64)
