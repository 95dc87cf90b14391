"""Evaluation rule of convolution (types, padding, accumulation: see linalg.py's module docstring,
which states what XLA CPU computes for dot and convolution alike)."""
from __future__ import annotations

import itertools

import numpy as np

from ..registry import evaluator
from ..values import np_dtype
from .convert import F64, convert, kind
from .linalg import _contig, _etype_name, _narrow, _plus_zero, _widen, compute_types

# ============================================================================ convolution

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


@evaluator("convolution")
def eval_convolution(inst, args, ec):
    """Windowed sum of products of lhs windows (stride, padding incl. negative, lhs/rhs dilation,
    reversal) and the kernel, over input features (per feature group / batch group).
    XLA: see the module docstring for types, padding (Eigen multiplies it, the loop emitter skips
    it) and the f64 accumulation of f32."""
    lhs, rhs = args
    dn = inst.attrs["dim_labels"]
    window = inst.attrs.get("window")
    wdims = tuple(window.dimensions) if window is not None else ()
    fgc = inst.attrs.get("feature_group_count", 1) or 1
    bgc = inst.attrs.get("batch_group_count", 1) or 1
    out_dt = np_dtype(inst.shape)
    op_t, _ = compute_types(_etype_name(lhs.dtype), _etype_name(rhs.dtype), _etype_name(out_dt))
    dt = np_dtype(op_t)
    x = _widen(convert(lhs, dt))
    w = _widen(convert(rhs, dt))
    ns = len(dn.input_spatial_dimensions)
    x = np.transpose(x, [dn.input_batch_dimension, dn.input_feature_dimension, *dn.input_spatial_dimensions])
    w = np.transpose(w, [dn.kernel_output_feature_dimension, dn.kernel_input_feature_dimension,
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
    # Eigen's transposed-convolution kernel (2-D and 1-D) scatters products instead of gathering
    transposed = (ns <= 2 and fgc == 1 and any(wd.base_dilation != 1 for wd in wdims)
                  and all(wd.window_dilation == 1 or wd.size == 1 for wd in wdims)
                  and all(wd.stride == 1 for wd in wdims))
    eigen = (kind(dt) == "float" and dt != F64 and bgc == 1 and 0 < ns <= 3 and not transposed
             and not (all(wd.size == 1 for wd in wdims) and fgc == 1 and min(c, o) == 1)
             and not any(wd.window_reversal for wd in wdims)
             and not _operands_swapped(spatial, wdims, fgc, bgc))
    acc, terms = _conv_core(x, w, wdims, out_spatial, eigen)
    g, nx, og = acc.shape[:3]
    acc = acc.swapaxes(0, 1).reshape((nx, g * og) + out_spatial)
    res = _narrow(_plus_zero(acc, terms), dt)
    perm = [0] * (ns + 2)
    perm[dn.output_batch_dimension] = 0
    perm[dn.output_feature_dimension] = 1
    for j, d in enumerate(dn.output_spatial_dimensions):
        perm[d] = 2 + j
    res = np.transpose(res, perm)
    return _contig(convert(res, out_dt))


