"""Work shared among threads (hlo_cli/interpreter/parallel.py) and the fused regions that use it.

Splitting a step must never change a bit: a product split by batch or rows, a region's blocks run
on two threads, elementwise rules (exp, maximum, convert, ...) run block by block inside a region,
and groups of one shape formed across interleaved work all give exactly the generic loop's values.
"""
from __future__ import annotations

import numpy as np
import pytest

from hlo_cli.errors import HloEvalError
from hlo_cli.interpreter import RunOptions, allocator, compiler, parallel, run_module
from hlo_cli.interpreter.values import leaves
from hlo_cli.parser import parse


def _bits(values):
    return [(np.asarray(v).dtype.str, np.asarray(v).shape,
             np.ascontiguousarray(v).view(np.uint8).tobytes()) for v in values]


def _flat(value):
    return list(leaves(value)) if isinstance(value, tuple) else [value]


def _both(module, args):
    fast = run_module(module, args, RunOptions())
    slow = run_module(module, args, RunOptions(), compiled=False)
    return _flat(fast), _flat(slow)


@pytest.fixture
def small_blocks(monkeypatch):
    """Regions from 256 elements on, in blocks of 64: small arrays give many ragged blocks."""
    monkeypatch.setattr(compiler, "FUSE_BLOCK", 64)
    monkeypatch.setattr(compiler, "FUSE_BLOCK_THREADED", 64)
    monkeypatch.setattr(compiler, "FUSE_MIN", 256)


def _with_threads(monkeypatch, n):
    monkeypatch.setattr(parallel, "_threads", n)


# ---------------------------------------------------------------------------- the pool

def test_split_cuts_into_nearly_equal_contiguous_parts():
    assert parallel.split(list(range(7)), 3) == [[0, 1, 2], [3, 4], [5, 6]]
    assert parallel.split(list(range(2)), 5) == [[0], [1]]
    assert parallel.split([], 3) == [[]]                 # one empty part: run_parts still calls once
    parts = parallel.split(list(range(100)), 7)
    assert sum(parts, []) == list(range(100))
    assert max(map(len, parts)) - min(map(len, parts)) <= 1


@pytest.mark.parametrize("n", [1, 2, 3])
def test_run_parts_returns_results_in_part_order(monkeypatch, n):
    _with_threads(monkeypatch, n)
    assert parallel.run_parts(lambda p: p * p, list(range(9))) == [p * p for p in range(9)]


def test_run_parts_raises_the_first_failing_part_after_all_have_run(monkeypatch):
    _with_threads(monkeypatch, 3)
    done = []

    def fn(p):
        if p in (1, 2):
            raise ValueError(f"part {p}")
        done.append(p)
        return p
    with pytest.raises(ValueError, match="part 1"):
        parallel.run_parts(fn, [0, 1, 2, 3])
    assert sorted(done) == [0, 3]


def test_pool_threads_ignore_floating_point_errors(monkeypatch):
    _with_threads(monkeypatch, 2)

    def fn(p):                                      # overflows: no warning, no error in a part
        return np.full(4, 1e38, np.float32) * np.float32(p)
    with np.errstate(all="ignore"):
        out = parallel.run_parts(fn, [10, 20, 30])
    assert all(np.isinf(v).all() for v in out)


@pytest.mark.parametrize("env,expected", [("1", 1), ("3", 3), ("0", None), ("-2", None),
                                          ("many", None), ("", None), ("999", 64)])
def test_hlo_threads_sets_the_thread_count(monkeypatch, env, expected):
    monkeypatch.setattr(parallel, "_threads", None)
    monkeypatch.setenv("HLO_THREADS", env)
    got = parallel.threads()
    monkeypatch.setattr(parallel, "_threads", None)
    if expected is None:                            # unset or unusable: the cores this process has
        import os
        assert got == max(1, min(len(os.sched_getaffinity(0)), 64))
    else:
        assert got == expected


# ---------------------------------------------------------------------------- products

def test_large_products_are_cut_by_their_shape_alone():
    assert parallel.row_chunks(100) == [slice(0, 100)]
    c = parallel.CHUNK_ROWS
    assert parallel.row_chunks(2 * c - 1) == [slice(0, 2 * c - 1)]
    assert parallel.row_chunks(2 * c + 1) == [slice(0, c + 1), slice(c + 1, 2 * c + 1)]
    chunks = parallel.row_chunks(100_000)
    assert len(chunks) == parallel.MAX_CHUNKS and chunks[-1].stop == 100_000
    assert all(r.stop - r.start >= c for r in parallel.row_chunks(10 * c + 7))


