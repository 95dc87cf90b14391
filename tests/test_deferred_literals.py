"""Constants decoded when first read: a small constant of a plain type is a DeferredLiteral whose
text was checked as the fast decoder checks it; its value is exactly the eager decoder's, and a text
it does not take is decoded (and its problems reported) at once.  Reading and checking a module
imports neither NumPy nor ml_dtypes."""
from __future__ import annotations

import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hlo_cli.ir.literal import DeferredLiteral, Literal, deferred_literal, parse_literal
from hlo_cli.ir.serial import deserialize_module, serialize_module
from hlo_cli.ir.shape import parse_shape_text
from hlo_cli.parser import parse
from tests.imports_of import imported_by


def _same(a: Literal, b: Literal) -> bool:
    return a.shape == b.shape and a.elided == b.elided and a.value.dtype == b.value.dtype and \
        a.value.shape == b.value.shape and a.value.tobytes() == b.value.tobytes()


_NUMBER = st.one_of(
    st.integers(-2 ** 70, 2 ** 70).map(str),
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
    st.floats(-1e6, 1e6).map(lambda v: f"{v:.9g}"),
    st.sampled_from(["inf", "-inf", "nan", "-nan", "65504", "65519", "65520", "3.4028235e38", "3.4e38",
                     "3.40282357e38", "1e39", "-0", "1.", "007", "true", "false", "0", "1", "2", "255", "256",
                     "-129", "4294967295", "4294967296", "1e-46", "nan(0x1)", ".5", "1e5"]))
_TYPES = st.sampled_from(["f16", "bf16", "f32", "f64", "s8", "s16", "s32", "s64", "u8", "u16", "u32", "u64",
                          "pred", "s4", "f8e4m3fn", "c64"])


@settings(max_examples=400, deadline=None)
@given(_TYPES, st.lists(_NUMBER, min_size=0, max_size=6), st.booleans())
def test_a_deferred_constant_is_the_eager_one(et, numbers, scalar):
    """Whatever the text, a deferred literal (when the text is taken) decodes to exactly what the
    eager decoder makes of it, and a text the eager decoder refuses is never deferred."""
    if scalar:
        shape, text = parse_shape_text(f"{et}[]"), (numbers[0] if numbers else "")
    else:
        shape, text = parse_shape_text(f"{et}[{len(numbers)}]"), "{" + ", ".join(numbers) + "}"
    try:
        eager = parse_literal(text, shape)
    except Exception:   # noqa: BLE001 -- refused: then it must not be deferred
        eager = None
    lazy = deferred_literal(text, shape)
    if lazy is None:
        return
    assert eager is not None, f"{text!r} as {et} was deferred but does not decode"
    assert isinstance(lazy, DeferredLiteral) and _same(lazy, eager)
    assert lazy == eager and str(lazy) == str(eager)


@pytest.mark.parametrize("shape, text, taken", [
    ("f32[]", "1.5", True), ("f32[]", "nan", True), ("f32[]", "-inf", True), ("f16[]", "65504", True),
    ("f16[]", "65519", False), ("f32[]", "3.5e38", False), ("s8[]", "127", True), ("s8[]", "128", False),
    ("u64[]", "18446744073709551615", False), ("u32[2]{0}", "{1, 2}", True), ("u32[2]{0}", "{1, 2, 3}", False),
    ("f32[2,2]{1,0}", "{ { 1, 2 }, { 3, 4 } }", True), ("f32[2,2]{1,0}", "{1, 2, 3, 4}", False),
    ("pred[]", "true", True), ("pred[2]{0}", "{0, 1}", True), ("s4[]", "1", False), ("f32[]", "nan(0x1)", False),
    ("(f32[], s32[])", "(1, 2)", False), ("f32[4]{0}", "{...}", False), ("f32[1]{0}", "{1 /* one */}", False)])
def test_which_texts_wait(shape, text, taken):
    """Deferred: plain numbers that fit a plain type (inf and nan for floats); decoded at once: the
    rest (bounds, narrow and complex types, tuples, elided values, comments, NaN payloads)."""
    s = parse_shape_text(shape)
    lit = deferred_literal(text, s)
    assert (lit is not None) == taken
    if taken:
        assert _same(lit, parse_literal(text, s))


_MODULE = """HloModule m

ENTRY e {
  a = f32[] constant(1.5)
  b = u32[2]{0} constant({7, 9})
  c = f32[] constant(-inf)
  d = bf16[] constant(3)
  ROOT t = (f32[], u32[2]{0}, f32[], bf16[]) tuple(a, b, c, d)
}
"""


def test_a_module_keeps_its_constants_through_the_cache_and_pickle():
    m = parse(_MODULE)
    consts = [i.literal for i in m.entry_computation.instructions if i.opcode == "constant"]
    assert all(isinstance(c, DeferredLiteral) for c in consts)
    back = deserialize_module(serialize_module(m))
    again = [i.literal for i in back.entry_computation.instructions if i.opcode == "constant"]
    assert all(isinstance(c, DeferredLiteral) for c in again)        # (stored as their texts)
    for a, b in zip(consts, again):
        assert _same(a, b)
    copied = pickle.loads(pickle.dumps(consts[1]))
    assert type(copied) is Literal and _same(copied, consts[1])
    assert consts[1].value.tolist() == [7, 9] and consts[1].value.dtype == np.uint32
    assert np.isneginf(consts[2].value) and str(consts[3].value.dtype) == "bfloat16"


def test_reading_and_checking_a_module_imports_no_numpy(tmp_path):
    """`hlo check` (and the parser under it) of a module of constants, fusions and shardings loads
    neither NumPy nor ml_dtypes: a tenth of a second of every cold check."""
    f = tmp_path / "m.hlo"
    f.write_text(_MODULE.replace("HloModule m", "HloModule m, num_partitions=2").replace(
        "ROOT t", "s = u32[2]{0} add(b, b), sharding={devices=[2]<=[2]}\n  ROOT t").replace(
        "bf16[]) tuple(a, b, c, d)", "bf16[], u32[2]{0}) tuple(a, b, c, d, s)"))
    loaded, _ = imported_by(["check", "--no-cache", str(f)], ("numpy", "ml_dtypes"))
    assert loaded == []


@pytest.mark.parametrize("number, ok", [("18446744073709551615", True), ("-9223372036854775808", True),
                                        ("18446744073709551616", False), ("-9223372036854775809", False),
                                        ("99999999999999999999", False)])
def test_a_float_constant_spelled_as_an_integer_fits_64_bits(number, ok):
    """XLA's lexer reads an integer-spelled number in 64 bits (u64 or s64) even in a float literal:
    past that, its parser (jaxlib 0.10.2's hlo_module_from_text) refuses the module ("unexpected token
    type in a literal").  The fast decoder and the deferred path did not check it."""
    from hlo_cli.errors import HloError
    text = f"HloModule m\nENTRY e {{\n  ROOT c = f32[] constant({number})\n}}\n"
    if ok:
        assert float(parse(text).entry_computation.root_instruction.literal.value) == np.float32(float(number))
    else:
        with pytest.raises(HloError, match="does not fit in 64 bits"):
            parse(text)
        for shape in ("f32[]", "f32[1]{0}"):
            s = parse_shape_text(shape)
            t = number if shape == "f32[]" else "{" + number + "}"
            assert deferred_literal(t, s) is None
            with pytest.raises(Exception):
                parse_literal(t, s)
