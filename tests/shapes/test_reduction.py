"""Shape rules of the reduction family: reduce, reduce-window, select-and-scatter, map, sort, topk, scan.

Valid cases: every instruction of these opcodes in samples/{ops,syntax,jax} infers its declared
shape (layouts ignored).  Invalid cases: a table of (operands, instruction, expected message
fragment) per opcode, written as small HLO modules; every message follows the house template
`<opcode>: <what> must <constraint>, got <actual> for <operand shapes>`.
"""
from __future__ import annotations


import pytest

from .rules_harness import S, TEMPLATE, RuleTests, context, opcode_of, samples  # noqa: F401

from hlo_cli.parser import parse
from hlo_cli.shapes import RULES, infer_shape
from hlo_cli.shapes.registry import RuleContext, ShapeRuleError, computation_shapes, operand_shapes


OPCODES = ("reduce", "reduce-window", "select-and-scatter", "map", "sort", "topk", "scan")

# Samples XLA itself rejects (its verifier, or StableHLO's when XLA's is silent); our rules must
# reject them too (an error, or an inferred shape that differs from the declared one).
XLA_REJECTS = {
    "syntax/attr_window_conv.hlo:rwn":
        "reduce-window without window={...}: XLA reads an empty window, which must have one "
        "dimension per operand dimension (rank 4)",
}


# ----------------------------------------------------------------------------- harness


COMPS = {
    "add_f32": "add_f32 {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT r = f32[] add(a, b)\n}",
    "add_s32": "add_s32 {\n  a = s32[] parameter(0)\n  b = s32[] parameter(1)\n  ROOT r = s32[] add(a, b)\n}",
    "add3": "add3 {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  c = f32[] parameter(2)\n"
            "  ROOT r = f32[] add(a, b)\n}",
    "vec_add": "vec_add {\n  a = f32[2] parameter(0)\n  b = f32[2] parameter(1)\n  ROOT r = f32[2] add(a, b)\n}",
    "neg_f32": "neg_f32 {\n  a = f32[] parameter(0)\n  ROOT r = f32[] negate(a)\n}",
    "ge_f32": "ge_f32 {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)"
              "\n  ROOT r = pred[] compare(a, b), direction=GE\n}",
    "max_as_select": "max_as_select {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)"
                     "\n  ROOT r = f32[] maximum(a, b)\n}",
    "lt_f32": "lt_f32 {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)"
              "\n  ROOT r = pred[] compare(a, b), direction=LT\n}",
    "lt_kv": "lt_kv {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  c = s32[] parameter(2)\n"
             "  d = s32[] parameter(3)\n  ROOT r = pred[] compare(a, b), direction=LT\n}",
    "argmax": "argmax {\n  a = f32[] parameter(0)\n  i = s32[] parameter(1)\n  b = f32[] parameter(2)\n"
              "  j = s32[] parameter(3)\n  m = f32[] maximum(a, b)\n  ROOT r = (f32[], s32[]) tuple(m, i)\n}",
    "pair_as_scalar": "pair_as_scalar {\n  a = f32[] parameter(0)\n  i = s32[] parameter(1)\n  b = f32[] parameter(2)\n"
                      "  j = s32[] parameter(3)\n  ROOT m = f32[] maximum(a, b)\n}",
    "cumsum": "cumsum {\n  x = f32[] parameter(0)\n  c = f32[] parameter(1)\n  s = f32[] add(x, c)\n"
              "  ROOT t = (f32[], f32[]) tuple(s, s)\n}",
    "cumsum_s32_carry": "cumsum_s32_carry {\n  x = f32[] parameter(0)\n  c = s32[] parameter(1)\n"
                        "  s = f32[] add(x, x)\n  ROOT t = (f32[], f32[]) tuple(s, s)\n}",
    "row_double": "row_double {\n  x = f32[3] parameter(0)\n  ROOT d = f32[3] add(x, x)\n}",
}

_H = RuleTests(COMPS, XLA_REJECTS)
_context, _samples, _check_sample = context, samples, _H.check_sample
_module, infer, expect_error = _H.module, _H.infer, _H.expect_error


# ----------------------------------------------------------------------------- valid cases

def test_every_opcode_has_a_rule():
    assert all(op in RULES for op in OPCODES)


