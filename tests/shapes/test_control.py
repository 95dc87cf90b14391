"""Shape rules of the control family and of the asynchronous copies: call, while, conditional,
fusion, custom-call, async-start / async-update / async-done (and the `<op>-start` sugar),
copy-start, copy-done.

Valid cases: every instruction of these opcodes in samples/{ops,syntax,jax} infers its declared
shape (layouts ignored).  Invalid cases: a table of (operands, instruction, expected message
fragment) per opcode, written as small HLO modules; every message follows the house template
`<opcode>: <what> must <constraint>, got <actual> for <operand shapes>`.
"""
from __future__ import annotations

import re

import pytest

from .rules_harness import ROOT, S, TEMPLATE, RuleTests, context, opcode_of, samples  # noqa: F401

from hlo_cli.errors import HloSyntaxError
from hlo_cli.ir.attributes import ComputationRef
from hlo_cli.parser import parse
from hlo_cli.shapes import RULES, infer_shape
from hlo_cli.shapes.registry import RuleContext, ShapeRuleError, computation_shapes, operand_shapes


OPCODES = ("call", "while", "conditional", "fusion", "custom-call", "async-start", "async-update", "async-done",
           "copy-start", "copy-done")
SUGAR = re.compile(r"^[a-z][a-z0-9-]*-(start|update|done)$")
_OWN = {"all-reduce-start", "all-reduce-done", "all-gather-start", "all-gather-done", "collective-permute-start",
        "collective-permute-done", "copy-start", "copy-done", "send-done", "recv-done"}


def _is_control(opcode: str) -> bool:
    """The family's opcodes plus the async sugar `<op>-start/-update/-done` for a wrapped <op>."""
    return opcode in OPCODES or (SUGAR.match(opcode) is not None and opcode not in _OWN)


# Samples XLA itself rejects; our rules must reject them too (an error, or an inferred shape that
# differs from the declared one).
XLA_REJECTS = {
    "syntax/ops_async.hlo:s":
        "output_to_operand_aliasing={{}: (0, {})} on async-start: XLA's verifier wants a non-empty output "
        "index (and the whole async state is not shaped like parameter 0)",
    "syntax/attr_collectives_async.hlo:cs":
        "copy-start must have shape (operand, operand, u32[]); the sample declares a 4-tuple",
}


# ----------------------------------------------------------------------------- harness


def _comp(name, params, body):
    ps = "\n".join(f"  a{i} = {s} parameter({i})" for i, s in enumerate(params))
    return f"{name} {{\n{ps}\n{body}\n}}"


COMPS = {
    "add_f32": _comp("add_f32", ["f32[]", "f32[]"], "  ROOT r = f32[] add(a0, a1)"),
    "neg_f32": _comp("neg_f32", ["f32[]"], "  ROOT r = f32[] negate(a0)"),
    "neg4": _comp("neg4", ["f32[4]"], "  ROOT r = f32[4] negate(a0)"),
    "id4": _comp("id4", ["f32[4]"], "  ROOT r = f32[4] copy(a0)"),
    "sum4": _comp("sum4", ["f32[4]"], "  z = f32[] constant(0)\n"
                  "  ROOT r = f32[] reduce(a0, z), dimensions={0}, to_apply=add_f32"),
    "add44": _comp("add44", ["f32[4]", "f32[4]"], "  ROOT r = f32[4] add(a0, a1)"),
    "first48": _comp("first48", ["f32[4]", "f32[8]"], "  ROOT r = f32[4] exponential(a0)"),
    "cond": _comp("cond", ["(s32[], f32[4])"], "  i = s32[] get-tuple-element(a0), index=0\n"
                  "  n = s32[] constant(10)\n  ROOT lt = pred[] compare(i, n), direction=LT"),
    "cond_s32": _comp("cond_s32", ["(s32[], f32[4])"], "  ROOT i = s32[] get-tuple-element(a0), index=0"),
    "cond2": _comp("cond2", ["(s32[], f32[4])", "s32[]"], "  ROOT t = pred[] constant(true)"),
    "body": _comp("body", ["(s32[], f32[4])"], "  i = s32[] get-tuple-element(a0), index=0\n"
                  "  v = f32[4] get-tuple-element(a0), index=1\n  one = s32[] constant(1)\n"
                  "  i2 = s32[] add(i, one)\n  ROOT r = (s32[], f32[4]) tuple(i2, v)"),
    "body_drops": _comp("body_drops", ["(s32[], f32[4])"], "  ROOT i = s32[] get-tuple-element(a0), index=0"),
}

