"""Shape rules of gather and scatter (hlo_cli/shapes/families/indexing.py).

Every dimension number, batching dimensions included, the implicit index vector dimension,
variadic scatter and its update computation: samples, a table of valid cases, a table of invalid
cases, and XLA's verdict on both (through JAX, skipped without jaxlib).
"""
from __future__ import annotations

from pathlib import Path

import pytest

from hlo_cli.shapes import RULES

ROOT = Path(__file__).resolve().parents[2]

OWN = ["gather", "scatter"]          # the "indexing" family of the opcode table, less the dynamic slices


# ----------------------------------------------------------------------------- harness (tests/shapes/harness.py)

from .harness import SAMPLES, opcodes_in_samples, sample_checks, xla_verdicts, C, check_bad, check_good


# ----------------------------------------------------------------------------- coverage

def test_every_opcode_of_the_family_has_a_rule():
    assert not [o for o in OWN if o not in RULES]


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_samples(path):
    sample_checks(path, set(OWN))


def test_samples_cover_every_opcode():
    assert not [o for o in OWN if o not in opcodes_in_samples()]


# ----------------------------------------------------------------------------- helpers

def G(id, result, operand, indices, offset, collapsed, start_map, ivd, sizes, batching=None, fragment="", **kw):
    """gather(operand, indices) with its dimension numbers; batching=(operand dims, indices dims)."""
    attrs = (f"offset_dims={offset}, collapsed_slice_dims={collapsed}, start_index_map={start_map}, "
             f"index_vector_dim={ivd}, slice_sizes={sizes}")
    if batching:
        attrs += f", operand_batching_dims={batching[0]}, start_indices_batching_dims={batching[1]}"
    return C(id, result, "gather", [operand, indices], attrs, fragment, **kw)


ADD = {et: f"add_{et} {{\n  a = {et}[] parameter(0)\n  b = {et}[] parameter(1)\n  ROOT s = {et}[] add(a, b)\n}}\n\n"
       for et in ("f32", "bf16", "s32")}
ADD2 = ("add2 {\n  a0 = f32[] parameter(0)\n  a1 = s32[] parameter(1)\n  b0 = f32[] parameter(2)\n"
        "  b1 = s32[] parameter(3)\n  x0 = f32[] add(a0, b0)\n  x1 = s32[] add(a1, b1)\n"
        "  ROOT t = (f32[], s32[]) tuple(x0, x1)\n}\n\n")
EXTRA_COMPS = {
    "three_params": "three_params {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  c = f32[] parameter(2)\n"
                    "  ROOT s = f32[] add(a, b)\n}\n\n",
    "vector_result": "vector_result {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n"
                     "  ROOT s = f32[2] broadcast(a), dimensions={}\n}\n\n",
    "scalar_for_two": "scalar_for_two {\n  a0 = f32[] parameter(0)\n  a1 = s32[] parameter(1)\n"
                      "  b0 = f32[] parameter(2)\n  b1 = s32[] parameter(3)\n  ROOT s = f32[] add(a0, b0)\n}\n\n",
}


def S(id, result, operands, uwd, iwd, sdod, ivd, to_apply="add_f32", batching=None, fragment="", **kw):
    """scatter(inputs..., indices, updates...) with its dimension numbers."""
    attrs = (f"update_window_dims={uwd}, inserted_window_dims={iwd}, scatter_dims_to_operand_dims={sdod}, "
             f"index_vector_dim={ivd}")
    if batching:
        attrs += f", input_batching_dims={batching[0]}, scatter_indices_batching_dims={batching[1]}"
    attrs += f", to_apply={to_apply}"
    pre = ADD.get(to_apply.replace("add_", ""), "") if to_apply.startswith("add_") else \
        (ADD2 if to_apply == "add2" else EXTRA_COMPS[to_apply])
    return C(id, result, "scatter", operands, attrs, fragment, pre=pre, **kw)


# ----------------------------------------------------------------------------- valid cases

