"""The reduction family (reduce, reduce-window, select-and-scatter, map, sort, topk, scan) and the
shared machinery for called computations (hlo_cli/interpreter/computations.py).

Programs in tests/programs/reduction are checked against XLA's outputs (golden files); the unit
tests below pin down recognition, the generic vectorized paths and edge cases without XLA.
"""
from __future__ import annotations

import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from golden import check_program, programs  # noqa: E402

from hlo_cli.interpreter import computations as C  # noqa: E402
from hlo_cli.interpreter import run  # noqa: E402
from hlo_cli.interpreter.evaluator import EvalContext  # noqa: E402
from hlo_cli.ir.attributes import WindowDim  # noqa: E402
from hlo_cli.parser import parse  # noqa: E402

PROGRAMS = programs("reduction")


@pytest.mark.parametrize("path", PROGRAMS, ids=[p.stem for p in PROGRAMS])
def test_program(path):
    check_program(path)


def _binary(dt, op, a="a", b="b", name="f"):
    return f"{name} {{\n  a = {dt}[] parameter(0)\n  b = {dt}[] parameter(1)\n  ROOT r = {dt}[] {op}({a}, {b})\n}}\n"


def _module(comps: str, entry: str):
    return parse(f"HloModule m\n\n{comps}\nENTRY main {{\n{entry}\n}}\n")


# ------------------------------------------------------------------------ recognition

@pytest.mark.parametrize("op", C.BINARY_OPS)
def test_recognize_binary(op):
    dt = "pred" if op in ("and", "or", "xor") else "f32"
    m = _module(_binary(dt, op) + _binary(dt, op, "b", "a", "g"),
                f"  x = {dt}[] parameter(0)\n  ROOT y = {dt}[] copy(x)")
    assert C.recognize_binary(m, "f") == op
    assert C.recognize_binary(m, "g") == op


def test_recognize_binary_rejects_others():
    comps = (_binary("f32", "subtract") +
             "h {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  s = f32[] add(a, b)\n"
             "  ROOT n = f32[] negate(s)\n}\n"
             "k {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT s = f32[] add(a, a)\n}\n")
    m = _module(comps, "  x = f32[] parameter(0)\n  ROOT y = f32[] copy(x)")
    assert C.recognize_binary(m, "f") is None
    assert C.recognize_binary(m, "h") is None
    assert C.recognize_binary(m, "k") is None


_ARGMAX = """argmax {
  v0 = f32[] parameter(0)
  v1 = f32[] parameter(2)
  gt = pred[] compare(v0, v1), direction=GT
  ne = pred[] compare(v0, v0), direction=NE
  keep = pred[] or(gt, ne)
  v = f32[] select(keep, v0, v1)
  eq = pred[] compare(v0, v1), direction=EQ
  i0 = s32[] parameter(1)
  i1 = s32[] parameter(3)
  lt = pred[] compare(i0, i1), direction=LT
  tie = pred[] and(eq, lt)
  keepi = pred[] or(keep, tie)
  i = s32[] select(keepi, i0, i1)
  ROOT t = (f32[], s32[]) tuple(v, i)
}
gtonly {
  v0 = f32[] parameter(0)
  i0 = s32[] parameter(1)
  v1 = f32[] parameter(2)
  i1 = s32[] parameter(3)
  gt = pred[] compare(v0, v1), direction=GT
  v = f32[] select(gt, v0, v1)
  i = s32[] select(gt, i0, i1)
  ROOT t = (f32[], s32[]) tuple(v, i)
}
pair {
  a0 = f32[] parameter(0)
  b0 = s32[] parameter(1)
  a1 = f32[] parameter(2)
  b1 = s32[] parameter(3)
  mn = f32[] minimum(a0, a1)
  mx = s32[] maximum(b1, b0)
  ROOT t = (f32[], s32[]) tuple(mn, mx)
}
"""