_H = RuleTests(COMPS, XLA_REJECTS)
_context, _samples, _check_sample = context, samples, _H.check_sample
_module, infer, expect_error = _H.module, _H.infer, _H.expect_error


# ----------------------------------------------------------------------------- valid cases

def test_every_opcode_has_a_rule():
    assert all(op in RULES for op in OPCODES)


@pytest.mark.parametrize("path", [p for p in _samples(OPCODES)] + [
    p for d in ("ops", "syntax") for p in sorted((ROOT / "samples" / d).glob("*.hlo"))
    if re.search(r"\s[a-z][a-z0-9]*(?:-[a-z0-9]+)*-(?:start|update|done)\(", p.read_text())
    and p not in _samples(OPCODES)], ids=lambda p: f"{p.parent.name}/{p.name}")
def test_samples_infer_their_declared_shape(path):
    _check_sample(path, _is_control)


W_STATE = ["(s32[], f32[4])"]

VALID = [
    (["f32[4]"], "f32[4] call(p0), to_apply=neg4", ["neg4"], "f32[4]"),
    (["f32[4]"], "f32[] call(p0), to_apply=sum4", ["add_f32", "sum4"], "f32[]"),
    (W_STATE, "(s32[], f32[4]) while(p0), condition=cond, body=body", ["cond", "body"], "(s32[], f32[4])"),
    (["pred[]", "f32[4]", "f32[4]"], "f32[4] conditional(p0, p1, p2), true_computation=neg4, false_computation=id4",
     ["neg4", "id4"], "f32[4]"),
    (["s32[]", "f32[4]", "f32[4]", "f32[4]"],
     "f32[4] conditional(p0, p1, p2, p3), branch_computations={neg4, id4, neg4}",
     ["neg4", "id4"], "f32[4]"),
    (["f32[4]", "f32[4]"], "f32[4] fusion(p0, p1), kind=kLoop, calls=add44", ["add44"], "f32[4]"),
    # a fusion may leave trailing operands unused by its parameters
    (["f32[4]", "f32[4]"], "f32[4] fusion(p0, p1), kind=kLoop, calls=neg4", ["neg4"], "f32[4]"),
    (["f32[4]", "f32[8]"], "f32[4] fusion(p0, p1), kind=kLoop, calls=first48, output_to_operand_aliasing={{}: (0, {})}",
     ["first48"], "f32[4]"),
    (["f32[4]"], "(f32[4], s32[]) custom-call(p0), custom_call_target=\"t\", output_to_operand_aliasing={{0}: (0, {})}",
     [], "(f32[4], s32[])"),
    (["f32[4]"], "((f32[4]), f32[4], s32[]) async-start(p0), calls=neg4", ["neg4"], "((f32[4]), f32[4], s32[])"),
    # async-start may bind a prefix of the parameters; async-update binds the rest
    (["f32[4]"], "((f32[4]), f32[4], u32[]) async-start(p0), calls=add44", ["add44"], "((f32[4]), f32[4], u32[])"),
    # the sugar infers the wrapped instruction with its own rule
    (["f32[2,3]", "f32[3,4]"], "((f32[2,3], f32[3,4]), f32[2,4], u32[]) dot-start(p0, p1), lhs_contracting_dims={1}, "
     "rhs_contracting_dims={0}", [], "((f32[2,3], f32[3,4]), f32[2,4], u32[])"),
    (["f32[4]"], "(f32[4], f32[4], u32[]) copy-start(p0)", [], "(f32[4], f32[4], u32[])"),
    (["(f32[4], f32[4], u32[])"], "f32[4] copy-done(p0)", [], "f32[4]"),
]