@pytest.mark.parametrize("dt", [np.float32, np.float64, np.complex64])
@pytest.mark.parametrize("shape", [(4, 40, 33, 17),      # cut between the matrices of the batch
                                   (3, 37, 20, 9),
                                   (1, 1000, 70, 90),    # cut into row chunks
                                   (2, 600, 64, 30),     # row chunks of each matrix
                                   (1, 200, 16, 16)])    # too few rows to cut: one call
def test_products_do_not_depend_on_the_number_of_threads(monkeypatch, dt, shape):
    """Cutting a product by rows can change its last bits (OpenBLAS computes a row differently
    depending on its neighbours), so the cut depends on the shape only."""
    monkeypatch.setattr(parallel, "SPLIT_MIN_MACS", 1)
    b, m, k, nn = shape
    rng = np.random.default_rng(sum(shape))
    x = rng.standard_normal((b, m, k)).astype(dt)
    y = rng.standard_normal((b, k, nn)).astype(dt)
    results = []
    for n in (1, 2, 3, 4):
        _with_threads(monkeypatch, n)
        got = parallel.matmul(x, y)
        assert got.dtype == np.result_type(x, y) and got.shape == (b, m, nn)
        results.append(got.tobytes())
    assert len(set(results)) == 1
    with parallel.blas_single():                    # the same as one call per piece
        want = np.concatenate([np.concatenate([np.matmul(x[i], y[i])[None] if len(parallel.row_chunks(m)) == 1
                                               else np.matmul(x[i, r], y[i])[None]
                                               for r in parallel.row_chunks(m)], axis=1)
                               for i in range(b)])
    assert results[0] == want.tobytes()
    np.testing.assert_allclose(np.frombuffer(results[0], got.dtype).reshape(got.shape), x @ y,
                               rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("threads", [1, 2])
def test_a_dot_split_across_threads_matches_the_generic_loop(monkeypatch, threads):
    _with_threads(monkeypatch, threads)
    monkeypatch.setattr(parallel, "SPLIT_MIN_MACS", 1)
    monkeypatch.setattr(parallel, "CHUNK_ROWS", 16)
    module = parse("""HloModule d
ENTRY e {
  a = f32[3,70,24] parameter(0)
  b = f32[3,24,50] parameter(1)
  ROOT d = f32[3,70,50] dot(a, b), lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={1}
}
""")
    rng = np.random.default_rng(0)
    a = rng.standard_normal((3, 70, 24)).astype(np.float32)
    b = rng.standard_normal((3, 24, 50)).astype(np.float32)
    fast, slow = _both(module, [a, b])
    assert _bits(fast) == _bits(slow)


# ---------------------------------------------------------------------------- regions

_RULES = """HloModule rules
ENTRY e {{
  a = {t}[{n},{m}] parameter(0)
  b = {t}[{n},{m}] parameter(1)
  x = {t}[{n},{m}] exponential(a)
  mx = {t}[{n},{m}] maximum(x, b)
  mn = {t}[{n},{m}] minimum(a, mx)
  ab = {t}[{n},{m}] abs(mn)
  sq = {t}[{n},{m}] sqrt(ab)
  th = {t}[{n},{m}] tanh(b)
  lg = {t}[{n},{m}] log(sq)
  ng = {t}[{n},{m}] negate(lg)
  c = {t}[{n},{m}] clamp(th, ng, sq)
  h = bf16[{n},{m}] convert(c)
  hb = {t}[{n},{m}] convert(h)
  p = pred[{n},{m}] compare(hb, a), direction=LT
  s = {t}[{n},{m}] select(p, hb, x)
  ROOT t = ({t}[{n},{m}], bf16[{n},{m}], {t}[{n},{m}]) tuple(s, h, mx)
}}
"""


def _rules_module(t, n, m):
    return parse(_RULES.format(t=t, n=n, m=m))


def _edge_inputs(dt, n, m, seed):
    rng = np.random.default_rng(seed)
    a = (rng.standard_normal((n, m)) * 3).astype(dt)
    b = (rng.standard_normal((n, m)) * 3).astype(dt)
    tiny = np.finfo(dt).tiny
    edges = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, tiny / 4, -tiny / 8, tiny,
                      np.finfo(dt).max, -np.finfo(dt).max, 88.7, -103.0, 710.0], dt)
    a.flat[::53][:edges.size] = edges
    b.flat[7::61][:edges.size] = edges[::-1]
    return a, b


