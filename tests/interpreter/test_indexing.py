"""Indexing: dynamic-slice, dynamic-update-slice, gather, scatter, against XLA-made goldens
(tests/programs/indexing) plus unit tests of the measured edge cases and of vectorization.

What XLA CPU does, measured (jaxlib 0.10.2) and pinned by the programs:
- dynamic-slice / dynamic-update-slice / gather clamp each start into [0, dim - size]; unsigned
  index types are unsigned (u32 0xFFFFFFFF clamps to dim - size, it is not -1);
- scatter skips any update window not entirely in bounds, never clamps;
- scatter duplicates combine sequentially in row-major scatter-index order as combiner(current,
  update); with the assignment combiner the last update wins; the hints change nothing;
- empty index vectors: map(to_apply, operand, updates) when the updates have the operand's shape,
  only the last update with one-element windows (XLA CPU quirks, see indexing.py).
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from golden import check_program, programs  # noqa: E402

from hlo_cli.interpreter import run  # noqa: E402
from hlo_cli.interpreter.registry import rule_for  # noqa: E402
from hlo_cli.parser import parse  # noqa: E402


def _missing_rules(path: Path) -> list[str]:
    module = parse(path.read_text(), str(path))
    return sorted({i.opcode for _, i in module.instructions() if rule_for(i.opcode) is None})


@pytest.mark.parametrize("path", programs("indexing"), ids=lambda p: p.name)
def test_program(path):
    assert not _missing_rules(path)
    check_program(path)


def _scatter(combiner: str, ty: str, n: int, m: int, extra: str = "") -> str:
    return f"""HloModule m
c {{ a = {ty}[] parameter(0) {combiner} }}
ENTRY e {{ p = {ty}[{m}] parameter(0) i = s32[{n},1] parameter(1) u = {ty}[{n}] parameter(2)
  ROOT s = {ty}[{m}] scatter(p, i, u), update_window_dims={{}}, inserted_window_dims={{0}},
    scatter_dims_to_operand_dims={{0}}, index_vector_dim=1{extra}, to_apply=c }}"""


ADD = "b = {t}[] parameter(1) ROOT r = {t}[] add(a, b)"
ASSIGN = "ROOT b = {t}[] parameter(1)"


# --------------------------------------------------------------------------- dynamic-slice

def test_dynamic_slice_clamps_every_index_type():
    x = np.arange(10, dtype=np.int32)
    for ty, vals in [("s32", [-5, 0, 7, 8, 100, -2**31, 2**31 - 1]), ("u32", [7, 2**31, 2**32 - 1]),
                     ("s8", [-128, 127]), ("u8", [255]), ("s64", [-2**63, 2**63 - 1]),
                     ("u64", [2**64 - 1, 2**63])]:
        text = f"HloModule m\nENTRY e {{ p = s32[10] parameter(0) i = {ty}[] parameter(1)\n" \
               f"ROOT d = s32[3] dynamic-slice(p, i), dynamic_slice_sizes={{3}} }}"
        for v in vals:
            start = min(max(v, 0), 7)
            got = run(text, x, np.array(v).astype(np.dtype(ty.replace("s", "int").replace("u", "uint"))))
            assert got.tolist() == [start, start + 1, start + 2], (ty, v)


def test_dynamic_slice_legacy_index_vector_form():
    x = np.arange(20, dtype=np.int32).reshape(4, 5)
    r = run("HloModule m\nENTRY e { p = s32[4,5] parameter(0) i = s32[2] parameter(1)\n"
            "ROOT d = s32[2,2] dynamic-slice(p, i), dynamic_slice_sizes={2,2} }", x, np.array([3, -1], np.int32))
    np.testing.assert_array_equal(r, x[2:4, 0:2])


def test_dynamic_update_slice_does_not_touch_its_operand():
    x = np.zeros((4, 4), np.float32)
    r = run("HloModule m\nENTRY e { p = f32[4,4] parameter(0) u = f32[2,2] parameter(1) i = s32[] parameter(2)\n"
            "ROOT d = f32[4,4] dynamic-update-slice(p, u, i, i) }", x, np.ones((2, 2), np.float32), np.int32(9))
    assert r[2:, 2:].sum() == 4 and r.sum() == 4 and x.sum() == 0


# --------------------------------------------------------------------------- gather

def test_gather_large_batch_is_vectorized():
    rng = np.random.default_rng(0)
    table = rng.standard_normal((1000, 16)).astype(np.float32)
    ids = rng.integers(-10, 1010, 200_000).astype(np.int32)
    text = """HloModule m
    ENTRY e { t = f32[1000,16] parameter(0) i = s32[200000] parameter(1)
      ROOT g = f32[200000,16] gather(t, i), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0},
        index_vector_dim=1, slice_sizes={1,16} }"""
    t0 = time.perf_counter()
    r = run(text, table, ids)
    assert time.perf_counter() - t0 < 5
    np.testing.assert_array_equal(r, table[np.clip(ids, 0, 999)])


# --------------------------------------------------------------------------- scatter

def test_scatter_assignment_last_update_wins():
    rng = np.random.default_rng(1)
    idx = rng.integers(0, 7, 5000).astype(np.int32)
    upd = rng.standard_normal(5000).astype(np.float32)
    r = run(_scatter(ASSIGN.format(t="f32"), "f32", 5000, 7), np.zeros(7, np.float32), idx[:, None], upd)
    want = np.zeros(7, np.float32)
    for k in range(7):
        hits = np.nonzero(idx == k)[0]
        if hits.size:
            want[k] = upd[hits[-1]]
    np.testing.assert_array_equal(r, want)


def test_scatter_add_is_sequential_and_fast():
    rng = np.random.default_rng(2)
    n = 300_000
    idx = rng.integers(-2, 12, n).astype(np.int32)
    upd = (rng.standard_normal(n) * 10.0 ** rng.integers(-4, 8, n)).astype(np.float32)
    op = rng.standard_normal(10).astype(np.float32)
    t0 = time.perf_counter()
    r = run(_scatter(ADD.format(t="f32"), "f32", n, 10), op, idx[:, None], upd)
    assert time.perf_counter() - t0 < 5
    ok = (idx >= 0) & (idx < 10)
    want = op.copy()
    np.add.at(want, idx[ok], upd[ok])           # one update after the other, rounding each time
    np.testing.assert_array_equal(r, want)


def test_scatter_generic_combiner_many_duplicates():
    # an unrecognized combiner (b - a) with 2000 duplicates of one target, in sequence
    n = 2000
    upd = np.arange(n, dtype=np.int32)
    r = run(_scatter("b = s32[] parameter(1) ROOT r = s32[] subtract(b, a)", "s32", n, 2),
            np.array([5, 0], np.int32), np.zeros((n, 1), np.int32), upd)
    acc = 5
    for u in upd.tolist():
        acc = u - acc
    assert r.tolist() == [acc, 0]


def test_scatter_combiner_ignoring_its_first_parameter():
    # combiner(current, update) = -update: the combiner's first parameter is unused
    text = _scatter("b = f32[] parameter(1) ROOT r = f32[] negate(b)", "f32", 3, 2)
    r = run(text, np.zeros(2, np.float32), np.array([[0], [1], [0]], np.int32), np.array([1, 2, 3], np.float32))
    assert r.tolist() == [-3, -2]


def test_scatter_does_not_touch_its_operand():
    op = np.zeros(4, np.float32)
    run(_scatter(ADD.format(t="f32"), "f32", 2, 4), op, np.array([[1], [1]], np.int32), np.ones(2, np.float32))
    assert op.sum() == 0