@pytest.mark.parametrize("operands, line, comps, expected", VALID)
def test_valid(operands, line, comps, expected):
    assert infer(operands, line, comps).without_layout() == S(expected).without_layout()


def _add44():
    from hlo_cli.ir.attributes import ComputationRef
    return ComputationRef("add44"), {"add44": ([S("f32[4]"), S("f32[4]")], S("f32[4]"))}


def test_async_update_binds_further_operands():
    """Newer XLA lets async-update bind more parameters (the installed parser takes one operand, so
    this is checked on the rule directly): they are appended to the bound operand shapes."""
    ref, comps = _add44()
    got = infer_shape("async-update", [S("((f32[4]), f32[4], u32[])"), S("f32[4]")], {"calls": ref},
                      RuleContext("async-update", S("((f32[4], f32[4]), f32[4], u32[])"), comps))
    assert got.without_layout() == S("((f32[4], f32[4]), f32[4], u32[])").without_layout()
    with pytest.raises(ShapeRuleError) as info:
        infer_shape("async-update", [S("((f32[4]), f32[4], u32[])"), S("s32[4]")], {"calls": ref},
                    RuleContext("async-update", None, comps))
    assert "bound operand 1 must match parameter 1 of the async computation (f32[4]), got s32[4]" in str(info.value)
    assert TEMPLATE.match(str(info.value))


def test_conditional_result_is_dynamic_where_any_branch_is():
    """Operation semantics / XLA: a dimension dynamic in one branch is dynamic in the result."""
    params = [S("f32[4]")]
    ctx = RuleContext("conditional", None, {"a": (params, S("f32[<=4]")), "b": (params, S("f32[4]"))})
    from hlo_cli.ir.attributes import ComputationRef
    got = infer_shape("conditional", [S("pred[]"), S("f32[4]"), S("f32[4]")],
                      {"true_computation": ComputationRef("a"), "false_computation": ComputationRef("b")}, ctx)
    assert got.without_layout() == S("f32[<=4]").without_layout()


# ----------------------------------------------------------------------------- invalid cases

