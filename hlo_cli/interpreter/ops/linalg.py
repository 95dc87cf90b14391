"""Evaluation rules of the linear-algebra and normalization families: dot, ragged-dot, scaled-dot,
convolution, fft, cholesky, triangular-solve, batch-norm-training, batch-norm-inference,
batch-norm-grad.

What XLA CPU computes, and what is not reproduced, is in hlo_cli/SEMANTICS.md ("Dots,
convolutions, linear algebra").  In short:

* element types: the op runs in the result type when it holds the operands' (OperandUpcaster),
  else in the operands' type, converted after (ResultCaster); bf16/f16/f8 run as f32, rounded once;
* f32 sums: small dots (up to F32_BLAS_MIN_MACS multiply-adds) sum exact products in f64 and round
  once, larger ones are f32 BLAS; neither is XLA's blocked order, both are within its own error;
  integer dots are exact; operands read with DAZ, results written with FTZ;
* a one-term sum keeps -0 (XLA makes it a multiply); more terms that cancel give +0;
* convolution padding and lhs-dilation holes are multiplied where Eigen's kernels run (0 * inf =
  NaN) and skipped where XLA's loop emitter runs;
* fft in complex128, rounded; cholesky and triangular-solve as XLA's expanders, in f64/c128;
* batch-norm-* as XLA's BatchNormExpander op by op, with the FMAs LLVM contracts (``fma_once``).
"""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from ...errors import HloEvalError
from ...ir.shape import Shape
from ...shapes.families.reduction import higher_precision
from .. import computations as C
from . import numerics
from .. import ynn_sum
from ..kernels import TINY, Fast, declare, flush, hardware_casts, operand_dtypes, shape_dtype, subnormals
from ..registry import evaluator, prepares, rule_for
from ..fpenv import flushing, hardware
from ..parallel import SPLIT_MIN_MACS, blas_single, matmul, row_chunks, run_parts, split, threads
from ..values import np_dtype
from .elementwise import repair_f32_midpoints
from .convert import (BF16, C64, C128, F32, F64, contig, convert, etype, int_compute, int_range, kind, round_float,
                      widen_float, wrap_int)


# ============================================================================ element types

def etype_name(dtype) -> str:
    return etype(dtype).name


def compute_types(lhs_type: str, rhs_type: str, result_type: str) -> tuple[str, str]:
    """(type the operands are converted to and the op runs in, result type) after XLA's
    OperandUpcaster / ResultCaster: see the module docstring."""
    inferred = higher_precision(lhs_type, rhs_type)
    if result_type == inferred == lhs_type == rhs_type:
        return result_type, result_type
    if higher_precision(inferred, result_type) == result_type:
        return result_type, result_type
    return inferred, result_type


def _wide(dtype: np.dtype) -> np.dtype:
    """The NumPy dtype we accumulate an HLO element type in."""
    k = kind(dtype)
    if k == "float":
        return F64
    if k == "complex":
        return C128
    if k == "uint":
        return np.dtype(np.uint64)
    if k == "int":
        return np.dtype(np.int64)
    return np.dtype(np.bool_)


def widen_operand(x: np.ndarray) -> np.ndarray:
    """`x` (already of the op's type) in its accumulation dtype, read the way XLA CPU reads it:
    float types go through f32 (DAZ flushes f32/bf16 denormals), f64 and complex are flushed."""
    dt = x.dtype
    k = kind(dt)
    if k == "float":
        if dt == F64:
            return flush(x)
        return flush(x.astype(F32)).astype(F64)
    if k == "complex":
        return flush(x).astype(C128)
    if k == "pred":
        return x.astype(np.bool_)
    return int_compute(x).astype(_wide(dt))


def narrow_result(r: np.ndarray, dt: np.dtype) -> np.ndarray:
    """An accumulated result back in the op's type: floats rounded through f32 (XLA computes the
    narrow float types as f32 ops and converts once), FTZ; integers wrap."""
    k = kind(dt)
    if k == "float":
        if dt == F64:
            return flush(r)
        r32 = round_float(r, F32)
        return r32 if dt == F32 else round_float(r32, dt)
    if k == "complex":
        with np.errstate(all="ignore"):
            return flush(r.astype(dt))
    if k == "pred":
        return r.astype(np.bool_)
    return wrap_int(r, dt)


def plus_zero(r: np.ndarray, terms: int) -> np.ndarray:
    """XLA's -0 rule: a sum of two or more terms never ends at -0 (a one-term sum is a multiply)."""
    if terms >= 2 and r.dtype.kind == "f":
        return r + r.dtype.type(0.0)
    return r


# ============================================================================ dot core

def _contract(lhs, rhs, lb, lc, rb, rc, ftz=False):
    """The general dot of two accumulation-dtype arrays: result dims are batch, lhs free, rhs free.
    Returns (result, number of summed terms).  `ftz`: products with the processor's FTZ/DAZ flags
    (see parallel.matmul)."""
    lf = [d for d in range(lhs.ndim) if d not in lb and d not in lc]
    rf = [d for d in range(rhs.ndim) if d not in rb and d not in rc]
    bshape = [lhs.shape[d] for d in lb]
    lfs = [lhs.shape[d] for d in lf]
    rfs = [rhs.shape[d] for d in rf]
    k = int(np.prod([lhs.shape[d] for d in lc], dtype=np.int64))
    b = int(np.prod(bshape, dtype=np.int64))
    m = int(np.prod(lfs, dtype=np.int64))
    n = int(np.prod(rfs, dtype=np.int64))
    l3 = np.transpose(lhs, list(lb) + lf + list(lc)).reshape(b, m, k)
    r3 = np.transpose(rhs, list(rb) + list(rc) + rf).reshape(b, k, n)
    with np.errstate(all="ignore"):
        if lhs.dtype == np.bool_:
            # OR of ANDs: a sum of 0/1 terms in f32 is > 0 exactly when one term is 1 (any k)
            out = matmul(l3.astype(F32), r3.astype(F32)) > 0
        elif k == 1:
            out = l3 * r3                      # one term: a multiply, -0 kept
        elif k == 0:
            out = np.zeros((b, m, n), lhs.dtype)
        else:
            out = matmul(l3, r3, ftz)
    return out.reshape(bshape + lfs + rfs), k


def _dims(inst, name):
    return tuple(inst.attrs.get(name) or ())


# f32 dots of more multiply-adds than this accumulate in f32 with BLAS (sgemm, much faster
# than the f64 accumulation, and as close to XLA's blocked f32 sums as f64 is); smaller ones, where
# the time does not matter, sum in f64 (see the module docstring).  The same holds for the dots XLA
# computes as f32 ops: bf16, f16 and the f8/f6/f4 types, whose operands convert to f32 exactly
# (both are within XLA's own f32 error: hlo_cli/SEMANTICS.md).
F32_BLAS_MIN_MACS = 1 << 22


def f32_blas(b: int, m: int, k: int, n: int) -> bool:
    """True if an f32 dot of b batches of [m,k] x [k,n] runs as an f32 BLAS product."""
    return b * m * k * n > F32_BLAS_MIN_MACS


def _geometry(lshape, rshape, lb, lc, rb, rc) -> tuple[int, int, int, int]:
    """(batch, lhs free, contracting, rhs free) element counts of a dot."""
    def prod(ds):
        return int(np.prod(ds, dtype=np.int64))
    b = prod([lshape[d] for d in lb])
    k = prod([lshape[d] for d in lc])
    m = prod([s for d, s in enumerate(lshape) if d not in lb and d not in lc])
    n = prod([s for d, s in enumerate(rshape) if d not in rb and d not in rc])
    return b, m, k, n


def _as_f32(x: np.ndarray, dt: np.dtype) -> np.ndarray:
    """`x` converted to the float type `dt` the op runs in (XLA's convert), then exactly to f32
    (fnuz NaN as +NaN), read with DAZ unless the processor's flags do it."""
    w = widen_float(convert(x, dt))
    return w if hardware() is not None else flush(w)


