"""YNNPACK's summation order (hlo_cli/interpreter/ynn_sum.py): the vectorized sums equal a plain
step-by-step simulation of the kernels bit for bit (hypothesis, finite and NaN/Inf-filled rows),
and XLA CPU's add-reduces and batch-norm statistics bit for bit (slow: XLA live)."""
from __future__ import annotations

import contextlib

import numpy as np
import pytest
from hypothesis import assume, given, settings, strategies as st

from hlo_cli.interpreter import ynn_sum

F32 = np.float32


def _kahan(a, acc, err):
    y = a - err
    t = acc + y
    e = (t - acc) - y
    return t, np.where(np.isfinite(e), e, np.zeros_like(e))


class _Tree:
    """The kernels' accumulator tree, one term at a time."""

    def __init__(self, shape, dt):
        self.z = np.zeros(shape, dt)
        self.a0 = self.a1 = self.a2 = self.err = self.z
        self.clock = 0

    def add(self, term, ticks):
        self.a0 = self.a0 + term
        self.clock += ticks
        if self.clock % 16 == 0:
            self.a1, self.a0 = self.a1 + self.a0, self.z
            if self.clock % 256 == 0:
                self.a2, self.err = _kahan(self.a1, self.a2, self.err)
                self.a1 = self.z

    def close(self):
        self.a1 = self.a1 + self.a0
        self.a2, self.err = _kahan(self.a1, self.a2, self.err)
        return self.a2