@pytest.mark.parametrize("t,dt", [("f32", np.float32), ("f64", np.float64)])
@pytest.mark.parametrize("threads", [1, 2])
def test_elementwise_rules_run_inside_regions_bit_for_bit(monkeypatch, small_blocks, t, dt, threads):
    """exp, maximum, minimum, abs, sqrt, tanh, log, negate, clamp and the converts through bf16 are
    rule members of one region; NaN of both signs, infinities, signed zeros and subnormals included."""
    _with_threads(monkeypatch, threads)
    n, m = 37, 29
    module = _rules_module(t, n, m)
    comp = compiler.compiled(module, module.entry, True)
    regions = [st[1] for st in comp.steps if st[0] == compiler.REGION]
    assert len(regions) == 1
    ops = {mem[4].opcode for mem in regions[0].members}
    assert {"exponential", "maximum", "minimum", "sqrt", "tanh", "log", "clamp", "convert"} <= ops
    assert len(regions[0].blocks) > 1
    a, b = _edge_inputs(dt, n, m, 1)
    for _ in range(2):
        fast, slow = _both(module, [a, b])
        assert _bits(fast) == _bits(slow)


@pytest.mark.parametrize("threads", [1, 2])
def test_elementwise_rules_at_the_default_block_size(monkeypatch, threads):
    _with_threads(monkeypatch, threads)
    n, m = 600, 700                                 # above FUSE_MIN, several default blocks
    module = _rules_module("f32", n, m)
    comp = compiler.compiled(module, module.entry, True)
    assert [st for st in comp.steps if st[0] == compiler.REGION]
    a, b = _edge_inputs(np.float32, n, m, 2)
    fast, slow = _both(module, [a, b])
    assert _bits(fast) == _bits(slow)


_ADAM = """HloModule adam
ENTRY e {
  w1 = f32[40,30] parameter(0)
  g1 = f32[40,30] parameter(1)
  w2 = f32[25,20] parameter(2)
  g2 = f32[25,20] parameter(3)
  lr = f32[] constant(0.01)
  l1 = f32[40,30] broadcast(lr), dimensions={}
  l2 = f32[25,20] broadcast(lr), dimensions={}
  sa = f32[40,30] multiply(g1, g1)
  sb = f32[25,20] multiply(g2, g2)
  r1 = f32[40,30] sqrt(sa)
  r2 = f32[25,20] sqrt(sb)
  q1 = f32[40,30] divide(g1, r1)
  q2 = f32[25,20] divide(g2, r2)
  ua = f32[40,30] multiply(q1, l1)
  ub = f32[25,20] multiply(q2, l2)
  n1 = f32[40,30] subtract(w1, ua)
  n2 = f32[25,20] subtract(w2, ub)
  ROOT t = (f32[40,30], f32[25,20]) tuple(n1, n2)
}
"""


@pytest.mark.parametrize("threads", [1, 2])
def test_interleaved_updates_of_two_shapes_form_two_regions(monkeypatch, small_blocks, threads):
    """An optimizer updating two parameters step by step in turn: each shape's steps share one
    region although the other shape's steps sit between them."""
    _with_threads(monkeypatch, threads)
    monkeypatch.setenv("HLO_FMA", "0")      # (regions, not contraction: w - q * l stays two steps)
    module = parse(_ADAM)
    comp = compiler.compiled(module, module.entry, True)
    regions = [st[1] for st in comp.steps if st[0] == compiler.REGION]
    assert sorted(r.dims for r in regions) == [(25, 20), (40, 30)]
    assert all(len(r.members) >= 5 for r in regions)
    rng = np.random.default_rng(3)
    args = [rng.standard_normal(s).astype(np.float32) for s in [(40, 30), (40, 30), (25, 20), (25, 20)]]
    args[1].flat[::17] = 0.0                        # 0/0: NaN updates
    fast, slow = _both(module, args)
    assert _bits(fast) == _bits(slow)


_EARLY = """HloModule early
add {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT s = f32[] add(x, y)
}
ENTRY e {
  a = f32[32,16] parameter(0)
  m = f32[32,16] multiply(a, a)
  e1 = f32[32,16] exponential(m)
  z = f32[] constant(0)
  r = f32[32] reduce(e1, z), dimensions={1}, to_apply=add
  rb = f32[32,16] broadcast(r), dimensions={0}
  d = f32[32,16] divide(e1, rb)
  n = f32[32,16] negate(d)
  ROOT t = (f32[32,16], f32[32]) tuple(n, r)
}
"""


