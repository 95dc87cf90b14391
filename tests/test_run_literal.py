"""`hlo run --print`: values in XLA's Literal::ToString layout (hlo_cli.pipeline.io.literal_text).

The fixed cases follow the layout rules of XLA's literal printer (xla/literal.cc, its tests in
xla/literal_test.cc): from rank 2 on each innermost row on its own line indented by two spaces,
outer braces on their own lines, `/*iK=N*/` index comments from rank 4 on, a dynamic shape followed
by its sizes, pred arrays as 0/1 but a pred scalar as true/false.  The property tests tie the
layout to two independent facts: folding the lines gives the one-line form the HLO printer writes
for constants, and XLA's text syntax (our parser) reads the printed braces back to the same values.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hlo_cli.pipeline.io import literal_text
from hlo_cli.ir.literal import Literal, format_literal
from hlo_cli.parser import parse


def _shape(text: str):
    m = parse(f"HloModule m\nENTRY e {{\n  ROOT p = {text} parameter(0)\n}}\n")
    return m.entry_computation.root_instruction.shape


@pytest.mark.parametrize("shape,value,want", [
    ("s32[]", np.int32(-4), "s32[] -4"),
    ("pred[]", np.bool_(False), "pred[] false"),
    ("pred[4]", np.array([0, 1, 1, 0], bool), "pred[4] {0, 1, 1, 0}"),
    ("f32[2]", np.array([0.5, -2], np.float32), "f32[2] {0.5, -2}"),
    ("f32[0]", np.zeros(0, np.float32), "f32[0] {}"),
    ("s32[2,2]", np.array([[7, 8], [9, 10]], np.int32), "s32[2,2] {\n  { 7, 8 },\n  { 9, 10 }\n}"),
    ("s32[3,1]", np.array([[7], [8], [9]], np.int32), "s32[3,1] {\n  {7},\n  {8},\n  {9}\n}"),
    ("f32[2,0]", np.zeros((2, 0), np.float32), "f32[2,0] {\n  {},\n  {}\n}"),
    ("s32[2,1,2]", np.array([[[1, 2]], [[3, 4]]], np.int32),
     "s32[2,1,2] {\n{\n  { 1, 2 }\n},\n{\n  { 3, 4 }\n}\n}"),
    ("s32[1,2,1,2]", np.array([[[[1, 2]], [[3, 4]]]], np.int32),
     "s32[1,2,1,2] {\n{ /*i0=0*/\n{ /*i1=0*/\n  { 1, 2 }\n},\n{ /*i1=1*/\n  { 3, 4 }\n}\n}\n}"),
    ("s32[<=4,2]", np.array([[1, 2], [3, 4]], np.int32), "s32[<=4,2](2,2) {\n  { 1, 2 },\n  { 3, 4 }\n}"),
], ids=["s32-scalar", "pred-scalar", "pred-vector", "f32-vector", "empty-vector", "matrix", "column",
        "empty-rows", "rank-3", "rank-4-comments", "dynamic"])
def test_xla_layout(shape, value, want):
    assert literal_text(value, _shape(shape)) == want


TYPES = {"f32": np.float32, "s32": np.int32, "pred": np.bool_, "u8": np.uint8}


@st.composite
def arrays(draw):
    et = draw(st.sampled_from(sorted(TYPES)))
    dims = draw(st.lists(st.integers(0, 3), min_size=0, max_size=5))
    n = int(np.prod(dims)) if dims else 1
    ints = draw(st.lists(st.integers(0, 40), min_size=n, max_size=n))
    values = np.array(ints, np.float64)
    if et == "f32":
        values = values / 4 - 5                       # halves and quarters: exact in f32 and in text
    value = values.astype(TYPES[et]).reshape(dims)
    return f"{et}[{','.join(map(str, dims))}]", value


@settings(max_examples=60, deadline=None)
@given(arrays())
def test_folding_the_lines_gives_the_one_line_form(case):
    text, value = case
    shape = _shape(text)
    multi = literal_text(value, shape)
    one = literal_text(value, shape, oneline=True)
    assert multi.replace("\n  ", " ").replace("\n", " ") == one
    if value.size or value.ndim < 4:
        # (the HLO printer writes `{ /*i0=0*/  }`, two spaces, for an empty block under an index
        # comment; XLA's printer writes one, as literal_text does)
        assert one == f"{text} {format_literal(Literal(shape, value))}"  # the HLO printer's constants
    if value.ndim < 2:
        assert multi == one


@settings(max_examples=60, deadline=None)
@given(arrays())
def test_the_printed_value_reads_back(case):
    text, value = case
    shape = _shape(text)
    head, body = literal_text(value, shape).split(" ", 1)
    m = parse(f"HloModule m\nENTRY e {{\n  ROOT c = {head} constant({body})\n}}\n")
    got = m.entry_computation.root_instruction.literal.value
    assert got.dtype == value.dtype and got.shape == value.shape
    np.testing.assert_array_equal(got, value)