def _products(l3: np.ndarray, r3: np.ndarray, ftz: bool, finish, out_dtype) -> np.ndarray:
    """finish(parallel.matmul(l3, r3, ftz)) of (b, m, k) and (b, k, n) arrays, with the product
    computed in parallel.matmul's pieces (so bit for bit the same) and each piece finished (an
    elementwise rounding into `out_dtype`) as soon as it is made: a large product never holds more
    than its pieces in flight in the accumulation type."""
    b, m, k = l3.shape
    n = r3.shape[2]
    rows = row_chunks(m) if b * m * k * n >= SPLIT_MIN_MACS else None
    nt = threads()
    if rows is None or (len(rows) == 1 and (b < 2 or nt < 2)):
        return finish(flushing(np.matmul, l3, r3) if ftz else np.matmul(l3, r3))
    if len(rows) == 1:
        pieces = [[(s, slice(None))] for s in (slice(p.start, p.stop) for p in split(range(b), min(nt, b)))]
    else:
        pieces = split([(slice(i, i + 1), r) for i in range(b) for r in rows], nt)
    out = np.empty((b, m, n), out_dtype)

    def part(items):
        for bs, rs in items:
            prod = flushing(np.matmul, l3[bs, rs], r3[bs]) if ftz else np.matmul(l3[bs, rs], r3[bs])
            out[bs, rs] = finish(prod)
    with blas_single():
        run_parts(part, pieces)
    return out


def _blas_contract(a, b, lb, lc, rb, rc, ftz, finish, out_dtype) -> np.ndarray:
    """The dot of two arrays of one BLAS dtype (result dims: batch, lhs free, rhs free) through
    _products, each piece finished into `out_dtype`."""
    lf = [d for d in range(a.ndim) if d not in lb and d not in lc]
    rf = [d for d in range(b.ndim) if d not in rb and d not in rc]
    bb, m, k, n = _geometry(a.shape, b.shape, lb, lc, rb, rc)
    l3 = np.transpose(a, list(lb) + lf + list(lc)).reshape(bb, m, k)
    r3 = np.transpose(b, list(rb) + list(rc) + rf).reshape(bb, k, n)
    out = _products(l3, r3, ftz, finish, out_dtype)
    return out.reshape([a.shape[d] for d in lb] + [a.shape[d] for d in lf] + [b.shape[d] for d in rf])


def _f32_dot(lhs, rhs, lb, lc, rb, rc, dt, result_dtype):
    """A large dot XLA computes as an f32 op (f32 or a narrower float type `dt`) of two or more
    terms: operands in f32, one f32 BLAS product (FTZ/DAZ), -0 rule, rounded once to `dt`,
    converted to the result type."""
    hw = hardware() is not None

    def finish(out):
        with np.errstate(all="ignore"):
            np.add(out, F32.type(0.0), out=out)    # XLA's -0 rule (a fresh product: in place)
            if not hw:
                out = flush(out)
            if dt != F32:
                out = round_float(out, dt)
            return convert(out, result_dtype)
    return _blas_contract(_as_f32(lhs, dt), _as_f32(rhs, dt), lb, lc, rb, rc, hw, finish, np.dtype(result_dtype))


def _c64_dot(lhs, rhs, lb, lc, rb, rc, result_dtype):
    """A large c64 dot of two or more terms as XLA CPU runs it, in c64: one complex64 BLAS
    product (cgemm) of the DAZ-read operands, FTZ."""
    hw = hardware() is not None
    a, b = (convert(v, C64) for v in (lhs, rhs))
    if not hw:
        a, b = flush(a), flush(b)

    def finish(out):
        with np.errstate(all="ignore"):
            return convert(out if hw else flush(out), result_dtype)
    return _blas_contract(a, b, lb, lc, rb, rc, hw, finish, np.dtype(result_dtype))


# integer dots whose every partial sum is below this in magnitude are exact in f64 (f32) BLAS
_F64_EXACT = 2.0 ** 53
_F32_EXACT = 2.0 ** 24


def _int_bound(x: np.ndarray) -> int:
    """max |x| of an integer array (0 if empty), from its type's range when that is small."""
    if x.size == 0:
        return 0
    et = etype(x.dtype)
    lo, hi = int_range(et) if et.kind in ("int", "uint") else (0, 1)
    if et.bits <= 16:
        return max(-lo, hi)
    return int(max(-int(x.min()), int(x.max())))


def _int_dot(lhs, rhs, lb, lc, rb, rc, dt, result_dtype):
    """An integer dot in type `dt` (wrapping): through f32 BLAS when k * max|a| * max|b| < 2^24,
    f64 BLAS when < 2^53 (every product and partial sum is an exact integer, in any order), else
    an int64 product (NumPy's, no BLAS), then wrapped to `dt` and converted to the result type."""
    a, b_ = int_compute(convert(lhs, dt)), int_compute(convert(rhs, dt))
    _, _, k, _ = _geometry(a.shape, b_.shape, lb, lc, rb, rc)
    bound = float(k) * _int_bound(a) * _int_bound(b_)
    if k >= 2 and bound < _F64_EXACT:
        blas = F32 if bound < _F32_EXACT else F64
        out, _ = _contract(a.astype(blas), b_.astype(blas), lb, lc, rb, rc)
        wide = np.int64 if kind(dt) == "int" else np.uint64
        out = out.astype(np.int64).astype(wide, copy=False)
    else:
        out, _ = _contract(a.astype(_wide(dt)), b_.astype(_wide(dt)), lb, lc, rb, rc)
    return convert(wrap_int(out, dt), result_dtype)


def dot_values(lhs, rhs, lb, lc, rb, rc, result_dtype, terms_scale: int = 1):
    """XLA's dot of two arrays of any types into `result_dtype` (see the module docstring)."""
    op_t, res_t = compute_types(etype_name(lhs.dtype), etype_name(rhs.dtype), etype_name(result_dtype))
    dt = np_dtype(op_t)
    k_ = kind(dt)
    geometry = _geometry(lhs.shape, rhs.shape, lb, lc, rb, rc)
    blas = geometry[2] >= 2 and f32_blas(*geometry)     # one-term and empty sums: the general path
    if blas and k_ == "float" and dt != F64:
        return _f32_dot(lhs, rhs, lb, lc, rb, rc, dt, result_dtype)
    if blas and dt == C64:
        return _c64_dot(lhs, rhs, lb, lc, rb, rc, result_dtype)
    if k_ in ("int", "uint"):
        return _int_dot(lhs, rhs, lb, lc, rb, rc, dt, result_dtype)
    l, r = widen_operand(convert(lhs, dt)), widen_operand(convert(rhs, dt))
    out, k = _contract(l, r, lb, lc, rb, rc)
    out = narrow_result(plus_zero(out, k * terms_scale), dt)
    return convert(out, result_dtype)


@evaluator("dot")
def eval_dot(inst, args, ec):
    """Sum of products over the contracting dims; result dims = batch, lhs free, rhs free.
    Under GPU numerics the products follow the effective algorithm (numerics.py: TF32 for f32
    DEFAULT/HIGH on Ampere+, the bf16/TF32 splits of explicit algorithms).
    XLA: computed in the up/result-cast type (s8 x s8 -> s32 natively, bf16 -> f32 accumulation,
    f16/bf16 results rounded once from f32); we accumulate f32 in f64 (YNNPACK's order is not
    reproducible), so inexact f32 sums may differ in the last bits."""
    lhs, rhs = args
    dims = (_dims(inst, "lhs_batch_dims"), _dims(inst, "lhs_contracting_dims"),
            _dims(inst, "rhs_batch_dims"), _dims(inst, "rhs_contracting_dims"))
    alg = numerics.dot_algorithm(inst, ec, args)
    if alg is not None:                  # GPU numerics: TF32 / split products (numerics.py)
        return numerics.apply_pairs(lhs, rhs, alg, lambda l, r: dot_values(l, r, *dims, F32), np_dtype(inst.shape))
    return dot_values(lhs, rhs, *dims, np_dtype(inst.shape))


# ============================================================================ ragged-dot