def _simulated_row(row):
    """The k1 kernel on one row, chunk by chunk."""
    dt = row.dtype
    n_l = 64 // dt.itemsize
    nk4 = 4 * n_l
    padded = np.zeros(-(-max(len(row), 1) // nk4) * nk4, dt)
    padded[:len(row)] = row

    def chunk(i):
        p = padded[i * nk4:(i + 1) * nk4].reshape(4, n_l)
        return ((np.zeros(n_l, dt) + p[0] + p[1]) + p[2]) + p[3]
    tree, k, i = _Tree(n_l, dt), len(row), 0
    while k >= 16 * n_l:
        for _ in range(4):
            tree.a0 = tree.a0 + chunk(i)
            i += 1
        k -= 16 * n_l
        tree.add(np.zeros(n_l, dt), 4 * n_l)
    while k >= nk4:
        tree.add(chunk(i), n_l)
        i += 1
        k -= nk4
    if k:
        tree.a0 = tree.a0 + chunk(i)
    v = tree.close()
    while len(v) > 1:
        v = v[:len(v) // 2] + v[len(v) // 2:]
    return dt.type(0) + v[0]


def _simulated_columns(a):
    """The kn kernel over the rows of `a`, four rows at a time."""
    k, n = a.shape
    z = np.zeros(n, a.dtype)
    if k <= 4:
        s = z
        for r in a:
            s = s + r
        return s
    tree, i = _Tree(n, a.dtype), 0
    while k - i >= 4:
        tree.add(((z + a[i] + a[i + 1]) + a[i + 2]) + a[i + 3], 4)
        i += 4
    s = z
    for r in a[i:]:
        s = s + r
    tree.a0 = tree.a0 + s
    return z + tree.close()


def _values(draw_seed, shape, dt, hostile):
    rng = np.random.default_rng(draw_seed)
    x = (rng.standard_normal(shape) * 10 + 3).astype(dt)
    if hostile:
        flat = x.reshape(-1)
        for v in (np.nan, np.inf, -np.inf):
            flat[rng.random(flat.size) < hostile] = v
    return x


def _same(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return np.array_equal(np.isnan(a), np.isnan(b)) and bool(np.all((a == b) | np.isnan(a)))


@contextlib.contextmanager
def _path(native: bool, block: int | None = None):
    """ynn_sum's compiled k1 kernel (numba, where installed) for every size, or its NumPy path
    only; `block`: the NumPy path's rows per block in elements."""
    saved = ynn_sum.NATIVE_MIN, ynn_sum.ROW_BLOCK, ynn_sum.NATIVE_PAYBACK
    ynn_sum.NATIVE_MIN = 0 if native else 1 << 62
    ynn_sum.NATIVE_PAYBACK = 0
    ynn_sum.ROW_BLOCK = block or saved[1]
    try:
        yield
    finally:
        ynn_sum.NATIVE_MIN, ynn_sum.ROW_BLOCK, ynn_sum.NATIVE_PAYBACK = saved


@pytest.mark.parametrize("native", [False, True])
@settings(max_examples=60, deadline=None)
@given(st.integers(1, 2500), st.integers(1, 5), st.sampled_from([F32, np.float64]),
       st.sampled_from([0.0, 0.001, 0.05]), st.integers(0, 2**31))
def test_row_sums_equal_the_kernel_step_by_step(native, k, m, dt, hostile, seed):
    rows = _values(seed, (m, k), dt, hostile)
    with np.errstate(all="ignore"), _path(native):
        got = ynn_sum.row_sums(rows)
        want = np.array([_simulated_row(r) for r in rows])
    assert _same(got, want)


@pytest.mark.parametrize("native", [False, True])
@settings(max_examples=60, deadline=None)
@given(st.integers(1, 700), st.integers(1, 9), st.sampled_from([F32, np.float64]),
       st.sampled_from([0.0, 0.01]), st.integers(0, 2**31))
def test_column_sums_equal_the_kernel_step_by_step(native, k, n, dt, hostile, seed):
    a = _values(seed, (k, n), dt, hostile)
    with np.errstate(all="ignore"), _path(native):
        assert _same(ynn_sum.column_sums(a), _simulated_columns(a))
        # a strided view of the same columns (read in place by the compiled kernel)
        assert _same(ynn_sum.column_sums(np.repeat(a, 2, axis=1)[:, ::2]), _simulated_columns(a))


def _same_bits(a, b):
    """Equal bits (the signs of zeros included), NaN at the same places.  (Where a NaN and a
    NaN of the other sign meet, NumPy's own loops pick either, depending on the array's width:
    the kernels follow x86's scalar rule, the first operand's.)"""
    a, b = (np.ascontiguousarray(v).reshape(-1) for v in (a, b))
    nan = np.isnan(a)
    return np.array_equal(nan, np.isnan(b)) and np.array_equal(
        a[~nan].view(np.uint8), b[~nan].view(np.uint8))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 40), min_size=1, max_size=4), st.data(), st.sampled_from([F32, np.float64]),
       st.sampled_from([0.0, 0.01, 0.2]), st.integers(1, 3), st.integers(0, 2**31 - 1))
def test_the_compiled_kernel_and_the_blocked_views_give_the_same_bits(shape, data, dt, hostile, threads, seed):
    """The k1 and kn sums read in place (the compiled kernels; the NumPy path's strided chunk
    views in blocks of rows, sliced rows, the tiles' rows as views) give the same bits over any
    layout, NaN and Inf included (_same_bits)."""
    x = _values(seed, tuple(shape), dt, hostile)
    dims = data.draw(st.sets(st.integers(0, len(shape) - 1), min_size=1))
    block = data.draw(st.sampled_from([1, 100, 1 << 16]))
    got = []
    for native in (False, True):
        with np.errstate(all="ignore"), _path(native, block):
            got.append(ynn_sum.tiled_sum(x, sorted(dims), threads=threads))
            got.append(ynn_sum.reduce_sum(x, sorted(dims)))
            rows = x.reshape(-1, shape[-1])
            got.append(ynn_sum.row_sums(np.concatenate([rows, rows], axis=1)[:, :shape[-1]]))
            got.append(ynn_sum.row_sums(rows))
    for a, b in zip(got[:4], got[4:]):
        assert _same_bits(a, b)
    assert _same_bits(got[2], got[3])


def test_nan_and_inf_spread_as_in_any_order():
    """A NaN term, or +inf and -inf terms, make the sum NaN; one-signed infs make it inf."""
    x = np.ones((3, 2, 300), F32)
    x[0, 0, 5] = np.nan
    x[1, 1, 7], x[2, 1, 9] = np.inf, -np.inf
    x[2, 0, 3] = np.inf
    with np.errstate(all="ignore"):
        s = ynn_sum.acb_sums(x)
    assert np.isnan(s).tolist() == [True, True]
    y = np.ones((3, 2, 300), F32)
    y[:, 1, 4] = -np.inf
    assert ynn_sum.acb_sums(y).tolist() == [900.0, -np.inf]


def test_tiles_follow_the_input_bytes():
    assert ynn_sum.tile_rows(320, 49, 4) == 2           # MobileNetV2's f32[96,320,7,7]
    assert ynn_sum.tile_rows(1280, 49, 4) == 1
    assert ynn_sum.tile_rows(160, 49, 8) == 2
    assert ynn_sum.tile_rows(1 << 20, 1, 4) == 1


def test_reduce_sum_tiles_other_layouts():
    x = np.ones((4, 5, 6), F32)
    assert ynn_sum.reduce_sum(x, [1]).tolist() == [[5.0] * 6] * 4        # between kept dims
    assert ynn_sum.reduce_sum(x, [0, 2]).tolist() == [24.0] * 5
    assert ynn_sum.reduce_sum(x, [0, 1, 2]).shape == ()
    assert ynn_sum.reduce_sum(np.ones(40000, F32), [0]) == 40000.0       # rows longer than a tile
    nhwc = ynn_sum.reduce_sum(np.ones((4, 5, 6, 7), F32), [0, 1, 2])       # NHWC's N, H, W
    assert nhwc.tolist() == [120.0] * 7
    # two reduced dims cut (an image over a tile)
    assert ynn_sum.reduce_sum(np.ones((6, 56, 56, 24), F32), [0, 1, 2]).tolist() == [18816.0] * 24
    # rows over a tile beside kept dims: each row one k1 call (its tiles' loop is serial)
    assert ynn_sum.reduce_sum(np.ones((5, 40000), F32), [1]).tolist() == [40000.0] * 5


def test_parallel_dims_follow_the_task_target():
    """2 x threads tasks: the outermost cut dim is parallel, an inner one while the dims outside
    it make fewer tasks; one thread: none."""
    splits = ynn_sum.split_factors((96, 112, 112, 96), 4)
    assert splits == [1, 3, None, None]
    assert ynn_sum.parallel_dims((96, 112, 112, 96), splits, 2) == {0}
    assert ynn_sum.parallel_dims((3, 112, 112, 96), splits, 2) == {0, 1}
    assert ynn_sum.parallel_dims((4, 112, 112, 96), splits, 2) == {0}
    assert ynn_sum.parallel_dims((4, 112, 112, 96), splits, 4) == {0, 1}
    assert ynn_sum.parallel_dims((96, 112, 112, 96), splits, 1) == set()


def test_the_pool_is_this_machines_unless_named(monkeypatch):
    """XLA's pool: the processors this process may use; HLO_XLA_THREADS names another machine's
    (a positive count; anything else is ignored)."""
    import os
    monkeypatch.delenv("HLO_XLA_THREADS", raising=False)
    assert ynn_sum.xla_threads() == len(os.sched_getaffinity(0))
    monkeypatch.setenv("HLO_XLA_THREADS", "7")
    assert ynn_sum.xla_threads() == 7
    monkeypatch.setenv("HLO_XLA_THREADS", "0")
    assert ynn_sum.xla_threads() == len(os.sched_getaffinity(0))
    monkeypatch.setenv("HLO_XLA_THREADS", "1")
    x = _values(5, (96, 64, 14, 14), F32, 0.0)                 # NCHW: the (A, C, B) path...
    with np.errstate(all="ignore"):
        one = ynn_sum.reduce_sum(x, (0, 2, 3))                  # ...gives way to one thread's loops
        assert one.tobytes() == ynn_sum.tiled_sum(x, (0, 2, 3), threads=1).tobytes()
        assert one.tobytes() != ynn_sum.acb_sums(x.reshape(96, 64, 196)).tobytes()


def test_the_last_reduce_loops_only_around_a_cut_kept_dim():
    """One call over all slots, unless a kept dim inside the slots is over a tile: then a call
    per tile of slots, added into the result in order (f32[7,300,200] over 0: plane by plane)."""
    assert ynn_sum.final_splits((96, 38, 96), [True, True, False], 4) == [None, None, None]
    assert ynn_sum.final_splits((96, 320), [True, False], 8) == [None, None]
    assert ynn_sum.final_splits((7, 300, 200), [True, False, False], 4) == [1, None, None]
    x = _values(6, (7, 300, 200), F32, 0.0)
    plane_by_plane = np.zeros((300, 200), F32)
    for p in x:
        plane_by_plane = plane_by_plane + p
    with np.errstate(all="ignore"):
        assert ynn_sum.reduce_sum(x, (0,)).tobytes() == plane_by_plane.tobytes()


def test_a_dim_not_looped_over_writes_its_first_slot():
    """Images of 2 x 3 rows, H cut into tiles of 2 rows: with H looped over each tile has its
    slot, otherwise each image is one call into its first H slot (the others +0)."""
    x = np.arange(2 * 3 * 4, dtype=F32).reshape(2, 3, 4) + 1
    red, splits = [True, True, False], [1, 2, None]
    looped, _ = ynn_sum.partial_slots(x, red, splits, [0, 1], {0, 1})
    assert looped.tolist() == [[(x[0, :2].sum(0)).tolist(), x[0, 2].tolist()],
                               [(x[1, :2].sum(0)).tolist(), x[1, 2].tolist()]]
    whole, mask = ynn_sum.partial_slots(x, red, splits, [0, 1], {0})
    assert mask == [True, True, False]
    assert whole.tolist() == [[x[0].sum(0).tolist(), [0.0] * 4], [x[1].sum(0).tolist(), [0.0] * 4]]


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 7), st.integers(1, 60), st.integers(1, 60), st.integers(1, 50), st.integers(1, 4),
       st.sampled_from([F32, np.float64]), st.integers(0, 2**31 - 1))
