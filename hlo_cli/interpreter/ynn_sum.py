"""YNNPACK's float sums in their exact order: the f32/f64 add-reduces XLA CPU hands to YNNPACK
(batch norm's statistics among them) give these bits (hlo_cli/SEMANTICS.md, "YNNPACK").

An (A, C, B) array summed over A and B (C kept) is summed in two stages: each (a, c) row of B
contiguous elements by the k1 kernel, then the (A, C) row sums over A by the kn kernel.  Both
keep a three-level tree of accumulators that start at +0: level 0 takes the terms, a clock says
when level 0 is added into level 1 (clock a multiple of 16) and level 1 into level 2 by a Kahan
step (a multiple of 256; a non-finite Kahan error is dropped); at the end level 0 goes into
level 1 and level 1 into level 2 once more.

* k1 (`row_terms`, `finish_rows`): L lanes (16 f32, 8 f64: 64 bytes).  The row is read in chunks
  of 4 L elements; a chunk's L-lane term is ((c0 + c1) + c2) + c3 of its four L-element parts (a
  short last chunk reads zeros).  While at least 16 L elements remain, four chunks go into level
  0 and the clock moves by 4 L; then each whole chunk left moves it by L; the short chunk goes
  into level 0 last.  The row's sum is level 2's lanes added by halves (lanes [0, L/2) +
  [L/2, L), and again, down to one).
* kn (`column_sums`): four rows at a time, ((r0 + r1) + r2) + r3 from +0, go into level 0 and
  move the clock by 4; the last rows (fewer than four) go into level 0 at the end; k <= 4 rows
  are just added in order.
* The batch dim A is cut into tiles of TILE_BYTES of input (`tile_rows` planes, at least one):
  a tile's k1 row sums are added in order into its (C,) buffer from +0, and the tiles' buffers
  summed by the kn kernel (`combine_planes`); with B == 1 (only leading dims reduced) each
  tile's rows are summed by the kn kernel instead.  This is the scheduler's order (`tiled_sum`)
  for one cut reduced dim when XLA's pool has several threads.
* Any other layout (several leading reduced dims as NHWC's N, H, W, reduced dims between kept
  ones, rows longer than a tile, one thread) follows the scheduler itself (`tiled_sum`:
  `split_factors`, `parallel_dims`, `partial_slots`, `final_splits`, `kernel_plan`).

The chunk terms are formed vectorized over the whole row; the tree's steps run once per 256
clock ticks, over all rows at once.
"""
from __future__ import annotations

import math
import os
import sys
import threading

import numpy as np


def lanes(dt) -> int:
    """YNNPACK's accumulator width for the k1 sum: 64 bytes of `dt`."""
    return 64 // np.dtype(dt).itemsize


def _kahan(a, acc, err):
    """acc + a with Kahan's correction `err`; a non-finite error is dropped (YNNPACK)."""
    y = a - err
    t = acc + y
    e = (t - acc) - y
    bad = ~np.isfinite(e)
    if bad.any():
        e[bad] = 0
    return t, e


def _halves(v):
    """The lanes (last axis) added by halves down to one (lane-major: long contiguous adds)."""
    if v.shape[-1] == 1:
        return v[..., 0]
    t = np.ascontiguousarray(np.moveaxis(v, -1, 0))
    while t.shape[0] > 1:
        h = t.shape[0] // 2
        t = t[:h] + t[h:]
    return t[0]


def _four(parts):
    """((p0 + p1) + p2) + p3 along axis -2 (of length 4), then + 0 (a -0 becomes +0)."""
    s = np.add(parts[..., 0, :], parts[..., 1, :])
    s += parts[..., 2, :]
    s += parts[..., 3, :]
    s += parts.dtype.type(0)
    return s


def _chunks(rows: np.ndarray, full: int, n_l: int) -> np.ndarray:
    """The first `full` chunks of 4 L elements of each row of `rows` (its last axis contiguous)
    as an (m, full, 4, L) view, without a copy."""
    m = rows.shape[0]
    if rows.flags.c_contiguous and rows.shape[1] == full * 4 * n_l:
        return rows.reshape(m, full, 4, n_l)
    isz = rows.itemsize
    return np.lib.stride_tricks.as_strided(
        rows, (m, full, 4, n_l), (rows.strides[0], 4 * n_l * isz, n_l * isz, isz), writeable=False)


def _short_chunk(part: np.ndarray, n_l: int) -> np.ndarray:
    """The L-lane term of a short last chunk (rem < 4 L columns of `part`, zeros after them):
    lane l adds columns l, L + l, 2 L + l, 3 L + l in order, from +0; computed column-wise on the
    transposed part (NumPy's loops over a few strided lanes per row are slow)."""
    return _short_lanes(part, n_l).T