INVALID = [
    # --- call
    ("call-arity", ["f32[]"], "f32[] call(p0), to_apply=add_f32", ["add_f32"],
     "to_apply must take one parameter per operand (1), got 2"),
    ("call-operand-shape", ["s32[]"], "f32[] call(p0), to_apply=neg_f32", ["neg_f32"],
     "operand 0 must match parameter 0 of to_apply (f32[]), got s32[]"),
    ("call-composite-name", ["f32[]"], 'f32[] call(p0), to_apply=neg_f32, is_composite=true, '
     'frontend_attributes={composite.version="1"}', ["neg_f32"],
     "a composite call must have a non-empty frontend attribute composite.name"),
    ("call-composite-version", ["f32[]"], 'f32[] call(p0), to_apply=neg_f32, is_composite=true, '
     'frontend_attributes={composite.name="x", composite.version="v1"}', ["neg_f32"],
     "the frontend attribute composite.version must be a non-negative integer, got 'v1'"),
    # --- while (operation semantics: condition T -> PRED, body T -> T)
    ("while-condition-result", W_STATE, "(s32[], f32[4]) while(p0), condition=cond_s32, body=body",
     ["cond_s32", "body"], "the result of condition must be pred[], got s32[]"),
    ("while-body-result", W_STATE, "s32[] while(p0), condition=cond, body=body_drops", ["cond", "body_drops"],
     "the result of body must have the shape of the loop state ((s32[], f32[4])), got s32[]"),
    ("while-condition-arity", W_STATE, "(s32[], f32[4]) while(p0), condition=cond2, body=body", ["cond2", "body"],
     "condition must take 1 parameter, got 2"),
    ("while-init", ["f32[4]"], "(s32[], f32[4]) while(p0), condition=cond, body=body", ["cond", "body"],
     "the parameter of body must have the shape of the loop state (f32[4]), got (s32[], f32[4])"),
    # --- conditional (samples/invalid/conditional_nonscalar_selector.hlo, conditional_branch_count.hlo)
    ("conditional-float-selector", ["f32[]", "f32[4]", "f32[4]"], "f32[4] conditional(p0, p1, p2), "
     "true_computation=neg4, false_computation=id4", ["neg4", "id4"],
     "the selector (operand 0) must be a pred[] or s32[] scalar, got f32[]"),
    ("conditional-nonscalar-selector", ["f32[4]", "f32[4]"], "f32[4] conditional(p0, p1), branch_computations={id4}",
     ["id4"], "the selector (operand 0) must be a pred[] or s32[] scalar, got f32[4]"),
    ("conditional-branch-count", ["s32[]", "f32[4]", "f32[4]"], "f32[4] conditional(p0, p1, p2), "
     "branch_computations={id4}", ["id4"], "the operand count must be 1 + the number of branches (2), got 3"),
    ("conditional-branch-results", ["pred[]", "f32[4]", "f32[4]"], "f32[4] conditional(p0, p1, p2), "
     "true_computation=neg4, false_computation=sum4", ["add_f32", "neg4", "sum4"],
     "the result of branch 1 must have the shape of branch 0's (f32[4]), got f32[]"),
    ("conditional-branch-operand", ["s32[]", "s32[4]"], "f32[4] conditional(p0, p1), branch_computations={neg4}",
     ["neg4"], "branch operand 0 must match the parameter of branch 0 (f32[4]), got s32[4]"),
    # --- fusion
    ("fusion-parameter", ["s32[4]"], "f32[4] fusion(p0), kind=kLoop, calls=neg4", ["neg4"],
     "fused parameter 0 must match operand 0 (s32[4]), got f32[4]"),
    ("fusion-too-many-parameters", ["f32[4]"], "f32[4] fusion(p0), kind=kLoop, calls=add44", ["add44"],
     "the fused parameter count must be at most the operand count (1), got 2"),
    ("fusion-alias-operand", ["f32[4]"], "f32[4] fusion(p0), kind=kLoop, calls=neg4, "
     "output_to_operand_aliasing={{}: (3, {})}", ["neg4"],
     "the output_to_operand_aliasing operand number must be in [0, 1), got 3"),
    ("fusion-alias-shapes", ["f32[4]", "f32[8]"], "f32[4] fusion(p0, p1), kind=kLoop, calls=first48, "
     "output_to_operand_aliasing={{}: (1, {})}", ["first48"],
     "the aliased output {} must have the shape of operand 1 at {} (f32[8]), got f32[4]"),
    # --- custom-call
    ("custom-call-layout-count", ["f32[4]", "f32[4]"], 'f32[4] custom-call(p0, p1), custom_call_target="t", '
     "operand_layout_constraints={f32[4]{0}}", [],
     "operand_layout_constraints must have one shape per operand (2), got 1"),
    ("custom-call-layout-shape", ["f32[4]"], 'f32[4] custom-call(p0), custom_call_target="t", '
     "operand_layout_constraints={f32[5]{0}}", [],
     "operand_layout_constraints entry 0 must match operand 0 (f32[4]), got f32[5]"),
    ("custom-call-alias-operand", ["f32[4]"], 'f32[4] custom-call(p0), custom_call_target="t", '
     "output_to_operand_aliasing={{}: (2, {})}", [],
     "the output_to_operand_aliasing operand number must be in [0, 1), got 2"),
    ("custom-call-alias-output-index", ["f32[4]"], 'f32[4] custom-call(p0), custom_call_target="t", '
     "output_to_operand_aliasing={{1}: (0, {})}", [],
     "the output_to_operand_aliasing output index must be a valid index of the result (f32[4]), got {1}"),
    ("custom-call-alias-operand-index", ["f32[4]"], 'f32[4] custom-call(p0), custom_call_target="t", '
     "output_to_operand_aliasing={{}: (0, {0})}", [],
     "the output_to_operand_aliasing operand index must be a valid index of operand 0 (f32[4]), got {0}"),
    ("custom-call-alias-shapes", ["f32[4]"], '(f32[4], s32[]) custom-call(p0), custom_call_target="t", '
     "output_to_operand_aliasing={{1}: (0, {})}", [], "the aliased output {1} must have the shape of operand 0 at {} "
     "(f32[4]), got s32[]"),
    ("custom-call-rng-seed", ["f32[4]"], 'u64[] custom-call(p0), custom_call_target="GetRngSeed"', [],
     "a GetRngSeed custom-call must have no operands, got 1"),
    # --- async
    ("async-start-operand", ["s32[4]"], "((s32[4]), f32[4], s32[]) async-start(p0), calls=neg4", ["neg4"],
     "bound operand 0 must match parameter 0 of the async computation (f32[4]), got s32[4]"),
    ("async-start-too-many", ["f32[4]", "f32[4]"], "((f32[4], f32[4]), f32[4], s32[]) async-start(p0, p1), calls=neg4",
     ["neg4"], "the bound operands must be at most the async computation's parameters (1), got 2"),
    ("async-start-alias-empty-output", ["f32[4]"], "((f32[4]), f32[4], s32[]) async-start(p0), calls=neg4, "
     "output_to_operand_aliasing={{}: (0, {})}", ["neg4"],
     "the output_to_operand_aliasing output index must not be empty"),
    ("async-start-alias-shapes", ["f32[4]"], "((f32[4]), f32[4], s32[]) async-start(p0), calls=neg4, "
     "output_to_operand_aliasing={{2}: (0, {})}", ["neg4"],
     "the aliased output {2} must have the shape of async computation parameter 0 at {} (f32[4]), got s32[]"),
    ("async-start-result-form", ["f32[4]"], "f32[4] async-start(p0), calls=neg4", ["neg4"],
     "the result shape must be ((operand shapes...), result shape, context...), got f32[4]"),
    # --- copy-start / copy-done
    ("copy-done-operand", ["f32[4]"], "f32[4] copy-done(p0)", [],
     "operand 0 must be a copy-start state (destination, source, u32[]), got f32[4]"),
    ("copy-done-buffers", ["(f32[4], f32[8], u32[])"], "f32[4] copy-done(p0)", [],
     "the destination and source buffers must have the same shape, got f32[4] and f32[8]"),
]


