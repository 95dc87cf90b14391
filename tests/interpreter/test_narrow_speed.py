"""bf16/f16/f8 element-wise ops and conversions on their fast paths, against XLA CPU bit for bit.

The fast paths (ops/elementwise.py: bf16/f16 arithmetic in f32 under the processor's FTZ/DAZ flags,
blocks shared among threads; ops/convert.py: conversions through tables of all bit patterns, f32
into the 1-byte types through bf16 rounded to odd) must give what the generic rules give, which is
XLA's.  tests/data/narrow/ holds XLA's outputs (tests/data/narrow/make_goldens.py): every bf16, f16
and f8 bit pattern converted, hostile f32 values converted into the narrow types, and binary ops
on clean (NaN-free: zeros of both signs, subnormals, overflow) and hostile (random bits) pairs.
The large cases compare the fast paths with the generic ones (which the goldens tie to XLA) on
arrays big enough for the blocked, threaded path.
"""
from __future__ import annotations

import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from golden import assert_same, load_golden  # noqa: E402

from hlo_cli.interpreter.evaluator import run_module  # noqa: E402
from hlo_cli.interpreter.fpenv import hardware  # noqa: E402
from hlo_cli.interpreter.ops import convert as C  # noqa: E402
from hlo_cli.interpreter.ops import elementwise as E  # noqa: E402
from hlo_cli.ir.dtypes import ELEMENT_TYPES  # noqa: E402
from hlo_cli.parser import parse  # noqa: E402

DATA = Path(__file__).resolve().parents[1] / "data" / "narrow"
CASES = sorted(DATA.glob("*.hlo"))


def _assert_bits(g, w, what):
    """Bit for bit, NaN payloads and signs included (golden.assert_same compares NaNs as values)."""
    assert g.dtype == w.dtype and g.shape == w.shape, what
    if not _bits_equal(g, w):
        assert_same(g, w, {"exact": True}, what)         # a readable message when values differ
        u = np.ascontiguousarray(g).view(np.uint8).reshape(g.size, -1)
        v = np.ascontiguousarray(w).view(np.uint8).reshape(w.size, -1)
        i = int(np.flatnonzero((u != v).any(axis=1))[0])
        raise AssertionError(f"{what}: NaN bits differ, first at {i}: ours {u[i].tolist()} vs XLA {v[i].tolist()}")


def _bits_equal(a, b):
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a.view(np.uint8), b.view(np.uint8))


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_matches_xla(path):
    module = parse(path.read_text())
    args, want = load_golden(path, module)
    for compiled in (True, False):
        got = run_module(module, args, compiled=compiled)
        got = [np.asarray(g) for g in (got if isinstance(got, (tuple, list)) else [got])]
        assert len(got) == len(want)
        for k, (g, w) in enumerate(zip(got, want)):
            if k in (4, 5) and path.stem.startswith("binary_f8") and path.stem.endswith("_hostile"):
                # f8 maximum/minimum NaNs depend on XLA's fusion: alone (tests/programs) they keep
                # the rule's signs, fused with other ops (here) they come out as +NaN: NaN where
                # XLA has NaN, every other element bit for bit
                nan = np.isnan(w.astype(np.float32))
                assert np.array_equal(np.isnan(g.astype(np.float32)), nan), path.stem
                _assert_bits(g[~nan], w[~nan], f"{path.stem} out{k} (compiled={compiled})")
                continue
            _assert_bits(g, w, f"{path.stem} out{k} (compiled={compiled})")


@pytest.mark.parametrize("path", [p for p in CASES if p.stem.startswith("binary_")],
                         ids=[p.stem for p in CASES if p.stem.startswith("binary_")])
def test_nan_free_pairs_take_the_fast_path(path, monkeypatch):
    """The clean goldens are computed by the fast path (not silently by the fallback), and NaN
    results of the hostile ones by the generic path."""
    if hardware() is None:
        pytest.skip("no FTZ/DAZ flags here: the generic path runs")
    module = parse(path.read_text())
    args, _ = load_golden(path, module)
    calls = []
    real = E._narrow_block
    monkeypatch.setattr(E, "_narrow_block", lambda *a, **k: calls.append(r := real(*a, **k)) or r)
    run_module(module, args)
    if path.stem.endswith("_clean"):         # all but divide, where 0/0 makes NaN
        assert sum(r is not False for r in calls) == 5 and sum(r is False for r in calls) <= 1
    else:
        assert any(r is False for r in calls)


def _generic(fn, *args):
    """fn with the narrow fast paths and tables off (the generic rules)."""
    saved = E._NARROW_UFUNCS, C.TABLE_MIN, E.TABLE_MIN
    E._NARROW_UFUNCS, C.TABLE_MIN, E.TABLE_MIN = {}, 1 << 62, 1 << 62
    try:
        return fn(*args)
    finally:
        E._NARROW_UFUNCS, C.TABLE_MIN, E.TABLE_MIN = saved


_RULES = {"add": np.add, "subtract": np.subtract, "multiply": np.multiply, "divide": np.divide,
          "maximum": E._fmax, "minimum": E._fmin}


