"""Decoding of literals (`parse_literal`): XLA's rules (hlo_parser.cc ParseDenseLiteral and friends),
located errors, and the text round trip with `format_literal`."""
from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from hlo_cli.ir.dtypes import ELEMENT_TYPES
from hlo_cli.ir.literal import (Literal, LiteralError, _LiteralReader, format_literal, parse_literal)
from hlo_cli.ir.shape import parse_shape_text


def lit(text, shape):
    return parse_literal(text, parse_shape_text(shape))


def bits(value, dtype):
    a = np.asarray(value, dtype=dtype)
    return int(a.view({1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[a.itemsize]))


# ----------------------------------------------------------------------------- accepted forms

def test_dense_arrays():
    assert lit("{1, 2, 3}", "s32[3]").value.tolist() == [1, 2, 3]
    assert lit("{ { 1, 2, 3 }, { 4, 5, 6 } }", "f32[2,3]").value.tolist() == [[1, 2, 3], [4, 5, 6]]
    v = lit("{ { /*i0=0*/ { /*i1=0*/ {1, 2} }, { /*i1=1*/ {3, 4} } } }", "s32[1,2,1,2]").value
    assert v.shape == (1, 2, 1, 2) and v.reshape(-1).tolist() == [1, 2, 3, 4]
    assert lit("{1 2}", "f32[2]").value.tolist() == [1, 2]            # whitespace separates
    assert lit("{,1,,2,}", "f32[2]").value.tolist() == [1, 2]         # extra commas are skipped
    assert lit("{1,\n 2}", "f32[2]").value.tolist() == [1, 2]


def test_empty_arrays():
    assert lit("{}", "f32[0]").value.shape == (0,)
    assert lit("{ {}, {} }", "f32[2,0]").value.shape == (2, 0)
    assert lit("{  }", "f32[0,2]").value.shape == (0, 2)


def test_value_dtype_and_layout_free_shape():
    v = lit("{{1,2},{3,4}}", "f32[2,2]{0,1}").value
    assert v.dtype == np.float32 and v.tolist() == [[1, 2], [3, 4]]      # logical (row-major) order
    assert lit("{1, 2, 3}", "f32[<=3]").value.shape == (3,)


@pytest.mark.parametrize("etype", sorted(t for t in ELEMENT_TYPES if t not in ("token", "opaque")))
def test_every_array_type_has_a_scalar_literal(etype):
    text = {"pred": "true", "c64": "(1, -2)", "c128": "(1, -2)", "s1": "-1"}.get(etype, "1")
    v = lit(text, f"{etype}[]").value
    assert v.dtype == ELEMENT_TYPES[etype].numpy and v.shape == ()


@pytest.mark.parametrize("etype, lo, hi", [
    ("s1", -1, 0), ("s2", -2, 1), ("s4", -8, 7), ("s8", -128, 127), ("s16", -32768, 32767),
    ("s32", -2**31, 2**31 - 1), ("s64", -2**63, 2**63 - 1),
    ("u1", 0, 1), ("u2", 0, 3), ("u4", 0, 15), ("u8", 0, 255), ("u16", 0, 65535),
    ("u32", 0, 2**32 - 1), ("u64", 0, 2**64 - 1)])
def test_integer_ranges(etype, lo, hi):
    assert lit(f"{{{lo}, {hi}}}", f"{etype}[2]").value.tolist() == [lo, hi]
    for bad in (lo - 1, hi + 1):
        if bad > 2**64 - 1 or bad < -2**63:
            # XLA's lexer cannot read it at all
            with pytest.raises(LiteralError, match="does not fit in 64 bits"):
                lit(f"{{{lo}, {bad}}}", f"{etype}[2]")
            continue
        if etype in ("s64", "u64"):
            # XLA's lexer keeps the int64 bits: s64 reads 2**63 as -2**63, u64 reads -1 as 2**64-1
            wrapped = bad % 2**64 if etype == "u64" else bad - 2**64
            assert lit(f"{{{lo}, {bad}}}", f"{etype}[2]").value.tolist() == [lo, wrapped]
            continue
        with pytest.raises(LiteralError, match=rf"value {bad} is out of range for {etype} \[{lo}, {hi}\]"):
            lit(f"{{{lo}, {bad}}}", f"{etype}[2]")


def test_pred_values():
    assert lit("true", "pred[]").value.item() is True
    assert lit("{true, false, 0, 1, 2, -1}", "pred[6]").value.tolist() == [True, False, False, True, True, True]


def test_number_spellings():
    assert lit("{1e-05, -2.5E+3, 1., -.5, 7, 1.0e+2, -5.e-1}", "f64[7]").value.tolist() == \
        [1e-05, -2500.0, 1.0, -0.5, 7.0, 100.0, -0.5]
    assert lit("1e-400", "f64[]").value.item() == 0.0                # underflow is fine


def test_float_rounding_like_xla():
    assert lit("65519", "f16[]").value.item() == 65504               # rounds into range
    assert lit("3.4028235e38", "f32[]").value.item() == np.finfo(np.float32).max
    assert lit("100", "f4e2m1fn[]").value.astype(np.float64).item() == 6     # types without inf saturate
    assert math.isnan(lit("inf", "f8e4m3fn[]").value.astype(np.float64))    # no inf: inf becomes nan


def test_negative_zero_is_kept_for_floats():
    assert np.signbit(lit("-0", "f32[]").value)
    assert np.signbit(lit("-0.0", "bf16[]").value.astype(np.float32))
    assert lit("-0", "s32[]").value.item() == 0


def test_nan_and_payloads():
    assert bits(lit("nan", "f32[]").value, np.float32) == 0x7FC00000
    assert bits(lit("-nan", "f32[]").value, np.float32) == 0xFFC00000
    assert bits(lit("nan(0x1)", "f32[]").value, np.float32) == 0x7F800001
    assert bits(lit("-nan(0x7fffff)", "f32[]").value, np.float32) == 0xFFFFFFFF
    assert bits(lit("nan(0x8000000000001)", "f64[]").value, np.float64) == 0x7FF8000000000001
    assert bits(lit("nan(0x3)", "bf16[]").value, ml_dtypes.bfloat16) == 0x7F83
    assert bits(lit("-nan(0x1ff)", "f16[]").value, np.float16) == 0xFDFF
    assert bits(lit("nan(0x1)", "f8e5m2[]").value, ml_dtypes.float8_e5m2) == 0x7D
    # the double's quiet bit alone means "no payload"
    assert bits(lit("nan(0x8000000000000)", "f32[]").value, np.float32) == 0x7FC00000
    # types without payloads take plain nan / -nan
    assert bits(lit("-nan", "f8e4m3fn[]").value, ml_dtypes.float8_e4m3fn) == 0xFF
    assert bits(lit("nan", "f8e8m0fnu[]").value, ml_dtypes.float8_e8m0fnu) == 0xFF


def test_complex():
    assert lit("(1, -2.5)", "c64[]").value.item() == complex(1, -2.5)
    assert lit("{(1,2) (3,4)}", "c64[2]").value.tolist() == [1 + 2j, 3 + 4j]
    v = lit("{{(1, 2), (3, 4)}, {(5, 6), (7, 8)}}", "c128[2,2]").value
    assert v.dtype == np.complex128 and v[1, 1] == 7 + 8j
    v = lit("(-inf, -nan)", "c64[]").value.item()
    assert v.real == -math.inf and math.isnan(v.imag)


def test_tuples():
    t = lit("(1.5, (2, {true, false}), ())", "(f32[], (s32[], pred[2]), ())")
    assert t.shape.is_tuple and len(t.value) == 3
    assert t.value[0].value.item() == 1.5
    assert t.value[1].value[1].value.tolist() == [True, False]
    assert t.value[2].value == ()
    # an element may be elided; a missing comma is only recorded by XLA, not fatal
    assert lit("({...}, 2)", "(f32[2], s32[])").value[0].elided
    assert lit("(1 2)", "(f32[], s32[])").value[1].value.item() == 2


def test_elided():
    for shape in ("f32[16]", "s32[4,5]", "bf16[2,3,4]", "pred[11]"):
        e = lit("{...}", shape)
        assert e.elided and e.value is None
    assert lit("{ ... }", "f32[3]").elided
    assert lit("{1, ...}", "f32[2]").elided          # XLA fills the rest with garbage


def test_xla_quirks_without_braces():
    """XLA only *records* a missing '{' for a bare value, and accepts it (zero-filling the rest)."""
    assert lit("6", "f32[1]").value.tolist() == [6]
    assert lit("5", "f32[3]").value.tolist() == [5, 0, 0]


def test_literal_equality():
    a = lit("{1, 2}", "f32[2]")
    assert a == lit("{1, 2}", "f32[2]{0}") and a != lit("{1, 3}", "f32[2]")
    assert lit("{...}", "f32[2]") == Literal(parse_shape_text("f32[2]"), None, True)


# ----------------------------------------------------------------------------- errors

@pytest.mark.parametrize("shape, text, at, words", [
    ("f32[]", "NaN", "NaN", ["unexpected token 'NaN'", "lower case"]),
    ("f32[]", "Inf", "Inf", ["unexpected token 'Inf'"]),
    ("f32[]", "+1", "+1", ["unexpected token '+1'", "'+'"]),
    ("f32[]", ".5", ".5", ["unexpected token '.5'", "digit before the decimal point"]),
    ("s32[]", "0x10", "0x10", ["unexpected token '0x10'", "hexadecimal"]),
    ("f32[]", "1.5f", "1.5f", ["unexpected token '1.5f'"]),
    ("f32[]", "(1, 2)", "(", ["parens are only valid for complex literals"]),
    ("f64[]", "1e400", "1e400", ["out of range for double"]),
    ("f16[]", "1e6", "1e6", ["value 1e+06 is out of range for f16 [-65504, 65504]"]),
    ("f16[]", "65520", "65520", ["out of range for f16"]),
    ("f32[]", "3.5e38", "3.5e38", ["out of range for f32"]),
    ("f8e4m3fn[]", "1000", "1000", ["out of range for f8e4m3fn [-448, 448]"]),
    ("f8e8m0fnu[]", "0", "0", ["out of range for f8e8m0fnu"]),
    ("s32[]", "1.5", "1.5", ["expects integer for primitive type s32", "'1.5'"]),
    ("pred[]", "1.5", "1.5", ["expects integer for primitive type pred"]),
    ("s32[]", "inf", "inf", ["expects integer"]),
    ("s32[]", "true", "true", ["expects integer", "pred values"]),
    ("f32[]", "false", "false", ["expects a number", "pred values"]),
    ("c64[]", "1", "1", ["expects (real, imag) for complex type c64"]),
    ("c64[]", "(1e39, 1)", "1e39", ["real part 1e+39 is out of range for c64"]),
    ("c64[]", "(1, 2", "", ["expects ')' in a complex value"]),
    ("f32[]", "nan(0x800000)", "nan", ["NaN payload 0x800000 is out of range for f32 (at most 0x7fffff)"]),
    ("f32[]", "nan(0x0)", "nan", ["NaN payload 0x0 is out of range"]),
    ("f8e4m3fn[]", "nan(0x1)", "nan", ["f8e4m3fn does not support NaN payloads"]),
    ("f8e8m0fnu[]", "nan(0x1)", "nan", ["does not support NaN payloads"]),
    ("u64[]", "18446744073709551616", "1844", ["too large", "64 bits"]),
    ("s8[2]", "{1, 200}", "200", ["value 200 is out of range for s8 [-128, 127]"]),
    ("u4[]", "16", "16", ["value 16 is out of range for u4 [0, 15]"]),
    ("u8[]", "-1", "-1", ["value -1 is out of range for u8 [0, 255]"]),
    ("f32[2]", "{{1}, {2}}", 1, ["expects nested array in rank 1, but sees larger"]),
    ("f32[]", "{1}", "{", ["expects nested array in rank 0, but sees larger"]),
    ("f32[3]", "{1, 2}", 5, ["expects 3 elements in dimension 0, but sees 2"]),
    ("s32[3,2]", "{{1, 2}, {3, 4}}", 15, ["expects 3 elements in dimension 0, but sees 2"]),
    ("s32[2,2]", "{{1, 2}, {3}}", 11, ["expects 2 elements in dimension 1 at index [1], but sees 1"]),
    ("s32[1,2]", "{{1, 2}, {3, 4}}", "{3", ["expects 1 elements in dimension 0, but sees more"]),
    ("f32[3]", "{1, 2, 3, 4}", "4", ["expects 3 elements on the minor-most dimension, but sees more"]),
    ("f32[2,2]", "{1, 2, 3, 4}", "1", ["expects nested array in rank 2, but sees 1", "{{x, x}, {x, x}}"]),
    ("f32[2]", "{1, 2}}", 6, ["unexpected '}' after the literal"]),
    ("f32[2]", "{1, 2", "", ["unexpected end of the literal"]),
    ("f32[]", "...", "...", ["expects '...' at nest level 1, but sees it at nest level 0"]),
    ("f32[2,3]", "{{...}, {...}}", "...", ["expects '...' at nest level 1, but sees it at nest level 2"]),
    ("(f32[], s32[])", "{...}", "{", ["expects '(' in front of tuple elements"]),
    ("(f32[], s32[])", "()", ")", ["expects 2 tuple elements, but sees 0"]),
    ("(f32[], s32[])", "(1, 2, 3)", ", 3", ["expects ')' at the end of the tuple"]),
    ("token[]", "{}", "{", ["token-shaped constants are not allowed"]),
    ("opaque[]", "{}", "{", ["opaque-shaped constants are not allowed"]),
])
def test_errors(shape, text, at, words):
    with pytest.raises(LiteralError) as ei:
        lit(text, shape)
    msg = str(ei.value)
    for w in words:
        assert w in msg, msg
    offset = at if isinstance(at, int) else text.index(at) if at else len(text)
    assert ei.value.offset == offset, (ei.value.offset, msg)


def test_errors_are_value_errors():
    """The fast path of the builder catches (LiteralError, KeyError, ValueError)."""
    assert issubclass(LiteralError, ValueError)


def test_first_recorded_problem_is_reported():
    """Like XLA: the element-count problem at '4' is recorded before the fatal one there."""
    with pytest.raises(LiteralError, match="minor-most dimension"):
        lit("{1, 2, 3, 4}", "f32[3]")


# ----------------------------------------------------------------------------- round trip

_BITS = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}
_NARROW = {"f4e2m1fn", "f6e2m3fn", "f6e3m2fn"}   # stored in a byte: only the low bits are meaningful


