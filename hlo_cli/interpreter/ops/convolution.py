"""Evaluation rule of convolution.  Types, padding and the NaN rules (Eigen multiplies padding and
lhs-dilation holes, the loop emitter skips them) are XLA CPU's for dot and convolution alike
(hlo_cli/SEMANTICS.md, "Dots, convolutions, linear algebra").

Strategies.  The rule first normalizes operands to x (G, N, Cg, *S) and w (G, O, Cg, *K), G being
the feature groups or the batch groups (views, no copy).  When every partial sum has two or more
terms, _fast_path runs the convolution through _fast_conv; real float operands holding NaN or inf
stay on it (_nan_conv, _nonfinite_conv: the sum over zeroed non-finite values, the NaN and inf
outputs from indicator convolutions and tap tables, with Eigen's and the loop emitter's padding
semantics; f32 ones holding inf in _inf_conv, one sum over the operands as they are, its NaN
bits and partial padding repaired from x's NaN pixels spread over the windows and tap tables;
_scan_route finds those pixels, x's inf and its range in one blocked pass over x's bits), and f32
sums that overflow run again in f64.  The exact loops (_conv_by_tap, one strided
gather + product per kernel tap, and _conv_by_output for weight gradients) remain for pred, one-term
sums, integer sums beyond f64's exact range and complex or f64 overflow.  _fast_conv:

* splits each spatial dim into phases: one for plain and strided windows, sub-pixel phases for
  lhs-dilated (transposed) ones, so that lhs-dilation holes are never formed and every phase
  reads the input at A*q + b0 + j*bstep (q: its output positions, j: the kernel taps landing on
  real input elements);
* pads the input once and writes the output laid out in memory as the input is (NHWC stays NHWC,
  NCHW stays NCHW; output features where the input's features are);
* per phase, one of (chosen from the shape):
  - gemm: im2col.  The strided view (G, N, *Q, *J, Cg) is copied into a patch matrix (columns in
    the input's memory order: NHWC taps then features, so the copy reads contiguous runs) in chunks of
    PATCH_BUDGET bytes (over groups and output rows; cut in at least SPLIT_PIECES chunks for large
    products, shared among the cores) and multiplied by the kernel in one GEMM per group.  A 1x1
    convolution without padding is a GEMM on the input itself (strided: a strided view);
  - depthwise: one input feature and few outputs per group (feature_group_count = channels):
    multiply-adds of each tap's weights over strided views, block by block in cache, channels
    innermost for NHWC and planes innermost for NCHW;
  - reduce: few output positions and features per group over many groups (the weight gradient of
    a depthwise convolution, XLA's batch_group_count form): einsum per output position over the
    strided view, no patch copy;
  - products: few output features (the input gradient of a network's first layer): every input
    position times every kernel tap in one GEMM, then each output adds its taps' products up
    through strided views (Eigen's transposed-convolution kernel also scatters products).
  Chunks are fixed by the shape, never by the number of threads: results do not depend on it.

Accumulation.  f32 convolutions (and bf16/f16/f8 ones, read exactly as f32) of more than
F32_BLAS_MIN_MACS multiply-adds run in f32 under the processor's FTZ/DAZ (linalg.dot_values does the
same for dots); smaller ones sum exact products in f64 and round once (bit for bit with XLA whenever
the exact sum is an f32); f64 in f64 BLAS; complex in c128; integers in f64 when every partial sum
is an exact integer there (terms * max|x| * max|w| < 2^53), else the exact int64 loops; pred in
the exact loops.  Depthwise taps are added in order in f32, and patch columns follow the input's
memory order (NHWC: taps, then features): both follow XLA's order more often (the measurements
are in hlo_cli/SEMANTICS.md).
"""
from __future__ import annotations

import itertools
import math
import threading

import numpy as np

from ...errors import HloEvalError
from ...ir.attributes import sparsity_sides
from . import numerics
from ..registry import evaluator
from ..values import np_dtype
from .. import hwfma
from ..fpenv import flushing, hardware
from ..kernels import flush
from .convert import F32, F64, contig, convert, kind
from .elementwise import repair_f32_midpoints
from .linalg import (F32_BLAS_MIN_MACS, compute_types, etype_name, narrow_result, plus_zero,
                     widen_operand)
from ..parallel import run_parts

# ============================================================================ convolution

# XLA CPU computes a 1x1 f32 convolution (Eigen's contraction) as one FMA chain per output over
# the input features in order (hlo_cli/SEMANTICS.md); hlo follows it up to this many input
# features (its cost grows with them; wider ones take the f32 GEMM)
FMA_CHAIN_MAX_FEATURES = 16
# output pixels per block of the chain (the f64 temporaries of a block stay in cache)
FMA_CHAIN_BLOCK = 1 << 15


def _pointwise_chain(x, w, wdims, dt) -> bool:
    """True for the convolutions XLA CPU computes as an in-order FMA chain that hlo reproduces:
    f32, one group, every window dim of size 1 without stride, padding, dilation or reversal,
    2..FMA_CHAIN_MAX_FEATURES input features, and at least 25 output features, 0 or 9..15 modulo
    16 (measured: 25, 28, 32, 48, 64, 96, 144, 160, 576, 1280 exact; 1..8 modulo 16 and 12 or
    16 outputs over few features run other kernels), of any size."""
    if dt != F32 or x.shape[0] != 1:
        return False
    o = w.shape[1]
    if not 2 <= x.shape[2] <= FMA_CHAIN_MAX_FEATURES or o < 25 or 1 <= o % 16 <= 8:
        return False
    return all(wd.size == 1 and wd.stride == 1 and wd.padding_low == 0 and wd.padding_high == 0
               and wd.base_dilation == 1 and wd.window_dilation == 1 and not wd.window_reversal
               for wd in wdims)