GOOD = [
    G("gather.rows", "f32[2,4]", "f32[3,4]", "s32[2,1]", "{1}", "{0}", "{0}", 1, "{1,4}"),
    G("gather.implicit_index_vector", "f32[2,4]", "f32[3,4]", "s32[2]", "{1}", "{0}", "{0}", 1, "{1,4}"),
    G("gather.leading_index_vector", "f32[5,4]", "f32[3,4]", "s32[1,5]", "{1}", "{0}", "{0}", 0, "{1,4}"),
    G("gather.offset_first", "f32[4,2]", "f32[3,4]", "s32[2,1]", "{0}", "{0}", "{0}", 1, "{1,4}"),
    G("gather.windows", "f32[3,2,3]", "f32[5,6]", "s32[3,2]", "{1,2}", "{}", "{0,1}", 1, "{2,3}"),
    G("gather.windows_between_batch_dims", "f32[4,2,3,7]", "f32[5,6]", "s32[4,7,2]", "{1,2}", "{}", "{1,0}", 2,
      "{2,3}"),
    G("gather.empty_slice", "f32[2,0]", "f32[3,4]", "s32[2,1]", "{1}", "{0}", "{0}", 1, "{1,0}"),
    G("gather.scalar_indices", "f32[4]", "f32[3,4]", "s32[]", "{0}", "{0}", "{0}", 0, "{1,4}"),
    G("gather.batching", "f32[5,2,4]", "f32[5,3,4]", "s32[5,2,1]", "{2}", "{1}", "{1}", 2, "{1,1,4}",
      batching=("{0}", "{0}")),
    G("gather.batching_not_leading", "f32[2,5,4]", "f32[3,5,4]", "s32[2,5,1]", "{2}", "{0}", "{0}", 2, "{1,1,4}",
      batching=("{1}", "{1}")),
    G("gather.dynamic_indices", "f32[<=4,4]", "f32[3,4]", "s32[<=4,1]", "{1}", "{0}", "{0}", 1, "{1,4}"),
    G("gather.whole_dynamic_dimension", "f32[2,<=4]", "f32[3,<=4]", "s32[2,1]", "{1}", "{0}", "{0}", 1, "{1,4}"),
    G("gather.u8_indices", "f32[2,4]", "f32[3,4]", "u8[2,1]", "{1}", "{0}", "{0}", 1, "{1,4}"),
    S("scatter.rows", "f32[3,4]", ["f32[3,4]", "s32[2,1]", "f32[2,4]"], "{1}", "{0}", "{0}", 1),
    S("scatter.implicit_index_vector", "f32[3,4]", ["f32[3,4]", "s32[2]", "f32[2,4]"], "{1}", "{0}", "{0}", 1),
    S("scatter.smaller_windows", "f32[3,4]", ["f32[3,4]", "s32[2,1]", "f32[2,2]"], "{1}", "{0}", "{0}", 1),
    S("scatter.windows_first", "f32[3,4]", ["f32[3,4]", "s32[2,1]", "f32[4,2]"], "{0}", "{0}", "{0}", 1),
    S("scatter.two_index_dims", "s32[5,6]", ["s32[5,6]", "s32[3,2]", "s32[3]"], "{}", "{0,1}", "{1,0}", 1,
      to_apply="add_s32"),
    S("scatter.batching", "f32[5,3,4]", ["f32[5,3,4]", "s32[5,2,1]", "f32[5,2,4]"], "{2}", "{1}", "{1}", 2,
      batching=("{0}", "{0}")),
    S("scatter.variadic", "(f32[3,4], s32[3,4])", ["f32[3,4]", "s32[3,4]", "s32[2,1]", "f32[2,4]", "s32[2,4]"],
      "{1}", "{0}", "{0}", 1, to_apply="add2"),
    S("scatter.dynamic_input", "f32[<=3,4]", ["f32[<=3,4]", "s32[2,1]", "f32[2,4]"], "{1}", "{0}", "{0}", 1),
]


@pytest.mark.parametrize("case", GOOD, ids=lambda c: c.id)
def test_good(case):
    check_good(case)


# ----------------------------------------------------------------------------- invalid cases

OP, IDX = "f32[3,4]", "s32[2,1]"
BOP, BIDX = "f32[5,3,4]", "s32[5,2,1]"
SC = ["f32[3,4]", "s32[2,1]", "f32[2,4]"]
BSC = ["f32[5,3,4]", "s32[5,2,1]", "f32[5,2,4]"]

