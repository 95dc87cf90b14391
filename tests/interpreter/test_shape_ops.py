"""Shape manipulation: broadcast, reshape, transpose, reverse, slice, concatenate, pad, iota, bitcast
and the dynamic-shape ops, against XLA-made goldens (tests/programs/shape_ops) plus unit tests.

bitcast cannot go through the XLA reference runner (its StableHLO path drops layouts), so it is
tested against the layout document's own example, against the logical ops XLA itself treats as
bitcasts (a transpose is a bitcast when the layouts make it one: the dumps in samples/jax are full
of them), and against hand-derived values.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from golden import PROGRAMS, check_program, programs  # noqa: E402

from hlo_cli.interpreter import run  # noqa: E402
from hlo_cli.ir.shape import parse_array_shape  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("path", programs("shape_ops"), ids=lambda p: p.name)
def test_program(path):
    check_program(path)


# --------------------------------------------------------------------------- bitcast

def _bitcast(src: str, dst: str, x):
    return run(f"HloModule m\nENTRY e {{ p = {src} parameter(0) ROOT r = {dst} bitcast(p) }}", x)


def test_bitcast_layout_document_example():
    # the layout document: [2 x 3] with minor_to_major {0,1} lies in memory as "a d b e c f"
    x = np.array([[0, 1, 2], [3, 4, 5]], np.float32)          # a b c / d e f
    assert _bitcast("f32[2,3]{0,1}", "f32[6]{0}", x).tolist() == [0, 3, 1, 4, 2, 5]
    assert _bitcast("f32[2,3]{1,0}", "f32[6]{0}", x).tolist() == [0, 1, 2, 3, 4, 5]
    back = _bitcast("f32[6]{0}", "f32[2,3]{0,1}", np.array([0, 3, 1, 4, 2, 5], np.float32))
    np.testing.assert_array_equal(back, x)


def test_bitcast_default_layouts_is_a_reshape():
    x = np.arange(24, dtype=np.int32).reshape(2, 3, 4)
    np.testing.assert_array_equal(_bitcast("s32[2,3,4]", "s32[6,4]", x), x.reshape(6, 4))


def test_bitcast_transposing_layouts():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    # same physical buffer, the logical dims swapped: a transpose
    np.testing.assert_array_equal(_bitcast("f32[2,3]{1,0}", "f32[3,2]{0,1}", x), x.T)
    np.testing.assert_array_equal(_bitcast("f32[2,3]{0,1}", "f32[3,2]{1,0}", x), x.T)
    # column-major to column-major of another shape: logical -> physical -> reshape -> logical
    got = _bitcast("f32[2,3]{0,1}", "f32[3,2]{0,1}", x)
    np.testing.assert_array_equal(got, x.T.reshape(-1).reshape(2, 3).T)


def test_bitcast_cnn_dump_shape():
    # from samples/jax/cnn.opt.hlo: f32[8,3,3,8]{3,2,1,0} -> f32[3,3,8,8]{3,1,0,2}
    x = np.random.default_rng(0).standard_normal((8, 3, 3, 8)).astype(np.float32)
    got = _bitcast("f32[8,3,3,8]{3,2,1,0}", "f32[3,3,8,8]{3,1,0,2}", x)
    np.testing.assert_array_equal(got, x.transpose(1, 2, 0, 3))


def test_bitcast_changes_element_type_by_bytes():
    x = np.array([[1.0, -2.0, 0.5], [np.inf, -0.0, 3.0]], np.float32)
    np.testing.assert_array_equal(_bitcast("f32[2,3]{1,0}", "u32[2,3]{1,0}", x), x.view(np.uint32))
    np.testing.assert_array_equal(_bitcast("f32[2,3]{0,1}", "s32[6]{0}", x), x.T.reshape(-1).view(np.int32))
    # element size changes with the byte count kept
    np.testing.assert_array_equal(_bitcast("f32[3]{0}", "u16[3,2]{1,0}", x[0]), x[0].view(np.uint16).reshape(3, 2))


def test_bitcast_operand_defined_elsewhere():
    # the operand's layout comes from its definition when no inline operand shape is written
    text = (ROOT / "samples" / "ops" / "bitcast.transpose_layout.hlo").read_text()
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(run(text, x), x.T)
    nested = """HloModule m
    inner { q = f32[2,3]{0,1} parameter(0) ROOT b = f32[6]{0} bitcast(q) }
    ENTRY e { p = f32[2,3]{0,1} parameter(0) ROOT c = f32[6]{0} call(p), to_apply=inner }"""
    got = run(nested, x)
    assert got.tolist() == [0, 3, 1, 4, 2, 5]


def _is_bitcast_transpose(src, dst, perm) -> bool:
    """XLA's ShapeUtil::TransposeIsBitcast: the layouts make the transpose a pure relabelling."""
    return [perm[d] for d in dst.layout.minor_to_major] == list(src.layout.minor_to_major)


