"""Shape rules of the shape-manipulation family (hlo_cli/shapes/families/shape_ops.py).

broadcast, reshape, dynamic-reshape, transpose, reverse, slice, dynamic-slice, dynamic-update-slice,
concatenate, pad, iota, copy, bitcast, get-dimension-size and set-dimension-size:

* every instruction of these opcodes in samples/{ops,syntax,jax} gets its declared shape back;
* a table of valid edge cases (including the examples of the operation semantics);
* a table of invalid cases per opcode (house-style message naming the operand shapes);
* XLA (through JAX, skipped without jaxlib) accepts the valid and rejects the invalid cases.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from hlo_cli.ir.opcodes import OPCODES
from hlo_cli.shapes import RULES, infer_shape

ROOT = Path(__file__).resolve().parents[2]

OWN = sorted({o for o, s in OPCODES.items() if s.family in ("shape", "dynamic_shape")}
             | {"dynamic-slice", "dynamic-update-slice", "copy"})


# ----------------------------------------------------------------------------- harness (tests/shapes/harness.py)

from .harness import SAMPLES, opcodes_in_samples, sample_checks, xla_verdicts, C, check_bad, check_good


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


# ----------------------------------------------------------------------------- valid edge cases

NO_BITCAST = "XLA's HLO->StableHLO import cannot express a bitcast"
NO_LEGACY = "StableHLO has no rank-1 index vector form of dynamic-slice (HLO's verifier accepts it)"

GOOD = [
    # broadcast: operand dimension i -> result dimension dimensions[i]
    C("broadcast.scalar_without_dimensions", "f32[2,3]", "broadcast", ["f32[]"]),
    C("broadcast.scalar_empty_dimensions", "f32[2,3]", "broadcast", ["f32[]"], "dimensions={}"),
    C("broadcast.row", "f32[2,3]", "broadcast", ["f32[3]"], "dimensions={1}"),
    C("broadcast.identity", "s8[2,3]", "broadcast", ["s8[2,3]"], "dimensions={0,1}"),
    C("broadcast.unsorted_dimensions", "f32[3,4,2]", "broadcast", ["f32[2,3]"], "dimensions={2,0}"),
    C("broadcast.dynamic_result", "f32[<=4,3]", "broadcast", ["f32[3]"], "dimensions={1}"),
    # reshape: the operation-semantics examples
    C("reshape.to_vector", "f32[24]", "reshape", ["f32[4,2,3]"]),
    C("reshape.to_matrix", "f32[8,3]", "reshape", ["f32[4,2,3]"]),
    C("reshape.to_scalar", "f32[]", "reshape", ["f32[1,1]"]),
    C("reshape.from_scalar", "f32[1,1]", "reshape", ["f32[]"]),
    C("reshape.empty", "s32[0,5]", "reshape", ["s32[5,0]"]),
    C("reshape.inferred_dimension", "f32[3,2]", "reshape", ["f32[6]"], "inferred_dimension=0"),
    C("dynamic-reshape.bounds", "f32[<=3,<=4]", "dynamic-reshape", ["f32[12]", "s32[]", "s32[]"]),
    C("transpose.rotate", "f32[4,2,3]", "transpose", ["f32[2,3,4]"], "dimensions={2,0,1}"),
    C("transpose.dynamic", "f32[3,<=2]", "transpose", ["f32[<=2,3]"], "dimensions={1,0}"),
    C("transpose.scalar", "f32[]", "transpose", ["f32[]"], "dimensions={}"),
    C("reverse.both", "f32[2,3]", "reverse", ["f32[2,3]"], "dimensions={0,1}"),
    C("reverse.none", "s32[4]", "reverse", ["s32[4]"], "dimensions={}"),
    # slice: the operation-semantics examples, strides, empty slices, dynamic dimensions
    C("slice.semantics_1d", "f32[2]", "slice", ["f32[5]"], "slice={[2:4]}"),
    C("slice.semantics_2d", "f32[2,2]", "slice", ["f32[4,3]"], "slice={[2:4], [1:3]}"),
    C("slice.strided", "f32[3,2]", "slice", ["f32[7,4]"], "slice={[1:7:2], [0:4:3]}"),
    C("slice.big_stride", "f32[1]", "slice", ["f32[3]"], "slice={[0:3:5]}"),
    C("slice.empty", "f32[0]", "slice", ["f32[3]"], "slice={[2:2]}"),
    C("slice.scalar", "f32[]", "slice", ["f32[]"], "slice={}"),
    C("slice.dynamic_kept", "f32[<=5]", "slice", ["f32[<=5]"], "slice={[0:5]}"),
    C("slice.dynamic_single_element", "f32[1]", "slice", ["f32[<=5]"], "slice={[2:3]}"),
    # dynamic-slice / dynamic-update-slice: the operation-semantics examples
    C("dynamic-slice.semantics_1d", "f32[2]", "dynamic-slice", ["f32[5]", "s32[]"], "dynamic_slice_sizes={2}"),
    C("dynamic-slice.semantics_2d", "f32[2,2]", "dynamic-slice", ["f32[4,3]", "s32[]", "s32[]"],
      "dynamic_slice_sizes={2,2}"),
    C("dynamic-slice.u64_index", "f32[2]", "dynamic-slice", ["f32[5]", "u64[]"], "dynamic_slice_sizes={2}"),
    C("dynamic-slice.whole_dynamic", "f32[<=5,1]", "dynamic-slice", ["f32[<=5,3]", "s32[]", "s32[]"],
      "dynamic_slice_sizes={5,1}"),
    C("dynamic-slice.legacy_index_vector", "f32[2,2]", "dynamic-slice", ["f32[4,3]", "s32[2]"],
      "dynamic_slice_sizes={2,2}", xla=False, why=NO_LEGACY),
    C("dynamic-slice.scalar", "f32[]", "dynamic-slice", ["f32[]"], "dynamic_slice_sizes={}"),
    C("dynamic-update-slice.semantics_1d", "f32[5]", "dynamic-update-slice", ["f32[5]", "f32[2]", "s32[]"]),
    C("dynamic-update-slice.semantics_2d", "f32[4,3]", "dynamic-update-slice",
      ["f32[4,3]", "f32[2,2]", "s32[]", "s32[]"]),
    C("dynamic-update-slice.u32_index", "f32[5]", "dynamic-update-slice", ["f32[5]", "f32[2]", "u32[]"]),
    C("dynamic-update-slice.dynamic_operand", "f32[<=5]", "dynamic-update-slice", ["f32[<=5]", "f32[2]", "s32[]"]),
    # concatenate: the operation-semantics examples
    C("concatenate.semantics_1d", "s32[6]", "concatenate", ["s32[2]", "s32[2]", "s32[2]"], "dimensions={0}"),
    C("concatenate.semantics_2d", "f32[4,2]", "concatenate", ["f32[3,2]", "f32[1,2]"], "dimensions={0}"),
    C("concatenate.minor", "f32[2,7]", "concatenate", ["f32[2,3]", "f32[2,4]"], "dimensions={1}"),
    C("concatenate.single", "f32[2]", "concatenate", ["f32[2]"], "dimensions={0}"),
    C("concatenate.dynamic", "f32[<=5,2]", "concatenate", ["f32[<=3,2]", "f32[2,2]"], "dimensions={0}"),
    # pad: edge, interior and negative padding
    C("pad.edges_and_interior", "f32[4,7]", "pad", ["f32[2,3]", "f32[]"], "padding=1_1x0_2_1"),
    C("pad.negative_edges", "f32[3]", "pad", ["f32[5]", "f32[]"], "padding=-1_-1"),
    C("pad.negative_with_interior", "s32[7]", "pad", ["s32[3]", "s32[]"], "padding=-1_1_2"),
    C("pad.interior_of_empty", "f32[2]", "pad", ["f32[0]", "f32[]"], "padding=1_1_5"),
    C("pad.dynamic", "f32[<=7]", "pad", ["f32[<=5]", "f32[]"], "padding=1_1"),
    # iota: the operation-semantics example and other types
    C("iota.semantics", "s32[4,8]", "iota", [], "iota_dimension=0"),
    C("iota.minor", "s32[4,8]", "iota", [], "iota_dimension=1"),
    C("iota.float", "f32[5]", "iota", [], "iota_dimension=0"),
    C("iota.complex", "c64[5]", "iota", [], "iota_dimension=0"),
    C("copy.array", "f32[2,<=3]", "copy", ["f32[2,<=3]"]),
    C("copy.tuple", "(f32[3], s32[])", "copy", ["(f32[3], s32[]) tuple(x, y)"],
      extra=("x = f32[3] constant({1, 2, 3})", "y = s32[] constant(1)")),
    C("bitcast.flatten", "f32[6]", "bitcast", ["f32[2,3]"], xla=False, why=NO_BITCAST),
    C("bitcast.reinterpret", "s32[3,2]", "bitcast", ["f32[2,3]"], xla=False, why=NO_BITCAST),
    C("bitcast.scalar", "u32[]", "bitcast", ["f32[1]"], xla=False, why=NO_BITCAST),
    C("get-dimension-size.dynamic", "s32[]", "get-dimension-size", ["f32[3,<=4]"], "dimensions={1}"),
    C("get-dimension-size.static", "s32[]", "get-dimension-size", ["f32[3]"], "dimensions={0}"),
    C("set-dimension-size.static", "f32[<=8,4]", "set-dimension-size", ["f32[8,4]", "s32[]"], "dimensions={0}"),
    C("set-dimension-size.dynamic", "f32[8,<=4]", "set-dimension-size", ["f32[8,<=4]", "s32[]"], "dimensions={1}"),
]


@pytest.mark.parametrize("case", GOOD, ids=lambda c: c.id)
def test_good(case):
    check_good(case)


# ----------------------------------------------------------------------------- invalid cases

BAD = [
    # broadcast
    C("broadcast.size", "f32[2,4]", "broadcast", ["f32[3]"], "dimensions={1}",
      fragment="result dimension 1 (operand dimension 0) must have the operand's size 3, got 4 in [2,4]"),
    C("broadcast.count", "f32[2,3]", "broadcast", ["f32[3]"], "dimensions={0,1}",
      fragment="dimensions must have one entry per operand dimension (1), got {0,1}"),
    C("broadcast.range", "f32[2,3]", "broadcast", ["f32[3]"], "dimensions={2}",
      fragment="every entry of dimensions must be in [0, 2), got {2}"),
    C("broadcast.repeated", "f32[3]", "broadcast", ["f32[3,3]"], "dimensions={0,0}",
      fragment="the entries of dimensions must be distinct, got {0,0}"),
    C("broadcast.element_type", "f64[2,3]", "broadcast", ["f32[3]"], "dimensions={1}",
      fragment="the result element type must be the operand's (f32), got f64"),
    C("broadcast.missing_dimensions", "f32[2,3]", "broadcast", ["f32[3]"],
      fragment="the attribute dimensions must be given for a non-scalar operand, got none", xla=False,
      why="XLA's parser rejects it already"),
    # reshape (operation semantics: the element counts must agree)
    C("reshape.count", "f32[5,5]", "reshape", ["f32[4,2,3]"],
      fragment="the element count must be preserved (24 in [4,2,3]), got 25 in [5,5]"),
    C("reshape.element_type", "s32[6]", "reshape", ["f32[2,3]"],
      fragment="the result element type must be the operand's (f32), got s32"),
    C("reshape.inferred_dimension", "f32[6]", "reshape", ["f32[2,3]"], "inferred_dimension=1",
      fragment="inferred_dimension must be in [0, 1), got 1", xla=False, why="XLA ignores inferred_dimension"),
    C("dynamic-reshape.size_type", "f32[<=3,<=4]", "dynamic-reshape", ["f32[12]", "s64[]", "s32[]"],
      fragment="size operand 1 must be s32[], got s64[]"),
    C("dynamic-reshape.elements", "f32[<=3,<=5]", "dynamic-reshape", ["f32[12]", "s32[]", "s32[]"],
      fragment="must be preserved (12 in [12]), got 15 in [<=3,<=5]"),
    # transpose / reverse
    C("transpose.not_permutation", "f32[3,2]", "transpose", ["f32[2,3]"], "dimensions={0,0}",
      fragment="dimensions must be a permutation of {0,1}, got {0,0}"),
    C("transpose.length", "f32[3,2]", "transpose", ["f32[2,3]"], "dimensions={1,0,2}",
      fragment="got {1,0,2}"),
    C("reverse.repeated", "f32[3]", "reverse", ["f32[3]"], "dimensions={0,0}",
      fragment="the entries of dimensions must be distinct, got {0,0}"),
    C("reverse.range", "f32[3]", "reverse", ["f32[3]"], "dimensions={1}",
      fragment="every entry of dimensions must be in [0, 1), got {1}"),
    # slice
    C("slice.limit", "f32[3]", "slice", ["f32[5]"], "slice={[2:6]}",
      fragment="a slice limit must not exceed the dimension size, got [2:6:1] (dimension 0 of size 5)"),
    C("slice.start_after_limit", "f32[0]", "slice", ["f32[5]"], "slice={[3:2]}",
      fragment="a slice start must not exceed its limit, got [3:2:1]"),
    C("slice.stride", "f32[2]", "slice", ["f32[5]"], "slice={[0:2:0]}",
      fragment="a slice stride must be positive, got [0:2:0]", xla=False,
      why="XLA's parser rejects a zero stride already"),
    C("slice.count", "f32[2]", "slice", ["f32[5,2]"], "slice={[0:2]}",
      fragment="slice must have one [start:limit:stride] per operand dimension (2), got 1 in {[0:2]}"),
    # dynamic-slice (operation semantics: one scalar integer per dimension, size <= dimension)
    C("dynamic-slice.size", "f32[6]", "dynamic-slice", ["f32[5]", "s32[]"], "dynamic_slice_sizes={6}",
      fragment="dynamic_slice_sizes[0] must be in [0, 5] (the operand's dimension 0), got 6"),
    C("dynamic-slice.sizes_count", "f32[2]", "dynamic-slice", ["f32[5]", "s32[]"], "dynamic_slice_sizes={2,2}",
      fragment="dynamic_slice_sizes must have one entry per operand dimension (1), got {2,2}"),
    C("dynamic-slice.float_index", "f32[2]", "dynamic-slice", ["f32[5]", "f32[]"], "dynamic_slice_sizes={2}",
      fragment="the start indices' element type must be integer, got f32"),
    C("dynamic-slice.index_count", "f32[2,2]", "dynamic-slice", ["f32[4,3]", "s32[]"],
      "dynamic_slice_sizes={2,2}", fragment="the number of start indices must be the operand rank 2, got 1"),
    C("dynamic-slice.index_types", "f32[2,2]", "dynamic-slice", ["f32[4,3]", "s32[]", "s64[]"],
      "dynamic_slice_sizes={2,2}", fragment="the start indices' element types must be the same"),
    C("dynamic-slice.matrix_index", "f32[2,2]", "dynamic-slice", ["f32[4,3]", "s32[2,1]", "s32[]"],
      "dynamic_slice_sizes={2,2}", fragment="every start index must be a scalar, got s32[2,1] (operand 1)"),
    C("dynamic-update-slice.update_size", "f32[3]", "dynamic-update-slice", ["f32[3]", "f32[4]", "s32[]"],
      fragment="the update's dimension 0 must not exceed the operand's (3), got 4 in [4]"),
    C("dynamic-update-slice.rank", "f32[3]", "dynamic-update-slice", ["f32[3]", "f32[1,1]", "s32[]"],
      fragment="the update's rank must be the operand's (1), got 2"),
    C("dynamic-update-slice.element_type", "f32[3]", "dynamic-update-slice", ["f32[3]", "bf16[2]", "s32[]"],
      fragment="the element types of the operand and the update must be the same"),
    C("dynamic-update-slice.float_index", "f32[3]", "dynamic-update-slice", ["f32[3]", "f32[2]", "f32[]"],
      fragment="the start indices' element type must be integer, got f32"),
    # concatenate (operation semantics: equal dimensions except the concatenated one)
    C("concatenate.other_dimension", "f32[5,2]", "concatenate", ["f32[3,2]", "f32[2,3]"], "dimensions={0}",
      fragment="the operands' dimension 1 must be equal (only dimension 0 is concatenated), got [3,2] vs [2,3]"),
    C("concatenate.rank", "f32[5]", "concatenate", ["f32[3]", "f32[2,1]"], "dimensions={0}",
      fragment="the operands' ranks must be equal, got 1 vs 2 (operand 1)"),
    C("concatenate.element_type", "f32[6]", "concatenate", ["f32[3]", "bf16[3]"], "dimensions={0}",
      fragment="element types must be the same (mixed precision is not allowed), got f32 vs bf16"),
    C("concatenate.dimension", "f32[3,4]", "concatenate", ["f32[3,2]", "f32[3,2]"], "dimensions={2}",
      fragment="the concatenation dimension must be in [0, 2), got 2"),
    C("concatenate.scalars", "f32[2]", "concatenate", ["f32[]", "f32[]"], "dimensions={0}",
      fragment="the concatenation dimension must be in [0, 0), got 0"),
    C("concatenate.two_dimensions", "f32[6]", "concatenate", ["f32[3]", "f32[3]"], "dimensions={0,1}",
      fragment="dimensions must name exactly one dimension, got {0,1}", xla=False,
      why="XLA's parser rejects it already"),
    # pad
    C("pad.value_not_scalar", "f32[5]", "pad", ["f32[3]", "f32[1]"], "padding=1_1",
      fragment="the padding value must be a scalar, got f32[1]"),
    C("pad.value_type", "f32[5]", "pad", ["f32[3]", "s32[]"], "padding=1_1",
      fragment="the element types of the operand and the padding value must be the same"),
    C("pad.config_rank", "f32[5]", "pad", ["f32[3]", "f32[]"], "padding=1_1x0_0",
      fragment="padding must have one low_high[_interior] entry per operand dimension (1), got 2"),
    C("pad.negative_size", "f32[0]", "pad", ["f32[3]", "f32[]"], "padding=-2_-2",
      fragment="the padded size of dimension 0 must be non-negative, got -1"),
    # iota
    C("iota.scalar", "s32[]", "iota", [], "iota_dimension=0",
      fragment="the result must have rank >= 1 (iota of a scalar), got s32[]"),
    C("iota.dimension", "s32[4,8]", "iota", [], "iota_dimension=2",
      fragment="iota_dimension must be in [0, 2) for s32[4,8], got 2"),
    C("iota.pred", "pred[4]", "iota", [], "iota_dimension=0",
      fragment="the result element type must be integer, floating-point or complex, got pred"),
    # bitcast
    C("bitcast.size", "f32[7]", "bitcast", ["f32[2,3]"],
      fragment="the result's size must be the operand's (24 bytes), got 28 bytes for f32[7]", xla=False,
      why=NO_BITCAST),
    C("bitcast.wider_type", "f64[6]", "bitcast", ["f32[2,3]"], fragment="got 48 bytes for f64[6]",
      xla=False, why=NO_BITCAST),
    # dimension sizes
    C("get-dimension-size.range", "s32[]", "get-dimension-size", ["f32[3]"], "dimensions={1}",
      fragment="the dimension must be in [0, 1), got 1"),
    C("set-dimension-size.size_type", "f32[<=3]", "set-dimension-size", ["f32[3]", "s64[]"], "dimensions={0}",
      fragment="the size operand must be s32[], got s64[]"),
    C("set-dimension-size.range", "f32[<=3]", "set-dimension-size", ["f32[3]", "s32[]"], "dimensions={1}",
      fragment="the dimension must be in [0, 1), got 1"),
]


@pytest.mark.parametrize("case", BAD, ids=lambda c: c.id)
def test_bad(case):
    check_bad(case)


def test_broadcast_without_declared_shape_follows_xla_parser():
    """`broadcast(x), dimensions={2}` without a result shape: XLA reads dimensions as new sizes."""
    from hlo_cli.ir.shape import parse_shape_text
    from hlo_cli.shapes import RuleContext
    got = infer_shape("broadcast", [parse_shape_text("f32[3]")], {"dimensions": (2,)}, RuleContext("broadcast"))
    assert got.to_str(False) == "f32[2,3]"


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
