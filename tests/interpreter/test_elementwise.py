"""Elementwise family: unary/binary arithmetic, select, clamp, compare, convert, bitcast-convert,
reduce-precision, stochastic-convert, checked against XLA-made goldens (tests/programs/elementwise)
plus unit tests of the measured semantics that need no XLA.

What XLA CPU does (jaxlib 0.10.2, x86-64), measured and pinned by the programs:
- integers: divide truncates, x/0 = -1 (all ones), INT_MIN/-1 = INT_MIN; remainder x%0 = x,
  INT_MIN%-1 = 0; shift amounts read as unsigned, >= width gives 0 (or -1 for an arithmetic shift of
  a negative); power squares over the exponent's low 6 bits, a (signed-compare) negative exponent
  gives 0 except bases 1 and -1; abs(INT_MIN) = INT_MIN; s4 popcnt counts its s8 container;
- floats: f32/f64 (so bf16) run under FTZ/DAZ; narrow floats compute wide and round once per op
  (f8/f4 as f16 ops); max/min propagate NaN, max(-0, +0) = +0, min = -0; TOTALORDER orders -NaN <
  -inf < -0 < +0 < inf < NaN; convert truncates and saturates, NaN -> 0, rounds to nearest even, goes
  through f32 into bf16; reduce-precision works on the operand's own bits;
- transcendental functions use XLA's own approximations: those programs carry a tolerance.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from golden import check_program, programs  # noqa: E402

from hlo_cli.interpreter import run  # noqa: E402
from hlo_cli.interpreter.ops import convert as cv  # noqa: E402
from hlo_cli.interpreter.registry import rule_for  # noqa: E402
from hlo_cli.ir.opcodes import OPCODES  # noqa: E402

FAMILIES = ("elementwise_unary", "elementwise_binary", "elementwise_ternary", "compare", "convert")
PROGRAMS = programs("elementwise")


@pytest.mark.parametrize("path", PROGRAMS, ids=lambda p: p.name)
def test_program(path):
    check_program(path)


def _opcodes():
    table = OPCODES.values() if isinstance(OPCODES, dict) else OPCODES
    return sorted(spec.name for spec in table if spec.family in FAMILIES)


@pytest.mark.parametrize("opcode", _opcodes())
def test_every_opcode_has_a_rule_with_a_docstring_and_a_program(opcode):
    rule = rule_for(opcode)
    assert rule is not None, f"no evaluation rule for {opcode}"
    assert rule.__doc__ and rule.__doc__.strip(), f"{opcode}: rule has no docstring"
    assert any(p.name.split(".")[0] == opcode for p in PROGRAMS), f"no program for {opcode}"


# ----------------------------------------------------------------------------- helpers

def _run1(op: str, t: str, *arrays, out: str | None = None, attrs: str = ""):
    """Run `op` elementwise on 1-D arrays of element type `t`."""
    n = len(arrays[0])
    params = "\n".join(f"  p{k} = {t}[{n}] parameter({k})" for k in range(len(arrays)))
    args = ", ".join(f"p{k}" for k in range(len(arrays)))
    a = f", {attrs}" if attrs else ""
    text = f"HloModule m\nENTRY e {{\n{params}\n  ROOT r = {out or t}[{n}] {op}({args}){a}\n}}\n"
    return run(text, *arrays)


def _bits(a):
    a = np.asarray(a)
    return a.view({1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize])


# ----------------------------------------------------------------------------- integers

def test_integer_divide_and_remainder_edges():
    x = np.array([7, -7, 7, -7, 5, -2**31, -2**31], np.int32)
    y = np.array([2, 2, -2, -2, 0, -1, 0], np.int32)
    assert _run1("divide", "s32", x, y).tolist() == [3, -3, -3, 3, -1, -2**31, -1]
    assert _run1("remainder", "s32", x, y).tolist() == [1, -1, 1, -1, 5, 0, -2**31]
    u = np.array([7, 9], np.uint32)
    assert _run1("divide", "u32", u, np.array([0, 2], np.uint32)).tolist() == [2**32 - 1, 4]
    assert _run1("remainder", "u32", u, np.array([0, 2], np.uint32)).tolist() == [7, 1]


def test_shifts_by_width_and_negative_amounts():
    x = np.array([1, -8, -8, -8, 5], np.int32)
    n = np.array([32, 1, 33, -1, 31], np.int32)
    assert _run1("shift-left", "s32", x, n).tolist() == [0, -16, 0, 0, -2**31]
    assert _run1("shift-right-arithmetic", "s32", x, n).tolist() == [0, -4, -1, -1, 0]
    assert _run1("shift-right-logical", "s32", x, n).tolist() == [0, 2**31 - 4, 0, 0, 0]
    u = np.array([2**31, 2**32 - 1], np.uint32)
    assert _run1("shift-right-arithmetic", "u32", u, np.array([1, 40], np.uint32)).tolist() == [3 << 30, 2**32 - 1]


def test_integer_power():
    b = np.array([2, 2, 2, 3, 0, 1, -1, -1, 5, 2], np.int64)
    e = np.array([10, 64, 65, 0, 0, -7, -3, -4, -1, 63], np.int64)
    assert _run1("power", "s64", b, e).tolist() == [1024, 1, 2, 1, 1, 1, -1, 1, 0, -2**63]
    # the exponent's sign test is signed, also for unsigned types
    got = _run1("power", "u8", np.array([3, 255, 3], np.uint8), np.array([200, 255, 5], np.uint8))
    assert got.tolist() == [0, 255, 243]


def test_abs_negate_sign_of_extremes():
    assert _run1("abs", "s32", np.array([-2**31, -5], np.int32)).tolist() == [-2**31, 5]
    assert _run1("negate", "u32", np.array([0, 1], np.uint32)).tolist() == [0, 2**32 - 1]
    assert _run1("sign", "s8", np.array([-128, 0, 7], np.int8)).tolist() == [-1, 0, 1]


def test_popcnt_and_clz():
    assert _run1("popcnt", "s32", np.array([-1, 0, -2**31, 7], np.int32)).tolist() == [32, 0, 1, 3]
    assert _run1("count-leading-zeros", "s32", np.array([0, 1, -1, 2**30], np.int32)).tolist() == [32, 31, 0, 1]
    s4 = np.array([-8, -1, 1, 0], np.int8).astype(ml_dtypes.int4)
    # XLA counts s4 in its sign-extended s8 container: popcnt(-8) = 5, popcnt(-1) = 8 -> wraps to -8
    assert _run1("popcnt", "s4", s4).astype(np.int8).tolist() == [5, -8, 1, 0]
    assert _run1("count-leading-zeros", "s4", s4).astype(np.int8).tolist() == [0, 0, 3, 4]


@pytest.mark.parametrize("t,dt", [("s32", np.int32), ("u32", np.uint32), ("s64", np.int64), ("u64", np.uint64),
                                  ("s8", np.int8), ("u16", np.uint16)])
def test_mulhi_matches_exact_integer_arithmetic(t, dt):
    info = np.iinfo(dt)
    rng = np.random.default_rng(0)
    edges = [info.min, info.max, 0, 1, info.max - 1, info.min + 1] + ([-1, -2] if info.min < 0 else [2, 3])
    halves = rng.integers(0, 2**63, 400, dtype=np.uint64) * 2 + rng.integers(0, 2, 400, dtype=np.uint64)
    randoms = [int(v) for v in halves]
    randoms = [r % (1 << info.bits) + info.min for r in randoms]            # uniform over the type
    x = np.array(edges * len(edges) + randoms[:200], dtype=object)
    y = np.array([e for e in edges for _ in edges] + randoms[200:], dtype=object)
    bits = info.bits
    want = [((int(a) * int(b)) >> bits) for a, b in zip(x, y)]
    want = [(w + (1 << bits)) % (1 << bits) for w in want]          # as the unsigned pattern
    got = _run1("mulhi", t, x.astype(dt), y.astype(dt))
    assert [int(v) % (1 << bits) for v in got] == want


@pytest.mark.parametrize("t,dt", [("s1", ml_dtypes.int1), ("u1", ml_dtypes.uint1), ("s2", ml_dtypes.int2),
                                  ("u2", ml_dtypes.uint2)])
def test_one_and_two_bit_integers_wrap(t, dt):
    """XLA lowers s1/u1 to i1 and cannot run them through StableHLO: these follow the same wrapping
    rules as the measured s2/u2/s4/u4."""
    lo, hi = (-(1 << (int(t[1:]) - 1)), (1 << (int(t[1:]) - 1)) - 1) if t[0] == "s" else (0, (1 << int(t[1:])) - 1)
    v = np.arange(lo, hi + 1)
    x, y = np.meshgrid(v, v, indexing="ij")
    x, y = x.ravel(), y.ravel()
    width = int(t[1:])

    def wrap(a):
        a = np.asarray(a) % (1 << width)
        return np.where(a > hi, a - (1 << width), a)
    for op, f in (("add", np.add), ("subtract", np.subtract), ("multiply", np.multiply)):
        got = _run1(op, t, x.astype(np.int8).astype(dt), y.astype(np.int8).astype(dt))
        assert got.dtype == np.dtype(dt)
        assert got.astype(np.int64).tolist() == wrap(f(x, y)).tolist(), op


# ----------------------------------------------------------------------------- floats

def test_ftz_daz_on_f32_arithmetic_but_not_on_bit_operations():
    d = np.float32(1e-40)
    x = np.array([d, -d, 2e-38, d], np.float32)
    y = np.array([0, 0, -1.9e-38, d], np.float32)                           # 2e-38 - 1.9e-38: denormal
    assert _bits(_run1("add", "f32", x, y)).tolist() == [0, 0, 0, 0]          # +-0 + 0 = +0
    assert _bits(_run1("multiply", "f32", x, np.ones(4, np.float32)))[[0, 1, 3]].tolist() == [0, 0x80000000, 0]
    assert _bits(_run1("negate", "f32", x)).tolist() == (_bits(x) ^ np.uint32(0x80000000)).tolist()
    assert _bits(_run1("abs", "f32", x)).tolist() == (_bits(x) & np.uint32(0x7FFFFFFF)).tolist()
    assert _run1("compare", "f32", x, np.zeros(4, np.float32), out="pred", attrs="direction=EQ").tolist() == \
        [True, True, False, True]


def test_max_min_nan_and_signed_zero():
    x = np.array([np.nan, 1, 0.0, -0.0], np.float32)
    y = np.array([1, np.nan, -0.0, 0.0], np.float32)
    mx, mn = _run1("maximum", "f32", x, y), _run1("minimum", "f32", x, y)
    assert np.isnan(mx[:2]).all() and np.isnan(mn[:2]).all()
    assert _bits(mx[2:]).tolist() == [0, 0] and _bits(mn[2:]).tolist() == [0x80000000, 0x80000000]


def test_totalorder_compare():
    v = np.array([-np.nan, -np.inf, -0.0, 0.0, np.inf, np.nan], np.float32)
    v[0] = -np.float32(np.nan)
    x, y = v[:-1], v[1:]
    assert _run1("compare", "f32", x, y, out="pred", attrs="direction=LT, type=TOTALORDER").all()
    assert not _run1("compare", "f32", x, y, out="pred", attrs="direction=LT, type=FLOAT")[[0, 2, 4]].any()


def test_convert_float_to_int_saturates_and_zeroes_nan():
    x = np.array([np.nan, np.inf, -np.inf, 3e9, -3e9, -2.7, 2.7, -0.0], np.float32)
    assert _run1("convert", "f32", x, out="s32").tolist() == [0, 2**31 - 1, -2**31, 2**31 - 1, -2**31, -2, 2, 0]
    assert _run1("convert", "f32", x, out="u8").tolist() == [0, 255, 0, 255, 0, 0, 2, 0]


def test_convert_into_bf16_rounds_twice_from_f64():
    x = np.array([1 + 2**-8 + 2**-30], np.float64)                          # f32 rounds to the bf16 tie
    assert float(_run1("convert", "f64", x, out="bf16")[0]) == 1.0
    assert float(_run1("convert", "f32", x.astype(np.float32), out="bf16")[0]) == 1.0
    assert float(_run1("convert", "f64", np.array([1 + 2**-11 + 2**-40]), out="f16")[0]) == 1 + 2**-10


def test_round_half_cases():
    x = np.array([0.5, -0.5, 1.5, 2.5, -2.5, 0.49999997], np.float32)
    assert _run1("round-nearest-afz", "f32", x).tolist() == [1, -1, 2, 3, -3, 0]
    assert _run1("round-nearest-even", "f32", x).tolist() == [0, -0.0, 2, 2, -2, 0]


def test_reduce_precision_to_bf16_matches_convert():
    rng = np.random.default_rng(1)
    x = rng.standard_normal(1000).astype(np.float32) * np.float32(1e3)
    rp = _run1("reduce-precision", "f32", x, attrs="exponent_bits=8, mantissa_bits=7")
    assert np.array_equal(rp, x.astype(ml_dtypes.bfloat16).astype(np.float32))


@pytest.mark.parametrize("name", ["f6e2m3fn", "f6e3m2fn"])
def test_f6_types_round_like_ml_dtypes(name):
    """XLA CPU cannot run f6 at all (it fails to compile f32 -> f6): f6 follows the f4e2m1fn rules
    measured for the other NaN-less type (saturation, NaN -> -0, ops as f16)."""
    dt = cv.ELEMENT_TYPES[name].numpy
    x = np.array([0.3, -1.7, 100.0, -100.0, np.nan, 2.5], np.float32)
    got = _run1("convert", "f32", x, out=name)
    want = x.astype(dt)
    assert np.array_equal(_bits(got)[:4], _bits(want)[:4])
    assert _bits(got)[4] == 0x20                                             # -0
    s = _run1("add", name, got, got)
    assert s.dtype == dt
    assert np.array_equal(s.astype(np.float32)[:4], (got.astype(np.float32) * 2).astype(dt).astype(np.float32)[:4])


def test_bitcast_convert_between_widths_is_little_endian():
    x = np.array([0x04030201], np.uint32)
    text = "HloModule m\nENTRY e {\n  p = u32[1] parameter(0)\n  ROOT r = u8[1,4] bitcast-convert(p)\n}\n"
    assert run(text, x).tolist() == [[1, 2, 3, 4]]
    text = "HloModule m\nENTRY e {\n  p = u8[2] parameter(0)\n  ROOT r = s4[2,2] bitcast-convert(p)\n}\n"
    assert run(text, np.array([0x21, 0xF7], np.uint8)).astype(np.int8).tolist() == [[1, 2], [7, -1]]


def test_scalar_operands_through_constants():
    text = """HloModule m
ENTRY e {
  a = s32[] constant(-7)
  b = s32[] constant(2)
  d = s32[] divide(a, b)
  lo = f32[] constant(1)
  hi = f32[] constant(-1)
  x = f32[3] constant({-5, 0.5, 5})
  c = f32[3] clamp(lo, x, hi)
  p = pred[] constant(true)
  s = f32[3] select(p, c, x)
  ROOT t = (s32[], f32[3]) tuple(d, s)
}
"""
    d, s = run(text)
    assert d.shape == () and int(d) == -3
    assert s.tolist() == [-1, -1, -1]                                        # lo > hi gives hi


def test_rules_are_vectorized():
    n = 1_000_000
    rng = np.random.default_rng(2)
    x = rng.standard_normal(n).astype(np.float32)
    y = rng.integers(-2**31, 2**31 - 1, n, dtype=np.int32)
    t0 = time.perf_counter()
    _run1("add", "f32", x, x)
    _run1("divide", "s32", y, y[::-1].copy())
    _run1("convert", "f32", x, out="bf16")
    _run1("popcnt", "s32", y)
    assert time.perf_counter() - t0 < 5.0