_TRANSPOSE = re.compile(r"= (\S+) transpose\((?:(\S+) )?(%?[\w.\-]+)\), dimensions=\{([\d,]*)\}")
_DEF = re.compile(r"^\s*(?:ROOT )?(%?[\w.\-]+) = (\S+) ")


def _dump_transposes():
    """(operand shape, result shape, permutation) of the transposes in samples/jax/*.opt.hlo that
    XLA's layouts make bitcasts."""
    found = set()
    for path in sorted((ROOT / "samples" / "jax").glob("*.opt.hlo")):
        text = path.read_text()
        shapes = {m.group(1).lstrip("%"): m.group(2) for m in map(_DEF.match, text.splitlines()) if m}
        for m in _TRANSPOSE.finditer(text):
            src = m.group(2) or shapes.get(m.group(3).lstrip("%"))
            if src is None:
                continue
            perm = tuple(int(d) for d in m.group(4).split(","))
            found.add((src, m.group(1), perm))
    return sorted(found)


def test_bitcast_equals_the_transposes_xla_treats_as_bitcasts():
    cases = [c for c in _dump_transposes()
             if _is_bitcast_transpose(parse_array_shape(c[0]), parse_array_shape(c[1]), c[2])]
    assert cases, "no bitcast-like transposes found in samples/jax/*.opt.hlo"
    rng = np.random.default_rng(1)
    for src, dst, perm in cases:
        s = parse_array_shape(src)
        x = rng.standard_normal(s.dims).astype(np.float32) if s.element_type == "f32" else \
            rng.integers(0, 100, s.dims).astype(np.int32)
        if s.element_type not in ("f32", "s32"):
            continue
        np.testing.assert_array_equal(_bitcast(src, dst, x), x.transpose(perm), err_msg=f"{src} -> {dst}")


# --------------------------------------------------------------------------- unit tests

def test_broadcast_is_a_read_only_view():
    r = run("HloModule m\nENTRY e { p = f32[3] parameter(0) ROOT r = f32[1000,3] broadcast(p), dimensions={1} }",
            np.arange(3, dtype=np.float32))
    assert r.shape == (1000, 3) and r.strides[0] == 0
    np.testing.assert_array_equal(r[999], [0, 1, 2])


def test_pad_negative_interior_matches_reference_formula():
    # every element lands at low + i*(interior+1), then [0, size) is kept
    x = np.arange(1, 6, dtype=np.float32)
    for low, high, interior in [(-3, 1, 2), (2, -4, 1), (-9, 0, 1), (0, -9, 0), (-2, -2, 3), (1, 1, 0)]:
        size = max(low + high + 5 + 4 * interior, 0)
        r = run(f"HloModule m\nENTRY e {{ p = f32[5] parameter(0) v = f32[] constant(-1)\n"
                f"ROOT r = f32[{size}] pad(p, v), padding={low}_{high}_{interior} }}", x)
        want = np.full(size, -1, np.float32)
        for i in range(5):
            pos = low + i * (interior + 1)
            if 0 <= pos < size:
                want[pos] = x[i]
        np.testing.assert_array_equal(r, want, err_msg=f"padding={low}_{high}_{interior}")