def _ec(comps: str):
    m = _module(comps, "  x = f32[] parameter(0)\n  ROOT y = f32[] copy(x)")
    return EvalContext(m)


def test_reducer_recognition():
    ec = _ec(_ARGMAX)
    assert C.reducer(ec, "argmax", 2).pair == "argmax"
    assert C.reducer(ec, "gtonly", 2).generic
    r = C.reducer(ec, "pair", 2)
    assert r.kinds == (("minimum", False), ("maximum", True)) and not r.generic


# ------------------------------------------------------------------------ reduce semantics

def test_init_counted_once_per_window_of_32():
    """XLA CPU's tree rewrite: 1000 ones + init 10 -> 32 windows + the final reduce = 33 inits."""
    text = ("HloModule m\n" + _binary("s32", "add") +
            "ENTRY e {\n  x = s32[1000] parameter(0)\n  i = s32[] constant(10)\n"
            "  ROOT r = s32[] reduce(x, i), dimensions={0}, to_apply=f\n}\n")
    assert int(run(text, np.ones(1000, np.int32))) == 1330
    text100k = text.replace("1000]", "100000]")
    assert int(run(text100k, np.ones(100000, np.int32))) == 100000 + 10 * (3125 + 98 + 4 + 1)


def _add_reduce(et, dims, red, init):
    out = ",".join(str(d) for i, d in enumerate(dims) if i not in red)
    return ("HloModule m\n" + _binary(et, "add") +
            f"ENTRY e {{\n  x = {et}[{','.join(map(str, dims))}] parameter(0)\n  i = {et}[] constant({init})\n"
            f"  ROOT r = {et}[{out}] reduce(x, i), dimensions={{{','.join(map(str, red))}}}, to_apply=f\n}}\n")


@pytest.mark.parametrize("et,dt", [("f32", np.float32), ("f64", np.float64)])
def test_large_float_sums_add_the_init_once(et, dt):
    """From 4096 input elements on (the whole input, not the row), XLA CPU's f32/f64 add-reduces
    add the init once to the sum; below, once per window of 32 and once more."""
    assert float(run(_add_reduce(et, (2, 2048), (1,), 10), np.ones((2, 2048), dt))[0]) == 2058
    assert float(run(_add_reduce(et, (2, 2047), (1,), 10), np.ones((2, 2047), dt))[0]) == 2047 + 10 * (64 + 2 + 1)
    assert float(run(_add_reduce(et, (64, 64), (0,), 10), np.ones((64, 64), dt))[0]) == 74
    assert float(run(_add_reduce(et, (4095,), (0,), 10), np.ones(4095, dt))) == 4095 + 10 * (128 + 4 + 1)
    # the init comes last: 2^24 + 4097 in f32 rounds once (not 4097 times)
    big = run(_add_reduce(et, (4097,), (0,), 16777216), np.ones(4097, dt))
    assert float(big) == float(dt(16777216) + dt(4097))
    # the elements are summed from +0: -0s and an init of -0 give +0
    z = run(_add_reduce(et, (4096,), (0,), "-0"), np.full(4096, -0.0, dt))
    assert z == 0 and not np.signbit(z)
    z = run(_add_reduce(et, (4095,), (0,), "-0"), np.full(4095, -0.0, dt))
    assert z == 0 and np.signbit(z)


def test_large_integer_sums_keep_the_windows():
    x = np.ones((2, 2048), np.int32)
    assert int(run(_add_reduce("s32", (2, 2048), (1,), 10), x)[0]) == 2048 + 10 * (64 + 2 + 1)


@pytest.mark.parametrize("op", ["add", "multiply", "maximum"])
def test_reduce_of_size_one_dimensions_ignores_the_init(op):
    """XLA's simplifier makes such a reduce a reshape, whatever the reducer and the init."""
    text = ("HloModule m\n" + _binary("f32", op) +
            "ENTRY e {\n  x = f32[3,1,5] parameter(0)\n  i = f32[] constant(10)\n"
            "  ROOT r = f32[3,5] reduce(x, i), dimensions={1}, to_apply=f\n}\n")
    x = np.arange(15, dtype=np.float32).reshape(3, 1, 5)
    np.testing.assert_array_equal(run(text, x), x.reshape(3, 5))