@pytest.mark.parametrize("threads", [1, 2])
def test_a_group_closes_before_a_step_outside_it_reads_its_values(monkeypatch, small_blocks, threads):
    """The reduce needs e1: the region computing it runs first, and the steps after the reduce
    form a second region."""
    _with_threads(monkeypatch, threads)
    module = parse(_EARLY)
    comp = compiler.compiled(module, module.entry, True)
    kinds = [(st[0], st[4].opcode) for st in comp.steps]
    regions = [n for n, (k, _) in enumerate(kinds) if k == compiler.REGION]
    reduce_at = [n for n, (_, op) in enumerate(kinds) if op == "reduce"][0]
    assert len(regions) == 2 and regions[0] < reduce_at < regions[1]
    a = np.random.default_rng(4).standard_normal((32, 16)).astype(np.float32)
    fast, slow = _both(module, [a])
    assert _bits(fast) == _bits(slow)


_INPLACE = """HloModule inplace
ENTRY e {
  a = u32[40,30] parameter(0)
  b = u32[40,30] parameter(1)
  s = u32[40,30] add(a, b)
  x = u32[40,30] xor(s, a)
  y = u32[40,30] multiply(x, b)
  k = u32[] constant(3)
  kb = u32[40,30] broadcast(k), dimensions={}
  z = u32[40,30] shift-left(y, kb)
  r = u32[30,40] transpose(s), dimensions={1,0}
  w = u32[40,30] subtract(z, x)
  ROOT t = (u32[30,40], u32[40,30], u32[40,30]) tuple(r, w, y)
}
"""


@pytest.mark.parametrize("threads", [1, 2])
def test_regions_never_write_into_inputs_or_values_still_in_use(monkeypatch, small_blocks, threads):
    _with_threads(monkeypatch, threads)
    module = parse(_INPLACE)
    rng = np.random.default_rng(5)
    a = rng.integers(0, 2**32, (40, 30), dtype=np.uint32)
    b = rng.integers(0, 2**32, (40, 30), dtype=np.uint32)
    a0, b0 = a.copy(), b.copy()
    s = a0 + b0
    x = s ^ a0
    y = x * b0
    for _ in range(compiler.HOT_CALLS + 2):         # the generated code too
        r, w, yy = run_module(module, [a, b])
        assert np.array_equal(r, s.T)
        assert np.array_equal(w, (y << np.uint32(3)) - x)
        assert np.array_equal(yy, y)
        assert np.array_equal(a, a0) and np.array_equal(b, b0)


def test_an_error_inside_a_region_names_the_member_that_raised(monkeypatch, small_blocks):
    from hlo_cli.interpreter import registry
    real = registry.EVAL_RULES["tanh"]

    def broken(inst, args, ec):
        raise ValueError("the tanh table is missing")
    broken.elementwise = True
    monkeypatch.setitem(registry.EVAL_RULES, "tanh", broken)
    _with_threads(monkeypatch, 2)
    module = _rules_module("f32", 37, 29)
    comp = compiler.compiled(module, module.entry, True)
    region = [st[1] for st in comp.steps if st[0] == compiler.REGION][0]
    assert "tanh" in {mem[4].opcode for mem in region.members}
    a, b = _edge_inputs(np.float32, 37, 29, 6)
    with pytest.raises(HloEvalError) as exc:
        run_module(module, [a, b])
    d = exc.value.diagnostics[0]
    assert d.instruction == "th"
    assert "tanh table is missing" in d.message


def test_a_region_member_of_the_wrong_dtype_is_caught(monkeypatch, small_blocks):
    from hlo_cli.interpreter import registry
    real = registry.EVAL_RULES["sqrt"]

    def widened(inst, args, ec):
        return real(inst, args, ec).astype(np.float64)
    widened.elementwise = True
    monkeypatch.setitem(registry.EVAL_RULES, "sqrt", widened)
    module = _rules_module("f32", 37, 29)
    a, b = _edge_inputs(np.float32, 37, 29, 7)
    with pytest.raises(HloEvalError) as exc:
        run_module(module, [a, b])
    assert exc.value.diagnostics[0].instruction == "sq"
    assert "does not match its shape" in str(exc.value)


# ---------------------------------------------------------------------------- memory

def test_keep_freed_memory_applies_once_and_can_be_turned_off(monkeypatch):
    monkeypatch.setattr(allocator, "_done", False)
    monkeypatch.setenv("HLO_MALLOC", "system")
    assert allocator.keep_freed_memory() is False
    assert allocator.keep_freed_memory() is False       # decided once
    monkeypatch.setattr(allocator, "_done", False)
    monkeypatch.delenv("HLO_MALLOC")
    first = allocator.keep_freed_memory()
    assert allocator.keep_freed_memory() is first
    import sys
    if sys.platform.startswith("linux"):
        import platform
        if platform.libc_ver()[0] == "glibc":
            assert first is True