@pytest.mark.parametrize("path", _samples(OPCODES), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_samples_infer_their_declared_shape(path):
    assert _check_sample(path, OPCODES) > 0


@pytest.mark.parametrize("operands, line, comps, expected", [
    # operation semantics, ReduceWindow: a [4x6] input, window and strides [2x3] -> [2x2]
    (["f32[4,6]", "f32[]"], "f32[2,2] reduce-window(p0, p1), window={size=2x3 stride=2x3}, to_apply=add_f32",
     ["add_f32"], "f32[2,2]"),
    # ReduceWindow padding example: window 3, stride 2 over 5 elements, kValid -> 2 windows
    (["f32[5]", "f32[]"], "f32[2] reduce-window(p0, p1), window={size=3 stride=2}, to_apply=add_f32",
     ["add_f32"], "f32[2]"),
    # ... and with SAME-style padding 1_1 -> 3 windows
    (["f32[5]", "f32[]"], "f32[3] reduce-window(p0, p1), window={size=3 stride=2 pad=1_1}, to_apply=add_f32",
     ["add_f32"], "f32[3]"),
    # base (lhs) dilation 2 then padding: 2*(4-1)+1 + 2 = 9 -> size 3 stride 1 -> 7
    (["f32[4]", "f32[]"], "f32[7] reduce-window(p0, p1), window={size=3 pad=1_1 lhs_dilate=2}, to_apply=add_f32",
     ["add_f32"], "f32[7]"),
    # window dilation 2: effective window 5 over 8 -> 4
    (["f32[8]", "f32[]"], "f32[4] reduce-window(p0, p1), window={size=3 rhs_dilate=2}, to_apply=add_f32",
     ["add_f32"], "f32[4]"),
    # Reduce: reducing dimension 1 of a 2x3 array; all dimensions -> scalar
    (["f32[2,3]", "f32[]"], "f32[2] reduce(p0, p1), dimensions={1}, to_apply=add_f32", ["add_f32"], "f32[2]"),
    (["f32[2,3,4]", "f32[]"], "f32[] reduce(p0, p1), dimensions={0,1,2}, to_apply=add_f32", ["add_f32"], "f32[]"),
    # variadic reduce (argmax): a tuple of one result per input
    (["f32[4,8]", "s32[4,8]", "f32[]", "s32[]"], "(f32[4], s32[4]) reduce(p0, p1, p2, p3), dimensions={1}, "
     "to_apply=argmax", ["argmax"], "(f32[4], s32[4])"),
    # dynamic dimensions survive a reduce of the other dimensions
    (["f32[<=5,3]", "f32[]"], "f32[<=5] reduce(p0, p1), dimensions={1}, to_apply=add_f32", ["add_f32"], "f32[<=5]"),
    # TopK: [A, ..., P, Q] -> values and indices [A, ..., P, k]
    (["f32[3,5,9]"], "(f32[3,5,4], s32[3,5,4]) topk(p0), k=4, largest=true", [], "(f32[3,5,4], s32[3,5,4])"),
    (["bf16[4]"], "(bf16[4], s32[4]) topk(p0), k=4, largest=false", [], "(bf16[4], s32[4])"),
    # dynamic dimensions: topk's k dimension is static, windows keep the base's dynamism
    (["f32[3,<=9]"], "(f32[3,4], s32[3,4]) topk(p0), k=4", [], "(f32[3,4], s32[3,4])"),
    (["f32[<=8]", "f32[]"], "f32[<=4] reduce-window(p0, p1), window={size=2 stride=2}, to_apply=add_f32",
     ["add_f32"], "f32[<=4]"),
    # Map over two arrays; a scalar operand is allowed next to arrays
    (["f32[2,3]", "f32[2,3]"], "f32[2,3] map(p0, p1), dimensions={0,1}, to_apply=add_f32", ["add_f32"], "f32[2,3]"),
    # Sort: keys and values -> a tuple
    (["f32[16]", "s32[16]"], "(f32[16], s32[16]) sort(p0, p1), dimensions={0}, is_stable=true, to_apply=lt_kv",
     ["lt_kv"], "(f32[16], s32[16])"),
    # SelectAndScatter: the operand's shape
    (["f32[4,4]", "f32[2,2]", "f32[]"], "f32[4,4] select-and-scatter(p0, p1, p2), window={size=2x2 stride=2x2}, "
     "select=ge_f32, scatter=add_f32", ["ge_f32", "add_f32"], "f32[4,4]"),
    # Scan: stacked outputs and the final carry
    (["f32[5]", "f32[]"], "(f32[5], f32[]) scan(p0, p1), dimensions={0}, num_carries=1, to_apply=cumsum",
     ["cumsum"], "(f32[5], f32[])"),
    (["f32[4,3]"], "f32[4,3] scan(p0), dimensions={0}, num_carries=0, to_apply=row_double", ["row_double"],
     "f32[4,3]"),
])
def test_semantics_examples(operands, line, comps, expected):
    assert infer(operands, line, comps).without_layout() == S(expected).without_layout()


def test_reduce_without_declared_shapes():
    """The parser may leave shapes to inference: reduce needs neither its own nor its reducer's."""
    module = parse("HloModule m\nsum {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT s = add(a, b)\n}\n"
                   "ENTRY e {\n  x = f32[2,3] parameter(0)\n  z = f32[] parameter(1)\n"
                   "  ROOT r = reduce(x, z), dimensions={1}, to_apply=sum\n}\n")
    entry = module.entry_computation
    root = entry.root_instruction
    got = infer_shape("reduce", operand_shapes(entry, root), root.attrs,
                      RuleContext("reduce", None, computation_shapes(module)))
    assert got.without_layout() == S("f32[2]").without_layout()


# ----------------------------------------------------------------------------- invalid cases

INVALID = [
    # --- reduce
    ("reduce-odd-operands", ["f32[2,3]", "f32[]", "f32[]"],
     "f32[2] reduce(p0, p1, p2), dimensions={1}, to_apply=add_f32", ["add_f32"],
     "the operand count must be even and at least 2"),
    ("reduce-dimension-out-of-range", ["f32[2,3]", "f32[]"],
     "f32[2] reduce(p0, p1), dimensions={2}, to_apply=add_f32", ["add_f32"], "dimensions must be in [0, 2), got 2"),
    ("reduce-duplicate-dimension", ["f32[2,3]", "f32[]"],
     "f32[2] reduce(p0, p1), dimensions={1,1}, to_apply=add_f32", ["add_f32"], "dimensions must be unique"),
    ("reduce-reducer-arity", ["f32[2,3]", "f32[]"],
     "f32[2] reduce(p0, p1), dimensions={1}, to_apply=add3", ["add3"], "to_apply must take 2 parameters, got 3"),
    ("reduce-init-type", ["f32[2,3]", "s32[]"],
     "f32[2] reduce(p0, p1), dimensions={1}, to_apply=add_f32", ["add_f32"],
     "init value 0 must have the accumulator shape f32[], got s32[]"),
    ("reduce-nonscalar-init", ["f32[2,3]", "f32[2]"],
     "f32[2] reduce(p0, p1), dimensions={1}, to_apply=add_f32", ["add_f32"],
     "init value 0 must have the accumulator shape f32[], got f32[2]"),
    ("reduce-input-type-vs-reducer", ["s32[2,3]", "s32[]"],
     "s32[2] reduce(p0, p1), dimensions={1}, to_apply=add_f32", ["add_f32"],
     "init value 0 must have the accumulator shape f32[], got s32[]"),
    ("reduce-nonscalar-reducer", ["f32[2,2]", "f32[2]"],
     "f32[2] reduce(p0, p1), dimensions={1}, to_apply=vec_add", ["vec_add"],
     "the result of to_apply must be a scalar or a tuple of scalars, got f32[2]"),
    ("reduce-variadic-dims-differ", ["f32[4,8]", "s32[8,4]", "f32[]", "s32[]"],
     "(f32[4], s32[4]) reduce(p0, p1, p2, p3), dimensions={1}, to_apply=argmax", ["argmax"],
     "input 1 must have the dimensions of input 0 (f32[4,8]), got s32[8,4]"),
    ("reduce-variadic-scalar-reducer", ["f32[4,8]", "s32[4,8]", "f32[]", "s32[]"],
     "(f32[4], s32[4]) reduce(p0, p1, p2, p3), dimensions={1}, to_apply=pair_as_scalar", ["pair_as_scalar"],
     "the result of to_apply must be a tuple of 2 scalars, got f32[]"),
    # --- reduce-window
    ("reduce-window-rank", ["f32[4,6]", "f32[]"],
     "f32[2] reduce-window(p0, p1), window={size=2 stride=2}, to_apply=add_f32", ["add_f32"],
     "window must have one dimension per base dimension (2), got 1"),
    ("reduce-window-zero-size", ["f32[4]", "f32[]"],
     "f32[4] reduce-window(p0, p1), window={size=0}, to_apply=add_f32", ["add_f32"],
     "window size must be positive, got 0 in dimension 0"),
    ("reduce-window-zero-stride", ["f32[4]", "f32[]"],
     "f32[4] reduce-window(p0, p1), window={size=2 stride=0}, to_apply=add_f32", ["add_f32"],
     "window stride must be positive, got 0 in dimension 0"),
    ("reduce-window-zero-dilation", ["f32[4]", "f32[]"],
     "f32[4] reduce-window(p0, p1), window={size=2 lhs_dilate=0}, to_apply=add_f32", ["add_f32"],
     "window base dilation (lhs_dilate) must be at least 1"),
    ("reduce-window-init-type", ["f32[4]", "s32[]"],
     "f32[2] reduce-window(p0, p1), window={size=2 stride=2}, to_apply=add_f32", ["add_f32"],
     "init value 0 must have the accumulator shape f32[], got s32[]"),
    ("reduce-window-odd-operands", ["f32[4]", "f32[4]", "f32[]"],
     "f32[2] reduce-window(p0, p1, p2), window={size=2 stride=2}, to_apply=add_f32", ["add_f32"],
     "the operand count must be even"),
    # --- select-and-scatter
    ("select-and-scatter-source-shape", ["f32[4,4]", "f32[3,3]", "f32[]"],
     "f32[4,4] select-and-scatter(p0, p1, p2), window={size=2x2 stride=2x2}, select=ge_f32, scatter=add_f32",
     ["ge_f32", "add_f32"], "source must have the shape of the window-reduced operand (f32[2,2]), got f32[3,3]"),
    ("select-and-scatter-select-result", ["f32[4,4]", "f32[2,2]", "f32[]"],
     "f32[4,4] select-and-scatter(p0, p1, p2), window={size=2x2 stride=2x2}, select=max_as_select, "
     "scatter=add_f32", ["max_as_select", "add_f32"], "the result of select must be pred[], got f32[]"),
    ("select-and-scatter-scatter-arity", ["f32[4,4]", "f32[2,2]", "f32[]"],
     "f32[4,4] select-and-scatter(p0, p1, p2), window={size=2x2 stride=2x2}, select=ge_f32, scatter=add3",
     ["ge_f32", "add3"], "scatter must take 2 parameters, got 3"),
    ("select-and-scatter-select-type", ["s32[4,4]", "s32[2,2]", "s32[]"],
     "s32[4,4] select-and-scatter(p0, p1, p2), window={size=2x2 stride=2x2}, select=ge_f32, scatter=add_s32",
     ["ge_f32", "add_s32"], "parameter 0 of select must be s32[] (the operand element type), got f32[]"),
    # --- map
    ("map-shapes-differ", ["f32[2,3]", "f32[3,2]"],
     "f32[2,3] map(p0, p1), dimensions={0,1}, to_apply=add_f32", ["add_f32"],
     "operand 1 must have the shape of operand 0 (f32[2,3]), got f32[3,2]"),
    ("map-arity", ["f32[4]"], "f32[4] map(p0), dimensions={0}, to_apply=add_f32", ["add_f32"],
     "to_apply must take one parameter per operand (1), got 2"),
    ("map-nonscalar-result", ["f32[2]", "f32[2]"], "f32[2] map(p0, p1), dimensions={0}, to_apply=vec_add",
     ["vec_add"], "the result of to_apply must be a scalar, got f32[2]"),
    ("map-parameter-type", ["s32[4]"], "f32[4] map(p0), dimensions={0}, to_apply=neg_f32", ["neg_f32"],
     "parameter 0 of to_apply must have the element type of operand 0 (s32), got f32[]"),
    # --- sort
    ("sort-comparator-result", ["f32[8]"], "f32[8] sort(p0), dimensions={0}, to_apply=add_f32", ["add_f32"],
     "the result of the comparator must be pred[], got f32[]"),
    ("sort-comparator-arity", ["f32[16]", "s32[16]"],
     "(f32[16], s32[16]) sort(p0, p1), dimensions={0}, to_apply=lt_f32", ["lt_f32"],
     "the comparator must take 2 parameters per operand (4), got 2"),
    ("sort-dims-differ", ["f32[16]", "s32[8]"],
     "(f32[16], s32[8]) sort(p0, p1), dimensions={0}, to_apply=lt_kv", ["lt_kv"],
     "operand 1 must have the dimensions of operand 0 (f32[16]), got s32[8]"),
    ("sort-dimension-range", ["f32[4,8]"], "f32[4,8] sort(p0), dimensions={2}, to_apply=lt_f32", ["lt_f32"],
     "the sort dimension must be in [0, 2), got 2"),
    ("sort-two-dimensions", ["f32[4,8]"], "f32[4,8] sort(p0), dimensions={0,1}, to_apply=lt_f32", ["lt_f32"],
     "dimensions must name exactly one dimension, got {0,1}"),
    ("sort-comparator-types", ["s32[8]"], "s32[8] sort(p0), dimensions={0}, to_apply=lt_f32", ["lt_f32"],
     "parameter 0 of the comparator must be s32[], got f32[]"),
    # --- topk (operation semantics: the last dimension must be >= k; at least one dimension)
    ("topk-k-too-large", ["f32[2,8]"], "(f32[2,9], s32[2,9]) topk(p0), k=9", [],
     "the last dimension must be at least k=9, got 8"),
    ("topk-scalar", ["f32[]"], "(f32[], s32[]) topk(p0), k=1", [], "operand must have at least one dimension"),
    ("topk-tuple-operand", ["(f32[4])"], "(f32[1], s32[1]) topk(p0), k=1", [], "operand must be an array"),
    # --- scan
    ("scan-two-dimensions", ["f32[5,2]", "f32[]"],
     "(f32[5,2], f32[]) scan(p0, p1), dimensions={0,1}, num_carries=1, to_apply=cumsum", ["cumsum"],
     "dimensions must name exactly one dimension, got {0,1}"),
    ("scan-carry-type", ["f32[5]", "s32[]"],
     "(f32[5], f32[]) scan(p0, p1), dimensions={0}, num_carries=1, to_apply=cumsum_s32_carry",
     ["cumsum_s32_carry"], "carry 0 returned by to_apply must have the carry parameter's shape s32[], got f32[]"),
    ("scan-parameter-shape", ["f32[5,2]", "f32[]"],
     "(f32[5], f32[]) scan(p0, p1), dimensions={0}, num_carries=1, to_apply=cumsum", ["cumsum"],
     "parameter 0 of to_apply must be f32[2], got f32[]"),
    ("scan-dimension-range", ["f32[4,3]"], "f32[4,3] scan(p0), dimensions={2}, num_carries=0, to_apply=row_double",
     ["row_double"], "the scan dimension must be in [0, 2) for input 0, got 2"),
    ("scan-arity", ["f32[4,3]", "f32[4,3]"],
     "f32[4,3] scan(p0, p1), dimensions={0}, num_carries=0, to_apply=row_double", ["row_double"],
     "to_apply must take one parameter per operand (2), got 1"),
]


@pytest.mark.parametrize("operands, line, comps, fragment", [c[1:] for c in INVALID], ids=[c[0] for c in INVALID])
def test_invalid(operands, line, comps, fragment):
    expect_error(fragment, operands, line, comps)


def test_invalid_table_covers_every_opcode():
    covered = {opcode_of(line) for _, _, line, _, _ in INVALID}
    assert covered == set(OPCODES)


def test_missing_to_apply_is_reported():
    with pytest.raises(ShapeRuleError) as info:
        infer_shape("reduce", [S("f32[2]"), S("f32[]")], {"dimensions": (0,)}, RuleContext("reduce"))
    assert TEMPLATE.match(str(info.value)) and "to_apply must name a computation" in str(info.value)