BAD = [
    # gather: operands
    G("gather.float_indices", "f32[2,4]", OP, "f32[2,1]", "{1}", "{0}", "{0}", 1, "{1,4}",
      fragment="the start indices' element type must be integer, got f32"),
    G("gather.index_vector_dim", "f32[2,4]", OP, IDX, "{1}", "{0}", "{0}", 3, "{1,4}",
      fragment="index_vector_dim must be in [0, 2] (the rank of the start indices is 2), got 3"),
    # gather: offset_dims
    G("gather.offset_unsorted", "f32[2,3,4]", "f32[3,4,5]", IDX, "{2,1}", "{0}", "{0}", 1, "{1,4,5}",
      fragment="the entries of offset_dims must be sorted, got {2,1}"),
    G("gather.offset_repeated", "f32[2,4]", OP, IDX, "{1,1}", "{}", "{0}", 1, "{1,4}",
      fragment="the entries of offset_dims must not repeat, got {1,1}"),
    G("gather.offset_range", "f32[2,4]", OP, IDX, "{2}", "{0}", "{0}", 1, "{1,4}",
      fragment="every entry of offset_dims must be in [0, 2) (the result rank), got {2}"),
    # gather: start_index_map
    G("gather.start_index_map_count", "f32[2,4]", OP, IDX, "{1}", "{0}", "{0,1}", 1, "{1,4}",
      fragment="start_index_map must have one entry per index vector element (1, dimension 1 of the start indices), got {0,1}"),
    G("gather.start_index_map_range", "f32[2,4]", OP, IDX, "{1}", "{0}", "{2}", 1, "{1,4}",
      fragment="every entry of start_index_map must be in [0, 2), got {2}"),
    G("gather.start_index_map_repeated", "f32[2]", OP, "s32[2,2]", "{}", "{0,1}", "{0,0}", 1, "{1,1}",
      fragment="the entries of start_index_map must not repeat, got {0,0}"),
    # gather: collapsed_slice_dims
    G("gather.collapsed_range", "f32[2,4]", OP, IDX, "{1}", "{2}", "{0}", 1, "{1,4}",
      fragment="every entry of collapsed_slice_dims must be in [0, 2), got {2}"),
    G("gather.collapsed_unsorted", "f32[2]", OP, IDX, "{}", "{1,0}", "{0}", 1, "{1,1}",
      fragment="the entries of collapsed_slice_dims must be sorted, got {1,0}"),
    G("gather.collapsed_size", "f32[2,4]", OP, IDX, "{1}", "{0}", "{0}", 1, "{2,4}",
      fragment="the slice size of every dimension in collapsed_slice_dims must be 0 or 1, got 2 for dimension 0"),
    # gather: slice sizes and rank accounting
    G("gather.slice_sizes_count", "f32[2,4]", OP, IDX, "{1}", "{0}", "{0}", 1, "{1,4,1}",
      fragment="slice_sizes must have one entry per operand dimension (2), got {1,4,1}"),
    G("gather.slice_size_range", "f32[2,5]", OP, IDX, "{1}", "{0}", "{0}", 1, "{1,5}",
      fragment="slice_sizes[1] must be in [0, 4] (operand dimension 1), got 5"),
    G("gather.unaccounted_dimension", "f32[2]", OP, IDX, "{}", "{0}", "{0}", 1, "{1,4}",
      fragment="offset_dims, collapsed_slice_dims and operand_batching_dims together must account for every operand dimension (2), got 0 + 1 + 0"),
    # gather: batching dimensions
    G("gather.batching_lengths", "f32[5,2,4]", BOP, BIDX, "{2}", "{1}", "{1}", 2, "{1,1,4}",
      batching=("{0}", "{}"), fragment="operand_batching_dims and start_indices_batching_dims must have the same length, got {0} and {}"),
    G("gather.batching_range", "f32[5,2,4]", BOP, BIDX, "{2}", "{1}", "{1}", 2, "{1,1,4}",
      batching=("{3}", "{0}"), fragment="every entry of operand_batching_dims must be in [0, 3), got {3}"),
    G("gather.indices_batching_range", "f32[5,2,4]", BOP, BIDX, "{2}", "{1}", "{1}", 2, "{1,1,4}",
      batching=("{0}", "{3}"), fragment="every entry of start_indices_batching_dims must be in [0, 3), got {3}"),
    G("gather.batching_overlaps_collapsed", "f32[5,2,4]", BOP, BIDX, "{2}", "{0}", "{1}", 2, "{1,1,4}",
      batching=("{0}", "{0}"), fragment="collapsed_slice_dims and operand_batching_dims must have no dimension in common, got {0} in both"),
    G("gather.batching_index_vector_dim", "f32[5,2,4]", BOP, BIDX, "{2}", "{1}", "{1}", 2, "{1,1,4}",
      batching=("{0}", "{2}"), fragment="start_indices_batching_dims must not contain index_vector_dim (2), got {2}"),
    G("gather.batching_sizes", "f32[6,2,4]", BOP, "s32[6,2,1]", "{2}", "{1}", "{1}", 2, "{1,1,4}",
      batching=("{0}", "{0}"), fragment="the batching dimensions' sizes must be equal in the operand and the start indices, got 5 (operand dimension 0) vs 6 (start indices dimension 0)"),
    G("gather.batching_slice_size", "f32[5,2,4]", BOP, BIDX, "{2}", "{1}", "{1}", 2, "{2,1,4}",
      batching=("{0}", "{0}"), fragment="the slice size of every dimension in operand_batching_dims must be 0 or 1, got 2 for dimension 0"),
    # scatter: operands
    S("scatter.float_indices", "f32[3,4]", ["f32[3,4]", "f32[2,1]", "f32[2,4]"], "{1}", "{0}", "{0}", 1,
      fragment="the scatter indices' element type must be integer, got f32"),
    S("scatter.index_vector_dim", "f32[3,4]", SC, "{1}", "{0}", "{0}", 3,
      fragment="index_vector_dim must be in [0, 2] (the rank of the scatter indices is 2), got 3"),
    S("scatter.update_type", "f32[3,4]", ["f32[3,4]", "s32[2,1]", "bf16[2,4]"], "{1}", "{0}", "{0}", 1,
      fragment="the element type of update 0 must be input 0's (f32), got bf16"),
    S("scatter.updates_rank", "f32[3,4]", ["f32[3,4]", "s32[2,1]", "f32[2,4,1]"], "{1}", "{0}", "{0}", 1,
      fragment="the updates' rank must be 2 (scatter indices' batch dims 1 + 1 window dims), got 3"),
    S("scatter.variadic_dims", "(f32[3,4], s32[3,5])",
      ["f32[3,4]", "s32[3,5]", "s32[2,1]", "f32[2,4]", "s32[2,4]"], "{1}", "{0}", "{0}", 1, to_apply="add2",
      fragment="the inputs' dimensions must be equal, got [3,4] vs [3,5] (input 1)"),
    S("scatter.variadic_precision", "(f32[3,4], bf16[3,4])",
      ["f32[3,4]", "bf16[3,4]", "s32[2,1]", "f32[2,4]", "bf16[2,4]"], "{1}", "{0}", "{0}", 1, to_apply="add2",
      fragment="the floating-point inputs must have one precision (mixed precision is not allowed), got bf16 vs f32"),
    # scatter: window dimensions
    S("scatter.update_window_unsorted", "f32[3,4,5]", ["f32[3,4,5]", "s32[2,1]", "f32[2,5,4]"], "{2,1}", "{0}",
      "{0}", 1, fragment="the entries of update_window_dims must be sorted, got {2,1}"),
    S("scatter.update_window_range", "f32[3,4]", SC, "{2}", "{0}", "{0}", 1,
      fragment="every entry of update_window_dims must be in [0, 2), got {2}"),
    S("scatter.inserted_unsorted", "f32[3,4]", ["f32[3,4]", "s32[2,1]", "f32[2]"], "{}", "{1,0}", "{0}", 1,
      fragment="the entries of inserted_window_dims must be sorted, got {1,0}"),
    S("scatter.inserted_range", "f32[3,4]", SC, "{1}", "{2}", "{0}", 1,
      fragment="every entry of inserted_window_dims must be in [0, 2), got {2}"),
    S("scatter.unaccounted_dimension", "f32[3,4]", ["f32[3,4]", "s32[2,1]", "f32[2]"], "{}", "{0}", "{0}", 1,
      fragment="update_window_dims, inserted_window_dims and input_batching_dims together must account for every input dimension (2), got 0 + 1 + 0"),
    S("scatter.window_too_big", "f32[3,4]", ["f32[3,4]", "s32[2,1]", "f32[2,5]"], "{1}", "{0}", "{0}", 1,
      fragment="the updates' window dimension 1 must not exceed the inputs' dimension 1 (4), got 5"),
    S("scatter.scatter_dimension", "f32[3,4]", ["f32[3,4]", "s32[2,1]", "f32[3,4]"], "{1}", "{0}", "{0}", 1,
      fragment="the updates' scatter dimension 0 must have the size of scatter indices dimension 0 (2), got 3"),
    # scatter: scatter_dims_to_operand_dims
    S("scatter.sdod_count", "f32[3,4]", SC, "{1}", "{0}", "{0,1}", 1,
      fragment="scatter_dims_to_operand_dims must have one entry per index vector element (1, dimension 1 of the scatter indices), got {0,1}"),
    S("scatter.sdod_range", "f32[3,4]", SC, "{1}", "{0}", "{2}", 1,
      fragment="every entry of scatter_dims_to_operand_dims must be in [0, 2), got {2}"),
    S("scatter.sdod_repeated", "s32[5,6]", ["s32[5,6]", "s32[3,2]", "s32[3]"], "{}", "{0,1}", "{0,0}", 1,
      to_apply="add_s32", fragment="the entries of scatter_dims_to_operand_dims must not repeat, got {0,0}"),
    # scatter: batching dimensions
    S("scatter.batching_lengths", "f32[5,3,4]", BSC, "{2}", "{1}", "{1}", 2, batching=("{0}", "{}"),
      fragment="input_batching_dims and scatter_indices_batching_dims must have the same length, got {0} and {}"),
    S("scatter.batching_overlaps_inserted", "f32[5,3,4]", BSC, "{2}", "{0}", "{1}", 2, batching=("{0}", "{0}"),
      fragment="inserted_window_dims and input_batching_dims must have no dimension in common, got {0} in both"),
    S("scatter.batching_index_vector_dim", "f32[5,3,4]", BSC, "{2}", "{1}", "{1}", 2, batching=("{0}", "{2}"),
      fragment="scatter_indices_batching_dims must not contain index_vector_dim (2), got {2}"),
    S("scatter.batching_sizes", "f32[5,3,4]", ["f32[5,3,4]", "s32[6,2,1]", "f32[6,2,4]"], "{2}", "{1}", "{1}", 2,
      batching=("{0}", "{0}"), fragment="the batching dimensions' sizes must be equal in the inputs and the scatter indices, got 5 (inputs dimension 0) vs 6 (scatter indices dimension 0)"),
    # scatter: the update computation
    S("scatter.to_apply_arity", "f32[3,4]", SC, "{1}", "{0}", "{0}", 1, to_apply="three_params",
      fragment="the update computation three_params must take 2 parameters, got 3"),
    S("scatter.to_apply_vector", "f32[3,4]", SC, "{1}", "{0}", "{0}", 1, to_apply="vector_result",
      fragment="the result of vector_result must be a scalar or a tuple of scalars, got f32[2]"),
    S("scatter.to_apply_type", "f32[3,4]", SC, "{1}", "{0}", "{0}", 1, to_apply="add_s32",
      fragment="result 0 of add_s32 must be a scalar of input 0's type f32, got s32[]"),
    S("scatter.to_apply_not_a_tuple", "(f32[3,4], s32[3,4])",
      ["f32[3,4]", "s32[3,4]", "s32[2,1]", "f32[2,4]", "s32[2,4]"], "{1}", "{0}", "{0}", 1,
      to_apply="scalar_for_two", fragment="the result of scalar_for_two must be a tuple of 2 scalars, got f32[]"),
]


@pytest.mark.parametrize("case", BAD, ids=lambda c: c.id)
def test_bad(case):
    check_bad(case)


def test_scatter_update_computation_ignores_fp_precision():
    """XLA's VerifyReducerShape compares the update computation ignoring floating-point precision,
    so the HLO verifier accepts a bf16 computation for f32 inputs (StableHLO, which infers the
    result type from the computation, does not; hlo follows the HLO verifier)."""
    case = S("x", "f32[3,4]", SC, "{1}", "{0}", "{0}", 1, to_apply="add_bf16")
    check_good(case)


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
