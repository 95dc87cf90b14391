"""The syntax corpus: every module XLA accepts parses, and the IR says what the text says.

samples/syntax/*.hlo, samples/ops/*.hlo and samples/jax/*.hlo are modules XLA accepts;
samples/syntax/extended/*.hlo are modules XLA rejects, of which hlo accepts exactly two documented
extensions (the short layout `f16[10,2]<1,0>` and compact tuple access `%x#0`).
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from hlo_cli.errors import HloSyntaxError
from hlo_cli.ir.attributes import ComputationRef, Metadata
from hlo_cli.ir.dtypes import ELEMENT_TYPES
from hlo_cli.ir.shape import COMBINE_DIM, UNBOUNDED, parse_array_shape, parse_shape_text
from hlo_cli.parser import parse
from hlo_cli.sources.reading import read_source

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"
VALID = sorted([*(SAMPLES / "syntax").glob("*.hlo"), *(SAMPLES / "ops").glob("*.hlo"),
                *(SAMPLES / "jax").glob("*.hlo")])
EXTENDED = sorted((SAMPLES / "syntax" / "extended").glob("*.hlo"))
# hlo's documented extensions (the product spec asks for them); XLA rejects these files
EXTENSIONS = {"layout_short_form.hlo", "layout_short_form_parameter.hlo", "tuple_access_hash.hlo",
              "tuple_access_hash_bare.hlo"}


def load(rel: str):
    text, name = read_source(str(SAMPLES / rel))
    return parse(text, name)


def comp(module, name):
    return module.computation_map[name]


def inst(computation, name):
    return computation.by_name[name]


def bits(value, dtype):
    a = np.asarray(value, dtype=dtype)
    return int(a.view({1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[a.itemsize]))


# ----------------------------------------------------------------------------- whole corpus

@pytest.mark.parametrize("path", VALID, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_valid_module_parses(path):
    m = load(f"{path.parent.name}/{path.name}")
    assert m.computations
    entry = m.entry_computation
    assert entry.root in entry.by_name
    for c in m.computations:
        assert len(c.by_name) == len(c.instructions), f"{c.name}: instruction names are unique"
        seen = set()
        for i in c.instructions:
            assert all(o in seen for o in i.operands), f"{c.name}/{i.name}: operands come first"
            seen.add(i.name)
            for called in i.called_computations:
                assert called in m.computation_map


@pytest.mark.parametrize("path", EXTENDED, ids=lambda p: p.name)
def test_extended_module(path):
    """XLA rejects all of these; hlo accepts only its documented extensions."""
    if path.name in EXTENSIONS:
        load(f"syntax/extended/{path.name}")
    else:
        with pytest.raises(HloSyntaxError) as ei:
            load(f"syntax/extended/{path.name}")
        d = ei.value.diagnostics[0]
        assert d.line > 0 and d.column > 0 and d.message


def test_every_extended_file_is_classified():
    names = {p.name for p in EXTENDED}
    assert EXTENSIONS <= names


# ----------------------------------------------------------------------------- module structure

def test_stack_frames_resolve_to_file_and_line():
    m = load("syntax/stack_frames.hlo")
    sf = m.stack_frames
    assert sf.file_names == {1: "model.py", 2: "/usr/lib/python3/site-packages/lib.py"}
    assert sf.function_names == {1: "forward", 2: "helper"}
    assert sf.resolve(2) == [("/usr/lib/python3/site-packages/lib.py", "helper", 77, 0), ("model.py", "forward", 10, 4)]
    assert sf.resolve(1) == [("model.py", "forward", 10, 4)]
    main = m.entry_computation
    assert isinstance(inst(main, "p").attrs["metadata"], Metadata)
    assert inst(main, "p").attrs["metadata"].stack_frame_id == 2
    assert inst(main, "e").attrs["metadata"].stack_frame_id == 1


def test_empty_stack_frame_sections():
    m = load("syntax/stack_frames_empty.hlo")
    assert not m.stack_frames


def test_computations_forms():
    m = load("syntax/computations.hlo")
    assert m.entry == "main"
    assert [c.name for c in m.computations] == ["add_f32", "max_f32", "main", "const_fn", "other_thread", "tuple_fn"]
    main = comp(m, "main")
    # ENTRY in the middle, ROOT not last
    assert main.is_entry and main.root == "r" and main.instructions[-1].name == "unused" and main.root_explicit
    # no ROOT: the last instruction is the root
    const_fn = comp(m, "const_fn")
    assert const_fn.root == "k2" and not const_fn.root_explicit and const_fn.params == ()
    # signatures as written
    assert [n for n, _ in comp(m, "max_f32").params] == ["a", "b"]
    assert comp(m, "add_f32").params is None
    assert comp(m, "tuple_fn").result_shape == parse_shape_text("(s32[], f32[])")
    assert comp(m, "other_thread").result_shape == parse_array_shape("f32[2,3]{1,0}")
    # execution thread
    assert comp(m, "other_thread").execution_thread == "host"
    assert main.execution_thread is None
    assert inst(main, "r").attrs["to_apply"] == ComputationRef("add_f32")


def test_no_header():
    m = load("syntax/no_header.hlo")
    assert not m.has_header and m.entry == "main"
    assert [c.name for c in m.computations] == ["helper", "main"]


def test_no_header_entry():
    m = load("syntax/no_header_entry.hlo")
    assert not m.has_header and m.entry_computation.is_entry


def test_entry_first():
    m = load("syntax/entry_first_no_signature.hlo")
    assert m.entry == "main" and m.computations[0].name == "main"


def test_no_entry_keyword_makes_the_last_computation_the_entry():
    m = load("syntax/no_entry_keyword.hlo")
    assert m.entry == "main" and not any(c.is_entry for c in m.computations)


def test_single_instruction():
    m = load("syntax/single_instruction.hlo")
    (c,) = m.computations
    assert [(i.name, i.opcode) for i in c.instructions] == [("lhs", "parameter"), ("rhs", "parameter"), ("sum", "add")]
    assert [i.parameter_number for i in c.parameters] == [0, 1]
    m = load("syntax/single_instruction_anonymous.hlo")
    (c,) = m.computations
    assert c.root_instruction.opcode == "multiply" and c.root_instruction.operands == ("_0", "_1")


# ----------------------------------------------------------------------------- lifting

def test_inline_computations_are_lifted():
    """Inline bodies become computations named as XLA names them: _, _.1, _.2, ..."""
    m = load("syntax/attr_inline_computation.hlo")
    main = m.entry_computation
    r = inst(main, "r")
    assert r.attrs["to_apply"] == ComputationRef("_")
    body = comp(m, "_")
    assert [i.name for i in body.instructions] == ["a", "b", "s"] and body.root == "s"
    # the body's instructions keep their place in the file
    assert (body.by_name["a"].loc.line, body.by_name["a"].loc.column) == (12, 5)
    mapped = comp(m, "_.1")
    assert (mapped.by_name["p"].loc.line, mapped.by_name["p"].loc.column) == (16, 49)
    c = inst(main, "c")
    assert c.attrs["branch_computations"] == (ComputationRef("_.2"), ComputationRef("br1"))
    assert comp(m, "_.2").root == "q"


def test_nested_operands_are_lifted_before_their_users():
    m = load("syntax/operands_nested.hlo")
    main = m.entry_computation
    names = [i.name for i in main.instructions]
    a = inst(main, "a")
    assert a.operands == ("multiply.anon", "negate.anon")
    assert names.index("multiply.anon") < names.index("a")
    mul = inst(main, "multiply.anon")
    assert mul.opcode == "multiply" and mul.operands == ("x", "y") and mul.shape == parse_array_shape("f32[4]")
    # written without a shape: inferred from its operand, as XLA does
    assert inst(main, "negate.anon").shape == parse_array_shape("f32[4]")
    b = inst(main, "b")
    chain = inst(main, b.operands[0])
    assert chain.opcode == "exponential" and inst(main, chain.operands[0]).opcode == "log"
    assert inst(main, b.operands[1]).literal.value.tolist() == [1, 2, 3, 4]
    assert inst(main, inst(main, "d").operands[0]).opcode == "parameter"


def _tuple_access(m):
    main = m.entry_computation
    (gte,) = [i for i in main.instructions if i.opcode == "get-tuple-element"]
    user = main.instructions[main.instructions.index(gte) + 1]
    return main, gte, user


@pytest.mark.parametrize("rel", ["syntax/extended/tuple_access_hash.hlo",
                                 "syntax/extended/tuple_access_hash_bare.hlo"])
def test_compact_tuple_access_files(rel):
    m = load(rel)
    main, gte, user = _tuple_access(m)
    t = inst(main, "t")
    assert gte.operands == ("t",) and gte.attrs["index"] == 0
    assert gte.shape == t.shape.tuple_shapes[0]
    assert user.operands == (gte.name,) and gte.name not in ("t", user.name)


def test_compact_tuple_access_is_shared_and_chains():
    m = parse("""HloModule m