def test_tiled_sums_of_small_integers_are_exact(n, h, w, c, threads, dt, seed):
    """Small integers add exactly in any order: whatever the tiling (one to three cut dims, any
    pool), tiled_sum loses no slot and counts none twice."""
    x = np.random.default_rng(seed).integers(-8, 9, (n, h, w, c)).astype(dt)
    for dims in [(0, 1, 2), (0, 1), (1, 2), (0, 2)]:
        got = ynn_sum.tiled_sum(x, dims, threads)
        if got is not None:
            assert got.tolist() == x.sum(axis=dims).tolist()


def test_splits_follow_the_tile_area():
    assert ynn_sum.split_factors((96, 24, 56, 56), 4) == [1, 10, None, None]
    assert ynn_sum.split_factors((96, 7, 7, 320), 4) == [2, None, None, None]
    assert ynn_sum.split_factors((96, 56, 56, 24), 4) == [1, 24, None, None]
    assert ynn_sum.split_factors((40000,), 8) == [16384]


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 40), st.integers(1, 12), st.integers(1, 300), st.sampled_from([F32, np.float64]),
       st.sampled_from([0.0, 0.3]), st.integers(0, 2**31 - 1))
def test_the_scheduler_reproduces_the_acb_sums(a, c, b, dt, hostile, seed):
    """tiled_sum's general tiling gives the (A, C, B) path's bits wherever both apply."""
    x = _values(seed, (a, c, b), dt, hostile)
    want = ynn_sum.reduce_sum(x, (0, 2))
    got = ynn_sum.tiled_sum(x, (0, 2))
    assume(got is not None)
    assert _same(got, want)


