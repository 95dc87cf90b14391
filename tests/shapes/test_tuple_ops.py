"""Shape rules of tuples, tokens and computation leaves (hlo_cli/shapes/families/tuple_ops.py).

tuple, get-tuple-element, parameter, constant, opt-barrier, domain, after-all and add-dependency:
samples, a table of valid cases, a table of invalid cases, and XLA's verdict on both (through JAX,
skipped without jaxlib).
"""
from __future__ import annotations

from pathlib import Path

import pytest

from hlo_cli.ir.opcodes import OPCODES
from hlo_cli.shapes import RULES, ShapeRuleError, infer_shape

ROOT = Path(__file__).resolve().parents[2]

OWN = sorted({o for o, s in OPCODES.items() if s.family == "tuple"}
             | {"parameter", "constant", "opt-barrier", "domain", "after-all", "add-dependency"})


# ----------------------------------------------------------------------------- harness (tests/shapes/harness.py)

from .harness import SAMPLES, opcodes_in_samples, sample_checks, xla_verdicts, Case, C, check_bad, check_good

def raw(id, result, opcode, lines, fragment="", **kw) -> Case:
    """A case written as the body of ENTRY main (its last line is the ROOT instruction r)."""
    text = "HloModule t\n\nENTRY main {\n" + "\n".join("  " + l for l in lines[:-1]) + \
        f"\n  ROOT r = {lines[-1]}\n}}\n"
    return Case(id, result, opcode, (), "", fragment, raw=text, **kw)



# ----------------------------------------------------------------------------- coverage

def test_every_opcode_of_the_family_has_a_rule():
    assert not [o for o in OWN if o not in RULES]


def test_every_opcode_of_the_family_is_in_a_table():
    covered = {c.opcode for c in GOOD + BAD}
    assert not [o for o in OWN if o not in covered]


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_samples(path):
    sample_checks(path, set(OWN))


def test_samples_cover_every_opcode():
    assert not [o for o in OWN if o not in opcodes_in_samples()]


# ----------------------------------------------------------------------------- valid cases

NO_TUPLE_CONSTANT = "XLA's StableHLO import has no tuple constants"

AFTER_ALL_OPERANDS = ("XLA's HLO verifier accepts after-all operands of any shape; the StableHLO import "
                      "XLA compiles through takes tokens only")

GOOD = [
    C("tuple.arrays", "(f32[3], s32[])", "tuple", ["f32[3]", "s32[]"]),
    C("tuple.dynamic", "(f32[<=3])", "tuple", ["f32[<=3]"]),
    raw("tuple.empty", "()", "tuple", ["() tuple()"]),
    raw("tuple.nested_with_token", "((f32[2]), token[])", "tuple",
        ["x = f32[2] parameter(0)", "t = (f32[2]) tuple(x)", "k = token[] after-all()",
         "((f32[2]), token[]) tuple(t, k)"]),
    raw("get-tuple-element.first", "f32[3]", "get-tuple-element",
        ["x = f32[3] parameter(0)", "y = s32[] parameter(1)", "t = (f32[3], s32[]) tuple(x, y)",
         "f32[3] get-tuple-element(t), index=0"]),
    raw("get-tuple-element.nested", "(s32[], f32[3])", "get-tuple-element",
        ["x = f32[3] parameter(0)", "y = s32[] parameter(1)", "i = (s32[], f32[3]) tuple(y, x)",
         "t = (f32[3], (s32[], f32[3])) tuple(x, i)", "(s32[], f32[3]) get-tuple-element(t), index=1"]),
    raw("parameter.array", "f32[2,<=3]", "parameter", ["f32[2,<=3] parameter(0)"]),
    raw("parameter.scalar", "pred[]", "parameter", ["pred[] parameter(0)"]),
    raw("constant.vector", "f32[3]", "constant", ["f32[3] constant({1, 2, 3})"]),
    raw("constant.scalar", "s32[]", "constant", ["s32[] constant(7)"]),
    raw("constant.matrix", "bf16[2,2]", "constant", ["bf16[2,2] constant({ {1, 2}, {3, 4} })"]),
    raw("constant.tuple", "(f32[2], s32[])", "constant", ["(f32[2], s32[]) constant(({1, 2}, 7))"],
        xla=False, why=NO_TUPLE_CONSTANT),
    raw("opt-barrier.tuple", "(f32[3], s32[])", "opt-barrier",
        ["x = f32[3] parameter(0)", "y = s32[] parameter(1)", "t = (f32[3], s32[]) tuple(x, y)",
         "(f32[3], s32[]) opt-barrier(t)"]),
    C("opt-barrier.array", "f32[3]", "opt-barrier", ["f32[3]"]),
    C("domain.sharding", "f32[4]", "domain", ["f32[4]"],
      'domain={kind="sharding", entry={maximal device=0}, exit={replicated}}', xla=False,
      why="XLA's StableHLO import drops domains"),
    raw("after-all.none", "token[]", "after-all", ["token[] after-all()"]),
    raw("after-all.two", "token[]", "after-all",
        ["a = token[] after-all()", "b = token[] after-all()", "token[] after-all(a, b)"]),
    # XLA's HandleAfterAll checks only the result: any operands (StableHLO's after_all wants tokens)
    C("after-all.array", "token[]", "after-all", ["f32[3]"], xla=False, why=AFTER_ALL_OPERANDS),
    raw("after-all.second", "token[]", "after-all",
        ["x = f32[3] parameter(0)", "k = token[] after-all()", "token[] after-all(k, x)"], xla=False,
        why=AFTER_ALL_OPERANDS),
    raw("add-dependency.array", "f32[3]", "add-dependency",
        ["x = f32[3] parameter(0)", "k = token[] after-all()", "f32[3] add-dependency(x, k)"]),
    raw("add-dependency.tuple", "(f32[3])", "add-dependency",
        ["x = f32[3] parameter(0)", "t = (f32[3]) tuple(x)", "k = token[] after-all()",
         "(f32[3]) add-dependency(t, k)"], xla=False, why="StableHLO's add_dependency takes arrays only"),
]