def test_fold_is_sequential_from_init():
    """A non-commutative reducer exposes the order: ((init - x0) - x1) - ..."""
    text = ("HloModule m\n" + _binary("f32", "subtract") +
            "ENTRY e {\n  x = f32[5] parameter(0)\n  i = f32[] constant(100)\n"
            "  ROOT r = f32[] reduce(x, i), dimensions={0}, to_apply=f\n}\n")
    assert float(run(text, np.array([1, 2, 4, 8, 16], np.float32))) == 69.0


def test_float_sum_matches_sequential_order_bitwise():
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((4, 30)) * np.exp(4 * rng.standard_normal((4, 30)))).astype(np.float32)
    text = ("HloModule m\n" + _binary("f32", "add") +
            "ENTRY e {\n  x = f32[4,30] parameter(0)\n  i = f32[] constant(0)\n"
            "  ROOT r = f32[4] reduce(x, i), dimensions={1}, to_apply=f\n}\n")
    want = np.zeros(4, np.float32)
    for j in range(30):
        want = (want + x[:, j]).astype(np.float32)
    assert np.array_equal(run(text, x), want)


def test_subnormals_flushed_in_sums():
    text = ("HloModule m\n" + _binary("f32", "add") +
            "ENTRY e {\n  x = f32[3] parameter(0)\n  i = f32[] constant(0)\n"
            "  ROOT r = f32[] reduce(x, i), dimensions={0}, to_apply=f\n}\n")
    assert float(run(text, np.full(3, 1e-40, np.float32))) == 0.0


def test_generic_fold_long_axis_uses_tree(monkeypatch):
    """Beyond FOLD_BUDGET steps a generic reducer is applied as a pairwise tree (still exact for an
    associative integer reducer)."""
    monkeypatch.setattr(C, "FOLD_BUDGET", 8)
    comps = ("g {\n  a = s32[] parameter(0)\n  b = s32[] parameter(1)\n  s = s32[] add(a, b)\n"
             "  one = s32[] constant(1)\n  ROOT t = s32[] multiply(s, one)\n}\n")
    text = ("HloModule m\n" + comps + "ENTRY e {\n  x = s32[2,30] parameter(0)\n  i = s32[] constant(5)\n"
            "  ROOT r = s32[2] reduce(x, i), dimensions={1}, to_apply=g\n}\n")
    x = np.arange(60, dtype=np.int32).reshape(2, 30)
    assert run(text, x).tolist() == [5 + sum(range(30)), 5 + sum(range(30, 60))]


# ------------------------------------------------------------------------ folds and combine

def test_combine_minmax_nan_and_zero_bits():
    nan = np.float32(np.nan)
    mnan = np.array([0xFFC00000], np.uint32).view(np.float32)[0]
    a = np.array([-1, 1, -0.0, 0.0, nan, -np.inf], np.float32)
    b = np.array([nan, nan, 0.0, -0.0, -1, mnan], np.float32)
    mn = C.combine("minimum", a, b).view(np.uint32)
    mx = C.combine("maximum", a, b).view(np.uint32)
    assert mn.tolist() == [0xFFC00000, 0x7FC00000, 0x80000000, 0x80000000, 0x7FC00000, 0xFFC00000]
    assert mx.tolist() == [0x7FC00000, 0x7FC00000, 0x00000000, 0x00000000, 0x7FC00000, 0xFFC00000]