def _values(etype):
    """Arrays of every value of a type, from bit patterns (NaNs, infinities, subnormals, -0)."""
    et = ELEMENT_TYPES[etype]
    dt = et.numpy
    if et.kind == "complex":
        comp = np.float32 if etype == "c64" else np.float64
        part = st.integers(0, 2 ** (8 * np.dtype(comp).itemsize) - 1).map(
            lambda b: np.array(b, dtype=_BITS[np.dtype(comp).itemsize]).view(comp))
        return st.tuples(part, part).map(lambda p: complex(p[0], p[1]) if False else (p[0], p[1]))
    if et.kind == "pred":
        return st.booleans()
    if et.kind in ("int", "uint"):
        lo, hi = (-(1 << (et.bits - 1)), (1 << (et.bits - 1)) - 1) if et.kind == "int" else (0, (1 << et.bits) - 1)
        return st.integers(lo, hi)
    if etype in _NARROW:
        table = np.arange(2 ** et.bits, dtype=np.uint8).view(dt)
        return st.sampled_from(list(range(len(table)))).map(lambda k: table[k])
    size = np.dtype(dt).itemsize
    return st.integers(0, 2 ** (8 * size) - 1).map(lambda b: np.array(b, dtype=_BITS[size]).view(dt))


def _array(etype, values, dims):
    et = ELEMENT_TYPES[etype]
    if et.kind == "complex":
        out = np.empty(len(values), dtype=et.numpy)
        comp = np.float32 if etype == "c64" else np.float64
        out.real = np.array([v[0] for v in values], dtype=comp)
        out.imag = np.array([v[1] for v in values], dtype=comp)
        return out.reshape(dims)
    return np.array(values, dtype=et.numpy).reshape(dims)


