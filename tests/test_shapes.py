"""Decoding of shape text: `parse_array_shape` (one array shape, memoized) and `parse_shape_text`
(tuples too).  Errors carry the 0-based `offset` of the offending character."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hlo_cli.ir.dtypes import ELEMENT_TYPES
from hlo_cli.ir.shape import (COMBINE_DIM, UNBOUNDED, Layout, Shape, ShapeSyntaxError, SplitConfig,
                              default_layout, parse_array_shape, parse_shape_text)

ARRAY_TYPES = sorted(t for t in ELEMENT_TYPES if t not in ("token", "opaque"))


# ----------------------------------------------------------------------------- accepted forms

@pytest.mark.parametrize("text, etype, dims, dynamic, m2m", [
    ("f32[]", "f32", (), (), ()),
    ("f32[2,3]", "f32", (2, 3), (False, False), (1, 0)),
    ("f32[2,3]{0,1}", "f32", (2, 3), (False, False), (0, 1)),
    ("s8[0]", "s8", (0,), (False,), (0,)),
    ("f32[<=16,8]{1,0}", "f32", (16, 8), (True, False), (1, 0)),
    ("f32[?,8]", "f32", (UNBOUNDED, 8), (True, False), (1, 0)),
    ("pred[ 3 , 4 ]", "pred", (3, 4), (False, False), (1, 0)),
    ("f32[2,3]{ 1, 0 }", "f32", (2, 3), (False, False), (1, 0)),
    ("f32[16]{0:}", "f32", (16,), (False,), (0,)),
    ("f32[9223372036854775807]", "f32", (2**63 - 1,), (False,), (0,)),
    ("f32[2/*rows*/,3]", "f32", (2, 3), (False, False), (1, 0)),
    # XLA reads the minor_to_major list without checking that it is a permutation
    ("f32[2,3]{0,0}", "f32", (2, 3), (False, False), (0, 0)),
    ("f32[16]{-1}", "f32", (16,), (False,), (-1,)),
])
def test_array_shapes(text, etype, dims, dynamic, m2m):
    s = parse_array_shape(text)
    assert (s.element_type, s.dims, s.dynamic, s.layout.minor_to_major) == (etype, dims, dynamic, m2m)
    assert not s.is_tuple


@pytest.mark.parametrize("etype", sorted(ELEMENT_TYPES))
def test_every_element_type(etype):
    if etype in ("token", "opaque"):
        s = parse_array_shape(f"{etype}[]")
        assert s == Shape(etype) and s.layout is None
    else:
        s = parse_array_shape(f"{etype}[2]{{0}}")
        assert s.element_type == etype and s.dims == (2,)


def test_layout_suffixes_in_order():
    s = parse_array_shape("f32[16]{0:D(D,C+)T(8)(2,1)L(2)#(s32)*(u32)E(4)S(1)SC(0:1,2)(1:)M(8)}")
    lay = s.layout
    assert lay.minor_to_major == (0,)
    assert lay.dim_level_types == ("D", "C+")
    assert lay.tiles == ((8,), (2, 1))
    assert lay.tail_padding_alignment == 2
    assert lay.index_primitive_type == "s32" and lay.pointer_primitive_type == "u32"
    assert lay.element_size_in_bits == 4 and lay.memory_space == 1
    assert lay.split_configs == (SplitConfig(0, (1, 2)), SplitConfig(1, ()))
    assert lay.dynamic_shape_metadata_prefix_bytes == 8
    assert str(s) == "f32[16]{0:D(D,C+)T(8)(2,1)L(2)#(s32)*(u32)E(4)S(1)SC(0:1,2)(1:)M(8)}"


def test_tiles_with_combined_dims_and_empty_tile():
    assert parse_array_shape("bf16[16,256]{1,0:T(8,*)(2,1)}").layout.tiles == ((8, COMBINE_DIM), (2, 1))
    assert parse_array_shape("f32[16]{0:T()}").layout.tiles == ((),)


def test_scalar_layouts_and_negative_memory_space():
    assert parse_array_shape("f32[]{:S(1)}").layout == Layout((), memory_space=1)
    assert parse_array_shape("s32[]{:T(128)}").layout.tiles == ((128,),)
    assert parse_array_shape("pred[8]{0:E(1)S(-1)}").layout.memory_space == -1


def test_short_layout_extension():
    """Our extension: f16[10,2]<1,0> is f16[10,2]{1,0}."""
    assert parse_array_shape("f16[10,2]<1,0>") == parse_array_shape("f16[10,2]{1,0}")
    assert parse_array_shape("f16[10,2]<0,1>").layout.minor_to_major == (0, 1)
    assert parse_array_shape("f32[<=4]<0>").dynamic == (True,)


def test_default_layout_is_the_same_object_shape():
    assert parse_array_shape("f32[2,3]") == parse_array_shape("f32[2,3]{1,0}")
    assert parse_array_shape("f32[2,3]").layout == default_layout(2)


def test_tuple_shapes():
    s = parse_shape_text("(f32[2], (s32[], pred[3]{0}), ())")
    assert s.is_tuple and len(s.tuple_shapes) == 3
    assert s.tuple_shapes[1].tuple_shapes[1] == parse_array_shape("pred[3]")
    assert s.tuple_shapes[2] == Shape.tuple_of(())
    assert parse_shape_text("(f32[])") == Shape.tuple_of([parse_array_shape("f32[]")])
    assert parse_shape_text(" ( token[] , opaque[] ) ").tuple_shapes == (Shape("token"), Shape("opaque"))


# ----------------------------------------------------------------------------- errors

@pytest.mark.parametrize("text, at, words", [
    ("f33[2]", "f33", ["unknown element type 'f33'"]),
    ("f32[2,,3]", ",3", ["expected an integer dimension size", "got ','"]),
    ("f32[3,]", "]", ["expected an integer dimension size", "got ']'"]),
    ("f32[-2]", "-2", ["invalid dimension size -2"]),
    ("f32[<=-1]", "-1", ["invalid dimension size -1"]),
    ("f32[99999999999999999999]", "9999", ["too large"]),
    ("f32[9223372036854775808]", "9223", ["too large"]),
    ("f32[2 3]", "3]", ["expected ',' or ']'", "got '3'"]),
    ("f32[2,3]{}", "{}", ["'{}' is not a layout", "expected an opcode"]),
    ("f32[]{}", "{}", ["'{}' is not a layout"]),
    ("f32[2,3]{ }", "{ }", ["'{}' is not a layout"]),
    ("f32[2,3]{0}", "{0}", ["1 minor_to_major entry", "rank 2"]),
    ("f32[2,3]<0>", "<0>", ["1 minor_to_major entry", "rank 2"]),
    ("f32[16]{:S(1)}", "{:", ["0 minor_to_major entries", "rank 1"]),
    ("f32[16]{0:S(1)T(8)}", "T(8)", ["expected '}'", "T(...) must come before S(...)"]),
    ("f32[16]{0:T(8)T(2)}", "T(2)", ["expected '}'", "given twice"]),
    ("f32[16]{0:*(s64)#(s32)}", "#(", ["#(...) must come before *(...)"]),
    ("f32[16]{0:T(8)X(1)}", "X(1)", ["expected '}'", "not a layout suffix"]),
    ("f32[16]{0:P(f32[16])}", "P(", ["physical shape"]),
    ("f32[16]{0:#(invalid)}", "invalid", ["expected an element type", "'invalid'"]),
    ("f32[16]{0:T(a)}", "a)", ["expected an integer or '*'"]),
    ("f32[2]<>", "<>", ["empty layout"]),
    ("token[2]", "token", ["token shapes have no dimensions"]),
    ("f32[2]x", "x", ["unexpected 'x' after the shape"]),
    ("f32", "", ["expected '['"]),
])
def test_errors_point_at_the_offending_character(text, at, words):
    with pytest.raises(ShapeSyntaxError) as ei:
        parse_array_shape(text)
    msg = str(ei.value)
    for w in words:
        assert w in msg, msg
    expected_offset = text.index(at) if at else len(text)
    assert ei.value.offset == expected_offset, (ei.value.offset, msg)


def test_error_offsets_count_spaces_and_comments():
    with pytest.raises(ShapeSyntaxError) as ei:
        parse_array_shape("f32[2, /* x */ -2]")
    assert ei.value.offset == len("f32[2, /* x */ ")


def test_tuple_errors():
    with pytest.raises(ShapeSyntaxError) as ei:
        parse_shape_text("(f32[], s32[]")
    assert "',' or ')'" in str(ei.value) and ei.value.offset == len("(f32[], s32[]")
    with pytest.raises(ShapeSyntaxError) as ei:
        parse_shape_text("(f32[], f33[])")
    assert ei.value.offset == len("(f32[], ")


def test_errors_are_value_errors():
    """The fast path of the builder catches ValueError."""
    with pytest.raises(ValueError):
        parse_array_shape("f32[2,3]{}")


# ----------------------------------------------------------------------------- round trip

_dim_level = st.sampled_from(["D", "C", "S", "H", "C+", "S~", "D+~"])


@st.composite
def layouts(draw, rank: int):
    m2m = tuple(draw(st.permutations(list(range(rank))))) if rank else ()
    fields = {}
    if draw(st.booleans()):
        fields["dim_level_types"] = tuple(draw(st.lists(_dim_level, min_size=1, max_size=3)))
    if draw(st.booleans()):
        tile = st.lists(st.one_of(st.integers(0, 512), st.just(COMBINE_DIM)), max_size=3).map(tuple)
        fields["tiles"] = tuple(draw(st.lists(tile, min_size=1, max_size=3)))
    if draw(st.booleans()):
        fields["tail_padding_alignment"] = draw(st.integers(0, 64))
    if draw(st.booleans()):
        fields["index_primitive_type"] = draw(st.sampled_from(["s32", "u32", "s64", "u64", "u8"]))
    if draw(st.booleans()):
        fields["pointer_primitive_type"] = draw(st.sampled_from(["s32", "u32", "s64", "u64"]))
    if draw(st.booleans()):
        fields["element_size_in_bits"] = draw(st.integers(0, 64))
    if draw(st.booleans()):
        fields["memory_space"] = draw(st.integers(-2, 7))
    if draw(st.booleans()):
        sc = st.builds(SplitConfig, st.integers(0, 4), st.lists(st.integers(0, 100), max_size=3).map(tuple))
        fields["split_configs"] = tuple(draw(st.lists(sc, min_size=1, max_size=2)))
    if draw(st.booleans()):
        fields["dynamic_shape_metadata_prefix_bytes"] = draw(st.integers(0, 64))
    return Layout(m2m, **fields)


@st.composite
def array_shapes(draw):
    etype = draw(st.sampled_from(ARRAY_TYPES))
    rank = draw(st.integers(0, 5))
    dims, dyn = [], []
    for _ in range(rank):
        kind = draw(st.sampled_from(["static", "static", "bounded", "unbounded"]))
        if kind == "unbounded":
            dims.append(UNBOUNDED)
            dyn.append(True)
        else:
            dims.append(draw(st.one_of(st.integers(0, 64), st.integers(0, 2**63 - 1))))
            dyn.append(kind == "bounded")
    layout = draw(layouts(rank)) if draw(st.booleans()) else default_layout(rank)
    return Shape(etype, tuple(dims), tuple(dyn), layout)


@settings(max_examples=300, deadline=None)
@given(array_shapes())
def test_array_shape_text_round_trip(s):
    assert parse_array_shape(str(s)) == s


@settings(max_examples=100, deadline=None)
@given(st.recursive(array_shapes() | st.just(Shape("token")),
                    lambda kids: st.lists(kids, max_size=3).map(Shape.tuple_of), max_leaves=6))
def test_shape_text_round_trip_with_tuples(s):
    assert parse_shape_text(str(s)) == s