def _short_lanes(part: np.ndarray, n_l: int) -> np.ndarray:
    """_short_chunk's lanes, lane-major: (L, m)."""
    m, rem = part.shape
    t = np.ascontiguousarray(part.T)                 # (rem, m)
    lanes_t = np.zeros((n_l, m), part.dtype)
    for l in range(min(n_l, rem)):
        acc = lanes_t[l]
        for j in range(l, rem, n_l):
            acc = acc + t[j]
        lanes_t[l] = acc
    return lanes_t


# rows are turned into their k1 terms (NumPy path) in blocks of about this many elements
# (rows are independent; this bounds the intermediate arrays)
ROW_BLOCK = 1 << 20


def row_terms(rows: np.ndarray) -> np.ndarray:
    """The k1 kernel's level-2 (Kahan) terms of each row of the 2-D f32/f64 array `rows` (its
    last axis contiguous, else copied): (m, steps, L); `finish_rows` adds them up."""
    if rows.ndim != 2 or (rows.shape[1] > 1 and rows.strides[1] != rows.itemsize):
        rows = np.ascontiguousarray(rows)
    m, k = rows.shape
    kernel = _native_kernel(rows.size)
    if kernel is not None:
        rows = np.ascontiguousarray(rows)
        n_l = lanes(rows.dtype)
        groups = k // (4 * n_l) // 4 if k >= 16 * n_l else 0
        out = np.empty((m, groups // (64 // n_l) + 1, n_l), rows.dtype)
        kernel(rows, out)
        return out
    step = max(1, ROW_BLOCK // max(1, k))
    if m <= step:
        return _block_terms(rows)
    return np.concatenate([_block_terms(rows[i:i + step]) for i in range(0, m, step)], axis=0)


def _block_terms(rows: np.ndarray) -> np.ndarray:
    """row_terms of one block of rows."""
    dt = rows.dtype
    m, k = rows.shape
    n_l = lanes(dt)
    nk4 = 4 * n_l
    full = k // nk4
    rem = k - full * nk4
    groups = full // 4 if k >= 16 * n_l else 0
    loc = _four(_chunks(rows, full, n_l)) if full else None
    zero = np.zeros((m, n_l), dt)
    acc0 = acc1 = zero
    terms = []
    if groups:
        # a group moves the clock by 4 L (a multiple of 16): level 0 holds one group and
        # empties into level 1 after it; level 1 empties into level 2 every `per` groups
        g = _four(loc[:, :4 * groups].reshape(m, groups, 4, n_l))
        per = 256 // nk4
        whole = groups // per
        if whole:
            sup = g[:, :whole * per].reshape(m, whole, per, n_l)
            s = sup[:, :, 0] + dt.type(0)
            for i in range(1, per):
                s = s + sup[:, :, i]
            terms.append(s)
        for j in range(whole * per, groups):
            acc1 = acc1 + g[:, j]
    clock = groups * nk4
    for j in range(4 * groups, full):
        # fewer than four chunks are left: the clock (groups * 4 L + j L) can reach a
        # multiple of 16 here but not one of 256 (no Kahan step before the end)
        acc0 = acc0 + loc[:, j]
        clock += n_l
        if clock % 16 == 0:
            acc1, acc0 = acc1 + acc0, zero
    if rem:
        acc0 = acc0 + _short_chunk(rows[:, full * nk4:], n_l)
    terms.append((acc1 + acc0)[:, None])
    return np.concatenate(terms, axis=1)


def _x86_nan(a, b, r):
    """`r`, the result of an add or subtract of `a` and `b`, with x86's NaN rule made explicit (the
    compiler may swap an add's operands): a NaN operand's bits, quieted, the first one's if both are
    NaN."""
    if r != r:
        if a != a:
            return a + a
        if b != b:
            return b + b
    return r


def _sub(a, b):
    """a - b with x86's NaN rule (_x86_nan)."""
    return _x86_nan(a, b, a - b)


def _add(a, b):
    """a + b with x86's NaN rule (_x86_nan)."""
    return _x86_nan(a, b, a + b)


def _k1_terms(rows, out):
    """row_terms's arithmetic (compiled by numba: `_native_kernel`): the same adds in the same
    order, read in place from the C-contiguous `rows`, lanes innermost."""
    m, k = rows.shape
    n_l = out.shape[2]
    nk4 = 4 * n_l
    full = k // nk4
    rem = k - full * nk4
    groups = full // 4 if k >= 16 * n_l else 0
    per = 256 // nk4
    whole = groups // per
    zero = out.dtype.type(0)
    g = np.empty(n_l, out.dtype)
    s = np.empty(n_l, out.dtype)
    acc0 = np.empty(n_l, out.dtype)
    acc1 = np.empty(n_l, out.dtype)
    if full == 0:                       # one short chunk per row: its lanes from +0
        for r in range(m):
            x = rows[r]
            for ln in range(n_l):
                t = zero
                for j in range(ln, k, n_l):
                    t = _add(t, x[j])
                out[r, 0, ln] = _add(zero, _add(zero, t))
        return
    for r in range(m):
        x = rows[r]
        acc1[:] = zero
        for gi in range(groups):
            b0 = gi * 4 * nk4
            for q in range(4):
                for ln in range(n_l):
                    b = b0 + q * nk4 + ln
                    c = _add(_add(_add(_add(x[b], x[b + n_l]), x[b + 2 * n_l]), x[b + 3 * n_l]), zero)
                    g[ln] = c if q == 0 else _add(g[ln], c)
            i = gi % per
            if gi < whole * per:        # a whole run of `per` groups: one Kahan term
                for ln in range(n_l):
                    t = _add(g[ln], zero)
                    s[ln] = _add(t, zero) if i == 0 else _add(s[ln], t)
                if i == per - 1:
                    out[r, gi // per] = s
            else:
                for ln in range(n_l):
                    acc1[ln] = _add(acc1[ln], _add(g[ln], zero))
        acc0[:] = zero
        clock = groups * nk4
        for j in range(4 * groups, full):
            for ln in range(n_l):
                b = j * nk4 + ln
                c = _add(_add(_add(_add(x[b], x[b + n_l]), x[b + 2 * n_l]), x[b + 3 * n_l]), zero)
                acc0[ln] = _add(acc0[ln], c)
            clock += n_l
            if clock % 16 == 0:
                for ln in range(n_l):
                    acc1[ln] = _add(acc1[ln], acc0[ln])
                acc0[:] = zero
        for ln in range(min(rem, n_l)):     # the short chunk: lane ln from +0
            t = zero
            for j in range(full * nk4 + ln, k, n_l):
                t = _add(t, x[j])
            acc0[ln] = _add(acc0[ln], t)
        for ln in range(n_l):
            out[r, whole, ln] = _add(acc1[ln], acc0[ln])


# arrays of at least this many elements are summed by the compiled kernels (`_k1_terms`,
# `_kn_sums`), once NumPy has summed NATIVE_PAYBACK elements in this process (about the time
# that importing numba and loading the kernels from its cache costs, about 1 s) or numba is
# already imported; HLO_NATIVE=1 (or strict): from the first, HLO_NATIVE=0: never
NATIVE_MIN = 1 << 16
NATIVE_PAYBACK = 1 << 28
_KERNELS: list = []
_KERNELS_LOCK = threading.Lock()
_NUMPY_ELEMENTS = [0]


def _native_kernel(size: int, which: int = 0):
    """The numba-compiled `_k1_terms` (which=0) or `_kn_sums` (1), numba's on-disk cache keeping
    them, or None: numba not installed, HLO_NATIVE=0, fewer than NATIVE_MIN elements, or not yet
    worth it (see NATIVE_PAYBACK)."""
    mode = os.environ.get("HLO_NATIVE", "")
    if size < NATIVE_MIN or mode == "0":
        return None
    if not _KERNELS:
        if mode not in ("1", "strict") and "numba" not in sys.modules:
            _NUMPY_ELEMENTS[0] += size
            if _NUMPY_ELEMENTS[0] < NATIVE_PAYBACK:
                return None
        with _KERNELS_LOCK:             # (the pool's threads may ask at once)
            if not _KERNELS:
                _KERNELS.extend(_compile())
    return _KERNELS[which]


def _compile() -> list:
    try:
        import numba
    except ImportError:
        return [None, None]
    global _x86_nan, _add, _sub, _kahan_step      # the kernels call these compiled
    _x86_nan = numba.njit(inline="always")(_x86_nan)
    _add = numba.njit(inline="always")(_add)
    _sub = numba.njit(inline="always")(_sub)
    _kahan_step = numba.njit(inline="always")(_kahan_step)
    return [numba.njit(cache=True, nogil=True)(f) for f in (_k1_terms, _kn_sums)]


def finish_rows(terms: np.ndarray) -> np.ndarray:
    """Each row's k1 sum from its `row_terms` (rows of several calls may be concatenated)."""
    if terms.shape[1] == 1:             # one Kahan step from +0 adds the term exactly
        return _halves(terms[:, 0] + terms.dtype.type(0)) + terms.dtype.type(0)
    zero = np.zeros(terms[:, 0].shape, terms.dtype)
    acc, err = zero, zero.copy()
    for j in range(terms.shape[1]):
        acc, err = _kahan(terms[:, j], acc, err)
    return _halves(acc) + terms.dtype.type(0)


def row_sums(rows: np.ndarray) -> np.ndarray:
    """YNNPACK's k1 sum of each row of the 2-D f32 or f64 array `rows`."""
    n_l = lanes(rows.dtype)
    if rows.shape[1] < 4 * n_l and _native_kernel(rows.size) is None:
        # one short chunk: its lanes added by halves, lane-major
        v = _short_lanes(rows, n_l) + rows.dtype.type(0)
        while v.shape[0] > 1:
            h = v.shape[0] // 2
            v = v[:h] + v[h:]
        return v[0] + rows.dtype.type(0)
    return finish_rows(row_terms(rows))


class _Tree:
    """YNNPACK's three-level accumulator tree over vectors of one shape (module docstring)."""

    def __init__(self, zero):
        self.zero = zero
        self.acc0 = self.acc1 = self.acc2 = zero
        self.err = zero.copy()
        self.clock = 0

    def kahan(self):
        self.acc2, self.err = _kahan(self.acc1, self.acc2, self.err)
        self.acc1 = self.zero

    def add(self, term, ticks):
        """A term into level 0, then the clock moves by `ticks`."""
        self.acc0 = self.acc0 + term
        self.clock += ticks
        if self.clock % 16 == 0:
            self.acc1 = self.acc1 + self.acc0
            self.acc0 = self.zero
            if self.clock % 256 == 0:
                self.kahan()

    def close(self, term=None):
        if term is not None:
            self.acc0 = self.acc0 + term
        self.acc1 = self.acc1 + self.acc0
        self.kahan()
        return self.acc2


def _kn_sums(a, out):
    """column_sums's arithmetic (compiled by numba: `_native_kernel`) over the (k, P, Q) array
    `a` (any strides) into the (P, Q) `out`: the same adds in the same order, per p."""
    k, np_, nq = a.shape
    zero = out.dtype.type(0)
    part = np.empty(nq, out.dtype)
    acc0 = np.empty(nq, out.dtype)
    acc1 = np.empty(nq, out.dtype)
    acc2 = np.empty(nq, out.dtype)
    err = np.empty(nq, out.dtype)
    for p in range(np_):
        if k <= 4:
            part[:] = zero
            for j in range(k):
                for q in range(nq):
                    part[q] = _add(part[q], a[j, p, q])
            out[p] = part
            continue
        acc0[:] = zero
        acc1[:] = zero
        acc2[:] = zero
        err[:] = zero
        clock = 0
        for j0 in range(0, k - 3, 4):
            part[:] = zero
            for j in range(j0, j0 + 4):
                for q in range(nq):
                    part[q] = _add(part[q], a[j, p, q])
            for q in range(nq):
                acc0[q] = _add(acc0[q], part[q])
            clock += 4
            if clock % 16 == 0:
                for q in range(nq):
                    acc1[q] = _add(acc1[q], acc0[q])
                acc0[:] = zero
                if clock % 256 == 0:
                    _kahan_step(acc1, acc2, err)
                    acc1[:] = zero
        if k % 4:
            part[:] = zero
            for j in range(k - k % 4, k):
                for q in range(nq):
                    part[q] = _add(part[q], a[j, p, q])
            for q in range(nq):
                acc0[q] = _add(acc0[q], part[q])
        for q in range(nq):
            acc1[q] = _add(acc1[q], acc0[q])
        _kahan_step(acc1, acc2, err)
        for q in range(nq):
            out[p, q] = _add(acc2[q], zero)


def _kahan_step(a, acc, err):
    """_kahan in place, element by element (compiled with `_kn_sums`)."""
    for q in range(a.shape[0]):
        y = _sub(a[q], err[q])
        t = _add(acc[q], y)
        e = _sub(_sub(t, acc[q]), y)
        acc[q] = t
        err[q] = e if np.isfinite(e) else err.dtype.type(0)


def column_sums(a: np.ndarray) -> np.ndarray:
    """YNNPACK's kn sum over the first axis of the array `a` (each column of the other axes
    independently)."""
    k = a.shape[0]
    kernel = _native_kernel(a.size, 1) if a.ndim >= 2 and a.shape[-1] else None
    if kernel is not None:
        out = np.empty(a.shape[1:], a.dtype)
        kernel(a.reshape(k, -1, a.shape[-1]), out.reshape(-1, a.shape[-1]))
        return out
    zero = np.zeros(a.shape[1:], a.dtype)
    if k >= 16 and _nan_free(a):
        return _column_sums_blocked(a, zero) + a.dtype.type(0)
    return column_sums_by_part(a, zero)


def column_sums_by_part(a, zero):
    """column_sums one four-row part at a time through the tree (the kn kernel's order as written;
    NaN inputs take it); k <= 4 rows just added in order."""
    def part(rows):
        s = zero
        for r in rows:
            s = s + r
        return s
    k = a.shape[0]
    if k <= 4:
        return part(a)
    tree = _Tree(zero)
    for j in range(0, k - 3, 4):
        tree.add(part(a[j:j + 4]), 4)
    return tree.close(part(a[k - k % 4:]) if k % 4 else None) + a.dtype.type(0)


def _nan_free(a) -> bool:
    v = np.minimum.reduce(a, axis=None)         # (NaN if a NaN is present)
    return bool(v == v)


def _in_order(terms, zero):
    """((0 + t0) + t1) + ... along the first axis of `terms`, for each index of its second axis at
    once (each a block of the sequence): (blocks, *rest)."""
    s = zero + terms[:, 0]
    for i in range(1, terms.shape[1]):
        s = s + terms[:, i]
    return s


def _column_sums_blocked(a, zero):
    """column_sums's tree (kn kernel) for k >= 16 rows free of NaN, its adds in the same order
    per element but each level's adds made for all its blocks at once: the four-row parts, the
    level-0 sums of four parts (16 clock ticks), the level-1 sums of 16 of those (256 ticks), then
    the Kahan steps in order and the unfinished blocks.  (Elementwise adds in the same order give
    the same bits wherever the array is cut; only which of two NaNs an add returns depends on an
    element's place in NumPy's loop, hence no NaN: the caller's loop takes those.)"""
    k = a.shape[0]
    g = k // 4                                      # four-row parts
    rest = a.shape[1:]
    parts = _in_order(a[:4 * g].reshape((g, 4) + rest), zero)
    b = g // 4                                      # full level-0 blocks
    level0 = _in_order(parts[:4 * b].reshape((b, 4) + rest), zero)
    sb = b // 16                                    # full level-1 blocks
    acc2, err = zero, zero.copy()
    if sb:
        level1 = _in_order(level0[:16 * sb].reshape((sb, 16) + rest), zero)
        for r in level1:
            acc2, err = _kahan(r, acc2, err)
    acc1 = zero
    for q in level0[16 * sb:]:
        acc1 = acc1 + q
    acc0 = zero
    for p in parts[4 * b:]:
        acc0 = acc0 + p
    if k % 4:
        tail = zero
        for r in a[4 * g:]:
            tail = tail + r
        acc0 = acc0 + tail
    acc1 = acc1 + acc0
    acc2, err = _kahan(acc1, acc2, err)
    return acc2


# the batch dim A is cut into tiles of about this many bytes of input
TILE_BYTES = 1 << 17


def known(b: int, itemsize: int) -> bool:
    """True when the order is known: rows of B elements within one tile (longer rows are cut
    into pieces whose rule was not measured)."""
    return b * itemsize <= TILE_BYTES


def tile_rows(c: int, b: int, itemsize: int) -> int:
    """How many (C, B) planes of the batch dim one tile holds."""
    return max(1, TILE_BYTES // max(1, c * b * itemsize))


def combine_planes(planes: np.ndarray, b: int) -> np.ndarray:
    """The (C,) total of the (A, C) k1 row sums `planes` of planes of B elements (B == 1: the
    elements themselves): per tile the k1 row sums added in order from +0 (B == 1: the tile's
    rows by the kn kernel), then the tiles' sums by the kn kernel."""
    a, c = planes.shape
    step = tile_rows(c, b, planes.dtype.itemsize)
    zero = np.zeros(c, planes.dtype)
    tiles = []
    for i in range(0, a, step):
        if b == 1:
            tiles.append(column_sums(planes[i:i + step]))
            continue
        s = zero
        for r in planes[i:i + step]:
            s = s + r
        tiles.append(s)
    return column_sums(np.stack(tiles)) if len(tiles) > 1 else tiles[0]


def acb_sums(x3: np.ndarray, map_rows=None) -> np.ndarray:
    """YNNPACK's sum of the (A, C, B) array `x3` over A and B: (C,).  `map_rows(fn, rows)`, if
    given, returns [fn(block) for the row blocks of `rows`, in order] (rows are independent: a
    pool may compute the blocks)."""
    a, c, b = x3.shape
    if b == 1:
        return combine_planes(x3[:, :, 0], 1)
    rows = np.ascontiguousarray(x3).reshape(a * c, b)
    sums = row_sums(rows) if map_rows is None else np.concatenate(map_rows(row_sums, rows))
    return combine_planes(sums.reshape(a, c), b)


def reduce_sum(x: np.ndarray, dims, map_rows=None, fused: bool = False) -> np.ndarray:
    """YNNPACK's sum (from +0, no init) of the f32/f64 array `x` over `dims`, shaped as the kept
    dims, when the kept dims are one run of neighbouring dims (or none) after at most one
    reduced dim: then `x` is an (A, C, B) array summed over A and B; otherwise (reduced dims
    between kept ones, several leading reduced dims, rows longer than a tile, XLA's pool of one
    thread, kept dims over a tile) by `tiled_sum` (`fused`: see there)."""
    out_shape = tuple(x.shape[d] for d in range(x.ndim) if d not in set(dims))
    if 1 in x.shape and x.size:         # YNNPACK drops dims of extent 1 (their neighbours fuse)
        live = [d for d in range(x.ndim) if x.shape[d] != 1]
        r = reduce_sum(x.reshape([x.shape[d] for d in live]),
                       [i for i, d in enumerate(live) if d in set(dims)], map_rows, fused)
        return r.reshape(out_shape)
    keep = [d for d in range(x.ndim) if d not in set(dims)]
    if not keep:
        a, c, b = 1, 1, x.size
    elif keep != list(range(keep[0], keep[-1] + 1)) or keep[0] > 1:
        return tiled_sum(x, dims, fused=fused)      # reduced dims between kept ones, or several leading ones
    else:
        a = math.prod(x.shape[:keep[0]])
        c = math.prod(out_shape)
        b = math.prod(x.shape[keep[-1] + 1:])
    if (not known(b, x.dtype.itemsize) or (xla_threads() == 1 and not fused)
            or c * x.dtype.itemsize > TILE_AREA_BYTES):
        # (one thread: no loop, see parallel_dims; kept dims over a tile: final_splits)
        return tiled_sum(x, dims, fused=fused)
    with np.errstate(all="ignore"):
        return acb_sums(np.ascontiguousarray(x).reshape(a, c, b), map_rows).reshape(out_shape)


# YNNPACK's scheduler cuts every reduce into tiles of about this many bytes of input
TILE_AREA_BYTES = 1 << 17


def split_factors(extents, itemsize: int) -> list:
    """YNNPACK's tile extent of each dim of a row-major array of `extents` (None: the whole
    dim): dims are visited innermost first, each taking what is left of the tile's area
    (floor division, at least 1)."""
    area = -(-TILE_AREA_BYTES // itemsize)
    so_far = 1
    out = [None] * len(extents)
    for d in reversed(range(len(extents))):
        e = extents[d]
        s = max(1, min(area // so_far, e))
        if s >= e:
            so_far *= e
        else:
            out[d] = s
            so_far *= s
    return out


def _dense_strides(shape) -> list:
    out, acc = [0] * len(shape), 1
    for d in reversed(range(len(shape))):
        out[d] = acc
        acc *= shape[d]
    return out


def kernel_plan(ext, strides, red, c_strides):
    """How YNNPACK's reduce runs one tile of extents `ext` (strides in elements of the whole
    buffer; `red` the reduced dims; `c_strides` the output's strides of the kept dims): the
    contiguous innermost reduced dims form the k1 rows, the next reduced dims whose strides
    continue each other the k2 loop, the other reduced dims an outer loop; with no k1 dim and
    the kept dims contiguous (or none) the kn kernel sums the k2 rows instead.  Returns
    (kn, k1 dims, k2 dims, outer reduced dims), dims in row-major order."""
    k1 = k2 = n = 1
    k2s = ns = 0
    k1a, k2a, outer = [], [], []
    for ax in reversed(range(len(ext))):
        e, st = ext[ax], strides[ax]
        if e == 1:
            continue
        if red[ax]:
            if k1 == st:
                k1 *= e
                k1a.append(ax)
            elif k2s * k2 == st:
                k2 *= e
                k2a.append(ax)
            elif k2 == 1:
                k2, k2s = e, st
                k2a.append(ax)
            else:
                outer.append(ax)
        elif c_strides[ax] == n:
            if ns * n == st:
                n *= e
            elif n == 1:
                n, ns = e, st
    return k1 == 1 and (n == 1 or ns == 1), sorted(k1a), sorted(k2a), sorted(outer)


def _tile_parts(t: np.ndarray, plan) -> list:
    """The terms one YNNPACK reduce call adds into its output, in order, for a batch of
    tiles `t` (nb, *tile): each (nb * kept elements,)."""
    kn, k1a, k2a, outer = plan
    red = set(k1a + k2a + outer)
    indep = [a for a in range(t.ndim - 1) if a not in red]
    size = lambda axes: math.prod(t.shape[1 + a] for a in axes)
    o, k2, k1 = size(outer), size(k2a), size(k1a)
    if kn:
        # (views: the kn kernel adds whole rows of the tiles in place)
        z = t.transpose([1 + a for a in outer + k2a] + [0] + [1 + a for a in indep])
        z = z.reshape((o, k2) + z.shape[len(outer) + len(k2a):])
        return [column_sums(z[i]).reshape(-1) for i in range(o)]
    z = t.transpose([0] + [1 + a for a in indep + outer + k2a + k1a])
    rs = row_sums(z.reshape(-1, k1)).reshape(-1, o * k2)         # (a copy only where needed)
    return [rs[:, j] for j in range(o * k2)]


def _groups(shape, red, splits):
    """The tiles of the reduced dims cut by `splits`, grouped by extent: yields (slices,
    {dim: (first tile, count, size)})."""
    cut = [d for d in range(len(shape)) if red[d] and splits[d] is not None]
    choices = []
    for d in cut:
        e, s = shape[d], splits[d]
        f, r = divmod(e, s)
        opts = [(0, f * s, 0, f, s)] if f else []
        if r:
            opts.append((f * s, e, f, 1, r))
        choices.append(opts)
    import itertools
    for combo in itertools.product(*choices):
        sl = [slice(None)] * len(shape)
        info = {}
        for d, (lo, hi, first, count, size) in zip(cut, combo):
            sl[d] = slice(lo, hi)
            info[d] = (first, count, size)
        yield tuple(sl), info


def _stage(x: np.ndarray, red, splits, c_strides, sequential: bool):
    """One YNNPACK reduce over the row-major array `x`.  Not `sequential`: each tile of the cut
    reduced dims is summed from +0 into its own slot (the partial reduction): returns the
    (tiles..., kept...) array in dim order.  `sequential`: the tiles go into one output in
    row-major tile order: returns the kept-dims array."""
    shape, strides = x.shape, _dense_strides(x.shape)
    cut = [d for d in range(x.ndim) if red[d] and splits[d] is not None]
    kept = [d for d in range(x.ndim) if not red[d]]
    kept_shape = tuple(shape[d] for d in kept)
    ntiles = [-(-shape[d] // splits[d]) for d in cut]
    parts = {}
    for sl, info in _groups(shape, red, splits):
        sub = x[sl]
        ext, new_shape, count_axes = [], [], []
        for d in range(x.ndim):
            if d in info:
                new_shape += [info[d][1], info[d][2]]
                count_axes.append(len(new_shape) - 2)
                ext.append(info[d][2])
            else:
                new_shape.append(sub.shape[d])
                ext.append(sub.shape[d] if red[d] or splits[d] is None else splits[d])
        sub = sub.reshape(new_shape)
        rest = [a for a in range(sub.ndim) if a not in count_axes]
        counts = [sub.shape[a] for a in count_axes]
        t = sub.transpose(count_axes + rest).reshape((-1,) + tuple(sub.shape[a] for a in rest))
        ps = _tile_parts(t, kernel_plan(ext, strides, red, c_strides))
        key = tuple(info[d][0] for d in cut)
        parts[key] = ([p.reshape(tuple(counts) + kept_shape) for p in ps], counts)
    if not sequential:
        out = np.zeros(tuple(ntiles) + kept_shape, x.dtype)
        for key, (ps, counts) in parts.items():
            acc = np.zeros(tuple(counts) + kept_shape, x.dtype)
            for p in ps:
                acc = acc + p
            out[tuple(slice(k, k + c) for k, c in zip(key, counts))] = acc
        return out
    import itertools
    c = np.zeros(kept_shape, x.dtype)
    for idx in itertools.product(*[range(n) for n in ntiles]):
        key, local = [], []
        for d, i in zip(cut, idx):
            f = shape[d] // splits[d]
            key.append(0 if i < f else f)
            local.append(i if i < f else 0)
        for p in parts[tuple(key)][0]:
            c = c + p[tuple(local)]
    return c


def xla_threads() -> int:
    """The size of XLA CPU's thread pool on this machine, which YNNPACK's scheduler is given: the
    processors this process may run on (TSL's MaxParallelism, sched_getaffinity); the
    environment variable HLO_XLA_THREADS, a positive number, stands for another machine's."""
    env = os.environ.get("HLO_XLA_THREADS", "").strip()
    if env.isdigit() and int(env) > 0:
        return int(env)
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def parallel_dims(shape, splits, threads: int) -> set:
    """The cut dims YNNPACK's scheduler loops over (ynn_runtime::make_schedule): it aims at
    2 x `threads` tasks; visiting the cut dims outermost first, a dim is parallel while fewer
    tasks than that are made by the dims outside it (each cut dim multiplies them by its tile
    count); with one thread none is.  A serial loop around a single call is dropped by slinky
    (simplify.cc drop_loop: the call takes the dim whole), so this is the set looped over."""
    if threads <= 1:
        return set()
    target, so_far, out = 2 * threads, 1, set()
    for d, s in enumerate(splits):
        if s is None:
            continue
        if -(-target // so_far) > 1:
            out.add(d)
        so_far *= -(-shape[d] // s)
    return out


def tiled_sum(x: np.ndarray, dims, threads: int | None = None, fused: bool = False) -> np.ndarray:
    """YNNPACK's sum (from +0, no init) of the row-major f32/f64 array `x` over `dims` by its
    scheduler (hlo_cli/SEMANTICS.md, "YNNPACK") with XLA's pool of `threads` (default:
    xla_threads()): the dims are cut into tiles (split_factors); if a reduced dim is cut, a
    partial reduction writes one slot per tile of the cut reduced dims, then the slots (zeros
    included) are reduced again (`partial_slots`, `final_splits`).  Each call sums by the k1
    or kn kernel (kernel_plan).  The loops over the tiles: the parallel ones (`parallel_dims`), or every one
    when `fused`, `x` computed inside them (an elementwise producer in the same YNNPACK
    subgraph, as the multiply of sum(g * (x - mean)); measured: then serial loops stay)."""
    x = np.ascontiguousarray(x)
    red = [d in set(dims) for d in range(x.ndim)]
    splits = split_factors(x.shape, x.dtype.itemsize)
    cut = [d for d in range(x.ndim) if red[d] and splits[d] is not None]
    with np.errstate(all="ignore"):
        if cut:
            looped = set(cut) if fused else parallel_dims(
                x.shape, splits, xla_threads() if threads is None else threads)
            x, red = partial_slots(x, red, splits, cut, looped)
        kept = [d for d in range(x.ndim) if not red[d]]
        ks = _dense_strides([x.shape[d] for d in kept])
        return _stage(x, red, final_splits(x.shape, red, x.dtype.itemsize), dict(zip(kept, ks)),
                      sequential=True)


def final_splits(shape, red, itemsize: int) -> list:
    """The tiles of the reduced dims that the last reduce of tiled_sum loops over (None: whole).
    Its loops over reduced dims are serial, so slinky drops them (one call: f64[96,320,7,7]
    over (0, 2, 3) sums its 96 slots in one kn call, f32[96,112,112,96] its 96 x 38) unless a
    cut kept dim lies inside them: that loop, over the output, stays behind as a one-trip loop
    and the outer ones stay (f32[7,300,200] over 0 adds its 7 planes in order; measured)."""
    splits = split_factors(shape, itemsize)
    red_cut = [d for d in range(len(shape)) if red[d] and splits[d] is not None]
    if not any(not red[d] and splits[d] is not None and red_cut and d > red_cut[0]
               for d in range(len(shape))):
        return [None] * len(shape)
    return [s if red[d] else None for d, s in enumerate(splits)]


def partial_slots(x: np.ndarray, red, splits, cut, looped):
    """YNNPACK's partial reduction of `x` (reduced-dims mask `red`, split_factors `splits`,
    `cut` the cut reduced dims, `looped` the cut dims looped over): the slots array, one slot
    per tile of each cut reduced dim, in dim order (cut dims as their tile counts, kept dims
    whole, the other reduced dims dropped), and its reduced-dims mask.  A cut reduced dim not
    looped over is whole in every call, which writes the first of its slots; the others stay
    +0 (measured, XLA CPU through JAX: NHWC f32[96,112,112,96] over (0, 1, 2) is one kn call
    per image into slot (n, 0) of 96 x 38)."""
    ntiles = {d: -(-x.shape[d] // splits[d]) for d in cut}
    # the slots' buffer keeps every dim (cut ones as their tile counts, the others 1)
    full = [ntiles[d] if d in ntiles else (1 if red[d] else x.shape[d]) for d in range(x.ndim)]
    c_strides = dict(enumerate(_dense_strides(full)))
    call_splits = [s if d in looped else None for d, s in enumerate(splits)]
    slots = _stage(x, red, call_splits, c_strides, sequential=False)
    # `slots` holds the looped dims' slots first, then the kept dims: put them in dim order
    out_shape, index, order = [], [], []
    seq = [d for d in cut if d in looped]
    kept_pos = len(seq)
    for d in range(x.ndim):
        if d in ntiles:
            out_shape.append(ntiles[d])
            index.append(slice(None) if d in looped else 0)
            if d in looped:
                order.append(seq.index(d))
        elif not red[d]:
            out_shape.append(x.shape[d])
            index.append(slice(None))
            order.append(kept_pos)
            kept_pos += 1
    out = np.zeros(out_shape, x.dtype)
    out[tuple(index)] = slots.transpose(order) if order else slots
    return out, [d in ntiles for d in range(x.ndim) if d in ntiles or not red[d]]