def _round_trips(etype, arr) -> bool:
    """Values XLA itself does not read back from its own printing are left out."""
    flat = arr.reshape(-1)
    if etype == "f8e8m0fnu":
        # 2^-127 prints as 5.9e-39, which XLA (like us) reads as 2^-126
        return not np.any(flat.astype(np.float64) == 2.0 ** -127)
    if etype in ("c64", "c128"):
        # XLA checks complex parts against the component's range *before* rounding, so the
        # printed maximum of c64 (3.40282347e+38 > FLT_MAX as a double) is rejected
        comp = np.float32 if etype == "c64" else np.float64
        big = np.finfo(comp).max
        parts = np.concatenate([flat.real, flat.imag]).astype(np.float64)
        with np.errstate(invalid="ignore"):
            return not np.any(np.abs(parts) >= big * (1 - 1e-7))
    return True


@st.composite
def literals(draw):
    etype = draw(st.sampled_from(sorted(t for t in ELEMENT_TYPES if t not in ("token", "opaque"))))
    rank = draw(st.integers(0, 4))
    dims = tuple(draw(st.lists(st.integers(0, 3), min_size=rank, max_size=rank)))
    n = int(np.prod(dims)) if dims else 1
    values = draw(st.lists(_values(etype), min_size=n, max_size=n))
    shape_text = f"{etype}[{','.join(map(str, dims))}]"
    return Literal(parse_shape_text(shape_text), _array(etype, values, dims))


@settings(max_examples=400, deadline=None)
@given(literals())
def test_literal_text_round_trip(literal):
    assume(_round_trips(literal.shape.element_type, literal.value))
    assert parse_literal(format_literal(literal), literal.shape) == literal


@settings(max_examples=100, deadline=None)
@given(st.lists(literals(), min_size=0, max_size=3))
def test_tuple_literal_round_trip(elements):
    for e in elements:
        assume(_round_trips(e.shape.element_type, e.value))
    shape = parse_shape_text("(" + ", ".join(e.shape.to_str() for e in elements) + ")")
    t = Literal(shape, tuple(elements))
    assert parse_literal(format_literal(t), shape) == t


@settings(max_examples=200, deadline=None)
@given(literals())
def test_fast_and_exact_readers_agree(literal):
    """The bulk reader for plain literals gives what the token-by-token reader gives."""
    assume(_round_trips(literal.shape.element_type, literal.value))
    text = format_literal(literal)
    reader = _LiteralReader(text)
    slow = reader.literal(literal.shape)
    assert slow == parse_literal(text, literal.shape)