def test_combine_narrow_float_nan_bits():
    """bf16/f16 add is computed in f32: inf - inf is x86's negative default NaN."""
    for dt in (ml_dtypes.bfloat16, np.float16):
        r = C.combine("add", np.array([np.inf], dt), np.array([-np.inf], dt))
        assert np.isnan(r.astype(np.float32))[0] and np.signbit(r.astype(np.float32))[0]


def test_combine_integers_wrap():
    r = C.combine("add", np.array([127], np.int8), np.array([1], np.int8))
    assert r.dtype == np.int8 and r[0] == -128
    r = C.combine("multiply", np.array([7], ml_dtypes.int4), np.array([3], ml_dtypes.int4))
    assert int(r[0]) == 5       # 21 wraps to 21 - 16


def test_fold_argpair_closed_form():
    nan = np.float32(np.nan)
    v = np.array([[1, 3, 3, 2], [1, nan, 5, nan], [-0.0, 0.0, -0.0, -1]], np.float32)
    i = np.broadcast_to(np.arange(4, dtype=np.int32), v.shape)
    red = C.Reducer("x", 2, None, "argmax")
    rv, ri = C.fold(None, red, [np.full(3, -np.inf, np.float32), np.zeros(3, np.int32)], [v, i])
    assert ri.tolist() == [1, 1, 0]
    assert rv[0] == 3 and np.isnan(rv[1])
    assert rv[2] == 0 and np.signbit(rv[2])       # the last of the tied zeros gives the bits


def test_fold_valid_mask_skips_positions():
    red = C.Reducer("x", 1, (("add", False),))
    x = np.array([[1, 2, 4, 8]], np.float32)
    (r,) = C.fold(None, red, [np.array([10], np.float32)], [x], np.array([[True, False, True, False]]))
    assert r.tolist() == [15.0]


# ------------------------------------------------------------------------ reduce-window

def test_reduce_window_scan_form_detection():
    w = lambda size, lo, hi: [C.TRIVIAL_WINDOW, WindowDim(size, 1, lo, hi)]
    assert C.scan_form((2, 40), w(40, 39, 0)) == (1, True, False)
    assert C.scan_form((2, 40), w(40, 40, 0)) == (1, True, True)
    assert C.scan_form((2, 40), w(40, 0, 39)) == (1, False, False)
    assert C.scan_form((2, 16), w(16, 15, 0)) is None          # not longer than the base 16
    assert C.scan_form((2, 40), w(40, 10, 0)) is None


def test_cumsum_init_as_data():
    """Blocks of 16 each start from the init value: 40 ones with init 10 -> measured on XLA CPU."""
    text = ("HloModule m\n" + _binary("s32", "add") +
            "ENTRY e {\n  x = s32[40] parameter(0)\n  i = s32[] constant(10)\n"
            "  ROOT r = s32[40] reduce-window(x, i), window={size=40 pad=39_0}, to_apply=f\n}\n")
    got = run(text, np.ones(40, np.int32))
    # in-block scan (init + ones) combined with the exclusive scan of block totals (init first)
    assert got[:16].tolist() == list(range(21, 37))
    assert got[16:18].tolist() == [47, 48]           # (10 + 1) + (10 + (10 + 16))


# ------------------------------------------------------------------------ sort / topk

_JAX_CMP = """cmp {
  p2 = s32[] parameter(2)
  p3 = s32[] parameter(3)
  a = f32[] parameter(0)
  ne0 = pred[] compare(a, a), direction=NE
  qnan = f32[] constant(nan)
  zero = f32[] constant(0)
  eq0 = pred[] compare(a, zero), direction=EQ
  s0 = f32[] select(eq0, zero, a)
  k0 = f32[] select(ne0, qnan, s0)
  b = f32[] parameter(1)
  ne1 = pred[] compare(b, b), direction=NE
  eq1 = pred[] compare(b, zero), direction=EQ
  s1_ = f32[] select(eq1, zero, b)
  k1 = f32[] select(ne1, qnan, s1_)
  ROOT lt = pred[] compare(k0, k1), direction=LT, type=TOTALORDER
}
"""