@pytest.mark.parametrize("case", GOOD, ids=lambda c: c.id)
def test_good(case):
    check_good(case)


# ----------------------------------------------------------------------------- invalid cases

BAD = [
    raw("get-tuple-element.index", "f32[3]", "get-tuple-element",
        ["x = f32[3] parameter(0)", "t = (f32[3]) tuple(x)", "f32[3] get-tuple-element(t), index=1"],
        fragment="index must be in [0, 1) for a tuple of 1 element, got 1"),
    raw("get-tuple-element.negative", "f32[3]", "get-tuple-element",
        ["x = f32[3] parameter(0)", "t = (f32[3]) tuple(x)", "f32[3] get-tuple-element(t), index=-1"],
        fragment="got -1", xla=False, why="XLA's parser rejects a negative index already"),
    C("get-tuple-element.array", "f32[3]", "get-tuple-element", ["f32[3]"], "index=0",
      fragment="the operand must be a tuple, got f32[3]"),
    raw("get-tuple-element.empty", "f32[3]", "get-tuple-element",
        ["t = () tuple()", "f32[3] get-tuple-element(t), index=0"],
        fragment="index must be in [0, 0) for a tuple of 0 elements, got 0"),
    C("add-dependency.not_token", "f32[3]", "add-dependency", ["f32[3]", "f32[3]"],
      fragment="operand 1 must be a token, got f32[3]"),
]


@pytest.mark.parametrize("case", BAD, ids=lambda c: c.id)
def test_bad(case):
    check_bad(case)


def test_constant_literal_must_have_the_declared_shape():
    from hlo_cli.ir.literal import parse_literal
    from hlo_cli.ir.shape import parse_shape_text
    from hlo_cli.shapes import RuleContext
    lit = parse_literal("{1, 2, 3}", parse_shape_text("f32[3]"))
    got = infer_shape("constant", [], {"literal": lit}, RuleContext("constant", parse_shape_text("f32[3]")))
    assert got.to_str(False) == "f32[3]"
    with pytest.raises(ShapeRuleError, match=r"constant: the literal's shape must be the declared shape "
                                             r"f32\[4\], got f32\[3\] for \(\)"):
        infer_shape("constant", [], {"literal": lit}, RuleContext("constant", parse_shape_text("f32[4]")))
    # no declared shape: the literal's
    got = infer_shape("constant", [], {"literal": lit}, RuleContext("constant"))
    assert got.to_str(False) == "f32[3]"


def test_constant_cannot_be_a_token():
    from hlo_cli.ir.shape import parse_shape_text
    from hlo_cli.shapes import RuleContext
    with pytest.raises(ShapeRuleError, match=r"constant: the constant's shape must hold only arrays .*"
                                             r"got token\[\] for \(\)"):
        infer_shape("constant", [], {}, RuleContext("constant", parse_shape_text("token[]")))


def test_parameter_needs_a_declared_shape():
    from hlo_cli.shapes import RuleContext
    with pytest.raises(ShapeRuleError, match=r"parameter: the result shape must be written"):
        infer_shape("parameter", [], {}, RuleContext("parameter"))


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