@pytest.mark.parametrize("operands, line, comps, fragment", [c[1:] for c in INVALID], ids=[c[0] for c in INVALID])
def test_invalid(operands, line, comps, fragment):
    expect_error(fragment, operands, line, comps)


# async-update/-done whose operand is not an async-start/-update: XLA's parser (and ours) refuses
# them, so the rules are called directly: (opcode, operand shapes, called computations, declared, expected
# shape or error fragment)
_F4 = "f32[4]"
DIRECT_ASYNC = [
    ("async-done", ["((f32[4], f32[4]), f32[4], u32[])"], {"calls": "add44"}, _F4, "f32[4]"),
    ("negate-done", ["((f32[4]), f32[4], u32[])"], {}, _F4, "f32[4]"),
    ("async-update", ["f32[4]"], {}, "((f32[4]), f32[4], s32[])",
     "operand 0 must be an async state ((operand shapes...), result shape, context...), got f32[4]"),
    ("async-done", ["((f32[4]), f32[4], u32[])"], {"calls": "add44"}, _F4,
     "the bound operands must be all 2 parameters of the async computation, got 1"),
    ("async-done", ["(f32[4], f32[4])"], {}, _F4,
     "operand 0 must be an async state ((operand shapes...), result shape, context...), got (f32[4], f32[4])"),
]