# ------------------------------------------------------------------ XLA live

SHAPES = [((96, 320, 49), (0, 2)), ((96, 100, 49), (0, 2)), ((40, 24, 3136), (0, 2)),
          ((17, 50, 300), (0, 2)), ((1100, 8, 5), (0, 2)), ((3, 1000, 60), (0, 2)),
          ((96, 1000), (0,)), ((5000, 3), (0,)), ((64, 1280, 49), (2,)), ((16000,), (0,)),
          # general tiling (tiled_sum): NHWC with an image within a tile, middle dims, long rows
          ((96, 7, 7, 320), (0, 1, 2)), ((96, 14, 14, 64), (0, 1, 2)), ((16, 14, 14, 32), (0, 1, 2)),
          ((30, 40, 50), (1,)), ((3, 20000, 4), (1,)), ((40000,), (0,)), ((40000, 3), (0,)),
          ((50, 1, 300), (0, 2)),
          # two or three reduced dims cut (partial_slots): images over a tile, the inner cut dim
          # looped over or not by the pool (this machine's, xla_threads)
          ((2, 40, 40, 32), (0, 1, 2)), ((3, 40, 40, 32), (0, 1, 2)), ((8, 56, 56, 24), (0, 1, 2)),
          ((16, 28, 28, 32), (0, 1, 2)), ((96, 7, 7, 1280), (0, 1, 2)), ((4, 112, 112, 96), (0, 1, 2)),
          ((6, 300, 200), (0, 1)), ((8, 4, 300, 300), (0, 2, 3)), ((2, 2, 50, 1000), (0, 1, 2)),
          ((3, 4, 50, 1000), (0, 1, 2)), ((64, 70, 700), (0, 2)),
          # kept dims over a tile: the last reduce loops over the slots (final_splits)
          ((7, 300, 200), (0,)), ((7, 60000), (0,)), ((7, 2, 300, 200), (0, 1)), ((20, 100, 400), (0,)),
          # rows over a tile beside kept dims
          ((5, 40000), (1,)), ((2, 5, 40000), (2,)), ((4, 3, 50000), (0, 2))]


@pytest.mark.slow
@pytest.mark.parametrize("dt", [F32, np.float64])
@pytest.mark.parametrize("shape,dims", SHAPES)
def test_reduce_sum_is_xla_bit_for_bit(shape, dims, dt):
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp
    jax.config.update("jax_platforms", "cpu")
    x = _values(7, shape, dt, 0.0)
    with jax.enable_x64(True):                  # (only here: other tests' programs are f32)
        want = np.asarray(jax.jit(lambda a: jnp.sum(a, axis=dims))(x))
    got = ynn_sum.reduce_sum(x, dims)
    assert got.dtype == want.dtype and got.tobytes() == want.tobytes()