def test_comparator_keys_recognized():
    m = _module(_JAX_CMP, "  x = f32[] parameter(0)\n  ROOT y = f32[] copy(x)")
    keys = C.comparator_keys(m, "cmp", 2)
    assert keys == [C.SortKey(0, "k0", 0, False, "TOTALORDER")]


def test_comparator_keys_flipped_and_generic():
    comps = ("rev {\n  a = s32[] parameter(0)\n  b = s32[] parameter(1)\n"
             "  ROOT r = pred[] compare(b, a), direction=LT\n}\n"
             "gen {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  s = f32[] subtract(a, b)\n"
             "  z = f32[] constant(0)\n  ROOT r = pred[] compare(s, z), direction=LT\n}\n")
    m = _module(comps, "  x = f32[] parameter(0)\n  ROOT y = f32[] copy(x)")
    assert C.comparator_keys(m, "rev", 1) == [C.SortKey(0, "a", 0, True, "SIGNED")]
    assert C.comparator_keys(m, "gen", 1) is None


def test_merge_sort_matches_stable_argsort():
    """The generic merge sort (any comparator via ec.apply) is stable and handles odd lengths."""
    comps = ("gen {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  c = s32[] parameter(2)\n"
             "  d = s32[] parameter(3)\n  s = f32[] subtract(a, b)\n  z = f32[] constant(0)\n"
             "  ROOT r = pred[] compare(s, z), direction=LT\n}\n")
    rng = np.random.default_rng(3)
    for n in (1, 2, 5, 16, 33, 100):
        x = rng.integers(-5, 6, (3, n)).astype(np.float32)
        text = ("HloModule m\n" + comps + f"ENTRY e {{\n  x = f32[3,{n}] parameter(0)\n"
                f"  i = s32[3,{n}] iota(), iota_dimension=1\n"
                f"  ROOT r = (f32[3,{n}], s32[3,{n}]) sort(x, i), dimensions={{1}}, is_stable=true, "
                "to_apply=gen\n}\n")
        v, i = run(text, x)
        want = np.argsort(x, axis=1, kind="stable")
        assert np.array_equal(i, want) and np.array_equal(v, np.take_along_axis(x, want, 1))


def test_total_order_key():
    mnan = np.array([0xFFC00000], np.uint32).view(np.float32)[0]
    x = np.array([np.nan, 1, -0.0, 0.0, -np.inf, mnan, np.inf, -1], np.float32)
    order = np.argsort(C.total_order_key(x), kind="stable")
    assert order.tolist() == [5, 4, 7, 2, 3, 1, 6, 0]


def test_topk_ties_in_index_order():
    text = ("HloModule m\nENTRY e {\n  x = s32[6] parameter(0)\n"
            "  ROOT t = (s32[3], s32[3]) topk(x), k=3, largest=true\n}\n")
    v, i = run(text, np.array([1, 5, 3, 5, 3, 5], np.int32))
    assert v.tolist() == [5, 5, 5] and i.tolist() == [1, 3, 5]


# ------------------------------------------------------------------------ scatter combining

def test_scatter_combine_sequential_rounds():
    """A generic combiner (acc - x) applied in update order per target."""
    comps = _binary("f32", "subtract", name="sub")
    ec = _ec(comps)
    out = np.full(3, 100, np.float32)
    C.scatter_combine(ec, "sub", [out], np.array([0, 2, 0, 0]), [np.array([1, 2, 4, 8], np.float32)])
    assert out.tolist() == [87, 100, 98]


def test_scatter_combine_fast_add():
    ec = _ec(_binary("s32", "add", name="add"))
    out = np.zeros(4, np.int32)
    C.scatter_combine(ec, "add", [out], np.array([1, 1, 3]), [np.array([5, 6, 7], np.int32)])
    assert out.tolist() == [0, 11, 0, 7]
