"""Shape rules of the elementwise family (hlo_cli/shapes/families/elementwise.py).

* every instruction of these opcodes in samples/{ops,syntax,jax} gets its declared shape back;
* a table of valid edge cases (result shape inferred exactly, XLA accepts them too);
* a table of invalid cases per opcode: the message follows the house template, names the operand
  shapes and says what is wrong; XLA (through JAX) rejects them too.

The XLA comparisons need jaxlib and are skipped without it.  XLA's verdict comes from importing
the module (HLO -> StableHLO) and compiling it for the CPU, which runs XLA's HLO verifier.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from hlo_cli.ir.opcodes import OPCODES
from hlo_cli.shapes import RULES, ShapeRuleError, infer_shape

ROOT = Path(__file__).resolve().parents[2]

OWN = sorted(o for o, s in OPCODES.items()
             if s.family in ("elementwise_unary", "elementwise_binary", "elementwise_ternary",
                             "compare", "convert"))


# ----------------------------------------------------------------------------- harness (tests/shapes/harness.py)

from .harness import SAMPLES, opcodes_in_samples, sample_checks, module_text, infer_root, xla_verdicts, C, check_bad, check_good


# ----------------------------------------------------------------------------- coverage

def test_every_opcode_of_the_family_has_a_rule():
    missing = [o for o in OWN if o not in RULES]
    assert not missing


def test_every_opcode_of_the_family_is_in_a_table():
    covered = {c.opcode for c in GOOD + BAD}
    assert not [o for o in OWN if o not in covered]


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_samples(path):
    sample_checks(path, set(OWN))


def test_samples_cover_every_opcode():
    assert not [o for o in OWN if o not in opcodes_in_samples()]


# ----------------------------------------------------------------------------- valid edge cases

UNARY_TYPES = {   # opcode -> (accepted element type, result element type)
    **{op: ("f32", "f32") for op in ("floor", "ceil", "round-nearest-afz", "round-nearest-even",
                                      "cbrt", "erf")},
    **{op: ("c64", "c64") for op in ("cosine", "sine", "tan", "exponential", "exponential-minus-one",
                                      "log", "log-plus-one", "logistic", "rsqrt", "sqrt", "tanh")},
    **{op: ("bf16", "bf16") for op in ("acos", "acosh", "asin", "asinh", "atanh", "cosh", "sinh")},
    "real": ("c128", "f64"), "imag": ("c64", "f32"), "abs": ("c64", "f32"), "sign": ("s8", "s8"),
    "negate": ("u32", "u32"), "count-leading-zeros": ("u8", "u8"), "popcnt": ("s64", "s64"),
    "not": ("pred", "pred"), "is-finite": ("f16", "pred"),
}

GOOD = [
    *(C(f"{op}.{t}", f"{r}[2,<=3]", op, [f"{t}[2,<=3]"]) for op, (t, r) in UNARY_TYPES.items()),
    C("real.of_float", "f32[3]", "real", ["f32[3]"]),
    C("abs.signed", "s32[3]", "abs", ["s32[3]"]),
    C("add.pred", "pred[3]", "add", ["pred[3]", "pred[3]"]),
    C("add.dynamic_either", "f32[<=4,3]", "add", ["f32[<=4,3]", "f32[4,3]"]),
    C("add.scalars", "s32[]", "add", ["s32[]", "s32[]"]),
    C("subtract.c64", "c64[2]", "subtract", ["c64[2]", "c64[2]"]),
    C("multiply.u8", "u8[2]", "multiply", ["u8[2]", "u8[2]"]),
    C("divide.s4", "s4[2]", "divide", ["s4[2]", "s4[2]"]),
    C("remainder.f32", "f32[2]", "remainder", ["f32[2]", "f32[2]"]),
    C("power.bf16", "bf16[2]", "power", ["bf16[2]", "bf16[2]"]),
    C("maximum.f8", "f8e4m3fn[2]", "maximum", ["f8e4m3fn[2]", "f8e4m3fn[2]"]),
    C("minimum.u64", "u64[2]", "minimum", ["u64[2]", "u64[2]"]),
    C("atan2.f64", "f64[2]", "atan2", ["f64[2]", "f64[2]"]),
    C("complex.f32", "c64[2,3]", "complex", ["f32[2,3]", "f32[2,3]"]),
    C("complex.f64", "c128[2]", "complex", ["f64[2]", "f64[2]"]),
    C("and.pred", "pred[2]", "and", ["pred[2]", "pred[2]"]),
    C("or.s8", "s8[2]", "or", ["s8[2]", "s8[2]"]),
    C("xor.u16", "u16[2]", "xor", ["u16[2]", "u16[2]"]),
    C("shift-left.s32", "s32[2]", "shift-left", ["s32[2]", "s32[2]"]),
    C("shift-right-arithmetic.s8", "s8[2]", "shift-right-arithmetic", ["s8[2]", "s8[2]"]),
    C("shift-right-logical.u32", "u32[2]", "shift-right-logical", ["u32[2]", "u32[2]"]),
    C("mulhi.u32", "u32[2]", "mulhi", ["u32[2]", "u32[2]"], xla=False,
      why="XLA's HLO->StableHLO import has no mulhi"),
    C("compare.float_default", "pred[2,3]", "compare", ["f32[2,3]", "f32[2,3]"], "direction=LT"),
    C("compare.totalorder", "pred[2]", "compare", ["bf16[2]", "bf16[2]"], "direction=GE, type=TOTALORDER"),
    C("compare.signed", "pred[2]", "compare", ["s32[2]", "s32[2]"], "direction=GT, type=SIGNED"),
    C("compare.unsigned", "pred[2]", "compare", ["u8[2]", "u8[2]"], "direction=LE, type=UNSIGNED"),
    C("compare.pred_unsigned", "pred[2]", "compare", ["pred[2]", "pred[2]"], "direction=NE, type=UNSIGNED"),
    C("compare.complex_float", "pred[2]", "compare", ["c64[2]", "c64[2]"], "direction=EQ, type=FLOAT"),
    C("compare.dynamic", "pred[<=2]", "compare", ["s32[<=2]", "s32[<=2]"], "direction=EQ"),
    # operation semantics: Select with a vector and with a scalar pred
    C("select.vector_pred", "s32[4]", "select", ["pred[4]", "s32[4]", "s32[4]"]),
    C("select.scalar_pred", "s32[4]", "select", ["pred[]", "s32[4]", "s32[4]"]),
    C("select.dynamic_pred", "f32[<=4]", "select", ["pred[<=4]", "f32[4]", "f32[4]"]),
    # operation semantics: Clamp with scalar min and max
    C("clamp.scalar_bounds", "s32[3]", "clamp", ["s32[]", "s32[3]", "s32[]"]),
    C("clamp.array_bounds", "f32[2,3]", "clamp", ["f32[2,3]", "f32[2,3]", "f32[2,3]"]),
    C("clamp.mixed_bounds", "f32[2]", "clamp", ["f32[]", "f32[2]", "f32[2]"]),
    C("clamp.pred", "pred[3]", "clamp", ["pred[]", "pred[3]", "pred[]"]),
    # operation semantics: ConvertElementType s32[3] -> f32[3]
    C("convert.s32_f32", "f32[3]", "convert", ["s32[3]"]),
    C("convert.pred_c64", "c64[3]", "convert", ["pred[3]"]),
    C("convert.dynamic", "bf16[<=3,2]", "convert", ["f32[<=3,2]"]),
    # operation semantics: BitcastConvert between widths
    C("bitcast-convert.f32_to_f16_pair", "f16[10,2]", "bitcast-convert", ["f32[10]"]),
    C("bitcast-convert.scalar_to_pair", "f16[2]", "bitcast-convert", ["f32[]"]),
    C("bitcast-convert.pair_to_f32", "f32[10]", "bitcast-convert", ["f16[10,2]"]),
    C("bitcast-convert.same_width", "s32[2,3]", "bitcast-convert", ["f32[2,3]"]),
    C("bitcast-convert.s32_to_s8", "s8[3,4]", "bitcast-convert", ["s32[3]"]),
    C("bitcast-convert.c128_to_c64_pair", "c64[3,2]", "bitcast-convert", ["c128[3]"], xla=False,
      why="XLA's StableHLO import cannot express it"),
    C("stochastic-convert.f32_bf16", "bf16[2,3]", "stochastic-convert", ["f32[2,3]", "u32[2,3]"],
      xla=False, why="XLA's CPU backend does not implement stochastic-convert"),
    C("stochastic-convert.f16_s8", "s8[4]", "stochastic-convert", ["f16[4]", "u16[4]"], xla=False,
      why="XLA's CPU backend does not implement stochastic-convert"),
    C("reduce-precision.f32", "f32[2]", "reduce-precision", ["f32[2]"], "exponent_bits=5, mantissa_bits=10"),
    C("reduce-precision.no_mantissa", "bf16[2]", "reduce-precision", ["bf16[2]"],
      "exponent_bits=1, mantissa_bits=0"),
]


@pytest.mark.parametrize("case", GOOD, ids=lambda c: c.id)
def test_good(case):
    check_good(case)


# ----------------------------------------------------------------------------- invalid cases

BAD = [
    # element types of unary ops (XLA's InferUnaryOpShape)
    C("floor.int", "s32[3]", "floor", ["s32[3]"], fragment="must be floating-point, got s32"),
    C("ceil.complex", "c64[3]", "ceil", ["c64[3]"], fragment="must be floating-point, got c64"),
    C("round-nearest-afz.int", "s8[3]", "round-nearest-afz", ["s8[3]"], fragment="got s8"),
    C("round-nearest-even.pred", "pred[3]", "round-nearest-even", ["pred[3]"], fragment="got pred"),
    C("cbrt.complex", "c64[3]", "cbrt", ["c64[3]"], fragment="must be floating-point, got c64"),
    C("erf.int", "s32[3]", "erf", ["s32[3]"], fragment="must be floating-point, got s32"),
    C("exponential.int", "s32[3]", "exponential", ["s32[3]"],
      fragment="must be floating-point or complex, got s32"),
    C("exponential-minus-one.pred", "pred[3]", "exponential-minus-one", ["pred[3]"], fragment="got pred"),
    C("log.uint", "u32[3]", "log", ["u32[3]"], fragment="got u32"),
    C("log-plus-one.int", "s16[3]", "log-plus-one", ["s16[3]"], fragment="got s16"),
    C("logistic.int", "s32[3]", "logistic", ["s32[3]"], fragment="got s32"),
    C("rsqrt.int", "s32[3]", "rsqrt", ["s32[3]"], fragment="got s32"),
    C("sqrt.int", "u8[3]", "sqrt", ["u8[3]"], fragment="got u8"),
    C("tanh.pred", "pred[3]", "tanh", ["pred[3]"], fragment="got pred"),
    C("tan.int", "s32[3]", "tan", ["s32[3]"], fragment="got s32"),
    C("sine.int", "s32[3]", "sine", ["s32[3]"], fragment="got s32"),
    C("cosine.int", "s32[3]", "cosine", ["s32[3]"], fragment="got s32"),
    C("acos.int", "s32[3]", "acos", ["s32[3]"], fragment="got s32"),
    C("acosh.int", "s32[3]", "acosh", ["s32[3]"], fragment="got s32"),
    C("asin.int", "s32[3]", "asin", ["s32[3]"], fragment="got s32"),
    C("asinh.int", "s32[3]", "asinh", ["s32[3]"], fragment="got s32"),
    C("atanh.int", "s32[3]", "atanh", ["s32[3]"], fragment="got s32"),
    C("cosh.pred", "pred[3]", "cosh", ["pred[3]"], fragment="got pred"),
    C("sinh.uint", "u32[3]", "sinh", ["u32[3]"], fragment="got u32"),
    C("real.int", "s32[3]", "real", ["s32[3]"], fragment="must be floating-point or complex, got s32"),
    C("imag.pred", "pred[3]", "imag", ["pred[3]"], fragment="got pred"),
    C("abs.unsigned", "u32[3]", "abs", ["u32[3]"],
      fragment="must be signed integer, floating-point or complex, got u32"),
    C("abs.pred", "pred[3]", "abs", ["pred[3]"], fragment="got pred"),
    C("sign.unsigned", "u8[3]", "sign", ["u8[3]"], fragment="got u8"),
    C("negate.pred", "pred[3]", "negate", ["pred[3]"],
      fragment="must be integer, floating-point or complex, got pred"),
    C("count-leading-zeros.float", "f32[3]", "count-leading-zeros", ["f32[3]"],
      fragment="must be integer, got f32"),
    C("popcnt.pred", "pred[3]", "popcnt", ["pred[3]"], fragment="must be integer, got pred"),
    C("not.float", "f32[3]", "not", ["f32[3]"], fragment="must be pred or integer, got f32"),
    C("is-finite.int", "pred[3]", "is-finite", ["s32[3]"], fragment="must be floating-point, got s32"),
    C("negate.tuple", "(f32[3])", "negate", ["(f32[3]) tuple(x)"], fragment="the operand must be an array",
      extra=("x = f32[3] constant({1, 2, 3})",)),
    # binary ops: no implicit broadcasting, one element type
    C("add.implicit_broadcast", "f32[2,3]", "add", ["f32[2,3]", "f32[3]"],
      fragment="dimensions must be equal (HLO has no implicit broadcasting), got [2,3] vs [3]"),
    C("add.scalar_broadcast", "f32[2,3]", "add", ["f32[2,3]", "f32[]"], fragment="got [2,3] vs []"),
    C("multiply.degenerate_broadcast", "f32[2,3]", "multiply", ["f32[2,1]", "f32[2,3]"],
      fragment="got [2,1] vs [2,3]"),
    C("add.mixed_precision", "f32[3]", "add", ["f32[3]", "bf16[3]"],
      fragment="element types must be the same (mixed precision is not allowed), got f32 vs bf16"),
    C("maximum.mixed_int", "s32[3]", "maximum", ["s32[3]", "u32[3]"], fragment="got s32 vs u32"),
    C("subtract.pred", "pred[3]", "subtract", ["pred[3]", "pred[3]"],
      fragment="must be integer, floating-point or complex (not pred), got pred"),
    C("divide.pred", "pred[3]", "divide", ["pred[3]", "pred[3]"], fragment="got pred"),
    C("power.pred", "pred[3]", "power", ["pred[3]", "pred[3]"], fragment="got pred"),
    C("remainder.pred", "pred[3]", "remainder", ["pred[3]", "pred[3]"], fragment="got pred"),
    C("remainder.complex", "c64[3]", "remainder", ["c64[3]", "c64[3]"],
      fragment="must be integer or floating-point, got c64"),
    C("minimum.token", "token[]", "minimum", ["token[] after-all()", "token[] after-all()"],
      fragment="the lhs must be an array, got token[]"),
    C("atan2.int", "s32[3]", "atan2", ["s32[3]", "s32[3]"], fragment="must be floating-point or complex, got s32"),
    C("complex.bf16", "c64[3]", "complex", ["bf16[3]", "bf16[3]"], fragment="must be f32 or f64, got bf16"),
    C("complex.mixed", "c64[3]", "complex", ["f32[3]", "f64[3]"], fragment="got f32 vs f64"),
    C("complex.of_complex", "c64[3]", "complex", ["c64[3]", "c64[3]"], fragment="got c64"),
    C("and.float", "f32[3]", "and", ["f32[3]", "f32[3]"], fragment="must be pred or integer, got f32"),
    C("or.float", "bf16[3]", "or", ["bf16[3]", "bf16[3]"], fragment="got bf16"),
    C("xor.shape", "s32[3]", "xor", ["s32[3]", "s32[4]"], fragment="got [3] vs [4]"),
    C("shift-left.float", "f32[3]", "shift-left", ["f32[3]", "f32[3]"], fragment="must be integer, got f32"),
    C("shift-right-arithmetic.pred", "pred[3]", "shift-right-arithmetic", ["pred[3]", "pred[3]"],
      fragment="got pred"),
    C("shift-right-logical.float", "f64[3]", "shift-right-logical", ["f64[3]", "f64[3]"], fragment="got f64"),
    C("mulhi.float", "f32[3]", "mulhi", ["f32[3]", "f32[3]"], fragment="must be integer, got f32",
      xla=False, why="XLA's HLO->StableHLO import has no mulhi"),
    # compare
    C("compare.implicit_broadcast", "pred[3]", "compare", ["s32[3]", "s32[]"], "direction=EQ",
      fragment="got [3] vs []"),
    C("compare.mixed", "pred[3]", "compare", ["f32[3]", "bf16[3]"], "direction=EQ", fragment="got f32 vs bf16"),
    C("compare.type_for_float", "pred[3]", "compare", ["f32[3]", "f32[3]"], "direction=EQ, type=SIGNED",
      fragment="type must be FLOAT or TOTALORDER for f32 operands, got SIGNED"),
    C("compare.type_for_signed", "pred[3]", "compare", ["s32[3]", "s32[3]"], "direction=LT, type=UNSIGNED",
      fragment="type must be SIGNED for s32 operands, got UNSIGNED"),
    C("compare.type_for_unsigned", "pred[3]", "compare", ["u32[3]", "u32[3]"], "direction=LT, type=SIGNED",
      fragment="type must be UNSIGNED for u32 operands"),
    C("compare.type_for_pred", "pred[3]", "compare", ["pred[3]", "pred[3]"], "direction=EQ, type=FLOAT",
      fragment="type must be UNSIGNED for pred operands"),
    C("compare.totalorder_complex", "pred[3]", "compare", ["c64[3]", "c64[3]"], "direction=EQ, type=TOTALORDER",
      fragment="type must be FLOAT for c64 operands"),
    # select (operation semantics: pred of the branches' dimensions or scalar)
    C("select.pred_type", "f32[3]", "select", ["s32[3]", "f32[3]", "f32[3]"],
      fragment="the predicate's element type must be pred, got s32"),
    C("select.pred_dims", "f32[3]", "select", ["pred[2]", "f32[3]", "f32[3]"],
      fragment="the predicate's dimensions must be those of on_true and on_false, or [] (a scalar predicate), got [2] vs [3]"),
    C("select.branch_dims", "f32[3]", "select", ["pred[]", "f32[3]", "f32[4]"],
      fragment="the dimensions of on_true and on_false must be equal"),
    C("select.branch_types", "f32[3]", "select", ["pred[3]", "f32[3]", "bf16[3]"],
      fragment="the element types of on_true and on_false must be the same"),
    C("select.tuples", "(f32[3])", "select", ["pred[]", "(f32[3]) tuple(x)", "(f32[3]) tuple(x)"],
      fragment="on_true must be an array, got (f32[3])", extra=("x = f32[3] constant({1, 2, 3})",)),
    # clamp (operation semantics: min/max scalars or of the operand's shape)
    C("clamp.bound_dims", "s32[3]", "clamp", ["s32[2]", "s32[3]", "s32[]"],
      fragment="the dimensions of min must be those of the operand, or [] (a scalar bound), got [2] vs [3]"),
    C("clamp.max_dims", "s32[3]", "clamp", ["s32[]", "s32[3]", "s32[3,1]"], fragment="the dimensions of max"),
    C("clamp.types", "s32[3]", "clamp", ["s32[]", "s32[3]", "s64[]"],
      fragment="the element types of min, operand and max must be the same"),
    # converts
    C("bitcast-convert.complex_to_real", "f32[3,2]", "bitcast-convert", ["c64[3]"],
      fragment="the conversion must not mix complex and real types, got c64 to f32"),
    C("bitcast-convert.widths", "s32[3]", "bitcast-convert", ["s8[3,3]"],
      fragment="the operand's last dimension must be the bit width ratio 4 (s8 to s32), got [3,3]"),
    C("bitcast-convert.not_dividing", "f16[3]", "bitcast-convert", ["f6e2m3fn[3]"],
      fragment="the bit widths must divide one another, got 6 (f6e2m3fn) and 16 (f16)", xla=False,
      why="XLA's StableHLO import has no f6 types"),
    C("bitcast-convert.scalar_to_wider", "f32[]", "bitcast-convert", ["f16[]"],
      fragment="the operand's last dimension must be the bit width ratio 2 (f16 to f32), got a scalar"),
    C("stochastic-convert.int_operand", "s8[3]", "stochastic-convert", ["s32[3]", "u32[3]"],
      fragment="the operand's element type must be floating-point, got s32", xla=False,
      why="XLA's CPU backend does not implement stochastic-convert"),
    C("stochastic-convert.signed_bits", "bf16[3]", "stochastic-convert", ["f32[3]", "s32[3]"],
      fragment="the random bits' element type must be unsigned integer, got s32", xla=False,
      why="XLA's CPU backend does not implement stochastic-convert"),
    C("stochastic-convert.width", "bf16[3]", "stochastic-convert", ["f32[3]", "u16[3]"],
      fragment="the random bits' width must be the operand's (32 bits), got 16 bits", xla=False,
      why="XLA's CPU backend does not implement stochastic-convert"),
    C("stochastic-convert.dims", "bf16[3]", "stochastic-convert", ["f32[3]", "u32[4]"],
      fragment="got [3] vs [4]", xla=False, why="XLA's CPU backend does not implement stochastic-convert"),
    C("reduce-precision.int", "s32[3]", "reduce-precision", ["s32[3]"], "exponent_bits=2, mantissa_bits=2",
      fragment="the element type must be floating-point, got s32"),
    C("reduce-precision.no_exponent", "f32[3]", "reduce-precision", ["f32[3]"],
      "exponent_bits=0, mantissa_bits=2", fragment="exponent_bits must be at least 1, got 0"),
    C("reduce-precision.negative_mantissa", "f32[3]", "reduce-precision", ["f32[3]"],
      "exponent_bits=2, mantissa_bits=-1", fragment="mantissa_bits must be non-negative, got -1"),
]


@pytest.mark.parametrize("case", BAD, ids=lambda c: c.id)
def test_bad(case):
    check_bad(case)


def test_dimension_mismatch_has_its_own_code():
    with pytest.raises(ShapeRuleError) as info:
        infer_root(module_text("f32[2,3]", "add", ["f32[2,3]", "f32[3]"]))
    assert info.value.code == "S101"


def test_convert_needs_a_declared_result():
    from hlo_cli.ir.shape import parse_shape_text
    from hlo_cli.shapes import RuleContext
    with pytest.raises(ShapeRuleError, match="convert: the result shape must be written"):
        infer_shape("convert", [parse_shape_text("f32[2]")], {}, RuleContext("convert"))


# ----------------------------------------------------------------------------- XLA agrees

@pytest.fixture(scope="module")
def xla():
    cases = [c for c in GOOD + BAD if c.xla]
    return dict(zip((c.id for c in cases), xla_verdicts([c.text for c in cases])))


@pytest.mark.parametrize("case", [c for c in GOOD if c.xla], ids=lambda c: c.id)
def test_xla_accepts_good(case, xla):
    assert xla[case.id] == "ok", xla[case.id]


@pytest.mark.parametrize("case", [c for c in BAD if c.xla], ids=lambda c: c.id)
def test_xla_rejects_bad(case, xla):
    assert xla[case.id] != "ok"