ENTRY main {
  t = (f32[2], (s32[], pred[])) parameter(0)
  t.0 = f32[2] parameter(1)
  a = f32[2] negate(%t#0)
  b = f32[2] add(t#0, a)
  c = pred[] not(%t#1#1)
  ROOT r = (f32[2], pred[], f32[2]) tuple(b, c, t.0)
}""")
    main = m.entry_computation
    names = [i.name for i in main.instructions]
    gtes = [i for i in main.instructions if i.opcode == "get-tuple-element"]
    assert len(gtes) == 3                                   # t#0 once, t#1, then #1 of that
    first = gtes[0]
    assert first.name not in ("t.0",) and first.name in names   # a fresh name
    assert names.index(first.name) == names.index("a") - 1      # just before its first user
    assert inst(main, "a").operands == (first.name,) and inst(main, "b").operands == (first.name, "a")
    assert gtes[2].operands == (gtes[1].name,) and gtes[2].shape == parse_array_shape("pred[]")
    assert inst(main, "c").operands == (gtes[2].name,)
    assert (first.loc.line, first.loc.column) == (5, 21)


def test_compact_tuple_access_errors():
    with pytest.raises(HloSyntaxError, match="not a tuple"):
        parse("HloModule m\nENTRY e {\n  x = f32[2] parameter(0)\n  ROOT y = f32[2] negate(x#0)\n}")
    with pytest.raises(HloSyntaxError, match="index 2 is out of range"):
        parse("HloModule m\nENTRY e {\n  x = (f32[], f32[]) parameter(0)\n  ROOT y = f32[] negate(x#2)\n}")
    with pytest.raises(HloSyntaxError, match="used before its definition"):
        parse("HloModule m\nENTRY e {\n  ROOT y = f32[] negate(x#0)\n  x = (f32[]) parameter(0)\n}")


# ----------------------------------------------------------------------------- shapes and layouts

def test_dynamic_dimensions():
    main = load("syntax/shapes_dynamic.hlo").entry_computation
    a = inst(main, "a").shape
    assert a.dims == (16, 8) and a.dynamic == (True, False)
    assert inst(main, "b").shape.dims == (UNBOUNDED, 8) and inst(main, "b").shape.dynamic == (True, False)
    assert inst(main, "c").shape.dynamic == (True, True, True)
    assert inst(main, "f").shape.dims == (1, 0, 3)
    assert inst(main, "g").shape == a.without_layout() or inst(main, "g").shape.dims == (16, 8)


def test_layouts_with_tiles_and_suffixes():
    main = load("syntax/layouts.hlo").entry_computation
    lay = {i.name: i.shape.layout for i in main.instructions}
    assert lay["a"].tiles == ((8, 128),) and lay["a"].minor_to_major == (1, 0)
    assert lay["b"].tiles == ((8, 128), (2, 1)) and lay["b"].minor_to_major == (0, 1)
    assert lay["c"].tiles == ((8, COMBINE_DIM), (2, 1), (1,))
    assert lay["d"].element_size_in_bits == 4
    assert lay["e"].memory_space == 1
    assert lay["f"].tail_padding_alignment == 8
    assert lay["g"].index_primitive_type == "s32" and lay["h"].pointer_primitive_type == "u32"
    assert [(s.dimension, s.split_indices) for s in lay["i"].split_configs] == [(0, (8, 12)), (1, (4,))]
    assert lay["j"].dynamic_shape_metadata_prefix_bytes == 8
    assert lay["k"].dim_level_types == ("D", "C+~")
    full = lay["l"]
    assert (full.tiles, full.tail_padding_alignment, full.element_size_in_bits, full.memory_space) == \
        (((8,),), 2, 32, 3)
    assert lay["m"].memory_space == 1 and lay["m"].minor_to_major == ()
    assert lay["n"].tiles == ((128,),)
    assert lay["o"].is_plain and lay["p"].minor_to_major == (0,)
    assert lay["q"].tiles == ((),)
    assert lay["r"].memory_space == -1
    assert lay["s"].minor_to_major == (0, 2, 1)


@pytest.mark.parametrize("rel", ["syntax/extended/layout_short_form.hlo",
                                 "syntax/extended/layout_short_form_parameter.hlo"])
def test_short_layout(rel):
    p = load(rel).entry_computation.root_instruction
    assert p.shape.layout.minor_to_major == (1, 0) and p.shape.layout.is_plain


def test_every_element_type():
    m = load("syntax/element_types.hlo")
    types = {i.shape.element_type for i in m.entry_computation.instructions if not i.shape.is_tuple}
    assert types == set(ELEMENT_TYPES)


def test_tuple_shapes():
    main = load("syntax/shapes_tuples.hlo").entry_computation
    assert any(i.shape.is_tuple and any(s.is_tuple for s in i.shape.tuple_shapes) for i in main.instructions)


# ----------------------------------------------------------------------------- literals

def test_elided_constants():
    main = load("syntax/literals_elided.hlo").entry_computation
    for name in "abcd":
        lit = inst(main, name).literal
        assert lit.elided and lit.value is None
    assert inst(main, "b").literal.shape.dims == (4, 5)


def test_scalar_literals_of_every_type():
    main = load("syntax/literals_scalars.hlo").entry_computation
    v = {i.name: i.literal.value for i in main.instructions if i.opcode == "constant"}
    assert v["a"].item() is True and v["b"].item() is False
    assert v["c"].item() == -1 and v["f"].item() == -128 and v["i"].item() == -2**63
    assert v["p"].item() == 2**64 - 1 and v["p"].dtype == np.uint64
    assert v["q"].item() == 65504 and v["r"].astype(np.float32).item() == -3.140625
    assert v["w"].astype(np.float32).item() == -448
    assert v["ac"].astype(np.float32).item() == 1024
    assert v["af"].astype(np.float32).item() == -6
    assert v["ag"].item() == complex(1, -2.5) and v["ag"].dtype == np.complex64
    assert v["ah"].item() == complex(0.1, 1e100)
    assert v["ak"].item() == 5e-324
    assert v["al"].item() == 100 and v["am"].item() == -0.5


def test_special_float_literals():
    main = load("syntax/literals_special_floats.hlo").entry_computation
    v = {i.name: i.literal.value for i in main.instructions if i.opcode == "constant"}
    assert bits(v["a"], np.float32) == 0x7FC00000 and bits(v["b"], np.float32) == 0xFFC00000
    assert bits(v["c"], np.float32) == 0x7F800001 and bits(v["d"], np.float32) == 0xFFFFFFFF
    assert v["e"].item() == math.inf and v["f"].item() == -math.inf
    assert bits(v["g"], np.float64) == 0x7FF8000000000001
    assert bits(v["h"], v["h"].dtype) == 0x7F83
    assert bits(v["i"], np.float16) == 0xFDFF
    k = v["k"]
    assert [bits(x, np.float32) for x in k] == [0x7FC00000, 0xFFC00000, 0x7F800000, 0xFF800000, 0x7FC00000,
                                                0xFF800002]
    c = v["l"].item()
    assert c.real == -math.inf and math.isnan(c.imag) and math.copysign(1, c.imag) < 0
    assert v["m"].tolist() == [complex(math.inf, 1), complex(0, -math.inf)]
    assert [bits(x, v["n"].dtype) for x in v["n"]] == [0x7F, 0xFF]
    assert bits(v["p"], v["p"].dtype) == 0xFF
    assert math.isnan(float(v["q"].astype(np.float32)))        # f8e4m3fn has no inf: inf becomes nan
    assert float(v["r"].astype(np.float32)) == 6               # f4e2m1fn saturates


def test_array_literals():
    main = load("syntax/literals_arrays.hlo").entry_computation
    v = {i.name: i.literal.value for i in main.instructions if i.opcode == "constant"}
    assert v["r2"].tolist() == [[1, 2, 3], [4, 5, 6]]
    assert v["r5"].shape == (2, 1, 1, 1, 2) and v["r5"].reshape(-1).tolist() == [1, 2, 3, 4]
    assert v["bare"].tolist() == [6]
    assert v["e1"].shape == (2, 0) and v["e3"].shape == (0, 0, 0)
    assert v["lay"].tolist() == [[1, 2], [3, 4]]
    assert v["c"][1, 0] == 5 + 6j
    assert v["p"].tolist() == [[True, False], [False, True]]


def test_tuple_literals():
    main = load("syntax/literals_tuples.hlo").entry_computation
    tuples = [i.literal for i in main.instructions if i.opcode == "constant" and i.shape.is_tuple]
    assert tuples and all(isinstance(t.value, tuple) for t in tuples)


# ----------------------------------------------------------------------------- attributes

def test_header_attributes():
    m = load("syntax/header_attrs.hlo")
    assert m.attrs["is_scheduled"] is True
    assert "entry_computation_layout" in m.attrs and "input_output_alias" in m.attrs


def test_instruction_locations():
    m = load("syntax/computations.hlo")
    r = inst(comp(m, "main"), "r")
    assert (r.loc.line, r.loc.column) == (21, 8)
    assert str(r.loc).endswith("computations.hlo:21:8")