def _group_ids(gs: np.ndarray, n: int) -> np.ndarray:
    """For group sizes gs[..., g], the group of each position 0..n-1 along the ragged dim
    (shape gs.shape[:-1] + (n,)); positions past the last group get g (no group)."""
    ends = np.cumsum(gs.astype(np.int64), axis=-1)
    pos = np.arange(n)
    return (pos[..., None] >= ends[..., None, :]).sum(-1) if gs.ndim == 1 else \
        (pos[None, :, None] >= ends.reshape(-1, 1, gs.shape[-1])).sum(-1).reshape(gs.shape[:-1] + (n,))


def _place(gid: np.ndarray, axes: list[int], rank: int) -> np.ndarray:
    """`gid`, whose dims are the given axes of an array of `rank` dims (in any order), transposed
    and reshaped to broadcast against that array."""
    order = np.argsort(axes)
    g = np.transpose(gid, order) if gid.ndim > 1 else gid
    shape = [1] * rank
    for a, size in zip(sorted(axes), g.shape):
        shape[a] = size
    return g.reshape(shape)


@evaluator("ragged-dot")
def eval_ragged_dot(inst, args, ec):
    """A dot whose lhs ragged dim is split into consecutive groups of group_sizes: non-contracting
    ragged dim -> each row uses its group's rhs slice (rows past the groups are 0); contracting ->
    one result per group, summing only that group's range; batch -> a plain dot.
    XLA CPU cannot run ragged-dot; this follows JAX's reference decomposition, except that rows
    outside a group are left out rather than multiplied by zero (no NaN from 0 * inf)."""
    lhs, rhs, gs = args
    alg = numerics.dot_algorithm(inst, ec, args[:2])
    if alg is not None:                  # GPU numerics (numerics.py): the ragged dot of each pair of parts
        probe = SimpleNamespace(opcode=inst.opcode, attrs=inst.attrs, shape=Shape.array("f32", inst.shape.dims))
        return numerics.apply_pairs(lhs, rhs, alg, lambda l, r: eval_ragged_dot(probe, [l, r, gs], None),
                                    np_dtype(inst.shape))
    lb, lc = _dims(inst, "lhs_batch_dims"), _dims(inst, "lhs_contracting_dims")
    rb, rc = _dims(inst, "rhs_batch_dims"), _dims(inst, "rhs_contracting_dims")
    r = _dims(inst, "lhs_ragged_dims")[0]
    gdims = _dims(inst, "rhs_group_dims")
    out_dt = np_dtype(inst.shape)
    lfree = [d for d in range(lhs.ndim) if d not in lb and d not in lc]
    if r in lb:
        return dot_values(lhs, rhs, lb, lc, rb, rc, out_dt)
    ngroups = gs.shape[-1]
    if r in lc:
        # one dot per group with both operands masked (zeros times zeros) outside the group
        rr = rc[lc.index(r)]
        lprefix = list(lb) + list(lc[:lc.index(r)])
        rprefix = list(rb) + list(rc[:lc.index(r)])
        gid_l = _group_ids(np.broadcast_to(gs, tuple(lhs.shape[d] for d in lprefix) + (ngroups,)), lhs.shape[r])
        gid_r = _group_ids(np.broadcast_to(gs, tuple(rhs.shape[d] for d in rprefix) + (ngroups,)), rhs.shape[rr])
        gl = _place(gid_l, lprefix + [r], lhs.ndim)
        gr = _place(gid_r, rprefix + [rr], rhs.ndim)
        zl, zr = np.zeros((), lhs.dtype), np.zeros((), rhs.dtype)
        outs = [dot_values(np.where(gl == g, lhs, zl), np.where(gr == g, rhs, zr), lb, lc, rb, rc, out_dt)
                for g in range(ngroups)]
        return np.stack(outs) if outs else np.zeros(inst.shape.dims, out_dt)
    # non-contracting: rows of group g use rhs[g]; the sum has K * G terms in XLA/JAX
    gd = gdims[0]
    rb2 = [d - (d > gd) for d in rb]
    rc2 = [d - (d > gd) for d in rc]
    lprefix = list(lb) + [d for d in lfree if d < r]
    gid = _group_ids(np.broadcast_to(gs, tuple(lhs.shape[d] for d in lprefix) + (ngroups,)), lhs.shape[r])
    # result axes of the prefix dims and of r: batch dims first, then lhs free dims in order
    res_axes = [lb.index(d) if d in lb else len(lb) + lfree.index(d) for d in lprefix + [r]]
    rank = len(inst.shape.dims)
    gpos = _place(gid, res_axes, rank)
    out = np.zeros(inst.shape.dims, out_dt)
    for g in range(ngroups):
        og = dot_values(lhs, np.take(rhs, g, axis=gd), lb, lc, rb2, rc2, out_dt, terms_scale=ngroups)
        out = np.where(gpos == g, og, out)
    return out


# ============================================================================ scaled-dot
#
# XLA CPU has no scaled-dot: its HLO-to-MLIR bridge rejects the instruction, and JAX's
# lax.scaled_dot reaches XLA CPU as a composite call whose body is the decomposition below.  The
# rule evaluates the decomposition XLA's ScaledDotRewriter makes of it
# (xla/backends/gpu/transforms/scaled_dot_rewriter.cc) with our own rules for the ordinary ops it
# produces (convert, multiply, dot), so scaled-dot is bit for bit what XLA CPU computes for them:
#
# 1. per side, a scalar scale leaves the operand alone; any other scale and its operand are
#    converted to _target_type(operand, scale), the scale is repeated blockwise to the operand's
#    shape (element i of a dimension reads scale element i // (operand size / scale size): a
#    broadcast into [scale dim, block] pairs and a reshape) and multiplied in;
# 2. both products are converted to _target_type(lhs', rhs') and contracted by a dot whose
#    element type is _target_type(that type, result type), converted to the result type.
#
# So f8e4m3fn/f8e5m2/f4e2m1fn operands with f8e8m0fnu scales (the MX formats) are scaled in bf16
# (exactly, but for values leaving bf16's range: XLA CPU's bf16 multiply runs in f32 under FTZ/DAZ,
# so 2^-127, e8m0's smallest scale, reads as 0) and contracted by a bf16 dot into f32 or bf16.
# XLA's HloEvaluator (constant folding) computes instead in the result type, as
# sum(lhs * lhs_scale * rhs * rhs_scale) with the operands converted first; the two agree but for
# rounding and range.

def _target_type(a: np.dtype, b: np.dtype) -> np.dtype:
    """XLA's GetTargetType (scaled_dot_rewriter.cc): bf16 when both types are narrower than 16
    bits, the type itself when both agree, f32 for two different types of one width, otherwise
    the wider type."""
    wa, wb = etype(a).bits, etype(b).bits
    if wa < 16 and wb < 16:
        return BF16
    if a == b:
        return a
    if wa == wb:
        return F32
    return a if wa > wb else b


def _elementwise(opcode: str, args, dtype: np.dtype) -> np.ndarray:
    """Our evaluation rule for an elementwise `opcode` applied to `args` into `dtype`."""
    inst = SimpleNamespace(opcode=opcode, shape=Shape.array(etype_name(dtype), args[0].shape), attrs={})
    return rule_for(opcode)(inst, list(args), None)