@pytest.mark.parametrize("opcode, operands, calls, declared, expected", DIRECT_ASYNC)
def test_async_rules_direct(opcode, operands, calls, declared, expected):
    f4 = S(_F4)
    comps = {"add44": ([f4, f4], f4)}
    attrs = {k: ComputationRef(v) for k, v in calls.items()}
    ctx = RuleContext(opcode, S(declared), comps)
    if "must" not in expected:
        got = infer_shape(opcode, [S(o) for o in operands], attrs, ctx)
        assert got.without_layout() == S(expected).without_layout()
        return
    with pytest.raises(ShapeRuleError) as info:
        infer_shape(opcode, [S(o) for o in operands], attrs, ctx)
    assert expected in str(info.value) and TEMPLATE.match(str(info.value)), str(info.value)


def test_pred_selector_with_branch_computations():
    """XLA's parser refuses branch_computations={...} with a pred[] selector, and so does ours; the
    rule, reached without the parser, still wants exactly two branches."""
    with pytest.raises(HloSyntaxError):
        infer(["pred[]", "f32[4]", "f32[4]", "f32[4]"], "f32[4] conditional(p0, p1, p2, p3), "
              "branch_computations={id4, neg4, id4}", ["id4", "neg4"])
    f4 = S("f32[4]")
    ctx = RuleContext("conditional", None, {"id4": ([f4], f4), "neg4": ([f4], f4)})
    refs = tuple(ComputationRef(n) for n in ("id4", "neg4", "id4"))
    with pytest.raises(ShapeRuleError) as info:
        infer_shape("conditional", [S("pred[]"), f4, f4, f4], {"branch_computations": refs}, ctx)
    assert "a pred[] selector must come with 2 branches (true_computation, false_computation), got 3" in \
        str(info.value)


def test_invalid_sugar_reports_the_wrapped_opcode():
    """An invalid wrapped instruction is reported by its own rule, in its own name."""
    with pytest.raises(ShapeRuleError) as info:
        infer(["f32[2,3]", "f32[2,3]"], "((f32[2,3], f32[2,3]), f32[2,3], u32[]) dot-start(p0, p1), "
              "lhs_contracting_dims={1}, rhs_contracting_dims={0}")
    assert str(info.value).startswith("dot: contracting dimension sizes must be equal")
    assert TEMPLATE.match(str(info.value))


@pytest.mark.parametrize("opcode, operands, attrs, fragment", [
    ("custom-call", ["f32[4]"], {"custom_call_target": "t"},
     "the result shape must be declared (it is not a function of the operands), got none"),
    ("copy-start", ["f32[4]", "f32[4]"], {}, "the operand count must be 1, got 2"),
    ("while", ["f32[4]", "f32[4]"], {}, "the operand count must be 1, got 2"),
])
def test_invalid_direct(opcode, operands, attrs, fragment):
    """Cases the parser itself refuses (operand counts) or that lack a declared shape."""
    with pytest.raises(ShapeRuleError) as info:
        infer_shape(opcode, [S(s) for s in operands], attrs, RuleContext(opcode))
    assert fragment in str(info.value) and TEMPLATE.match(str(info.value)), str(info.value)


def test_invalid_samples_of_the_parser_suite():
    """samples/invalid/conditional_*.hlo: XLA's parser rejects them; here the shape rule does."""
    for name, fragment in (("conditional_branch_count.hlo", "the operand count must be 1 + the number of branches"),
                           ("conditional_nonscalar_selector.hlo", "must be a pred[] or s32[] scalar")):
        module = parse((ROOT / "samples" / "invalid" / name).read_text())
        entry = module.entry_computation
        root = entry.root_instruction
        with pytest.raises(ShapeRuleError) as info:
            infer_shape(root.opcode, operand_shapes(entry, root), root.attrs,
                        _context(module, root, computation_shapes(module)))
        assert fragment in str(info.value)


def test_invalid_table_covers_every_opcode():
    covered = {opcode_of(line) for _, _, line, _, _ in INVALID} | {"copy-start"} | \
        {op for op, _, _, _, want in DIRECT_ASYNC if "must" in want}
    assert set(OPCODES) <= covered
