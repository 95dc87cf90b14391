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
from hlo_cli.interpreter.ops.convert import flush

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