def _fma_chain(x, w, hw: bool) -> np.ndarray:
    """x (1, N, K, *S) f32, w (1, O, K, 1...) f32 -> (N, *S, 1, O): each output is
    acc = fma(x_k, w_k, acc) over k = 0 .. K-1 from +0 (_chain_rows), block by block of output
    pixels on the pool's threads.  NaN and inf land where the chain puts them; a NaN's payload is
    the f64 arithmetic's."""
    n, k = x.shape[1:3]
    spatial = x.shape[3:]
    o = w.shape[1]
    xs = np.moveaxis(x[0], 1, -1).reshape(-1, k)
    ws = flush(w[0].reshape(o, k).T)                          # (K, O) (read as DAZ reads it)
    if not hw:
        xs = flush(xs)
    w64 = ws.astype(F64)[:, :, None]
    out = np.empty((xs.shape[0], o), F32)
    rows = max(1, FMA_CHAIN_BLOCK // o)

    def block(s, m=rows):
        with np.errstate(invalid="ignore"):                  # (a signaling NaN read)
            out[s:s + m] = _chain_rows(xs[s:s + m].T.astype(F64), w64, hw).T
    native = _native_chain(ws, xs.size * o)
    if native is None:
        run_parts(_flushed(block, hw), list(range(0, xs.shape[0], rows)))
        return out.reshape((n,) + spatial + (1, o))
    xc = np.ascontiguousarray(x[0], F32).reshape(n, k, -1)               # (N, K, S)
    size = xc.shape[2]
    offsets = np.arange(k, dtype=np.int64) * size

    def native_block(part):
        i, s = part
        r, m = i * size + s, min(rows, size - s)
        if not _run_chain(native, xc, i * k * size + s, ((1, 0), (1, 0), (m, 1)), offsets, out[r:r + m]):
            _flushed(block, hw)(r, m)                                 # (a NaN: the NumPy chain)
    run_parts(native_block, [(i, s) for i in range(n) for s in range(0, size, rows)])
    return out.reshape((n,) + spatial + (1, o))


# XLA CPU hands a 2-D f32 convolution to YNNPACK when more than 16 input or output features
# (ynn_support.cc); YNNPACK's dot then runs each output as one FMA chain over the window's taps in
# order, then the input features, when the output features are 0 or 9..15 modulo 16
# (hlo_cli/SEMANTICS.md).  hlo follows it up to this many terms per output (its cost grows with
# them; longer sums take the f32 GEMM)
WINDOW_CHAIN_MAX_TERMS = 32
# bit patterns of f64 sums lying exactly halfway between two f32 values (low 29 bits 1 << 28)
_F32_LOW_BITS = np.uint64((1 << 29) - 1)
_F32_HALF_BIT = np.uint64(1 << 28)


def _chain_rows(xb: np.ndarray, w64: np.ndarray, hw: bool) -> np.ndarray:
    """xb (K, R) f64 holding f32 values (R output pixels), w64 (K, O, 1) likewise -> (O, R) f32:
    acc = fma(x_k, w_k, acc) over k in order from +0, each step rounded once: the product is exact
    in f64, and a sum lying exactly halfway between two f32 values is moved towards the exact one
    before it is rounded (elementwise.repair_f32_midpoints, as linalg.fma_once), with XLA's
    FTZ/DAZ (`hw`: the processor's flags are set, else each step's result is flushed)."""
    shape = (w64.shape[1], xb.shape[1])
    acc = np.zeros(shape, F32)
    t = np.empty(shape, F64)
    low = np.empty(shape, np.uint64)
    half = np.empty(shape, bool)
    with np.errstate(all="ignore"):
        for j in range(xb.shape[0]):
            np.multiply(w64[j], xb[j], out=t)
            np.add(t, acc, out=t)
            np.bitwise_and(t.view(np.uint64), _F32_LOW_BITS, out=low)
            if np.equal(low, _F32_HALF_BIT, out=half).any():
                repair_f32_midpoints(t, xb[j], w64[j], acc)
            np.copyto(acc, t, casting="unsafe")
            if not hw:
                acc = flush(acc)
    return acc


def _window_chain(x, w, wdims, out_spatial, dt) -> bool:
    """True for the convolutions XLA CPU runs through YNNPACK's FMA-chain dot kernel that
    _fma_chain_window reproduces: f32, one group, two spatial dims, more than 16 input or output
    features, output features 0 or 9..15 modulo 16, 2..WINDOW_CHAIN_MAX_TERMS terms per output
    (features x taps), windows without base or window dilation or reversal, padding >= 0, and the
    kernel and output no larger than the input (ynn_support.cc's limits; measured: 1x1 with 17..32
    features into 9..16, 25, 32, 48, 64 outputs, 2x2, 3x3 (stride 1 and 2, symmetric and
    asymmetric padding) and 5x5 windows into 25..64 outputs, for 6 to 768 output pixels)."""
    if dt != F32 or x.shape[0] != 1 or len(wdims) != 2:
        return False
    c, o = x.shape[2], w.shape[1]
    terms = c * int(np.prod(w.shape[3:]))
    if max(c, o) <= 16 or 1 <= o % 16 <= 8 or not 2 <= terms <= WINDOW_CHAIN_MAX_TERMS:
        return False
    if _operands_swapped(x.shape[3:], wdims, 1, 1):
        return False
    return all(wd.base_dilation == 1 and wd.window_dilation == 1 and not wd.window_reversal
               and wd.stride >= 1 and wd.padding_low >= 0 and wd.padding_high >= 0
               and wd.size <= size_in and q <= size_in
               for wd, size_in, q in zip(wdims, x.shape[3:], out_spatial))


def _fma_chain_window(x, w, wdims, out_spatial, hw: bool) -> np.ndarray:
    """x (1, N, C, H, W) f32, w (1, O, C, KH, KW) f32 -> (N, OH, OW, 1, O): each output is one FMA
    chain (_chain_rows) over its window's taps in row-major order, then the input features, padding
    read as zeros and multiplied (YNNPACK pads the input, then its dot runs over the stencil),
    block by block of output rows on the pool's threads."""
    n, c = x.shape[1:3]
    o = w.shape[1]
    oh, ow = out_spatial
    xp = np.moveaxis(x[0], 1, -1)                              # (N, H, W, C)
    ws = flush(np.moveaxis(w[0], (0, 1), (-1, -2)).reshape(-1, o))  # (KH * KW * C, O), as DAZ reads it
    if not hw:
        xp = flush(xp)
    pads = [(wd.padding_low, wd.padding_high) for wd in wdims]
    if any(lo or hi for lo, hi in pads):
        xp = np.pad(xp, [(0, 0)] + pads + [(0, 0)])
    w64 = ws.astype(F64)[:, :, None]
    (kh, kw), (s0, s1) = w.shape[3:], (wd.stride for wd in wdims)
    sn, sh, sw, sc = xp.strides
    win = np.lib.stride_tricks.as_strided(xp, (n, oh, ow, kh, kw, c), (sn, s0 * sh, s1 * sw, sh, sw, sc),
                                          writeable=False)
    out = np.empty((n, oh, ow, o), F32)
    rows = max(1, min(oh, FMA_CHAIN_BLOCK // (ow * o)))

    def block(part):
        i, y = part
        v = win[i, y:y + rows]                                  # (R, OW, KH, KW, C)
        xb = np.empty((kh * kw * c, v.shape[0] * ow), F64)
        with np.errstate(invalid="ignore"):                  # (a signaling NaN read)
            xb.reshape(kh, kw, c, v.shape[0], ow)[...] = np.moveaxis(v, (0, 1), (-2, -1))
        out[i, y:y + rows] = _chain_rows(xb, w64, hw).T.reshape(-1, ow, o)
    native = _native_chain(ws, out.size * ws.shape[0])
    if native is not None:
        xp = np.ascontiguousarray(xp, F32)
        sn, sh, sw, sc = (v // 4 for v in xp.strides)
        offsets = np.array([a * sh + b * sw + f * sc for a in range(kh) for b in range(kw) for f in range(c)],
                           np.int64)

        def native_block(part):
            i, y = part
            r = min(rows, oh - y)
            if not _run_chain(native, xp, i * sn + y * s0 * sh, ((1, 0), (r, s0 * sh), (ow, s1 * sw)),
                              offsets, out[i, y:y + r].reshape(r * ow, o)):
                _flushed(block, hw)(part)                       # (a NaN: the NumPy chain)
    run_parts(_flushed(block, hw) if native is None else native_block, [(i, y) for i in range(n) for y in range(0, oh, rows)])
    return out.reshape(n, oh, ow, 1, o)


def _flushed(fn, hw: bool):
    """fn, run with the processor's FTZ/DAZ set on the calling thread when `hw` (the chain's steps
    then flush as XLA's do; without `hw` _chain_rows flushes them itself)."""
    return (lambda *a: flushing(fn, *a)) if hw else fn


def _native_chain(ws: np.ndarray, fmas: int):
    """[the native chain runner, ws (K, O) as C-contiguous f32 with its columns padded with zeros to
    a multiple of 16, whether its NaNs are the NumPy chain's (asked at the first NaN)] when hwfma's
    chain kernel runs these `fmas` chained FMAs, else None."""
    width = -(-ws.shape[1] // 16) * 16
    chain = hwfma.chain_kernel(fmas, width)
    if chain is None:
        return None
    wp = np.zeros((ws.shape[0], width), F32)
    wp[:, :ws.shape[1]] = ws
    return [chain, wp, None]


def _run_chain(native, x, start: int, grid, offsets, dest: np.ndarray) -> bool:
    """dest (P, O) <- the chains of the pixels `grid` from x's element `start` (hwfma._Chain's
    arguments, x the whole operand); False, dest left to the caller, when a result is NaN whose
    bits may not be the NumPy chain's (_one_nan)."""
    chain, wp, _ = native
    o = dest.shape[1]
    direct = wp.shape[1] == o and dest.flags.c_contiguous
    buf = dest if direct else np.empty((dest.shape[0], wp.shape[1]), F32)
    if chain(x, start, grid, offsets, wp, buf):
        if native[2] is None:
            native[2] = _one_nan(x, wp)
        if not native[2]:
            return False
    if not direct:
        dest[...] = buf[:, :o]
    return True


# bits of the NaN an invalid f32 operation gives on x86 (inf * 0, inf - inf), from f32 and f64 alike
_DEFAULT_NAN32 = 0xFFC00000
_QUIET32 = np.uint32(0x00400000)


def _one_nan(*operands) -> bool:
    """True when every NaN a chain over these f32 operands can give has the same bits: their NaNs,
    quieted, and the default NaN when they hold an infinity.  Any order of operations (the
    processor's FMA, NumPy's f64 steps) then gives the same NaNs."""
    seen: set = set()
    with np.errstate(all="ignore"):
        for a in operands:
            isn = np.isnan(a)
            if isn.any():
                q = a.view(np.uint32)[isn] | _QUIET32
                lo, hi = int(q.min()), int(q.max())
                seen.update((lo, hi))
            if np.isinf(a).any():
                seen.add(_DEFAULT_NAN32)
            if len(seen) > 1:
                return False
    return True


def _tap_positions(out_len: int, size_in: int, w, k: int):
    """For kernel tap k of window dim w: the input index under every output position along that
    dim, and whether it is a real input element (not padding, not an lhs-dilation hole)."""
    kk = (w.size - 1 - k) if w.window_reversal else k
    p = np.arange(out_len) * w.stride - w.padding_low + kk * w.window_dilation
    dil = (size_in - 1) * w.base_dilation + 1 if size_in else 0
    real = (p >= 0) & (p < dil) & (p % w.base_dilation == 0)
    idx = np.clip(p // w.base_dilation, 0, max(size_in - 1, 0))
    return idx, real


def _conv_core(x, w, wdims, out_spatial, eigen: bool):
    """x: (G, N, Cg, *S), w: (G, O, Cg, *K) in the accumulation dtype -> (G, N, O, *out_spatial)
    and the number of summed terms.  One strided gather + matmul per kernel tap, or, when there
    are fewer output positions than kernel taps (a weight gradient, whose "kernel" is an
    activation gradient), one gather + matmul per output position (_conv_by_output)."""
    g, n, cg = x.shape[:3]
    o = w.shape[1]
    p = int(np.prod(out_spatial, dtype=np.int64))
    acc = np.zeros((g, n, o, p), x.dtype)
    ntaps = int(np.prod([wd.size for wd in wdims], dtype=np.int64))
    terms = cg * ntaps
    if x.size == 0 or w.size == 0 or p == 0:
        return acc.reshape((g, n, o) + tuple(out_spatial)), terms
    if p < ntaps and (eigen or x.dtype.kind not in "fc" or bool(np.isfinite(w).all())):
        return _conv_by_output(x, w, wdims, out_spatial, eigen), terms
    return _conv_by_tap(x, w, wdims, out_spatial, eigen, acc), terms


def _conv_by_tap(x, w, wdims, out_spatial, eigen: bool, acc):
    """_conv_core's sum, one strided gather + matmul per kernel tap, added into acc (G, N, O, P)."""
    g, n, cg = x.shape[:3]
    ns = len(wdims)
    taps = [range(wd.size) for wd in wdims]
    p = acc.shape[3]
    with np.errstate(all="ignore"):
        for tap in itertools.product(*taps):
            xs = x
            mask = np.ones((), bool)
            for d in range(ns):
                idx, real = _tap_positions(out_spatial[d], x.shape[3 + d], wdims[d], tap[d])
                xs = np.take(xs, idx, axis=3 + d)
                mask = np.multiply.outer(mask, real) if d else real
            xs = xs.reshape(g, n, cg, p)
            mask = np.asarray(mask).reshape(p)
            wt = w[(slice(None), slice(None), slice(None)) + tuple(tap)]          # (G, O, Cg)
            if eigen:
                # padding and lhs-dilation holes are multiplied as zeros (0 * inf = NaN)
                xs = np.where(mask, xs, np.zeros((), xs.dtype))
                part = _gemm(wt, xs)
            else:
                part = np.where(mask, _gemm(wt, xs), np.zeros((), xs.dtype))
            acc = acc + part
    return acc.reshape(acc.shape[:3] + tuple(out_spatial))


def _conv_by_output(x, w, wdims, out_spatial, eigen: bool):
    """_conv_core's sum with the loops the other way round: for each output position, the input
    window under every kernel tap is gathered and contracted with the whole kernel in one product.
    Terms that fall on padding or lhs-dilation holes are zeros (the caller takes this path for the
    loop emitter's skipped padding only when the kernel is finite, so 0 * w adds nothing); adding
    the products to +0, as the tap loop does, keeps a zero sum +0."""
    g, n, cg = x.shape[:3]
    o = w.shape[1]
    ns = len(wdims)
    tables = []
    for d, wd in enumerate(wdims):
        pos = [_tap_positions(out_spatial[d], x.shape[3 + d], wd, k) for k in range(wd.size)]
        tables.append((np.stack([q[0] for q in pos]), np.stack([q[1] for q in pos])))    # (K_d, O_d)
    kt = int(np.prod([wd.size for wd in wdims], dtype=np.int64))
    wf = w.reshape(g, o, cg * kt).transpose(0, 2, 1)          # (G, Cg*K, O)
    if wf.dtype == np.bool_:
        wf = wf.astype(np.int64)
    out = np.zeros((g, n, o) + tuple(out_spatial), x.dtype)
    zero = np.zeros((), x.dtype)
    with np.errstate(all="ignore"):
        for q in itertools.product(*[range(s) for s in out_spatial]):
            xs = x
            mask = None
            for d in range(ns):
                idx, real = tables[d]
                xs = np.take(xs, idx[:, q[d]], axis=3 + d)
                m = real[:, q[d]]
                mask = m if mask is None else np.multiply.outer(mask, m)
            if not mask.all():
                xs = np.where(mask, xs, zero)
            xf = xs.reshape(g, n, cg * kt)
            if xf.dtype == np.bool_:
                res = np.matmul(xf.astype(np.int64), wf) > 0
            else:
                res = np.matmul(xf, wf)                         # (G, N, O)
            where = (slice(None), slice(None), slice(None)) + q
            out[where] = out[where] + res
    return out


# ============================================================================ fast strategies

# The patch matrix of one im2col chunk stays under this many bytes (chunks are cut over groups and
# output rows, from the shape alone, so the sums never depend on the number of threads)
PATCH_BUDGET = 64 << 20
# The depthwise strategy (multiply-adds over taps on strided views) works on output blocks of
# about this many elements, which stay in the processor's cache between taps
DEPTHWISE_BLOCK = 1 << 15
# _finish passes over blocks of about this many outputs
FINISH_BLOCK = 1 << 16
# products of at least SPLIT_MIN_MACS multiply-adds are cut into SPLIT_PIECES row chunks
SPLIT_MIN_MACS = 1 << 26
SPLIT_PIECES = 8


def _dim_phases(out_len: int, size_in: int, wd):
    """Window dim `wd` (not reversed) as phases: output positions o = P*q + r (q < Q) read input
    index A*q + b0 + j*bstep under kernel taps k = k0 + j*kstep (j < J); the taps whose input
    position is padding or an lhs-dilation hole are left out.  Returns P and a list of
    (r, Q, A, k0, kstep, J, b0, bstep)."""
    s, bd, dil, pl, k = wd.stride, wd.base_dilation, wd.window_dilation, wd.padding_low, wd.size
    big_p = bd // math.gcd(s, bd)
    kstep = bd // math.gcd(dil, bd)
    phases = []
    for r in range(big_p):
        q = (out_len - r + big_p - 1) // big_p if out_len > r else 0
        base = r * s - pl
        k0 = next((kk for kk in range(min(k, kstep)) if (base + kk * dil) % bd == 0), None)
        j = 0 if k0 is None else (k - 1 - k0) // kstep + 1
        b0 = (base + (k0 or 0) * dil) // bd
        phases.append((r, q, big_p * s // bd, k0 or 0, kstep, j, b0, dil * kstep // bd))
    return big_p, phases


def _fast_conv(x, w, wdims, out_spatial, cdt, ftz: bool, strategy: str | None = None,
               nonfinite: list | None = None):
    """_conv_core's sum for finite operands, padding and holes never formed: x (G, N, Cg, *S) and
    w (G, O, Cg, *K) (any strides, any dtype cdt can hold exactly) -> (N, *out_spatial, G, O) in
    cdt.  Each dim is split into phases (one for convolutions without lhs dilation; sub-pixel
    phases for transposed ones), the input is padded once, and each phase runs as im2col (a
    strided view, copied in chunks into one patch matrix, times the kernel in one GEMM per group)
    or, for depthwise-like convolutions (one input feature and few outputs per group), as
    multiply-adds of the kernel's taps over strided views, or, for few outputs over many groups
    (depthwise weight gradients), as einsum per output position (_reduce_parts), or products first
    (_products_parts) when there are fewer products than patch elements.  `strategy` ("gemm",
    "depthwise", "reduce", "products") forces one, for tests.  Each part adds +0 to its outputs as it ends (a sum of two
    or more terms is never -0) and appends True to `nonfinite` if one of them is inf or NaN."""
    from ..fpenv import flushing
    from ..parallel import blas_single, run_parts, threads
    g, n, cg = x.shape[:3]
    o = w.shape[1]
    ns = len(wdims)
    sizes = x.shape[3:]
    for d, wd in enumerate(wdims):
        if wd.window_reversal:
            w = np.flip(w, 3 + d)
    plans = [_dim_phases(out_spatial[d], sizes[d], wd) for d, wd in enumerate(wdims)]
    lo = [0] * ns
    hi = [0] * ns
    for d, (_, phases) in enumerate(plans):
        for (_, q, a, _, _, j, b0, bstep) in phases:
            if q and j:
                lo[d] = min(lo[d], b0)
                hi[d] = max(hi[d], a * (q - 1) + b0 + (j - 1) * bstep - (sizes[d] - 1))
    xcl = np.moveaxis(x, 2, -1)                                   # (G, N, *S, Cg), a view
    # the padded input and the output are laid out in memory as the input is (NHWC, NCHW...)
    xst = [abs(st) for st in xcl.strides]
    if any(lo) or any(hi) or xcl.dtype != cdt:
        xp = _zeros((g, n) + tuple(sz - l + h for sz, l, h in zip(sizes, lo, hi)) + (cg,), cdt, xst)
        xp[(slice(None), slice(None)) + tuple(slice(-l, -l + sz) for l, sz in zip(lo, sizes))] = xcl
    else:
        xp = xcl
    wcl = np.moveaxis(w, 1, -1).astype(cdt, copy=False)          # (G, Cg, *K, O)
    # output features sit where the input's features sit (just inside the groups); a single group
    # has no stride of its own (the size-1 axis's stride is the whole input's): it takes the features'
    gst = xst[0] if g > 1 else xst[-1]
    out = _zeros((n,) + tuple(out_spatial) + (g, o), cdt, [xst[1]] + xst[2:2 + ns] + [gst, gst - 0.5])
    ostr = out.strides
    xs = xp.strides
    depthwise = cg * o <= 4 and g > 1
    jobs = []
    for combo in itertools.product(*[p[1] for p in plans]):
        if any(ph[1] == 0 for ph in combo):
            continue
        qs = tuple(ph[1] for ph in combo)
        js = tuple(ph[5] for ph in combo)
        # the output positions of this phase: (G, N, *Q, O) view of out
        oview = np.lib.stride_tricks.as_strided(
            out[(slice(None),) + tuple(slice(ph[0], None) for ph in combo)],
            (g, n) + qs + (o,),
            (ostr[ns + 1], ostr[0]) + tuple(ostr[1 + d] * plans[d][0] for d in range(ns)) + (ostr[ns + 2],))
        if any(jj == 0 for jj in js):
            continue                                             # no real input under this phase
        start = (slice(None), slice(None)) + tuple(slice(ph[6] - lo[d], None) for d, ph in enumerate(combo))
        view = np.lib.stride_tricks.as_strided(
            xp[start], (g, n) + qs + js + (cg,),
            xs[:2] + tuple(xs[2 + d] * combo[d][2] for d in range(ns))
            + tuple(xs[2 + d] * combo[d][7] for d in range(ns)) + (xs[-1],))
        ksub = wcl[(slice(None), slice(None)) + tuple(slice(ph[3], ph[3] + (ph[5] - 1) * ph[4] + 1, ph[4])
                                                      for ph in combo)]          # (G, Cg, *J, O)
        jobs.append((view, ksub, oview, combo))
    if not jobs:
        return out
    patch_elems = sum(int(np.prod(v.shape[:-1], dtype=np.int64)) // g * cg for v, _, _, _ in jobs)
    product_elems = n * int(np.prod(xp.shape[2:-1], dtype=np.int64)) * int(np.prod(w.shape[3:])) * o
    rows = n * int(np.prod(out_spatial, dtype=np.int64))
    if strategy is None:
        strategy = ("depthwise" if depthwise and int(np.prod(w.shape[3:])) * cg <= rows else
                    "reduce" if g > 1 and o <= 4 and rows <= 64 else
                    "products" if 2 * product_elems < patch_elems else "gemm")
    parts = []
    if strategy == "products":
        parts = _products_parts(xp, wcl, jobs, lo)
    else:
        for view, ksub, oview, _ in jobs:
            parts.extend({"depthwise": _depthwise_parts, "reduce": _reduce_parts}.get(strategy, _gemm_parts)(
                view, ksub, oview))

    # each thread takes the next part until none is left (which thread runs a part never changes
    # its values); a thread keeps one patch buffer for all its parts (no page faults per chunk)
    lock = threading.Lock()
    todo = iter(parts)

    def worker(_):
        scratch = {}
        while True:
            with lock:
                part = next(todo, None)
            if part is None:
                if scratch.get("nonfinite") and nonfinite is not None:
                    nonfinite.append(True)
                return
            with np.errstate(all="ignore"):
                if ftz:
                    flushing(part, scratch)
                else:
                    part(scratch)
    with blas_single():
        run_parts(worker, list(range(min(threads(), len(parts)))))
    return out


def _finish(region: np.ndarray, scratch: dict):
    """A part's outputs, while they are in cache: +0 added (XLA's -0 rule for sums of two or more
    terms), and whether one is not finite noted in `scratch` (min and max spread NaN, show inf)."""
    if region.size == 0:
        return
    step = max(1, region.shape[0] * FINISH_BLOCK // region.size) if region.ndim else 1
    for i in range(0, max(region.shape[0] if region.ndim else 1, 1), step):
        block = region[i:i + step] if region.ndim else region      # in cache for its three passes
        np.add(block, block.dtype.type(0), out=block)
        if block.dtype.kind == "c":
            ok = bool(np.isfinite(block).all())
        else:
            ok = bool(np.isfinite(block.min())) and bool(np.isfinite(block.max()))
        if not ok:
            scratch["nonfinite"] = True


def _buffer(scratch: dict, shape, dtype) -> np.ndarray:
    """An uninitialized C-contiguous array of `shape`, in a buffer `scratch` keeps for reuse."""
    size = int(np.prod(shape, dtype=np.int64))
    buf = scratch.get(dtype)
    if buf is None or buf.size < size:
        buf = scratch[dtype] = np.empty(size, dtype)
    return buf[:size].reshape(shape)


def _zeros(shape, dtype, strides):
    """np.zeros(shape) laid out in memory with its axes in the order of decreasing `strides`."""
    order = sorted(range(len(shape)), key=lambda a: -strides[a])
    buf = np.zeros([shape[a] for a in order], dtype)
    return buf.transpose(np.argsort(order))


def _chunks(total: int, per_item: int, budget: int, pieces: int = 0) -> list[slice]:
    """range(total) in slices of at most budget // per_item items, or in `pieces` near-equal ones."""
    if pieces:
        pieces = max(1, min(pieces, total))
        return [slice(total * i // pieces, total * (i + 1) // pieces) for i in range(pieces)]
    step = max(1, budget // max(per_item, 1))
    return [slice(i, min(i + step, total)) for i in range(0, total, step)]


def _gemm_parts(view, ksub, oview):
    """im2col: the patches of `view` (G, N, *Q, *J, Cg) times ksub (G, Cg, *J, O) into oview
    (G, N, *Q, O), as callables, each one chunk of groups x output rows.  The patch copy keeps the
    view's innermost axis innermost: rows first (forward convolutions) or the contraction first
    (weight gradients, whose rows are the input's innermost features)."""
    g, n = view.shape[:2]
    nq = (view.ndim - 3) // 2
    rows = list(range(1, 2 + nq))                       # N, *Q
    cols = list(range(2 + nq, view.ndim))               # *J, Cg
    cols = cols[-1:] + cols[:-1]                        # Cg, *J: ksub's order
    # the patch columns in the order the input lies in memory (NHWC: taps, then features), so the
    # copy reads runs of contiguous elements; the kernel's rows are put in the same order
    cols = sorted(cols, key=lambda a: -abs(view.strides[a]) if view.shape[a] > 1 else 0)
    o = ksub.shape[-1]
    m_all = int(np.prod([view.shape[a] for a in rows], dtype=np.int64))
    kdim = int(np.prod([view.shape[a] for a in cols], dtype=np.int64))
    kmat = ksub.transpose([0] + [1 if a == view.ndim - 1 else a - nq for a in cols] + [ksub.ndim - 1])
    kmat = kmat.reshape(g, kdim, o)
    inner = min(range(1, view.ndim), key=lambda a: (abs(view.strides[a]), -a))
    rows_first = inner not in rows
    item = view.dtype.itemsize
    # chunk over groups, then over the outermost row axis (N, or Q0 when N is 1); a large product
    # is cut into at least SPLIT_PIECES row chunks, so that the machine's cores share it out
    ax = 1 if view.shape[1] > 1 or nq == 0 else 2
    per_row = m_all // view.shape[ax] * kdim * item
    parts = []
    for gs in _chunks(g, m_all * kdim * item, PATCH_BUDGET):
        gg = gs.stop - gs.start
        pieces = max(-(-gg * m_all * kdim * item // PATCH_BUDGET),
                     SPLIT_PIECES if gg * m_all * kdim * o >= SPLIT_MIN_MACS else 1)
        row_slices = [slice(None)] if pieces == 1 else _chunks(view.shape[ax], 0, 0, pieces)
        for rs in row_slices:
            def part(scratch, gs=gs, rs=rs):
                sel = [gs] + [slice(None)] * (view.ndim - 1)
                sel[ax] = rs
                v = view[tuple(sel)]
                ov = oview[tuple(sel[:2 + nq]) + (slice(None),)]
                gg = v.shape[0]
                m = int(np.prod([v.shape[a] for a in rows], dtype=np.int64))
                km = kmat[gs]
                src = v.transpose([0] + rows + cols) if rows_first else v.transpose([0] + cols + rows)
                if src.flags.c_contiguous:
                    pm = src                            # a 1x1 convolution's input as it is
                else:
                    pm = _buffer(scratch, src.shape, src.dtype)
                    np.copyto(pm, src)
                pm = pm.reshape(gg, m, kdim) if rows_first else pm.reshape(gg, kdim, m).transpose(0, 2, 1)
                target = ov.view()
                try:
                    target.shape = (gg, m, o)           # the output itself, when it is one matrix
                except AttributeError:
                    ov[...] = np.matmul(pm, km).reshape(ov.shape)
                else:
                    np.matmul(pm, km, out=target)
                _finish(ov, scratch)
            parts.append(part)
    return parts


def _products_parts(xp, wcl, jobs, lo):
    """Products first (few output features, e.g. the input gradient of a network's first layer):
    every padded input position times every kernel tap in one GEMM per group, (N*S, Cg) x
    (Cg, K*O), then each output position adds up its taps' products through strided views: the
    products are fewer than the patch matrix's elements.  Chunks of groups x batch."""
    g, n = xp.shape[:2]
    sp = xp.shape[2:-1]
    cg = xp.shape[-1]
    ksz = wcl.shape[2:-1]
    o = wcl.shape[-1]
    ns = len(sp)
    per_n = int(np.prod(sp, dtype=np.int64)) * int(np.prod(ksz, dtype=np.int64)) * o * xp.dtype.itemsize
    wmat = wcl.reshape(g, cg, -1)
    parts = []
    for gs in range(g):
        macs = n * per_n // xp.dtype.itemsize * cg
        for nsl in _chunks(n, per_n, PATCH_BUDGET) if n * per_n > PATCH_BUDGET \
                else _chunks(n, 0, 0, SPLIT_PIECES if macs >= SPLIT_MIN_MACS else 1):
            def part(scratch, gs=gs, nsl=nsl):
                xc = xp[gs, nsl]
                nn = xc.shape[0]
                y = np.matmul(xc.reshape(-1, cg), wmat[gs]).reshape((nn,) + sp + ksz + (o,))
                ys = y.strides
                for view, _, oview, combo in jobs:
                    ov = oview[gs, nsl]                                   # (nn, *Q, O)
                    first = True
                    for jt in itertools.product(*[range(ph[5]) for ph in combo]):
                        start = tuple(ph[6] - lo[d] + jt[d] * ph[7] for d, ph in enumerate(combo))
                        tap = tuple(ph[3] + jt[d] * ph[4] for d, ph in enumerate(combo))
                        yv = np.lib.stride_tricks.as_strided(
                            y[(slice(None),) + tuple(slice(st, None) for st in start) + tap],
                            ov.shape, (ys[0],) + tuple(ys[1 + d] * combo[d][2] for d in range(ns)) + (ys[-1],))
                        if first:
                            ov[...] = yv
                            first = False
                        else:
                            np.add(ov, yv, out=ov)
                    _finish(ov, scratch)
            parts.append(part)
    return parts


def _reduce_parts(view, ksub, oview):
    """Few output positions and features per group, many groups (the weight gradient of a
    depthwise convolution, XLA's batch_group_count form): for each output position, the products
    of the strided view (G, N, *J, Cg) and the kernel (G, Cg, *J, O) summed by einsum, no patch
    copy (a GEMM per group would be a matrix-vector product over a gathered copy)."""
    nq = (view.ndim - 3) // 2
    letters = "abcdefghijklm"[:nq]
    spec = f"gn{letters}c,gc{letters}o->gno"
    parts = []
    for q in itertools.product(*[range(s) for s in view.shape[2:2 + nq]]):
        def part(scratch, q=q):
            at = (slice(None), slice(None)) + q
            oview[at] = np.einsum(spec, view[at], ksub)
            _finish(oview[at], scratch)
        parts.append(part)
    return parts


def _depthwise_parts(view, ksub, oview):
    """Depthwise-like convolutions (Cg * O per group small): for each tap and input feature, the
    strided view (G, N, *Q) times that tap's weights (G, O), added up in the output, block by
    block of the outer output axes so that a block stays in cache across taps."""
    g, n = view.shape[:2]
    nq = (view.ndim - 3) // 2
    cg = view.shape[-1]
    o = ksub.shape[-1]
    js = view.shape[2 + nq:2 + 2 * nq]
    taps = list(itertools.product(*[range(j) for j in js]))
    qn = int(np.prod(view.shape[2:2 + nq], dtype=np.int64))
    if abs(oview.strides[0]) <= min(abs(st) for st in oview.strides[1:-1]):
        # NHWC: (N, *Q, G, [J..., Cg]) and (N, *Q, G, O), groups innermost; blocks over N, then Q0
        v = np.moveaxis(view, 0, 1 + nq)
        ov = np.moveaxis(oview, 0, 1 + nq)
        wk = np.moveaxis(ksub, 0, -2)                        # (Cg, *J, G, O)
        lead = (n,) + view.shape[2:2 + nq]
        per = g * o

        def pick(t, c, sel):
            return v[sel][(Ellipsis,) + t + (c,)][..., None], wk[(c,) + t]
        blocks = []
        for ns_ in _chunks(n, int(np.prod(lead[1:], dtype=np.int64)) * per, DEPTHWISE_BLOCK):
            if ns_.stop - ns_.start > 1 or nq == 0:
                blocks.append((ns_,))
            else:
                blocks += [(ns_, qs) for qs in _chunks(lead[1], int(np.prod(lead[2:], dtype=np.int64)) * per,
                                                       DEPTHWISE_BLOCK)]
    else:
        # NCHW: (N, G, *Q, [J..., Cg]) and (N, G, O, *Q), planes innermost; blocks over N, then G
        v = view.swapaxes(0, 1)
        ov = np.moveaxis(oview.swapaxes(0, 1), -1, 2)
        wk = np.moveaxis(ksub, 1, 0)                         # (Cg, G, *J, O)
        wk = np.moveaxis(wk, -1, 2).reshape(wk.shape[:2] + (o,) + tuple(js) + (1,) * nq)   # (Cg, G, O, *J, 1..)

        def pick(t, c, sel):
            return (v[sel][(Ellipsis,) + t + (c,)][:, :, None],
                    wk[(c, sel[1] if len(sel) > 1 else slice(None), slice(None)) + t])
        blocks = []
        for ns_ in _chunks(n, g * o * qn, DEPTHWISE_BLOCK):
            if ns_.stop - ns_.start > 1:
                blocks.append((ns_,))
            else:
                blocks += [(ns_, gs) for gs in _chunks(g, o * qn, DEPTHWISE_BLOCK)]
    # whole blocks of about 8 per part, so parts are few (thread hand-offs) and fixed by the shape
    parts = []
    for i in range(0, len(blocks), 8):
        def part(scratch, bl=blocks[i:i + 8]):
            for sel in bl:
                ob = ov[sel]
                tmp = np.empty(ob.shape, ob.dtype)
                first = True
                for t in taps:
                    for c in range(cg):
                        xv, wt = pick(t, c, sel)
                        if first:
                            np.multiply(xv, wt, out=ob)
                            first = False
                        else:
                            np.multiply(xv, wt, out=tmp)
                            np.add(ob, tmp, out=ob)
                _finish(ob, scratch)
        parts.append(part)
    return parts


def _operands_swapped(in_spatial, wdims, fgc: int, bgc: int) -> bool:
    """Whether XLA's ConvOperandSwapper swaps lhs and rhs (a kernel larger than the input): the
    swapped convolution has reversed windows, so it runs in the loop emitter (padding skipped)."""
    if fgc > 1 or bgc > 1:
        return False
    kernel_product = swapped_product = 1
    for size_in, wd in zip(in_spatial, wdims):
        k = wd.size
        plain = (not wd.window_reversal and wd.padding_low == 0 and wd.padding_high == 0
                 and wd.window_dilation == 1)
        if plain and ((wd.base_dilation == k and wd.stride == k - 1)
                      or (k == size_in and wd.base_dilation == 1 and wd.stride == 1)):
            continue
        kernel_product *= k
        full = (size_in == 1 and wd.stride == 1 and wd.window_dilation == 1
                and wd.padding_low == k - 1 and wd.padding_high == k - 1)
        swapped_product *= k if full else size_in
    return kernel_product > swapped_product


def _gemm(wt, xs):
    """(G, O, Cg) x (G, N, Cg, P) -> (G, N, O, P); a single input feature is a plain multiply."""
    if wt.shape[2] == 1:
        return wt[:, None, :, 0, None] * xs[:, :, 0, None, :]
    if xs.dtype == np.bool_:
        return np.matmul(wt[:, None].astype(np.int64), xs.astype(np.int64)) > 0
    return np.matmul(wt[:, None], xs)


# exact-in-f64 integer convolutions: |sum| bound below this
_F64_EXACT = 1 << 53


def _finite(a: np.ndarray) -> bool:
    """Whether every element of the float array `a` is finite: one summing pass (NaN and inf
    survive a sum), checked element by element only when the sum overflows."""
    if a.size == 0:
        return True
    with np.errstate(all="ignore"):
        if bool(np.isfinite(np.add.reduce(a, axis=None))):
            return True
    return bool(np.isfinite(a).all())


def _real_taps(sizes, wdims, out_spatial) -> np.ndarray:
    """(P, K) bool: whether kernel tap k (w's taps in C order) of output position p (C order)
    reads a real input element (not padding, not an lhs-dilation hole)."""
    r = np.ones((1, 1), bool)
    for size_in, wd, out_len in zip(sizes, wdims, out_spatial):
        rd = np.stack([_tap_positions(out_len, size_in, wd, k)[1] for k in range(wd.size)], axis=1)
        r = (r[:, None, :, None] & rd[None, :, None, :]).reshape(r.shape[0] * rd.shape[0], -1)
    return r


def _default_nan(dt) -> np.ndarray:
    """x86's generated NaN (inf - inf, 0 * inf: sign set, quiet, no payload) in float type dt."""
    bits = {4: (np.uint32, 0xFFC00000), 8: (np.uint64, 0xFFF8000000000000)}[np.dtype(dt).itemsize]
    return np.array(bits[1], bits[0]).view(dt)


def _first_nan(a: np.ndarray, isn: np.ndarray):
    """The first NaN of `a` (where isn), quieted as an arithmetic operation passes it on."""
    return a[np.unravel_index(int(np.argmax(isn)), isn.shape)] + a.dtype.type(0)


# the inf products' counts share one convolution while their digits (one per kind present, base
# above any count) fit an f64 exactly (f32 when they fit its 24 bits)
_DIGITS_MAX = 1 << 53


def _nonfinite_conv(xx, ww, wdims, out_spatial, cdt, hw: bool, eigen: bool, strategy=None):
    """The convolution of float operands of which one holds NaN or inf, at the fast path's speed:
    x (G, N, Cg, *S), w (G, O, Cg, *K) in cdt -> (N, *out_spatial, G, O) in cdt, or None when the
    finite part overflows.  The sum is taken over the operands with their NaN and inf replaced by
    zeros (an output whose window holds none of them is then exactly the plain sum); the outputs
    XLA's rules make NaN, +inf or -inf are found from counts of products of 0/1 indicators, each
    one convolution by the same strategies (as a convolution library tells non-finite results):

    * NaN: a NaN input under a real tap, or a NaN kernel tap over a real input (counted through
      channel sums, cheap); inf * 0 (either way round); with `eigen` (Eigen's kernel multiplies
      padding and lhs-dilation holes as zeros) a non-finite kernel tap over padding or a hole;
      an output with both +inf and -inf products (inf - inf);
    * +inf / -inf: an inf times a nonzero of the same / the other sign, and no NaN.
    Zeros are read with DAZ, as the products are.  NaN bits: a NaN input passes its payload on
    (quieted; the input's first NaN, the operands' NaNs are taken to share it), an x NaN before a
    kernel one; a NaN made by inf * 0 or inf - inf is x86's default NaN (sign set), as XLA CPU's."""
    g, n, cg = xx.shape[:3]
    o = ww.shape[1]
    sizes = xx.shape[3:]
    ksz = ww.shape[3:]
    kt = int(np.prod(ksz, dtype=np.int64))
    itype = F32 if 4 * cg * kt < (1 << 24) else F64            # counts exact in it
    shape = (n,) + tuple(out_spatial) + (g, o)
    with np.errstate(all="ignore"):
        if cdt == F32:
            out = _scan_route(xx, ww, wdims, out_spatial, hw, eigen, strategy)
            if out is not None:
                return out
        nx, nw = np.isnan(xx), np.isnan(ww)
        any_nx, any_nw = bool(nx.any()), bool(nw.any())
        iw = np.isinf(ww)
        any_iw = bool(iw.any())
        if any_nx and not any_nw and not any_iw and bool(nx.all()) \
                and bool(_real_taps(sizes, wdims, out_spatial).any(axis=1).all()):
            return np.full(shape, _first_nan(xx, nx))            # every output NaN: nothing to sum
        ix = np.isinf(xx)
        any_ix = bool(ix.any())
        if not any_ix and not any_iw:
            return _nan_conv(xx, ww, nw if any_nw else None, wdims, out_spatial, cdt, hw, eigen, strategy)
        if cdt == F32:
            out = _inf_conv(xx, ww, nx if any_nx else None, ix if any_ix else None, nw if any_nw else None,
                            iw if any_iw else None, wdims, out_spatial, hw, eigen, strategy)
            if out is not None:
                return out

        def conv(a, b):
            return _fast_conv(a, b, wdims, out_spatial, itype, False, strategy) > 0

        # NaN inputs under real taps: the channel sum of the indicator under a kernel of ones
        nan_x = conv(nx.sum(axis=2, keepdims=True, dtype=itype), np.ones((g, 1, 1) + ksz, itype)) \
            if any_nx else np.zeros((1,) * (len(shape)), bool)
        # NaN kernel taps over real inputs (and non-finite ones over padding under Eigen):
        # (P, K) tap tables times the kernel's channel sums
        nan_w = inf_pad = np.zeros((1,) * len(shape), bool)
        if any_nw or (eigen and any_iw):
            real = _real_taps(sizes, wdims, out_spatial)
            qshape = (1,) + tuple(out_spatial) + (g, o)
            if any_nw:
                cnt = nw.sum(axis=2, dtype=itype).reshape(g * o, kt)
                nan_w = ((real.astype(itype) @ cnt.T) > 0).reshape(qshape)
                if eigen:
                    nan_w = nan_w | ((~real).astype(itype) @ cnt.T > 0).reshape(qshape)
            if eigen and any_iw:
                cnt = iw.sum(axis=2, dtype=itype).reshape(g * o, kt)
                inf_pad = ((~real).astype(itype) @ cnt.T > 0).reshape(qshape)
        nan = nan_x | nan_w
        if nan.all():
            out = np.empty(shape, cdt)                           # every output NaN: nothing to sum
            if any_nx:
                out[...] = _first_nan(xx, nx)
            if any_nw:
                np.copyto(out, _first_nan(ww, nw), where=~np.broadcast_to(nan_x, shape))
            return out
        # products with an inf: indicator pairs, x side (G, N, Cg, *S), w side (G, O, Cg, *K)
        xd = flush(xx)                  # zeros as the sum reads them (DAZ), flushed or not yet
        wd_ = flush(ww)
        x_ind = {"+inf": lambda: xx == np.inf, "-inf": lambda: xx == -np.inf} if any_ix else {}
        w_ind = {"+inf": ww == np.inf, "-inf": ww == -np.inf} if any_iw else {}
        if any_iw:
            x_ind.update({"0": lambda: xd == 0, ">0": lambda: xd > 0, "<0": lambda: xd < 0})
        if any_ix:
            w_ind.update({"0": wd_ == 0, ">0": wd_ > 0, "<0": wd_ < 0})
        pairs = {"nan": [("+inf", "0"), ("-inf", "0"), ("0", "+inf"), ("0", "-inf")],
                 "pos": [("+inf", ">0"), ("-inf", "<0"), (">0", "+inf"), ("<0", "-inf")],
                 "neg": [("+inf", "<0"), ("-inf", ">0"), (">0", "-inf"), ("<0", "+inf")]}
        # one convolution counts them all: each x-side indicator is a group of input channels, its
        # kernel the w-side indicators it pairs with as digits of base B, one per kind present
        # (pos + B * neg + B^2 * nan; every count stays below B, so the digits come apart; the sums
        # are exact integers)
        uses = {a: {} for a in x_ind}
        for what, pl in pairs.items():
            for a, b in pl:
                if a in x_ind and b in w_ind and w_ind[b].any():
                    uses[a][what] = uses[a][what] | w_ind[b] if what in uses[a] else w_ind[b]
        chans = []
        for a, u in uses.items():
            if u:
                ind = x_ind[a]()
                if ind.any():
                    chans.append((ind, u))
        made = {}
        if chans:
            big = 1 << int(len(chans) * cg * kt).bit_length()
            kinds = [k for k in ("pos", "neg", "nan") if any(k in u for _, u in chans)]
            if big ** len(kinds) <= _DIGITS_MAX:
                dt3 = F32 if big ** len(kinds) <= (1 << 24) else F64
                xcat = np.empty((g, n, len(chans) * cg) + sizes, dt3)
                wcat = np.zeros((g, o, len(chans) * cg) + ksz, dt3)
                for k, (ind, u) in enumerate(chans):
                    xcat[:, :, k * cg:(k + 1) * cg] = ind
                    for d, what in enumerate(kinds):
                        if what in u:
                            wcat[:, :, k * cg:(k + 1) * cg] += u[what] * dt3.type(big ** d)
                v = np.rint(_fast_conv(xcat, wcat, wdims, out_spatial, dt3, False, strategy)).astype(np.int64)
                made = {what: (v // big ** d) % big > 0 for d, what in enumerate(kinds)}
            else:                          # too many terms for the digits: one convolution per kind
                for what, pl in pairs.items():
                    use = [(x_ind[a](), w_ind[b]) for a, b in pl if a in x_ind and b in w_ind and w_ind[b].any()]
                    if use:
                        made[what] = conv(np.concatenate([a for a, _ in use], axis=2).astype(itype),
                                          np.concatenate([b for _, b in use], axis=2).astype(itype))
        gen = inf_pad | made.get("nan", False)
        if "pos" in made and "neg" in made:
            gen = gen | (made["pos"] & made["neg"])
        # the finite part
        bad: list = []
        xf = np.where(nx | ix, cdt.type(0), xx) if any_nx or any_ix else xx
        wf = np.where(nw | iw, cdt.type(0), ww) if any_nw or any_iw else ww
        out = _fast_conv(xf, wf, wdims, out_spatial, cdt, hw, strategy, nonfinite=bad)
        if bad:
            return None
        for what, val in (("pos", np.inf), ("neg", -np.inf)):
            if what in made:
                np.copyto(out, cdt.type(val), where=made[what])
        np.copyto(out, _default_nan(cdt), where=np.broadcast_to(gen, shape))
        if any_nw:
            np.copyto(out, _first_nan(ww, nw), where=np.broadcast_to(nan_w, shape))
        if any_nx:
            np.copyto(out, _first_nan(xx, nx), where=np.broadcast_to(nan_x, shape))
    return out


# elements per block of _count_at_least (in cache for its two passes)
_COUNT_BLOCK = 1 << 16


def _count_at_least(a: np.ndarray, t: float) -> int:
    """How many elements of the float array `a` (any strides) have magnitude >= t, a block in
    cache at a time (NaN are never counted)."""
    d = 0
    while d < a.ndim - 1 and int(np.prod(a.shape[d + 1:], dtype=np.int64)) > _COUNT_BLOCK:
        d += 1
    inner = int(np.prod(a.shape[d + 1:], dtype=np.int64)) if a.ndim else 1
    step = max(1, _COUNT_BLOCK // max(inner, 1))
    buf = np.empty(step * inner, a.dtype)
    hit = np.empty(step * inner, bool)
    count = 0
    with np.errstate(all="ignore"):
        for idx in np.ndindex(*a.shape[:d]):
            for j in range(0, a.shape[d] if a.ndim else 1, step):
                blk = a[idx + (slice(j, j + step),)] if a.ndim else a
                m = np.abs(blk, out=buf[:blk.size].reshape(blk.shape))
                count += int(np.count_nonzero(np.greater_equal(m, t, out=hit[:blk.size].reshape(blk.shape))))
    return count


def _inf_conv(xx, ww, nx, ix, nw, iw, wdims, out_spatial, hw: bool, eigen: bool, strategy=None,
              scan=None):
    """_nonfinite_conv in f32 of operands holding inf (`nx`, `ix`, `nw`, `iw`: x's and w's NaN and
    inf masks, or None where there are none) in one sum over the operands as they are, when no finite
    partial sum can overflow (terms * max finite |x| * max finite |w| far below f32's range; else
    None).  In any order, a sum with a NaN product (a NaN operand, inf * 0 read with DAZ as the
    sum reads it) or with both +inf and -inf products is NaN, one with +inf (-inf) products alone
    is +inf (-inf), and the others are the finite sum: the IEEE rules XLA's kernels follow, so the
    sum's NaN and inf positions are XLA's, except for padding and lhs-dilation holes, which the
    strategies form for some outputs only.  Under `eigen` the tap tables add the NaN of
    non-finite kernel taps over padding and holes; without it a non-finite kernel tap over either
    gives None.  NaN bits as _nonfinite_conv's: x's first NaN where a NaN input is under a real
    tap, else w's first NaN where a NaN kernel tap is, else x86's default NaN.  `scan` (from
    _scan_route: x's range already checked, `nx` and `ix` then None): x's first NaN and its NaN
    pixels (G, N, 1, *S bool: a channel holds NaN) instead of the masks, or (None, None)."""
    g, n, cg = xx.shape[:3]
    o = ww.shape[1]
    ksz = ww.shape[3:]
    kt = int(np.prod(ksz, dtype=np.int64))
    real = _real_taps(xx.shape[3:], wdims, out_spatial)
    padded = not bool(real.all())
    wbad = nw if iw is None else iw if nw is None else nw | iw
    if padded and wbad is not None and not eigen:
        return None
    # no finite |x| or |w| reaches sqrt(f32 max / (4 terms)): every partial sum of finite products
    # stays far below the f32 range (the only elements that large are the infs)
    big = _inf_bound(cg * kt)
    for a, inf in ((xx, ix), (ww, iw)) if scan is None else ((ww, iw),):
        if _count_at_least(a, big) != (0 if inf is None else int(np.count_nonzero(inf))):
            return None
    if scan is None and nx is not None:
        scan = (_first_nan(xx, nx), nx.any(axis=2, keepdims=True))
    qshape = (1,) + tuple(out_spatial) + (g, o)
    with np.errstate(all="ignore"):
        out = _fast_conv(xx, ww, wdims, out_spatial, F32, hw, strategy)
        np.copyto(out, _default_nan(F32), where=np.isnan(out))
        if eigen and padded and wbad is not None:
            cnt = wbad.sum(axis=2, dtype=F64).reshape(g * o, kt)
            _put(out, _default_nan(F32), ((~real).astype(F64) @ cnt.T > 0).reshape(qshape))
        if nw is not None:
            taps = np.ones_like(real) if eigen else real
            cnt = nw.sum(axis=2, dtype=F64).reshape(g * o, kt)
            _put(out, _first_nan(ww, nw), ((taps.astype(F64) @ cnt.T) > 0).reshape(qshape))
        if scan is not None and scan[1] is not None:
            first, pix = scan
            nan_x = _window_any(pix[:, :, 0], wdims, out_spatial)          # (G, N, *out_spatial)
            _put(out, first, np.moveaxis(nan_x, 0, -1)[..., None])
    return out


def _window_any(m: np.ndarray, wdims, out_spatial) -> np.ndarray:
    """(A, B, *S) bool -> (A, B, *out_spatial): whether a real tap (not padding, not an
    lhs-dilation hole) of each output's window reads a True; one spatial dim at a time (the window
    is a product of per-dim taps), by strided slices where the taps' inputs are evenly spaced."""
    for i, (wd, out_len) in enumerate(zip(wdims, out_spatial)):
        ax = 2 + i
        lead = (slice(None),) * ax
        r = np.zeros(m.shape[:ax] + (out_len,) + m.shape[ax + 1:], bool)
        for k in range(wd.size):
            idx, real = _tap_positions(out_len, m.shape[ax], wd, k)
            at = np.flatnonzero(real)
            if not at.size:
                continue
            src = idx[at]
            step = int(src[1] - src[0]) if src.size > 1 else 1
            if at[-1] - at[0] + 1 == at.size and step > 0 and bool((np.diff(src) == step).all()):
                rs = r[lead + (slice(int(at[0]), int(at[-1]) + 1),)]
                np.logical_or(rs, m[lead + (slice(int(src[0]), int(src[-1]) + 1, step),)], out=rs)
            else:
                r[lead + (at,)] |= np.take(m, src, axis=ax)
        m = r
    return m


def _inf_bound(terms: int) -> float:
    """No finite |x| or |w| reaching this (sqrt(f32 max / (4 terms))): every partial sum of finite
    products of a `terms`-term f32 sum stays far below the f32 range."""
    return math.sqrt(float(np.finfo(F32).max) / (4.0 * terms))


def _x_scan(a: np.ndarray, big: float):
    """(whether a finite |x| >= big, whether x holds +-inf, x's NaN pixels (G, N, 1, *S) bool: a
    channel holds NaN) of the f32 x (G, N, Cg, *S), any strides: one pass over its magnitude bits,
    a block in cache at a time (per pixel their channel maximum: NaN's lie above inf's).  The
    first two only when a large finite |x| is found."""
    d = 0
    while d < a.ndim - 1 and int(np.prod(a.shape[d + 1:], dtype=np.int64)) > _COUNT_BLOCK:
        d += 1
    inner = int(np.prod(a.shape[d + 1:], dtype=np.int64))
    step = max(1, _COUNT_BLOCK // max(inner, 1))
    buf = np.empty(step * inner, np.int32)
    hit = np.empty(step * inner, bool)
    bits = a.view(np.int32)
    inf_bits = 0x7F800000
    lo = min(int(np.array(big, F32).view(np.int32)), inf_bits)
    pix = np.zeros(a.shape[:2] + a.shape[3:], np.int32)
    infs = False
    for lead in np.ndindex(*a.shape[:d]):
        for j in range(0, a.shape[d], step):
            full = lead + (slice(j, j + step),)
            blk = bits[full]
            m = np.bitwise_and(blk, 0x7FFFFFFF, out=buf[:blk.size].reshape(blk.shape))
            if d < 2:                                   # whole channel runs in the block
                np.maximum.reduce(m, axis=2 - d, out=pix[full])
            else:
                pv = pix[lead + (...,)] if d == 2 else pix[lead[:2] + lead[3:] + (slice(j, j + step),)]
                np.maximum(pv, np.maximum.reduce(m, axis=0) if d == 2 else m, out=pv)
            u = np.subtract(m, lo, out=m).view(np.uint32)   # large finite ones: [0, inf - lo)
            if int(np.minimum.reduce(u, axis=None)) < inf_bits - lo:
                return True, infs, None
            if not infs:
                infs = bool(np.equal(u, inf_bits - lo, out=hit[:blk.size].reshape(blk.shape)).any())
    return False, infs, np.expand_dims(pix > inf_bits, 2)


def _put(out: np.ndarray, val, mask: np.ndarray) -> None:
    """out[mask] = val (mask broadcast to out): by bit selection over a mask much smaller than out
    (copyto's branches cost more on a random mask than the selection's passes)."""
    if 2 * mask.size > out.size:               # hardly broadcast: no smaller than out's bits
        np.copyto(out, val, where=mask)
        return
    u = np.uint32 if out.dtype.itemsize == 4 else np.uint64
    ob = out.view(u)
    vb = np.array(val, out.dtype).view(u)
    np.bitwise_and(ob, np.where(mask, u(0), ~u(0)), out=ob)
    np.bitwise_or(ob, np.where(mask, vb, u(0)), out=ob)


def _scan_route(xx, ww, wdims, out_spatial, hw: bool, eigen: bool, strategy):
    """_nonfinite_conv in f32 without x's dense NaN and inf masks: one blocked pass over x's
    magnitude bits (_x_scan: no finite |x| too large, whether x holds inf, the pixels whose
    channels hold NaN), then _nan_conv when neither operand holds inf, else _inf_conv with x's
    first NaN and the NaN pixels.  None where the dense route decides: x's first element NaN (an
    all-NaN x has its own shortcut there), a large finite x, _inf_conv's fallbacks."""
    if xx.ndim < 3 or xx.size == 0 or bool(np.isnan(xx[(0,) * xx.ndim])):
        return None
    g, n, cg = xx.shape[:3]
    kt = int(np.prod(ww.shape[3:], dtype=np.int64))
    large, infs, nan_pix = _x_scan(xx, _inf_bound(cg * kt))
    if large:
        return None
    nw, iw = np.isnan(ww), np.isinf(ww)
    nw = nw if bool(nw.any()) else None
    iw = iw if bool(iw.any()) else None
    if not infs and iw is None:
        return _nan_conv(xx, ww, nw, wdims, out_spatial, F32, hw, eigen, strategy)
    scan = (None, None)
    if bool(nan_pix.any()):
        slab = np.unravel_index(int(np.argmax(nan_pix.reshape(g * n, -1).any(axis=1))), (g, n))
        first = _first_nan(xx[slab], np.isnan(xx[slab]))
        scan = (first, nan_pix)
    return _inf_conv(xx, ww, None, None, nw, iw, wdims, out_spatial, hw, eigen, strategy, scan=scan)


def _nan_conv(xx, ww, nw, wdims, out_spatial, cdt, hw: bool, eigen: bool, strategy=None):
    """_nonfinite_conv of operands holding NaN and no inf (`nw`: the kernel's NaN mask, or None):
    the sum over x as it is (a NaN under a real tap makes its output NaN, the processor passing its
    payload on as XLA's kernels do) and the kernel with its NaN zeroed, whose NaN outputs come from
    the tap tables (real taps, and with `eigen` padding and holes too).  None when f32 sums overflow."""
    g, o = ww.shape[:2]
    kt = int(np.prod(ww.shape[3:], dtype=np.int64))
    wf = ww if nw is None else np.where(nw, cdt.type(0), ww)
    out = _fast_conv(xx, wf, wdims, out_spatial, cdt, hw, strategy)
    if cdt == F32 and bool(np.isinf(out).any()):
        return None                                   # no inf operand: the f32 sums overflowed
    if nw is not None:
        real = _real_taps(xx.shape[3:], wdims, out_spatial)
        taps = np.ones_like(real) if eigen else real
        cnt = nw.sum(axis=2, dtype=F64).reshape(g * o, kt)
        nan_w = ((taps.astype(F64) @ cnt.T) > 0).reshape((1,) + tuple(out_spatial) + (g, o))
        np.copyto(out, _first_nan(ww, nw), where=nan_w & ~np.isnan(out))
    return out


def _fast_path(x, w, wdims, out_spatial, dt, terms: int, eigen: bool = True):
    """The convolution through _fast_conv when it gives the exact path's values: x (G, N, Cg, *S),
    w (G, O, Cg, *K) in the op type dt -> (N, *out_spatial, G, O) accumulated, or None (the caller
    then takes the exact tap / output-position loops).  f32 (and bf16/f16/f8, read exactly as f32)
    convolutions of more than F32_BLAS_MIN_MACS multiply-adds run in f32 with the processor's
    FTZ/DAZ, as XLA does (one whose f32 sums overflow runs again in f64, as the exact path sums);
    smaller ones sum in f64; f64 in f64; integers in f64 when every partial sum is an exact integer
    there (terms * max|x| * max|w| < 2^53).  Real float operands holding NaN or inf go through
    _nonfinite_conv (`eigen`: padding and holes are multiplied, see the module docstring).  Pred,
    one-term sums, complex or f64 results that overflow take the exact path."""
    if terms < 2 or x.size == 0 or w.size == 0 or 0 in out_spatial:
        return None
    k = kind(dt)
    g, n, cg = x.shape[:3]
    macs = g * n * cg * w.shape[1] * int(np.prod(out_spatial, dtype=np.int64)) * (terms // cg)
    if _pointwise_chain(x, w, wdims, dt):
        return _fma_chain(x, w, hardware() is not None)
    if _window_chain(x, w, wdims, out_spatial, dt):
        return _fma_chain_window(x, w, wdims, out_spatial, hardware() is not None)
    bad: list = []
    with np.errstate(all="ignore"):
        if k == "float":
            if dt != F64 and macs > F32_BLAS_MIN_MACS:
                hw = hardware() is not None
                xx, ww, cdt = x.astype(F32, copy=False), w.astype(F32, copy=False), F32
                if not hw:
                    xx, ww = flush(xx), flush(ww)
            else:
                hw, xx, ww, cdt = False, widen_operand(x), widen_operand(w), F64
            if _finite(xx) and _finite(ww):
                out = _fast_conv(xx, ww, wdims, out_spatial, cdt, hw, nonfinite=bad)
            else:
                out = _nonfinite_conv(xx, ww, wdims, out_spatial, cdt, hw, eigen)
                bad = [True] if out is None else []
            if bad and cdt == F32:
                # f32 partial sums overflowed: the sum in f64 (the exact path's), NaN and inf as above
                xx, ww = widen_operand(x), widen_operand(w)
                if _finite(xx) and _finite(ww):
                    return _fast_conv(xx, ww, wdims, out_spatial, F64, False)
                return _nonfinite_conv(xx, ww, wdims, out_spatial, F64, False, eigen)
            if bad:
                return None
            if cdt == F32 and not hw:
                out = flush(out)
        elif k == "complex":
            xx, ww = widen_operand(x), widen_operand(w)
            out = _fast_conv(xx, ww, wdims, out_spatial, xx.dtype, False, nonfinite=bad)
        elif k in ("int", "uint"):
            xx, ww = widen_operand(x), widen_operand(w)
            mx = max(abs(int(xx.max())), abs(int(xx.min())))
            mw = max(abs(int(ww.max())), abs(int(ww.min())))
            if terms * mx * mw >= _F64_EXACT:
                return None
            out = _fast_conv(xx, ww, wdims, out_spatial, F64, False).astype(xx.dtype)
            return out
        else:
            return None
        if bad:
            return None
    return out


def materialize_sparse(values, indices, side: dict) -> np.ndarray:
    """The dense operand of a 1:N structured-sparse one (XLA's MaterializeSparseOperand): along
    `dimension` each value lands in its block of N at the position `indices` gives, the rest are
    zeros.  XLA fails the run for a stride other than 1, indices of other dimensions than the
    values', and a position outside [0, N); so does this."""
    values, indices = np.asarray(values), np.asarray(indices)
    dim, n = side["dimension"], side["block_size"]
    if side["num_non_zero"] != 1 or side["stride"] != 1:
        raise HloEvalError(f"convolution: sparsity {side['num_non_zero']}:{n} with stride {side['stride']}: "
                           "XLA expands only 1:N sparsity with stride 1")
    if not 0 <= dim < values.ndim or n <= 0:
        raise HloEvalError(f"convolution: sparsity dimension {dim} must be in [0, {values.ndim}) and the "
                           f"block size {n} positive")
    if indices.shape != values.shape or indices.dtype.kind not in "iu":
        raise HloEvalError(f"convolution: the sparse kernel's indices must be integers shaped like its values "
                           f"{list(values.shape)}, got {indices.dtype}{list(indices.shape)}")
    if indices.size and (indices.min() < 0 or indices.max() >= n):
        bad = indices[(indices < 0) | (indices >= n)].flat[0]
        raise HloEvalError(f"convolution: a position in a sparsity block must be in [0, {n}), got {int(bad)}")
    shape = list(values.shape)
    shape[dim] *= n
    dense = np.zeros(shape, values.dtype)
    pos = np.arange(values.shape[dim]).reshape([-1 if k == dim else 1 for k in range(values.ndim)]) * n
    where = list(np.indices(values.shape, sparse=True))
    where[dim] = pos + indices.astype(np.int64)
    dense[tuple(where)] = values
    return dense


@evaluator("convolution")
def eval_convolution(inst, args, ec):
    """Windowed sum of products of lhs windows (stride, padding incl. negative, lhs/rhs dilation,
    reversal) and the kernel, over input features (per feature group / batch group).
    XLA: see the module docstring for types, padding (Eigen multiplies it, the loop emitter skips
    it) and the f64 accumulation of f32.  Under GPU numerics the products follow an explicit
    algorithm (numerics.py); f32 products otherwise, as cuDNN's DEFAULT_MATH algorithms that XLA's
    autotuner picked in every measured case (numerics.CONV_IMPLIED_TF32)."""
    lhs, rhs = args
    if isinstance(rhs, tuple):               # a sparse kernel: (values, indices)
        rhs = materialize_sparse(rhs[0], rhs[1], sparsity_sides(inst.attrs.get("sparsity_config"))["rhs"])
    alg = numerics.dot_algorithm(inst, ec, [lhs, rhs], implied=numerics.CONV_IMPLIED_TF32)
    if alg is not None:
        return numerics.apply_pairs(lhs, rhs, alg, lambda l, r: convolution_values(inst, l, r, F32),
                                    np_dtype(inst.shape))
    return convolution_values(inst, lhs, rhs, np_dtype(inst.shape))


def convolution_values(inst, lhs, rhs, out_dt):
    """The convolution `inst` of `lhs` and `rhs` into element type `out_dt` (XLA CPU's arithmetic)."""
    dn = inst.attrs["dim_labels"]
    window = inst.attrs.get("window")
    wdims = tuple(window.dimensions) if window is not None else ()
    fgc = inst.attrs.get("feature_group_count", 1) or 1
    bgc = inst.attrs.get("batch_group_count", 1) or 1
    op_t, _ = compute_types(etype_name(lhs.dtype), etype_name(rhs.dtype), etype_name(out_dt))
    dt = np_dtype(op_t)
    ns = len(dn.input_spatial_dimensions)
    x = np.transpose(convert(lhs, dt), [dn.input_batch_dimension, dn.input_feature_dimension,
                                        *dn.input_spatial_dimensions])
    w = np.transpose(convert(rhs, dt), [dn.kernel_output_feature_dimension, dn.kernel_input_feature_dimension,
                                        *dn.kernel_spatial_dimensions])
    n, c = x.shape[:2]
    o = w.shape[0]
    spatial = x.shape[2:]
    if fgc > 1:
        x = x.reshape((n, fgc, c // fgc) + spatial).swapaxes(0, 1)
        w = w.reshape((fgc, o // fgc) + w.shape[1:])
    else:
        x = x.reshape((bgc, n // bgc, c) + spatial)
        w = w.reshape((bgc, o // bgc) + w.shape[1:])
    out_spatial = tuple(inst.shape.dims[d] for d in dn.output_spatial_dimensions)
    terms = x.shape[2] * int(np.prod([wd.size for wd in wdims], dtype=np.int64))
    # Eigen's transposed-convolution kernel (2-D and 1-D) scatters products instead of gathering
    transposed = (ns <= 2 and fgc == 1 and any(wd.base_dilation != 1 for wd in wdims)
                  and all(wd.window_dilation == 1 or wd.size == 1 for wd in wdims)
                  and all(wd.stride == 1 for wd in wdims))
    eigen = (kind(dt) == "float" and dt != F64 and bgc == 1 and 0 < ns <= 3 and not transposed
             and not (all(wd.size == 1 for wd in wdims) and fgc == 1 and min(c, o) == 1)
             and not any(wd.window_reversal for wd in wdims)
             and not _operands_swapped(spatial, wdims, fgc, bgc))
    fast = _fast_path(x, w, wdims, out_spatial, dt, terms, eigen)
    if fast is not None:
        nx = fast.shape[0]
        res = fast.reshape((nx,) + out_spatial + (-1,))
        res = narrow_result(res, dt)
        perm = [0] * (ns + 2)
        perm[dn.output_batch_dimension] = 0
        perm[dn.output_feature_dimension] = ns + 1
        for j, d in enumerate(dn.output_spatial_dimensions):
            perm[d] = 1 + j
        return contig(convert(np.transpose(res, perm), out_dt))
    x = widen_operand(x)
    w = widen_operand(w)
    acc, terms = _conv_core(x, w, wdims, out_spatial, eigen)
    g, nx, og = acc.shape[:3]
    acc = acc.swapaxes(0, 1).reshape((nx, g * og) + out_spatial)
    res = narrow_result(plus_zero(acc, terms), dt)
    perm = [0] * (ns + 2)
    perm[dn.output_batch_dimension] = 0
    perm[dn.output_feature_dimension] = 1
    for j, d in enumerate(dn.output_spatial_dimensions):
        perm[d] = 2 + j
    res = np.transpose(res, perm)
    return contig(convert(res, out_dt))