@pytest.mark.parametrize("et", ["bf16", "f16", "f8e4m3fn"])
def test_blocked_threaded_path_same_bits(et):
    """Above _NARROW_SPLIT elements the work goes in blocks over the threads: the same bits as
    the generic rule, with zeros, subnormals and overflow present and a NaN in the last block."""
    dt = ELEMENT_TYPES[et].numpy
    rng = np.random.default_rng(5)
    n = E._NARROW_SPLIT + 12345
    pool = np.array([0.0, -0.0, 1e-39, -3e-40, 2.0 ** -126, 1.5, -2.25, 3e38, -3e38, 7e-3], np.float32)
    a = np.where(rng.random(n) < 0.2, rng.choice(pool, n), rng.standard_normal(n).astype(np.float32)).astype(dt)
    b = np.where(rng.random(n) < 0.2, rng.choice(pool, n), rng.standard_normal(n).astype(np.float32)).astype(dt)
    for op in ("add", "multiply", "maximum", "minimum"):
        impls = {E.FLOAT: _RULES[op]}
        nan = None if op in ("maximum", "minimum") else ("keep", "-")
        got = E._apply(op, impls, [a, b], dt, True, True, nan)
        want = _generic(E._apply, op, impls, [a, b], dt, True, True, nan)
        assert _bits_equal(got, want), op
    b2 = b.copy()
    b2[-1] = np.float32(np.nan)
    got = E._apply("add", {E.FLOAT: np.add}, [a, b2], dt, True, True, ("keep", "-"))
    assert _bits_equal(got, _generic(E._apply, "add", {E.FLOAT: np.add}, [a, b2], dt, True, True, ("keep", "-")))


def test_conversion_tables_agree_with_the_rule():
    """Every conversion the tables serve gives the direct conversion's bits, for every bit pattern
    of the 1- and 2-byte float types, and f32 into the 1-byte types (through bf16 rounded to odd)
    on random bits and on values next to the rounding boundaries."""
    floats = [et.numpy for et in ELEMENT_TYPES.values() if et.kind == "float"]
    others = [np.dtype(t) for t in (np.int8, np.uint8, np.int32, np.uint64, np.bool_)]
    for s in floats:
        if s.itemsize > 2:
            continue
        codes = np.arange(1 << 8 * s.itemsize, dtype=C.UINT_OF_BITS[8 * s.itemsize]).view(s)
        codes = np.tile(codes, max(1, C.TABLE_MIN // codes.size))
        for d in floats + others:
            if d != s and (s.itemsize == 1 or d.itemsize == 1):
                assert _bits_equal(C.convert(codes, d), C._convert(codes, d)), (s, d)
    rng = np.random.default_rng(7)
    bits = rng.integers(0, 1 << 32, 1 << 18, dtype=np.uint64).astype(np.uint32)
    bits[:65536] = (np.arange(65536, dtype=np.uint32) << 16) | 0x8000
    bits[65536:131072] = (np.arange(65536, dtype=np.uint32) << 16) | 0x0001
    x = bits.view(np.float32)
    for d in floats:
        if d.itemsize == 1:
            assert _bits_equal(C.convert(x, d), C._convert(x, d)), d
    assert _bits_equal(C.convert(x[::3], ml_dtypes.float8_e4m3fn), C._convert(x[::3], ml_dtypes.float8_e4m3fn))


def test_bf16_compare_reads_subnormals_as_zero():
    a = np.full(C.TABLE_MIN, 1e-39, np.float32).astype(ml_dtypes.bfloat16)
    z = np.zeros(C.TABLE_MIN, ml_dtypes.bfloat16)
    assert E._compare_floats(np.equal, a, z).all()
    assert not E._compare_floats(np.greater, a, z).any()


@pytest.mark.slow
@pytest.mark.parametrize("et", ["bf16", "f16"])
def test_large_ops_against_live_xla(et):
    """Arrays large enough for the blocked, threaded path (and for the compiler's regions), run by
    XLA itself: add, multiply, maximum against a broadcast zero (ReLU), compare + select."""
    pytest.importorskip("jax")
    from hlo_cli.tools.xla_reference import run_with_xla
    dt = ELEMENT_TYPES[et].numpy
    rng = np.random.default_rng(11)
    shape = (1536, 1024)
    pool = np.array([0.0, -0.0, 1e-39, -3e-40, 6e-8, 65504.0, 3e38], np.float32)
    with np.errstate(over="ignore"):
        a, b = (np.where(rng.random(shape) < 0.1, rng.choice(pool, shape),
                         rng.standard_normal(shape).astype(np.float32)).astype(dt) for _ in range(2))
    s = f"{et}[1536,1024]"
    text = f"""HloModule large_{et}

ENTRY main {{
  a = {s} parameter(0)
  b = {s} parameter(1)
  add = {s} add(a, b)
  mul = {s} multiply(a, b)
  zero = {et}[] constant(0)
  zeros = {s} broadcast(zero), dimensions={{}}
  relu = {s} maximum(a, zeros)
  gt = pred[1536,1024] compare(a, b), direction=GT
  sel = {s} select(gt, a, b)
  ROOT t = ({s}, {s}, {s}, {s}) tuple(add, mul, relu, sel)
}}
"""
    want = run_with_xla(text, [a, b])
    module = parse(text)
    for compiled in (True, False):
        got = run_module(module, [a, b], compiled=compiled)
        for k, (g, w) in enumerate(zip(got, want)):
            _assert_bits(np.asarray(g), np.asarray(w), f"large {et} out{k} (compiled={compiled})")