def test_iota_every_dimension_and_narrow_types():
    r = run("HloModule m\nENTRY e { ROOT r = s32[2,3,4] iota(), iota_dimension=2 }")
    np.testing.assert_array_equal(r, np.broadcast_to(np.arange(4), (2, 3, 4)))
    r = run("HloModule m\nENTRY e { ROOT r = s4[20] iota(), iota_dimension=0 }")
    assert r.dtype == ml_dtypes.int4
    assert r.astype(int).tolist() == [(i + 8) % 16 - 8 for i in range(20)]
    r = run("HloModule m\nENTRY e { ROOT r = f16[3000] iota(), iota_dimension=0 }")
    np.testing.assert_array_equal(r, np.arange(3000).astype(np.float16))     # round to nearest even


def test_reverse_and_transpose_compose():
    x = np.arange(24, dtype=np.int8).reshape(2, 3, 4)
    r = run("HloModule m\nENTRY e { p = s8[2,3,4] parameter(0) t = s8[4,2,3] transpose(p), dimensions={2,0,1}\n"
            "ROOT r = s8[4,2,3] reverse(t), dimensions={0,2} }", x)
    np.testing.assert_array_equal(r, x.transpose(2, 0, 1)[::-1, :, ::-1])


def test_set_dimension_size_and_dynamic_reshape_values():
    x = np.arange(32, dtype=np.float32).reshape(8, 4)
    r = run("HloModule m\nENTRY e { p = f32[8,4] parameter(0) n = s32[] parameter(1)\n"
            "ROOT d = f32[<=8,4] set-dimension-size(p, n), dimensions={0} }", x, np.int32(3))
    np.testing.assert_array_equal(r, x[:3])
    # sizes outside [0, bound] act as the bound / zero
    r = run("HloModule m\nENTRY e { p = f32[8,4] parameter(0) n = s32[] parameter(1)\n"
            "ROOT d = f32[<=8,4] set-dimension-size(p, n), dimensions={0} }", x, np.int32(100))
    assert r.shape == (8, 4)
    # dynamic-reshape takes the first prod(sizes) elements (measured: XLA reduces [[1,2],[3,4],[5,6]])
    r = run("HloModule m\nENTRY e { p = f32[12] parameter(0) a = s32[] parameter(1) b = s32[] parameter(2)\n"
            "ROOT d = f32[<=3,<=4] dynamic-reshape(p, a, b) }", np.arange(1, 13, dtype=np.float32),
            np.int32(3), np.int32(2))
    np.testing.assert_array_equal(r, [[1, 2], [3, 4], [5, 6]])


def test_dynamic_values_against_xla_valid_region():
    """XLA hands dynamic results back in a buffer of the bound's size whose first elements are the
    actual array, row-major (the rest is garbage): compare those."""
    ref = pytest.importorskip("hlo_cli.tools.xla_reference")
    pytest.importorskip("jax")
    text = """HloModule m
    ENTRY e { p = f32[12] parameter(0) a = s32[] parameter(1) b = s32[] parameter(2)
      r = f32[<=3,<=4] dynamic-reshape(p, a, b)
      ROOT t = f32[<=3,<=4] set-dimension-size(r, a), dimensions={0} }"""
    x = np.arange(1, 13, dtype=np.float32)
    for a, b in [(3, 4), (2, 4), (3, 2), (2, 2), (1, 1)]:
        ours = run(text, x, np.int32(a), np.int32(b))
        xla = ref.run_with_xla(text, [x, np.int32(a), np.int32(b)])[0]
        assert ours.shape == (a, b)
        np.testing.assert_array_equal(ours.reshape(-1), xla.reshape(-1)[:ours.size], err_msg=f"sizes {a},{b}")


def test_programs_exist_for_every_shape_opcode():
    names = {p.name.split(".")[0] for p in programs("shape_ops")}
    for op in ("broadcast", "reshape", "transpose", "reverse", "slice", "concatenate", "pad", "iota",
               "get-dimension-size", "set-dimension-size", "dynamic-reshape"):
        assert op in names, op
    assert (PROGRAMS / "shape_ops").is_dir()