@pytest.mark.slow
def test_batch_norm_statistics_and_nan_channels_are_xla_bit_for_bit():
    """Nearly constant channels of large values: the one-pass variance rounds negative in some,
    whose normalized outputs are NaN; mean, variance and the NaN channels as XLA CPU's."""
    pytest.importorskip("jax")
    from hlo_cli.interpreter import run
    from hlo_cli.parser import parse
    from hlo_cli.tools.xla_reference import XlaExecutable
    shape = (32, 24, 28, 28)
    text = """HloModule m
ENTRY e {
  x = f32[32,24,28,28] parameter(0)
  s = f32[24] parameter(1)
  o = f32[24] parameter(2)
  ROOT b = (f32[32,24,28,28], f32[24], f32[24]) batch-norm-training(x, s, o), epsilon=1e-05, feature_index=1
}"""
    rng = np.random.default_rng(5)
    level = rng.uniform(20, 80, (1, 24, 1, 1)).astype(F32)
    x = (level + F32(1e-5) * rng.standard_normal(shape)).astype(F32)
    s, o = rng.standard_normal(24).astype(F32), rng.standard_normal(24).astype(F32)
    want = [np.asarray(v) for v in XlaExecutable(text)([x, s, o])]
    got = run(parse(text, "m"), x, s, o)
    assert np.isnan(want[0]).any() and not np.isnan(want[0]).all()
    assert np.array_equal(np.isnan(got[0]), np.isnan(want[0]))
    for g, w in zip(got[1:], want[1:]):
        assert np.array_equal(np.asarray(g).view(np.uint32), w.view(np.uint32))


@pytest.mark.slow
@pytest.mark.parametrize("shape", [(8, 56, 56, 24), (3, 4, 50, 1000), (2, 40, 40, 32), (96, 14, 14, 64)])
def test_a_fused_product_loops_over_every_cut_dim(shape):
    """jnp.sum(a * b): the multiply is in YNNPACK's call and computed inside its loops, which then
    stay even where serial (tiled_sum(fused=True)); the plain sum of the same product does not
    loop over the serial ones."""
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp
    jax.config.update("jax_platforms", "cpu")
    a, b = _values(3, shape, F32, 0.0), _values(4, shape, F32, 0.0)
    dims = tuple(range(len(shape) - 1))
    want = np.asarray(jax.jit(lambda p, q: jnp.sum(p * q, axis=dims))(a, b))
    with np.errstate(all="ignore"):
        got = ynn_sum.reduce_sum(a * b, dims, fused=True)
    assert got.tobytes() == want.tobytes()


def test_fused_loops_over_every_cut_dim():
    """fused: every cut dim looped over, as when the pool makes every one parallel."""
    x = _values(9, (6, 40, 40, 24), F32, 0.0)                # N and H cut, H serial at 2 threads
    assert ynn_sum.parallel_dims(x.shape, ynn_sum.split_factors(x.shape, 4), 2) == {0}
    with np.errstate(all="ignore"):
        fused = ynn_sum.tiled_sum(x, (0, 1, 2), threads=2, fused=True)
        wide = ynn_sum.tiled_sum(x, (0, 1, 2), threads=64)
        plain = ynn_sum.tiled_sum(x, (0, 1, 2), threads=2)
    assert fused.tobytes() == wide.tobytes() and fused.tobytes() != plain.tobytes()


def test_the_compiled_kernels_wait_until_they_pay(monkeypatch):
    """HLO_NATIVE=0: never; unset: not for arrays under NATIVE_MIN, and (numba not imported yet)
    not before NumPy has summed NATIVE_PAYBACK elements; HLO_NATIVE=1: at once (numba installed)."""
    monkeypatch.setenv("HLO_NATIVE", "0")
    assert ynn_sum._native_kernel(1 << 40) is None
    monkeypatch.delenv("HLO_NATIVE")
    assert ynn_sum._native_kernel(ynn_sum.NATIVE_MIN - 1) is None
    if not ynn_sum._KERNELS:
        monkeypatch.setattr(ynn_sum, "_NUMPY_ELEMENTS", [0])
        monkeypatch.setattr(ynn_sum, "NATIVE_PAYBACK", 1 << 62)
        monkeypatch.delitem(__import__("sys").modules, "numba", raising=False)
        assert ynn_sum._native_kernel(1 << 20) is None
        assert ynn_sum._NUMPY_ELEMENTS[0] == 1 << 20
    pytest.importorskip("numba")
    monkeypatch.setenv("HLO_NATIVE", "1")
    assert ynn_sum._native_kernel(1 << 20) is not None