def _dequantize(x: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """Step 1 above: `x` times `scale` repeated blockwise, in their common type."""
    if scale.ndim == 0:
        return x
    t = _target_type(x.dtype, scale.dtype)
    xs, ss = convert(x, t), convert(scale, t)
    if ss.ndim != xs.ndim:          # a bf16 no-op scale of another rank (XLA's verifier allows it): its one value
        ss = ss.reshape((1,) * xs.ndim)
    for d in range(xs.ndim):
        if ss.shape[d] != xs.shape[d]:
            ss = np.repeat(ss, xs.shape[d] // ss.shape[d], axis=d)
    return _elementwise("multiply", (xs, ss), t)


@evaluator("scaled-dot")
def eval_scaled_dot(inst, args, ec):
    """dot(lhs * blockwise(lhs_scale), rhs * blockwise(rhs_scale)), operands (lhs, rhs, lhs_scale,
    rhs_scale); a scalar scale means no scaling.  XLA CPU cannot run scaled-dot: this is XLA's
    ScaledDotRewriter decomposition run with the convert / multiply / dot rules (see above)."""
    lhs, rhs, lscale, rscale = args
    lhs, rhs = _dequantize(lhs, lscale), _dequantize(rhs, rscale)
    t = _target_type(lhs.dtype, rhs.dtype)
    res = np_dtype(inst.shape)
    out = dot_values(convert(lhs, t), convert(rhs, t),
                     _dims(inst, "lhs_batch_dims"), _dims(inst, "lhs_contracting_dims"),
                     _dims(inst, "rhs_batch_dims"), _dims(inst, "rhs_contracting_dims"), _target_type(t, res))
    return convert(out, res)


# ============================================================================ fft

@evaluator("fft")
def eval_fft(inst, args, ec):
    """FFT / IFFT (complex, 1/N-normalized inverse), RFFT (real -> the n/2+1 non-negative
    frequencies of the last dim), IRFFT (the inverse; the imaginary parts of the DC and Nyquist
    bins are ignored) over the last len(fft_length) dims.
    XLA: DUCC in the operand's precision; we compute in complex128 and round (a few ulps off)."""
    x = args[0]
    typ = str(inst.attrs["fft_type"])
    lengths = tuple(inst.attrs["fft_length"])
    axes = tuple(range(x.ndim - len(lengths), x.ndim))
    out_dt = np_dtype(inst.shape)
    if any(d == 0 for d in inst.shape.dims) or any(d == 0 for d in x.shape):
        return np.zeros(inst.shape.dims, out_dt)
    with np.errstate(all="ignore"):
        if typ == "FFT":
            r = np.fft.fftn(flush(x).astype(C128), axes=axes)
        elif typ == "IFFT":
            r = np.fft.ifftn(flush(x).astype(C128), axes=axes)
        elif typ == "RFFT":
            r = np.fft.rfftn(flush(x).astype(F64), s=lengths, axes=axes)
        elif typ == "IRFFT":
            r = np.fft.irfftn(flush(x).astype(C128), s=lengths, axes=axes)
        else:
            raise HloEvalError(f"unknown fft_type {typ}")
        return flush(r.astype(out_dt))


# ============================================================================ cholesky / triangular-solve

def _conj(x):
    return np.conj(x) if x.dtype.kind == "c" else x


def cholesky_lower(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """XLA's Cholesky-Banachiewicz factor of the lower triangle of `a` (..., n, n), computed in
    a's (wide) dtype column by column, vectorized over the batch; returns (l, failed) where
    failed[...] marks matrices with a negative or NaN pivot."""
    n = a.shape[-1]
    l = np.zeros_like(a)
    failed = np.zeros(a.shape[:-2], bool)
    with np.errstate(all="ignore"):
        for j in range(n):
            row = l[..., j, :j]
            piv = a[..., j, j] - np.einsum("...k,...k->...", row, _conj(row))
            d = np.sqrt(piv.real) if a.dtype.kind == "c" else np.sqrt(piv)
            failed |= np.isnan(d)
            l[..., j, j] = piv / d                 # XLA divides the whole column, pivot included
            if j + 1 < n:
                col = a[..., j + 1:, j] - np.einsum("...ik,...k->...i", l[..., j + 1:, :j], _conj(row))
                l[..., j + 1:, j] = col / d[..., None]
    return l, failed


@evaluator("cholesky")
def eval_cholesky(inst, args, ec):
    """The Cholesky factor of each (batched) Hermitian positive-definite matrix: lower (a = l l^H)
    reading the lower triangle, else upper (a = u^H u) reading the upper one.
    XLA: the other triangle is 0; a matrix with a negative or NaN pivot becomes all NaN."""
    a = args[0]
    dt = a.dtype
    lower = bool(inst.attrs.get("lower", False))
    w = widen_operand(a)
    if not lower:
        w = np.swapaxes(w, -1, -2)              # XLA transposes (no conjugate), factors, transposes back
    l, failed = cholesky_lower(w)
    l = np.where(failed[..., None, None], np.array(np.nan, l.dtype), l)
    if not lower:
        l = np.swapaxes(l, -1, -2)
    return contig(narrow_result(l, dt))


_TRSM_BLOCK = 128      # XLA CPU's TriangularSolveExpander block size


def _invert_unit_blocks(blocks: np.ndarray, lower: bool) -> np.ndarray:
    """XLA's InvertDiagonalBlocks: columns scaled by the diagonal, the unit triangle inverted row
    by row with full-row dots (so a NaN anywhere in a row spreads), rows scaled back."""
    n = blocks.shape[-1]
    diags = np.diagonal(blocks, axis1=-2, axis2=-1)
    with np.errstate(all="ignore"):
        scaled = blocks / diags[..., None, :]
        out = np.broadcast_to(-np.eye(n, dtype=blocks.dtype), blocks.shape).copy()
        first = 0 if lower else n - 1
        out[..., first, first] = 1
        for i in range(1, n):
            j = i if lower else n - 1 - i
            out[..., j, :] = -np.einsum("...k,...kl->...l", scaled[..., j, :], out)
        return out / diags[..., :, None]


def triangular_solve(a: np.ndarray, b: np.ndarray, left: bool, lower: bool, unit: bool, trans: str):
    """XLA's TriangularSolveExpander: solve op(a) x = b (left) or x op(a) = b, op = identity /
    transpose / adjoint ("N", "T", "C"), reading only the `lower` (else upper) triangle of a (and
    not its diagonal when `unit`), by inverting 128x128 diagonal blocks and block substitution
    with matmuls; arrays in their accumulation dtype, batched over leading dims."""
    transpose, conj = trans != "N", trans == "C"
    cj = np.conj if conj else (lambda v: v)
    k = a.shape[-1]
    if b.size == 0:
        return b.copy()
    with np.errstate(all="ignore"):
        if k == 1:
            return b.copy() if unit else b / cj(a)
        mask = np.tril(np.ones((k, k), bool), -1 if unit else 0)
        if not lower:
            mask = mask.T
        a = np.where(mask, a, np.zeros((), a.dtype))
        if unit:
            a = a + np.eye(k, dtype=a.dtype)
        bs = min(_TRSM_BLOCK, k)
        nb = -(-k // bs)
        invs = []
        for j in range(nb):
            blk = a[..., j * bs:(j + 1) * bs, j * bs:(j + 1) * bs]
            if blk.shape[-1] < bs:                       # the last block is padded with identity
                pad = bs - blk.shape[-1]
                full = np.zeros(blk.shape[:-2] + (bs, bs), a.dtype)
                full[..., :blk.shape[-1], :blk.shape[-1]] = blk
                full[..., blk.shape[-1]:, blk.shape[-1]:] = np.eye(pad, dtype=a.dtype)
                blk = full
            invs.append(_invert_unit_blocks(blk, lower))
        backward = left ^ lower ^ transpose
        tr = (lambda v: np.swapaxes(v, -1, -2)) if transpose else (lambda v: v)
        x = None
        for i in range(nb):
            j = nb - 1 - i if backward else i
            size = k % bs if (k % bs and j + 1 == nb) else bs
            inv = cj(invs[j][..., :size, :size])
            hi = min((j + 1) * bs, k)
            b_row = b[..., j * bs:hi, :] if left else b[..., :, j * bs:hi]
            if i == 0:
                rem = b_row
            else:
                if backward:
                    r0, r1, c0, c1 = j * bs, hi, max(0, (nb - i) * bs), k
                else:
                    r0, r1, c0, c1 = j * bs, hi, 0, min(i * bs, k)
                if (not left) ^ transpose:
                    r0, r1, c0, c1 = c0, c1, r0, r1
                a_row = cj(a[..., r0:r1, c0:c1])
                rem = b_row - (np.matmul(tr(a_row), x) if left else np.matmul(x, tr(a_row)))
            upd = np.matmul(tr(inv), rem) if left else np.matmul(rem, tr(inv))
            if x is None:
                x = upd
            elif backward:
                x = np.concatenate([upd, x], axis=-2 if left else -1)
            else:
                x = np.concatenate([x, upd], axis=-2 if left else -1)
        return x


@evaluator("triangular-solve")
def eval_triangular_solve(inst, args, ec):
    """Solve op(a) x = b (left_side) or x op(a) = b by substitution, op(a) = a, a^T or a^H
    (transpose_a), reading only the lower/upper triangle of a and assuming a unit diagonal when
    unit_diagonal.  XLA (and we, in f64/c128): 128x128 diagonal blocks inverted by a row recurrence,
    then block substitution with matmuls, so NaN in b or a spreads further than in plain
    substitution; rounded once at the end."""
    a, b = args
    dt = np_dtype(inst.shape)
    trans = {"NO_TRANSPOSE": "N", "TRANSPOSE": "T", "ADJOINT": "C"}[str(inst.attrs.get("transpose_a"))]
    x = triangular_solve(widen_operand(a), widen_operand(b), bool(inst.attrs.get("left_side", False)),
                         bool(inst.attrs.get("lower", False)), bool(inst.attrs.get("unit_diagonal", False)),
                         trans)
    return contig(narrow_result(x, dt))


# ============================================================================ batch norm

_ADD = C.Reducer("add", 1, (("add", False),))
_TREE = 32        # XLA CPU's TreeReductionRewriter window (see hlo_cli/interpreter/computations.py)


def _xla_sum(ec, x: np.ndarray, keep: int, y: np.ndarray | None = None) -> np.ndarray:
    """XLA CPU's add-reduce of `x` over every dim but `keep` from a zero init: reduced dims
    longer than 32 first summed in windows of 32 (SAME padding), then a row-major left fold.
    With `y`: the reduce of x * y, the multiply fused into the first fold and contracted into its
    adds (acc = fma(x, y, acc)), as XLA's reduce loops compute it (hlo_cli/SEMANTICS.md)."""
    zero = np.zeros((), x.dtype)
    dims = [d for d in range(x.ndim) if d != keep]
    while any(x.shape[d] > _TREE for d in dims):
        pads, wins = [], []
        for d in range(x.ndim):
            if d in dims:
                size = x.shape[d]
                w = min(size, _TREE)
                tot = -(-size // w) * w - size
                pads.append((tot // 2, tot - tot // 2))
                wins.append(w)
            else:
                pads.append((0, 0))
                wins.append(1)
        split = [s for d in range(x.ndim) for s in (-(-x.shape[d] // wins[d]), wins[d])]
        order = [2 * d for d in range(x.ndim)] + [2 * d + 1 for d in range(x.ndim)]

        def windows(a):
            return np.transpose(np.pad(a, pads).reshape(split), order)
        xr = windows(x)
        vr = windows(np.ones(x.shape, bool))
        outs = xr.shape[:x.ndim]
        if y is None:
            x = C.fold(ec, _ADD, [np.broadcast_to(zero, outs)], [xr.reshape(outs + (-1,))],
                       vr.reshape(outs + (-1,)))[0]
        else:
            x = _fma_fold(xr.reshape(outs + (-1,)), windows(y).reshape(outs + (-1,)), vr.reshape(outs + (-1,)))
            y = None
    flat = np.moveaxis(x, keep, 0).reshape(x.shape[keep], -1)
    if y is not None:
        return _fma_fold(flat, np.moveaxis(y, keep, 0).reshape(y.shape[keep], -1), None)
    return C.fold(ec, _ADD, [np.broadcast_to(zero, (x.shape[keep],))], [flat])[0]


def _fma_fold(x: np.ndarray, y: np.ndarray, valid) -> np.ndarray:
    """Left fold over the last axis of acc = fma(x, y, acc) from +0, FTZ; positions where `valid`
    is False skipped."""
    dt = x.dtype
    acc = np.zeros(x.shape[:-1], dt)
    for j in range(x.shape[-1]):
        r = flush(np.asarray(fma_once(x[..., j], y[..., j], acc, dt)))
        acc = r if valid is None else np.where(valid[..., j], r, acc)
    return acc


class _F:
    """Elementwise ops of one float type as XLA CPU runs them: f32 (or f64) with DAZ/FTZ."""

    def __init__(self, dt):
        self.dt = dt

    def __call__(self, fn, *xs):
        with np.errstate(all="ignore"):
            r = fn(*[flush(np.asarray(x, self.dt)) for x in xs])
        return flush(np.asarray(r, self.dt))

    def fma(self, a, b, c):
        """a * b + c rounded once (XLA's contracted multiply-add, see fma_once)."""
        return self(lambda x, y, z: fma_once(x, y, z, self.dt), a, b, c)

    def rsqrt(self, x):
        with np.errstate(all="ignore"):
            r = 1.0 / np.sqrt(flush(np.asarray(x, self.dt)).astype(F64))
        return flush(round_float(np.asarray(r), self.dt) if self.dt != F64 else r)

    def const(self, v):
        return flush(round_float(np.asarray(v, F64), self.dt) if self.dt != F64 else np.asarray(v, F64))


def _bn_setup(inst, x):
    """(compute dtype, feature index, broadcast helper, element count N, 1/N, epsilon)."""
    dt = F64 if x.dtype == F64 else F32
    fi = inst.attrs["feature_index"]
    shape = [1] * x.ndim
    shape[fi] = x.shape[fi]
    f = _F(dt)
    count = int(np.prod([s for d, s in enumerate(x.shape) if d != fi], dtype=np.int64))
    n = f.const(float(np.float32(count)) if dt == F32 else float(count))
    inv_n = f(np.divide, np.ones((), dt), n)
    eps = f.const(float(np.float32(inst.attrs["epsilon"])))
    return dt, fi, (lambda v: np.reshape(v, shape)), n, inv_n, eps, f


def _bn_cast(v, dt):
    return convert(contig(v), dt)


# At convnet sizes (from C.LIBRARY_REDUCE_MIN elements) XLA CPU hands batch norm's sums to YNNPACK
# (a __ynn_fusion per reduce over every dim but the feature dim, no tree rewrite), whose order
# ynn_sum reproduces (hlo_cli/SEMANTICS.md).  Those run blocked: per-channel sums in YNNPACK's order, each block's elementwise steps in
# f32 in place while it is in cache, the blocks shared among the pool's threads (a block's result
# does not depend on the thread that made it, and block sums are added in block order).  Smaller
# inputs keep the reduce order of reduce_arrays (_xla_sum), exact where XLA folds sequentially.
_BN_BLOCK = 1 << 16          # elements per block
_BN_EXPAND = 1024            # blocks of fewer trailing elements get per-feature vectors expanded


class _Blocked:
    """An array of XLA's batch-norm shape viewed as (A, C, B) (A = dims before the feature dim,
    C = features, B = dims after), cut into blocks along A (or B when A is small)."""

    def __init__(self, shape, fi):
        self.a = int(np.prod(shape[:fi], dtype=np.int64))
        self.c = int(shape[fi])
        self.b = int(np.prod(shape[fi + 1:], dtype=np.int64))
        self.shape3 = (self.a, self.c, self.b)
        self.lead = fi                  # dims before the feature dim (YNNPACK's order: one)
        if self.a >= 8:
            step = max(1, _BN_BLOCK // max(1, self.c * self.b))
            self.blocks = [(slice(i, min(i + step, self.a)), slice(None), slice(None))
                           for i in range(0, self.a, step)]
        else:
            step = max(1, _BN_BLOCK // max(1, self.a * self.c))
            self.blocks = [(slice(None), slice(None), slice(i, min(i + step, self.b)))
                           for i in range(0, max(self.b, 1), step)]
        self.hw = hardware() is not None

    def view(self, x):
        return x.reshape(self.shape3)

    def chan(self, v, dt):
        """A per-feature vector broadcasting against a (., C, .) block."""
        return np.asarray(v, dt).reshape(1, self.c, 1)

    def wide(self, v, dt):
        """A per-feature vector as `dt` (exactly: f32 values into f64), broadcasting against a
        block; repeated over B (1, C, B) when the blocks are whole rows of a short B (NCHW's 7x7
        to 28x28), so NumPy's inner loops run over C * B contiguous elements instead of B, which is
        faster for short rows."""
        v = np.asarray(v).astype(dt).reshape(1, self.c, 1)
        if self.a >= 8 and 1 < self.b < _BN_EXPAND:
            return np.ascontiguousarray(np.broadcast_to(v, (1, self.c, self.b)))
        return v

    def run(self, fn) -> list:
        """[fn(block index) for every block], in block order, on the pool's threads, with the
        processor's FTZ/DAZ flags set when available (else fn flushes: see ftz)."""
        def part(bs):
            with np.errstate(all="ignore"):
                return [fn(ix) for ix in bs]
        parts = split(self.blocks, threads())
        res = run_parts((lambda bs: flushing(part, bs)) if self.hw else part, parts)
        return [r for rs in res for r in rs]

    def ftz(self, a):
        """Software FTZ of a block in place (a no-op under the processor's flags)."""
        if not self.hw:
            sub = subnormals(a)
            if sub is not None:
                a[sub] = np.copysign(np.zeros((), a.dtype), a[sub])
        return a

    def sums(self, dt, *fns) -> list[np.ndarray]:
        """Per-feature sums of each fn(block) (f32 or f64 terms, in that type) in YNNPACK's order
        (ynn_sum), in one sweep over the blocks: each block's k1 terms while it is in cache,
        then the rows' Kahan steps and the tiles' sums over all rows at once."""
        if not ynn_sum.known(self.b, dt.itemsize) or self.lead > 1:
            return self._f64_sums(*fns)
        if self.a < 8:                  # blocks cut the planes: the whole array in one piece
            whole = (slice(None), slice(None), slice(None))
            parts = [[ynn_sum.row_terms(self._rows(fn(whole))) for fn in fns]]
        else:
            parts = self.run(lambda ix: [ynn_sum.row_terms(self._rows(fn(ix))) for fn in fns])

        def finish(terms):
            planes = ynn_sum.finish_rows(terms).reshape(self.a, self.c)
            return ynn_sum.combine_planes(planes, self.b)
        out = []
        for k in range(len(fns)):
            terms = np.concatenate([ps[k] for ps in parts], axis=0)
            with np.errstate(all="ignore"):
                out.append(flushing(finish, terms) if self.hw else flush(finish(terms)))
        return out

    def _f64_sums(self, *fns) -> list[np.ndarray]:
        """Per-feature f64 sums of each fn(block), rounded to f32/f64 once: where YNNPACK's order
        is not known (ynn_sum.known), the closest to its accurate sums."""
        parts = self.run(lambda ix: [np.einsum("acb->c", fn(ix), dtype=F64) for fn in fns])
        totals = [np.zeros(self.c, F64) for _ in fns]
        for ps in parts:
            for t, p in zip(totals, ps):
                t += p
        return totals

    def _rows(self, block):
        """A (., C, B) block as rows of B elements (one per (a, c))."""
        return np.ascontiguousarray(block).reshape(-1, self.b)


def fma_once(a, b, c, dt, out=None) -> np.ndarray:
    """a * b + c rounded once, as XLA CPU's compiled loops compute a multiply feeding an add or
    subtract (LLVM contracts them into FMAs; hlo_cli/SEMANTICS.md).  f32: the product is exact in f64, the f64 sum's rounding error is found by TwoSum
    and a sum lying exactly halfway between two f32 values is moved towards the exact one, so the
    final rounding is correct.  f64 (no wider type at hand): two roundings.  `out`: an array of
    dtype `dt` and the result's shape to write into."""
    a, b, c = (np.asarray(v, dt) for v in (a, b, c))
    if dt != F32:
        r = np.add(np.multiply(a, b), c)
        if out is None:
            return r
        out[...] = r
        return out
    shape = np.broadcast_shapes(a.shape, b.shape, c.shape)
    s = np.empty(shape, F64)            # (casting into f64 first: NumPy's mixed-type loops are slow)
    s[...] = a
    s *= b                              # exact
    s += c
    repair_f32_midpoints(s, a, b, c)     # (rare: a sum exactly halfway between two f32 values)
    if out is None:
        return s.astype(F32)
    out[...] = s
    return out


def _at(v: np.ndarray, h: np.ndarray, shape) -> np.ndarray:
    """Elements of `v` broadcast to `shape` at the flat indices `h`, without materializing it."""
    if v.size == 1:
        return np.full(h.shape, v.reshape(-1)[0])
    if v.shape == tuple(shape):
        return v.reshape(-1)[h]
    if len(shape) == 3 and v.shape in ((1, shape[1], 1), (1, shape[1], shape[2])):   # per feature
        return v.reshape(-1)[(h // shape[2]) % shape[1] if v.shape[2] == 1 else h % (shape[1] * shape[2])]
    return np.broadcast_to(v, shape)[np.unravel_index(h, shape)]


def _fma_wide(a: np.ndarray, b: np.ndarray, c: np.ndarray, out: np.ndarray) -> np.ndarray:
    """fma_once of an f32 block `a` with f64 operands `b`, `c` holding f32 values (see _Blocked.wide),
    into the f32 block `out` (which may be `a`): the same single rounding, with no f32 -> f64
    conversions of the per-feature operands inside the loop."""
    shape = a.shape
    s = np.empty(shape, F64)
    s[...] = a
    s *= b                              # exact
    s += c
    sv = s.reshape(-1)
    mask = np.bitwise_and(sv.view(np.uint64), np.uint64((1 << 29) - 1)) == np.uint64(1 << 28)
    half = np.flatnonzero(mask) if mask.any() else None
    if half is not None:                # only there does the f64 sum's own rounding matter
        ph = a.reshape(-1)[half].astype(F64) if a.flags.c_contiguous else \
            a[np.unravel_index(half, shape)].astype(F64)
        ph *= _at(b, half, shape)
        ch = _at(c, half, shape)
        sh = sv[half]
        t = sh - ch
        e = (ph - t) + (ch - (sh - t))
        sv[half] = np.where(e != 0, np.nextafter(sh, np.where(e > 0, np.inf, -np.inf)), sh)
    out[...] = s
    return out


def _bn_fma(a, b, c, dt, out) -> np.ndarray:
    """a * b + c rounded once into the block `out`, `b` and `c` from _Blocked.wide(., F64) (c may
    also be an f32 block): _fma_wide in f32; in f64 two roundings, as fma_once."""
    if dt == F32:
        return _fma_wide(a, b, c, out)
    np.add(np.multiply(a, b), c, out=out)
    return out


def _bn_large(x) -> bool:
    return x.size >= C.LIBRARY_REDUCE_MIN


def _bn_input(x, dt):
    """x in the compute dtype, C-contiguous, DAZ applied (by the processor's flags in the blocked
    loops when available, else here; a copy only when needed)."""
    w = np.asarray(x)
    w = contig(w if w.dtype == dt else w.astype(dt))
    return w if hardware() is not None else flush(w)


@evaluator("batch-norm-training")
def eval_batch_norm_training(inst, args, ec):
    """(scale * (x - mean) / sqrt(var + epsilon) + offset, mean, var) with mean and var over every
    dim but feature_index.  XLA: the one-pass variance E[x^2] - E[x]^2, sums in reduce order,
    rsqrt approximate (see the module docstring)."""
    x, scale, offset = args
    dt, fi, b, n, inv_n, eps, f = _bn_setup(inst, x)
    if not _bn_large(x):
        return _bn_training_small(x, scale, offset, dt, fi, b, n, inv_n, eps, f, ec)
    sw, ow = (flush(np.asarray(v).astype(dt)) for v in (scale, offset))
    xw = _bn_input(x, dt)
    bl = _Blocked(xw.shape, fi)
    x3 = bl.view(xw)

    def square(ix):
        xb = x3[ix]
        return bl.ftz(np.multiply(xb, xb))
    order = _bn_layout(ec, inst, bl, xw.ndim, 0, dt.itemsize)
    stats = None                        # sum_squared: x * x in the call's loop, then summed
    if order is not None:
        stats = _bn_layout_sums(xw, fi, order, bl, lambda p: np.multiply(p, p, out=p), False)
    if stats is None:
        stats = bl.sums(dt, lambda ix: x3[ix], square)
    sum_x, sum_x2 = (f.const(v) for v in stats)
    mean = f(np.multiply, sum_x, inv_n)
    var = f.fma(sum_x2, inv_n, f(np.negative, f(np.multiply, mean, mean)))
    rs = f.rsqrt(f(np.add, var, eps))
    mb, rb = (bl.wide(v, dt) for v in (mean, rs))
    sb, ob = (bl.wide(v, F64) for v in (sw, ow))
    y = np.empty(bl.shape3, dt)

    def normalize(ix):
        o = y[ix]
        np.subtract(x3[ix], mb, out=o)
        bl.ftz(o)
        o *= rb
        bl.ftz(o)
        _bn_fma(o, sb, ob, dt, o)               # scale * ((x - mean) * rs) + offset, one rounding
        bl.ftz(o)
    bl.run(normalize)
    return (_bn_cast(y.reshape(x.shape), x.dtype), _bn_cast(mean, x.dtype), _bn_cast(var, x.dtype))


def _bn_physical_order(ec, inst, k: int = 0) -> list[int] | None:
    """The order (major to minor) in which XLA CPU lays out operand `k` of a batch norm when that
    differs from its row-major dims: a convolution's result is [batch, spatial..., feature] (its
    ConvCanonicalization; a transpose back to the written dims becomes a layout), e.g. NCHW
    f32[96,96,112,112] is reduced as NHWC f32[96,112,112,96] (hlo_cli/SEMANTICS.md, "YNNPACK").
    The layout comes from the nearest of the operand's sources through ops of its dims (as
    select, add, a batch norm's results), breadth first: a convolution gives its order, a
    parameter (row-major) or nothing found within 6 steps gives None."""
    comp = next((c for c in ec.module.computations if c.by_name.get(inst.name) is inst), None)
    if comp is None:
        return None
    dims = comp.by_name[inst.operands[k]].shape.dims
    frontier, seen = [inst.operands[k]], set()
    for _ in range(6):
        nxt = []
        for name in frontier:
            src = comp.by_name.get(name)
            if src is None or name in seen:
                continue
            seen.add(name)
            if src.opcode == "get-tuple-element":       # a batch norm's result: its operand's layout
                tup = comp.by_name.get(src.operands[0])
                if tup is not None and tup.opcode.startswith("batch-norm") and src.shape.dims == dims:
                    nxt.append(tup.operands[0])
                continue
            if src.shape.dims != dims:
                continue
            if src.opcode == "parameter":
                return None
            if src.opcode == "convolution":
                dn = src.attrs.get("dim_labels")
                order = [dn.output_batch_dimension, *dn.output_spatial_dimensions, dn.output_feature_dimension]
                return order if sorted(order) == list(range(len(dims))) else None
            if src.opcode in ("broadcast", "constant", "iota"):
                continue
            nxt += list(src.operands)
        frontier = nxt
    return None


def _bn_layout(ec, inst, bl, ndim: int, k: int = 0, itemsize: int = 4) -> list[int] | None:
    """The dim order in which batch norm's sums must be taken over XLA's layout of operand `k`
    (`_bn_physical_order`, else row-major), or None where the blocked sums already give them
    (row-major with at most one dim before the feature dim, rows within a tile, XLA's pool of
    several threads)."""
    order = _bn_physical_order(ec, inst, k) or list(range(ndim))
    if (order == list(range(ndim)) and bl.lead <= 1 and ynn_sum.known(bl.b, itemsize)
            and ynn_sum.xla_threads() > 1):
        return None
    return order


def _bn_layout_sums(first, fi, order, bl, second, fused):
    """Per-feature sums of `first` and of second(p) (p: `first` in the layout `order`, which
    `second` overwrites in place with the second term) in YNNPACK's order over that layout;
    `fused`: the second term's elementwise op is in the sum's YNNPACK call (ynn_sum.tiled_sum).
    None where YNNPACK's order is not known (ynn_sum.reduce_sum declines)."""
    dims = [d for d, src in enumerate(order) if src != fi]

    def sums(x):
        phys = np.transpose(x, order).copy()       # (a copy: overwritten below)
        with np.errstate(all="ignore"):
            s1 = ynn_sum.reduce_sum(phys, dims)
            if s1 is None:
                return None
            s2 = ynn_sum.reduce_sum(bl.ftz(second(phys)), dims, fused=fused)
        return None if s2 is None else [bl.ftz(s1), bl.ftz(s2)]
    return flushing(sums, first) if bl.hw else sums(first)


def _bn_training_small(x, scale, offset, dt, fi, b, n, inv_n, eps, f, ec):
    xw, sw, ow = (np.asarray(v).astype(dt) for v in (x, scale, offset))
    xw = flush(xw)
    sum_x = _xla_sum(ec, xw, fi)
    sum_x2 = _xla_sum(ec, xw, fi, xw)
    mean = f(np.multiply, sum_x, inv_n)
    var = f.fma(sum_x2, inv_n, f(np.negative, f(np.multiply, mean, mean)))
    rs = f.rsqrt(f(np.add, var, eps))
    y = f.fma(f(np.multiply, f(np.subtract, xw, b(mean)), b(rs)), b(sw), b(ow))
    return (_bn_cast(y, x.dtype), _bn_cast(mean, x.dtype), _bn_cast(var, x.dtype))


@evaluator("batch-norm-inference")
def eval_batch_norm_inference(inst, args, ec):
    """scale * (x - mean) / sqrt(variance + epsilon) + offset per feature.  XLA: computed as
    x * (scale * rsqrt(var + eps)) + (offset - mean * scale * rsqrt(var + eps))."""
    x, scale, offset, mean, var = args
    dt, fi, b, n, inv_n, eps, f = _bn_setup(inst, x)
    sw, ow, mw, vw = (flush(np.asarray(v).astype(dt)) for v in (scale, offset, mean, var))
    true_scale = f(np.multiply, sw, f.rsqrt(f(np.add, vw, eps)))
    true_shift = f.fma(f(np.negative, mw), true_scale, ow)
    xw = _bn_input(x, dt)
    bl = _Blocked(xw.shape, fi)
    x3 = bl.view(xw)
    tb, hb = bl.wide(true_scale, F64), bl.wide(true_shift, F64)
    y = np.empty(bl.shape3, dt)

    def affine(ix):
        o = y[ix]
        _bn_fma(x3[ix], tb, hb, dt, o)
        bl.ftz(o)
    bl.run(affine)
    return _bn_cast(y.reshape(x.shape), x.dtype)


@evaluator("batch-norm-grad")
def eval_batch_norm_grad(inst, args, ec):
    """(grad operand, grad scale, grad offset) of batch-norm-training given the batch mean and
    variance.  XLA: grad_x = (scale * rsqrt(var+eps) * (1/N)) * ((g * N - sum(g)) -
    sum(g * (x - mean)) * (x - mean) * (1 / (var + eps))); grad_scale = sum(g * (x - mean)) *
    rsqrt(var + eps); grad_offset = sum(g)."""
    x, scale, mean, var, g = args
    dt, fi, b, n, inv_n, eps, f = _bn_setup(inst, x)
    if not _bn_large(x):
        return _bn_grad_small(x, scale, mean, var, g, dt, fi, b, n, inv_n, eps, f, ec)
    sw, mw, vw = (flush(np.asarray(v).astype(dt)) for v in (scale, mean, var))
    ve = f(np.add, vw, eps)
    rs = f.rsqrt(ve)
    inv = f(np.divide, np.ones((), dt), ve)
    xw, gw = _bn_input(x, dt), _bn_input(g, dt)
    bl = _Blocked(xw.shape, fi)
    x3, g3 = bl.view(xw), bl.view(gw)
    mb = bl.wide(mw, dt)

    gx = np.empty(bl.shape3, dt)

    def x_m(ix):                        # x - mean kept in the result block for the second sweep
        xm = gx[ix]
        np.subtract(x3[ix], mb, out=xm)
        return bl.ftz(xm)

    def g_xm(ix):                       # g * (x - mean), each step rounded (and flushed) in dt
        return bl.ftz(np.multiply(x_m(ix), g3[ix]))
    order, stats = _bn_layout(ec, inst, bl, xw.ndim, 4, dt.itemsize), None
    if order is not None:               # XLA's layout (g's): g * (x - mean) multiplied in the sum's call
        bl.run(x_m)
        xm_t = np.transpose(gx.reshape(xw.shape), order)
        stats = _bn_layout_sums(gw, fi, order, bl, lambda p: np.multiply(p, xm_t, out=p), True)
    if stats is None:
        stats = bl.sums(dt, lambda ix: g3[ix], g_xm)
    sum_g, sum_gxm = (f.const(v) for v in stats)
    grad_scale = f(np.multiply, sum_gxm, rs)
    coef = f(np.multiply, f(np.multiply, sw, rs), inv_n)
    cb, sxb = (bl.wide(v, dt) for v in (coef, sum_gxm))
    nsgb, nib = bl.wide(f(np.negative, sum_g), F64), bl.wide(f(np.negative, inv), F64)
    nn = np.asarray(n, F64)

    def grad(ix):
        o = gx[ix]                              # holds x - mean
        t = np.multiply(o, sxb)                 # sum(g * (x - mean)) * (x - mean)
        bl.ftz(t)
        _bn_fma(g3[ix], nn, nsgb, dt, o)        # g * N - sum(g), one rounding
        bl.ftz(o)
        _bn_fma(t, nib, o, dt, o)               # ... - that * 1 / (var + eps), one rounding
        # (-t * inv = t * -inv exactly: rounding is symmetric, so the negation moves to inv)
        bl.ftz(o)
        np.multiply(cb, o, out=o)
        bl.ftz(o)
    bl.run(grad)
    return (_bn_cast(gx.reshape(x.shape), x.dtype), _bn_cast(grad_scale, x.dtype), _bn_cast(sum_g, x.dtype))


def _bn_grad_small(x, scale, mean, var, g, dt, fi, b, n, inv_n, eps, f, ec):
    xw, sw, mw, vw, gw = (flush(np.asarray(v).astype(dt)) for v in (x, scale, mean, var, g))
    ve = f(np.add, vw, eps)
    rs = f.rsqrt(ve)
    inv = f(np.divide, np.ones((), dt), ve)
    xm = f(np.subtract, xw, b(mw))
    sum_g = _xla_sum(ec, gw, fi)
    sum_gxm = _xla_sum(ec, gw, fi, xm)
    grad_scale = f(np.multiply, sum_gxm, rs)
    coef = f(np.multiply, f(np.multiply, sw, rs), inv_n)
    i6 = f.fma(f(np.negative, f(np.multiply, b(sum_gxm), xm)), b(inv), f.fma(gw, n, f(np.negative, b(sum_g))))
    gx = f(np.multiply, b(coef), i6)
    return (_bn_cast(gx, x.dtype), _bn_cast(grad_scale, x.dtype), _bn_cast(sum_g, x.dtype))


# ============================================================================ prepare stages
# (registry.prepare: once per instruction at compile time; kernels.py)

@prepares("dot")
def _prepare_dot(inst, ops, st):
    """f32 and f64 dots: the rule's arithmetic (f32 accumulated in f64, XLA's -0 rule, FTZ) with
    the dimension bookkeeping done once.  Under GPU numerics, a TF32 dot is the same step on the
    operands rounded to TF32 (numerics.py); split algorithms run the rule."""
    dt = shape_dtype(inst)
    if dt not in TINY or any(d != dt for d in operand_dtypes(ops, st)):
        return None
    mode, gen = numerics.module_mode(st.module)
    alg = numerics.instruction_algorithm(inst, gen) if mode == "gpu" else None
    if alg is not None:
        if alg != "dot_tf32_tf32_f32":
            return None                          # GPU numerics split its products: the rule
        fast = _prepare_dot_plain(inst, ops, st, dt)     # TF32 products: this dot of the rounded operands
        if fast is None:
            return None
        plain = fast.fn

        def tf32(x, y):                          # (rounding keeps operands free of subnormals)
            return plain(numerics.round_tf32(x), numerics.round_tf32(y))
        return Fast(tf32, clean=fast.clean)
    return _prepare_dot_plain(inst, ops, st, dt)


def _prepare_dot_plain(inst, ops, st, dt):
    """_prepare_dot's step for the plain products of `dt` (f32/f64) operands."""
    ls, rs = st.node(ops[0]).shape.dims, st.node(ops[1]).shape.dims
    lb, lc = (tuple(inst.attrs.get(n) or ()) for n in ("lhs_batch_dims", "lhs_contracting_dims"))
    rb, rc = (tuple(inst.attrs.get(n) or ()) for n in ("rhs_batch_dims", "rhs_contracting_dims"))
    lf = [d for d in range(len(ls)) if d not in lb and d not in lc]
    rf = [d for d in range(len(rs)) if d not in rb and d not in rc]
    lperm, rperm = tuple(list(lb) + lf + list(lc)), tuple(list(rb) + list(rc) + rf)

    def prod(dims):
        n = 1
        for d in dims:
            n *= d
        return n
    b, m, k = prod(ls[d] for d in lb), prod(ls[d] for d in lf), prod(ls[d] for d in lc)
    n = prod(rs[d] for d in rf)
    if k < 2:                                    # one-term and empty sums: the rule
        return None
    l3, r3, res = (b, m, k), (b, k, n), tuple(inst.shape.dims)
    daz_a, daz_b = not st.is_clean(ops[0]), not st.is_clean(ops[1])
    wide = dt == F32 and not f32_blas(b, m, k, n)
    zero = dt.type(0)

    def fn(x, y):
        x = x.transpose(lperm).reshape(l3)
        y = y.transpose(rperm).reshape(r3)
        if daz_a:
            x = flush(x)
        if daz_b:
            y = flush(y)
        if wide:
            out = matmul(x.astype(F64), y.astype(F64))
            out += zero                          # a sum of two or more terms never ends at -0
            out = flush(out.astype(F32))
        else:
            out = matmul(x, y)
            out += zero
            out = flush(out)
        return out.reshape(res)

    def fn_hw(x, y):                             # large f32: the processor flushes, as in XLA
        out = matmul(x.transpose(lperm).reshape(l3), y.transpose(rperm).reshape(r3), True)
        out += zero
        return out.reshape(res)
    if dt == F32 and not wide and hardware() is not None:
        return Fast(fn_hw, clean=True)
    if wide and hardware_casts():
        # small f32: the conversions to f64 read subnormals as zeros with the processor's DAZ
        # flag set (hardware_casts checked it does what flush does); the result is rounded to
        # f32 and flushed as the rule does (x86's own FTZ on that conversion detects tininess
        # before rounding to the subnormal grid, which flushes a few more values)
        fset, on, off = hardware()
        lkeep, rkeep = lperm == tuple(range(len(ls))), rperm == tuple(range(len(rs)))

        mm = np.matmul if b * m * k * n < SPLIT_MIN_MACS else matmul    # (what matmul calls then)

        def fn_cast(x, y):
            x = x.reshape(l3) if lkeep else x.transpose(lperm).reshape(l3)
            y = y.reshape(r3) if rkeep else y.transpose(rperm).reshape(r3)
            fset(on)
            try:
                x, y = x.astype(F64), y.astype(F64)
            finally:
                fset(off)
            out = mm(x, y)
            out += zero
            return flush(out.astype(F32)).reshape(res)
        if mm is np.matmul:                      # (loopgen.py: the same product, its casts hoisted)
            declare(fn_cast, raw_dot=(lperm if not lkeep else None, l3, rperm if not rkeep else None, r3, res))
        return Fast(fn_cast, clean=True)
    return Fast(fn, clean=True)
