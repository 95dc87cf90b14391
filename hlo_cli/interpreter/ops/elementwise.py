"""Elementwise evaluation rules: unary and binary arithmetic, select, clamp and compare.

The arithmetic rules are one line each from the factories ``unary`` and ``binary``, which do the
dtype handling in one place (convert.py holds the numeric machinery they rest on; what XLA CPU
computes is in hlo_cli/SEMANTICS.md):

* floats compute in f32 (f16, bf16) or f64 and are rounded back once per op, f8/f6/f4 ops run as
  f16 ops, e8m0 in f32; f32/f64 operands (and so bf16 ones, whose denormals are f32 denormals) are
  read with XLA CPU's DAZ and results written with its FTZ, unless the rule passes
  ``**KEEP_DENORMALS`` (bit operations, and library routines that return tiny arguments untouched);
  NaN results get the sign XLA's code gives them (``nan=``, see _nan_signs);
* complex numbers compute in c64/c128, their parts flushed the same way;
* integers compute in a NumPy dtype that holds them (int8/uint8 for the 1/2/4-bit types) and wrap to
  their width; functions that depend on the width are marked ``@typed`` and get the element type
  first;
* pred is NumPy bool.

Each rule's docstring gives the semantics and, after "XLA:", what XLA CPU does where NumPy or
intuition differ; tests/programs/elementwise records each such case as a program with XLA's output.
"""
from __future__ import annotations

import threading

import numpy as np

from ...errors import HloEvalError
from ...ir.attributes import comparison_type
from ..computations import weak_from_total
from .. import hwfma
from ..fpenv import hardware
from ..kernels import (
    PROBE_BITS, TINY, Fast, factory_rule, flush, hardware_casts, lone_value, min_reduce, minmax_keeps_nan, probed,
    operand_dtypes, probe_results, scalar_safe, shape_dtype, declare)
from ..registry import evaluator, prepares, rule_for
from ..values import np_dtype
from ..parallel import split
from .convert import (
    BF16, E8M0, F16, F32, F64, SINT_OF_BITS, TABLE_MIN, UINT_OF_BITS, by_table, convert, etype, int_compute, int_range, kind,
    round_float, signed_bits, unsigned_bits, widen_float, wrap_int,
)

FLOAT, COMPLEX, INT, PRED = "float", "complex", "int", "pred"      # INT: signed and unsigned
KEEP_DENORMALS = dict(daz=False, ftz=False)


def typed(fn):
    """Mark a function that takes the operands' element type first (integer functions that depend
    on the width, float functions that round intermediates)."""
    fn.typed = True
    return fn


def _domain(dtype) -> str:
    k = kind(dtype)
    return INT if k in ("int", "uint") else k


def _call(fn, et, xs):
    return fn(et, *xs) if getattr(fn, "typed", False) else fn(*xs)


# NaN results fewer than 1 in SPARSE_NAN_SHARE of the elements: only their positions are gathered
SPARSE_NAN_SHARE = 8
# the NaN rule of most float ops: a NaN operand's sign kept, x86's default NaN (sign set) made
DEFAULT_NAN = ("keep", "-")


def _nan_signs(r, xs, et, nan):
    """Give NaN results the sign XLA's code produces.  `nan` = (input, invalid): a NaN operand comes
    out with its sign kept ("keep"), flipped ("flip") or forced ("+"/"-"); a NaN made from non-NaN
    operands (sqrt(-1), sin(inf)) gets `invalid` ("-" is x86's default NaN).  `nan` may also be a
    function of the element type returning that pair.  Few NaN results: computed at their
    positions only (gathered), else over the whole arrays."""
    rule_in, rule_invalid = nan(et) if callable(nan) else nan
    out = np.isnan(r)
    count = int(np.count_nonzero(out))
    if not count:
        return r
    if rule_in == "keep2":                             # atan2(y, x): x's NaN wins
        rule_in, xs = "keep", xs[::-1]
    if count * SPARSE_NAN_SHARE < out.size:
        res = np.array(r)
        res[out] = _signed_nans(res[out], [np.broadcast_to(x, r.shape)[out] for x in xs], rule_in, rule_invalid)
        return res
    return np.where(out, _signed_nans(r, xs, rule_in, rule_invalid), r)


def _signed_nans(r, xs, rule_in: str, rule_invalid: str):
    """`r` (its NaN) with the sign _nan_signs gives them: the first NaN operand's under `rule_in`,
    `rule_invalid`'s where no operand is NaN."""
    x = xs[0]
    src_nan = np.isnan(x)
    for y in xs[1:]:                                   # binary ops: the first NaN operand propagates
        x = np.where(src_nan, x, y)
        src_nan = src_nan | np.isnan(y)
    mag = np.abs(r)
    sign_in = {"keep": np.signbit(x), "flip": ~np.signbit(x), "+": False, "-": True}[rule_in]
    return np.where(np.where(src_nan, sign_in, rule_invalid == "-"), -mag, mag)


# ----------------------------------------------------------------------------- bf16/f16 at size
# bf16 and f16 add, subtract, multiply, divide, maximum and minimum, when the processor's FTZ/DAZ
# flags can be set (fpenv.hardware): widen to f32 (exact: ml_dtypes' and NumPy's casts), run the
# f32 ufunc under the flags, as XLA CPU does (DAZ reads bf16 subnormals, which are f32 ones, as
# zeros; FTZ flushes the f32 result), and round back to nearest even with the same cast the rule
# uses.  One pass (the minimum of the result, or of its magnitude for maximum/minimum) finds the
# results the rule must decide: a NaN (its sign), and for maximum/minimum a zero or a value below
# the smallest normal f32 (signed zeros, flushed operands); the generic path then recomputes the
# block.  Large arrays go in cache-sized blocks, shared among the threads (parallel.py).

NARROW_BLOCK = 1 << 16                  # elements per block
_NARROW_SPLIT = 1 << 20                 # from this size on, blocks and threads
_NARROW_UFUNCS = {"add": np.add, "subtract": np.subtract, "multiply": np.multiply, "divide": np.divide,
                  "maximum": np.maximum, "minimum": np.minimum}
_NARROW = frozenset({BF16, F16})
_MIN_NORMAL = np.float32(2.0 ** -126)
_ONE = np.float32(1)
_min_reduce = np.minimum.reduce


def _narrow_block(ufunc, minmax, hw, a, b, dst, out=None):
    """One block; False when the generic path must decide (see above)."""
    x = _widen32(a)
    y = _widen32(b)
    fset, on, off = hw
    fset(on)
    try:
        r = ufunc(x, y) if minmax else ufunc(x, y, out=x if x.ndim or not y.ndim else y)
    finally:
        fset(off)
    if r.size:
        if minmax:
            low = _min_reduce(np.abs(r), axis=None)
            if not low >= _MIN_NORMAL:              # a zero, a subnormal operand, or NaN
                if low != low:
                    return False
                r = _signed_zeros(ufunc, hw, x, y)
        else:
            low = _min_reduce(r, axis=None)
            if low != low:                          # NaN (minimum propagates it)
                return False
    if out is None:
        return r.astype(dst)
    out[...] = r.astype(dst)      # (ml_dtypes' casts take no out=)
    return True


def _widen32(a):
    """bf16 -> f32 with ml_dtypes' cast (a shift); f16 -> f32 through the table of all 65536
    values (cheaper than NumPy's cast, which gives the same bits)."""
    if a.dtype == F16 and a.size >= TABLE_MIN:
        return np.take(_f16_table(), a.view(np.uint16))
    return a.astype(F32)


_F16_TABLE = []


def _f16_table():
    if not _F16_TABLE:
        t = np.arange(1 << 16, dtype=np.uint16).view(F16).astype(F32)
        t.flags.writeable = False
        _F16_TABLE.append(t)
    return _F16_TABLE[0]


def _signed_zeros(ufunc, hw, x, y):
    """maximum/minimum of NaN-free f32 x, y as the rule has them: operands flushed (x * 1 under
    DAZ/FTZ keeps the sign), max(-0, +0) = +0 and min(-0, +0) = -0."""
    fset, on, off = hw
    fset(on)
    try:
        np.multiply(x, _ONE, out=x)
        np.multiply(y, _ONE, out=y)
    finally:
        fset(off)
    r = ufunc(x, y)
    both = (x == 0) & (y == 0)
    if both.any():
        z = x + y if ufunc is np.maximum else -((-x) + (-y))
        np.copyto(r, z, where=both)
    return r


def narrow_binary(opcode: str, a: np.ndarray, b: np.ndarray, dst):
    """The bf16/f16 fast path of a binary op (see above): the result, or None where the generic
    path must compute it (no FTZ/DAZ flags, other types, NaN or zero results as said)."""
    from ..parallel import run_parts, threads
    dst = np.dtype(dst)
    ufunc = _NARROW_UFUNCS.get(opcode)
    if ufunc is None or dst not in _NARROW or a.dtype != dst or b.dtype != dst or a.shape != b.shape:
        return None
    hw = hardware()
    if hw is None:
        return None
    minmax = opcode in ("maximum", "minimum")
    shape, n = a.shape, a.size
    a = _scalar_view(a)
    if a.ndim or len(shape) == 0:
        b = _scalar_view(b)
    rows = shape[0] if shape else 1
    inner = n // rows if rows else 0
    if n < _NARROW_SPLIT or rows < 2 or inner > NARROW_BLOCK:
        r = _narrow_block(ufunc, minmax, hw, a, b, dst)
        return None if r is False else r
    out = np.empty(shape, dst)
    step = max(1, NARROW_BLOCK // inner)          # blocks of whole rows (views of any layout)
    blocks = [slice(i, min(i + step, rows)) for i in range(0, rows, step)]

    def at(x, s):
        return x if x.ndim == 0 else x[s]

    def part(ss):
        for s in ss:
            if not _narrow_block(ufunc, minmax, hw, at(a, s), at(b, s), dst, out[s]):
                return False
        return True
    # never from the pool's own threads (named "hlo_N"): a part waiting for the pool there could
    # wait for itself
    nt = 1 if threading.current_thread().name.startswith("hlo") else threads()
    if all(run_parts(part, split(blocks, nt))):
        return out
    return None


def _scalar_views(a: np.ndarray, b: np.ndarray):
    """(a, b) of one shape with at most one of them made a 0-d scalar view (see below)."""
    a2 = _scalar_view(a)
    return (a2, b) if a2.ndim != a.ndim else (a, _scalar_view(b))


def _scalar_view(x: np.ndarray) -> np.ndarray:
    """A broadcast scalar (every stride 0, e.g. the zeros of a ReLU) as a 0-d array, which the
    ufuncs broadcast without widening a full block of copies."""
    if x.ndim and x.size and not any(x.strides):
        return x.reshape(-1)[:1].reshape(())
    return x


def _apply(opcode: str, impls: dict, args, out_dtype: np.dtype, daz, ftz: bool, nan=None, origin=None):
    """One elementwise op: pick the implementation for the operands' kind, compute in the wide
    dtype, and bring the result back to the declared dtype.  `daz` is a bool or one per operand."""
    et = etype(args[0].dtype)
    dom = _domain(args[0].dtype)
    fn = impls.get(dom)
    if fn is None:
        raise HloEvalError(f"{opcode} is not defined on {et}")
    if len(args) == 2 and out_dtype in _NARROW and opcode in _NARROW_UFUNCS:
        with np.errstate(all="ignore"):
            r = narrow_binary(opcode, args[0], args[1], out_dtype)
        if r is not None:
            return r
    if dom == FLOAT and et.bits <= 8 and args[0].dtype != E8M0:
        # XLA CPU runs f8/f6/f4 ops as f16 ops: widen (exactly), compute as f16, round to the type
        big = args[0].size >= TABLE_MIN
        r = _apply(opcode, impls, [by_table(a, F16, "widen16") if big else widen_float(a).astype(F16)
                                   for a in args],
                   F16 if kind(out_dtype) == "float" else out_dtype, daz, ftz, nan, origin=et)
        if kind(out_dtype) != "float":
            return r
        return convert(r, out_dtype) if big and r.dtype == F16 else round_float(r, out_dtype)
    with np.errstate(all="ignore"):
        if dom == FLOAT or dom == COMPLEX:
            xs = [widen_float(a) for a in args]
            if len(args) == 1 and args[0].dtype == E8M0:
                daz = False       # XLA reads e8m0's 2^-127 as a constant LLVM folds without DAZ
            if not isinstance(daz, tuple):
                daz = (daz,) * len(xs)
            xs = [flush(x) if d else x for x, d in zip(xs, daz)]
            r = np.asarray(_call(fn, origin if origin is not None and getattr(fn, "own_type", False) else et, xs))
            if ftz and r.dtype.kind in "fc":
                r = flush(r)
            if nan is not None and r.dtype.kind == "f" and xs[0].dtype.kind == "f":
                r = _nan_signs(r, xs, origin or et, nan)
            if r.dtype == out_dtype:
                return r
            if kind(out_dtype) == "float":
                return round_float(r, out_dtype, origin=args[0].dtype)
            return r.astype(out_dtype)
        if dom == INT:
            r = np.asarray(_call(fn, et, [int_compute(a) for a in args]))
            return r.astype(out_dtype) if out_dtype.kind == "b" else wrap_int(r, out_dtype)
        r = np.asarray(fn(*args))                                       # pred
        return r if r.dtype == out_dtype else r.astype(out_dtype)


def unary(opcode: str, fn, kinds=FLOAT, *, daz=True, ftz: bool = True, nan=DEFAULT_NAN, doc: str):
    """Register `opcode` as `fn` applied elementwise: `fn` serves `kinds`, or is a {kind: fn} dict.
    `nan` says which sign NaN results get (see _nan_signs; None leaves NumPy's)."""
    if not isinstance(fn, dict):
        fn = {k: fn for k in ((kinds,) if isinstance(kinds, str) else kinds)}
    impls = dict(fn)

    def rule(inst, args, ec):
        return np.asarray(_apply(opcode, impls, args, np_dtype(inst.shape), daz, ftz, nan))
    rule.__name__ = rule.__qualname__ = "eval_" + opcode.replace("-", "_")
    rule.__doc__ = doc
    rule.ftz_result = ftz                   # results hold no subnormals (the compiler's "clean")
    rule.nan_rule = nan                     # the NaN signs (_nan_signs), for the prepare stages
    rule.elementwise = True                 # element i of the result depends on element i only
    evaluator(opcode)(rule)
    return rule


def binary(opcode: str, fn, kinds=FLOAT, *, daz=True, ftz: bool = True, nan=DEFAULT_NAN, doc: str):
    """Register a binary elementwise `opcode` (operand shapes already agree in checked IR)."""
    return unary(opcode, fn, kinds, daz=daz, ftz=ftz, nan=nan, doc=doc)


# ============================================================================= helpers: floats

def _f64(f):
    """`f` evaluated in f64 and rounded once for f32 operands: XLA's f32 routines sit within an ulp
    or two of the correctly rounded result, which this matches more often than NumPy's f32 code.
    (Narrow types keep NumPy's f32 evaluation, whose rounding to them matches XLA's best.)"""
    @typed
    def g(et, *xs):
        if et.name == "f32":
            return np.asarray(f(*[x.astype(F64) for x in xs])).astype(F32)
        return f(*xs)
    g.__name__ = getattr(f, "__name__", "f64")
    return g


_exp, _log, _log1p, _sin, _cos, _tan = (_f64(f) for f in (np.exp, np.log, np.log1p, np.sin, np.cos, np.tan))

def _log_nan(et):
    """XLA's own f32 log (also behind bf16 and f8) gives -NaN for every NaN result; f64 (glibc) keeps
    a NaN operand's sign and makes +NaN for x < 0; f16 (libm logf) keeps the sign, makes -NaN."""
    return {"f64": ("keep", "+"), "f16": ("keep", "-")}.get(et.name, ("-", "-"))


def _log1p_nan(et):
    return ("keep", "+") if et.name == "f64" else ("-", "-")


def _sign_float(x):
    return np.where(np.isnan(x) | (x == 0), x, np.copysign(np.ones((), x.dtype), x))


def _round_afz(x):
    t = np.trunc(x)                                        # x - t is exact: no x + 0.5 rounding
    return np.where(np.abs(x - t) >= 0.5, t + np.copysign(np.ones((), x.dtype), x), t)


def _fmax(a, b):
    """max(-0, +0) = +0; a NaN x wins; a NaN y loses its sign unless x is negative (sign AND)."""
    r = np.where((a == 0) & (b == 0), a + b, np.maximum(a, b))
    return np.where(np.isnan(a), a, np.where(np.isnan(b), np.where(np.signbit(a), b, np.abs(b)), r))


def _fmin(a, b):
    """min(-0, +0) = -0; a NaN x wins; a NaN y gets a sign if x is negative (sign OR)."""
    r = np.where((a == 0) & (b == 0), -((-a) + (-b)), np.minimum(a, b))
    return np.where(np.isnan(a), a, np.where(np.isnan(b), np.where(np.signbit(a), -np.abs(b), b), r))


@typed
def _fmax_typed(et, a, b):
    """XLA CPU's f16 maximum gives the quiet NaN 0x7E00 for every NaN result, whatever the
    operands' NaNs (measured; the f8 types' maximum, run as f16, keeps the rule's signs)."""
    return _canonical_nan(et, _fmax(a, b))


@typed
def _fmin_typed(et, a, b):
    return _canonical_nan(et, _fmin(a, b))


_fmax_typed.own_type = _fmin_typed.own_type = True       # et: the operands' type, not f8's f16


def _canonical_nan(et, r):
    if et.name != "f16":
        return r
    nan = np.isnan(r)
    return np.where(nan, np.array(np.nan, r.dtype), r) if nan.any() else r


def _sqrt(x):
    return np.sqrt(flush(x))          # flush here too: e8m0's 2^-127 skips the factory's DAZ


@typed
def _rsqrt(et, x):
    return _f64(lambda v: 1 / np.sqrt(v))(et, flush(x))


@typed
def _tanh(et, x):
    return _f64(np.tanh)(et, flush(x) if x.dtype == F64 else x)


def _cbrt(x):
    """XLA CPU calls glibc's cbrtf under DAZ, which returns -5.5951735e-16 for every f32 denormal."""
    if x.dtype == F32:                     # f64 then rounded: NumPy's own cbrtf is not correctly rounded
        denormal = (x != 0) & (np.abs(x) < np.finfo(F32).tiny)
        return np.where(denormal, np.float32(-5.5951735e-16), np.cbrt(x.astype(F64)).astype(F32))
    return np.cbrt(flush(x))


@typed
def _expm1(et, x):
    """f16 (and the f8 types run as f16): XLA's expansion in f16, each step rounded: exp(x) - 1 for
    |x| > 0.5, else tanh(x/2) * (exp(x) + 1), and x itself when x/2 underflows."""
    if et.name != "f16" or x.dtype.kind == "c":
        return _f64(np.expm1)(et, x)

    def back(v):
        return v.astype(F16).astype(x.dtype)
    e = back(np.exp(x))
    half = back(x * x.dtype.type(0.5))
    small = back(back(np.tanh(half)) * back(e + 1))
    return np.where(np.abs(x) > 0.5, back(e - 1), np.where(half == 0, x, small))


@typed
def _logistic(et, x):
    if et.name != "f16" or x.dtype.kind == "c":             # bf16/f8 widen to f32 before expansion
        return 1 / (1 + np.exp(-x))

    def back(v):                                            # round to f16 and widen again
        return round_float(v, et.numpy).astype(x.dtype)
    return 1 / back(1 + back(np.exp(-x)))


@typed
def _atan2(et, y, x):
    """Zero tests see the raw operands (atan2(denormal, 0) = +-pi/2, atan2(denormal, 1) = the
    denormal), the arithmetic the flushed ones."""
    r = flush(_f64(np.arctan2)(et, flush(y), flush(x)))
    r = np.where((x == 0) & (y != 0) & ~np.isnan(y), np.copysign(np.array(np.pi / 2, y.dtype), y), r)
    return np.where((x == 1) & (y != 0) & (np.abs(y) < np.finfo(y.dtype).tiny), y, r)


def _erf(x):
    """Maclaurin series for |x| < 2.5, Lentz's continued fraction for erfc beyond (the loops run
    over terms, never elements); computed in f64."""
    w = x.astype(np.float64)
    small = np.abs(w) < 2.5
    xs = np.where(small, w, 0.0)
    term, total, x2 = xs.copy(), xs.copy(), xs * xs
    for n in range(1, 80):
        term = -term * x2 / n
        total = total + term / (2 * n + 1)
    series = total * (2 / np.sqrt(np.pi))
    a = np.where(small, 3.0, np.abs(w))
    f = np.zeros_like(a)
    for k in range(120, 0, -1):
        f = (k / 2) / (a + f)
    tail = np.copysign(1 - np.exp(-a * a) / np.sqrt(np.pi) / (a + f), w)
    r = np.where(small, series, tail)
    return np.where(np.isnan(w) | (w == 0), w, r).astype(x.dtype)


# ============================================================================= helpers: complex

def _complex(re, im):
    out = np.empty(np.broadcast(re, im).shape, np.complex128 if re.dtype == F64 else np.complex64)
    out.real, out.imag = re, im
    return out


def _real(z):
    return z.real.copy() if z.dtype.kind == "c" else z


def _imag(z):
    return z.imag.copy() if z.dtype.kind == "c" else np.zeros_like(z)


def _abs_complex(z):
    """|z| = max * sqrt(1 + (min/max)^2); XLA gives NaN when a part is NaN (C99 says inf + NaN*j -> inf).
    Arithmetic, so DAZ/FTZ apply (unlike |x| of a float)."""
    z = flush(z)
    r = np.abs(z)
    return flush(np.where(np.isnan(z.real) | np.isnan(z.imag), np.array(np.nan, r.dtype), r))


def _multiply_complex(a, b):
    """Complex a * b as XLA CPU computes it: each part one multiply rounded and one contracted into
    an FMA with the other product (hlo_cli/SEMANTICS.md, "FMA contraction")."""
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
        a, b = np.broadcast_arrays(a, b)
    ar, ai, br, bi = a.real, a.imag, b.real, b.imag
    re = fma(ar, br, flush(np.asarray(ai * bi)), negate_addend=True)
    im = fma(ai, br, flush(np.asarray(ar * bi)))
    return _complex(re, im)


def _divide_complex(a, b):
    """Smith's algorithm, then XLA's repairs of a (NaN, NaN) result: x/0 = inf*x (signed by Re y), an
    infinite numerator over a finite denominator gives infinities, a finite one over an infinite
    denominator gives zeros."""
    ar, ai, br, bi = a.real, a.imag, b.real, b.imag
    t = ar.dtype.type
    with np.errstate(all="ignore"):
        r1, r2 = br / bi, bi / br
        d1, d2 = bi + r1 * br, br + r2 * bi
        small_r = np.abs(br) < np.abs(bi)
        cr = np.where(small_r, (r1 * ar + ai) / d1, (r2 * ai + ar) / d2)
        ci = np.where(small_r, (r1 * ai - ar) / d1, (ai - r2 * ar) / d2)
        inf = t(np.inf)
        zero_den = (br == 0) & (bi == 0) & ~(np.isnan(ar) & np.isnan(ai))
        s = np.copysign(inf, br)
        z_r, z_i = s * ar, s * ai
        a_inf_r, a_inf_i = np.isinf(ar), np.isinf(ai)
        inf_num = (a_inf_r | a_inf_i) & np.isfinite(br) & np.isfinite(bi)
        sr, si = np.copysign(np.where(a_inf_r, t(1), t(0)), ar), np.copysign(np.where(a_inf_i, t(1), t(0)), ai)
        n_r, n_i = inf * (sr * br + si * bi), inf * (si * br - sr * bi)
        b_inf_r, b_inf_i = np.isinf(br), np.isinf(bi)
        fin_num = (b_inf_r | b_inf_i) & np.isfinite(ar) & np.isfinite(ai)
        tr, ti = np.copysign(np.where(b_inf_r, t(1), t(0)), br), np.copysign(np.where(b_inf_i, t(1), t(0)), bi)
        f_r, f_i = t(0) * (ar * tr + ai * ti), t(0) * (ai * tr - ar * ti)
        both_nan = np.isnan(cr) & np.isnan(ci)
        fix_r = np.where(zero_den, z_r, np.where(inf_num, n_r, np.where(fin_num, f_r, cr)))
        fix_i = np.where(zero_den, z_i, np.where(inf_num, n_i, np.where(fin_num, f_i, ci)))
        return _complex(np.where(both_nan, fix_r, cr), np.where(both_nan, fix_i, ci))


def _sign_complex(z):
    a = np.abs(z)
    d = np.where(a == 0, 1, a)
    return np.where(a == 0, z, _complex(z.real / d, z.imag / d))


def _sqrt_complex(z):
    return np.sqrt(np.where(z.imag == 0, _complex(z.real, np.zeros_like(z.real)), z))


def _log1p_complex(z):
    x, y = z.real, z.imag
    s = x * (2 + x) + y * y                                 # |1+z|^2 - 1
    re = np.where(np.abs(s) < 0.5, 0.5 * np.log1p(s), np.log(np.hypot(1 + x, y)))
    return _complex(re, np.arctan2(y, 1 + x))


# ============================================================================= helpers: integers

@typed
def _sign_int(et, x):
    return np.sign(x) if et.kind == "int" else (x != 0).astype(x.dtype)


@typed
def _abs_int(et, x):
    return np.abs(x) if et.kind == "int" else x


def _not_int(x):
    return ~x


_POPCOUNT8 = np.array([bin(i).count("1") for i in range(256)], np.uint64)


@typed
def _popcnt(et, x):
    if et.kind == "int" and et.bits == 4:         # XLA CPU counts s4 in its sign-extended s8 container
        x, et = x.astype(np.int8), etype(np.int8)
    u = unsigned_bits(et, x).astype(np.uint64)
    n = np.zeros(u.shape, np.uint64)
    for shift in range(0, max(8, et.bits), 8):    # a loop over bytes
        n += _POPCOUNT8[(u >> np.uint64(shift)) & np.uint64(0xFF)]
    return n


@typed
def _clz(et, x):
    u = unsigned_bits(et, x).astype(np.uint64)
    n = np.full(u.shape, et.bits, np.int64)
    for b in range(et.bits):                       # a loop over bit positions
        n = np.where((u >> np.uint64(b)) & np.uint64(1) != 0, et.bits - 1 - b, n)
    return n


def _safe_divisor(et, a, b):
    """(b with 0 and the INT_MIN/-1 case replaced by 1, b == 0, INT_MIN/-1)."""
    zero = b == 0
    ovf = (a == int_range(et)[0]) & (b == -1) if et.kind == "int" else np.zeros(np.shape(a), bool)
    return np.where(zero | ovf, 1, b).astype(b.dtype), zero, ovf


@typed
def _int_divide(et, a, b):
    sb, zero, ovf = _safe_divisor(et, a, b)
    q = (a - np.fmod(a, sb)) // sb                 # exact division of the truncated multiple
    return np.where(zero, np.invert(np.zeros((), a.dtype)), np.where(ovf, a, q))   # x/0: all ones


@typed
def _int_remainder(et, a, b):
    sb, zero, ovf = _safe_divisor(et, a, b)
    return np.where(zero, a, np.where(ovf, 0, np.fmod(a, sb)))


@typed
def _int_power(et, a, b):
    acc = np.ones(a.shape, a.dtype)
    base = a.copy()
    e = unsigned_bits(et, b)
    one = e.dtype.type(1)
    for _ in range(6):                             # square-and-multiply over the low 6 bits
        acc = np.where((e & one) != 0, acc * base, acc)
        base = base * base
        e = e >> one
    if et.bits == 4:                               # XLA CPU runs s4/u4 power in s8/u8 containers
        et = etype(b.dtype)
    negative = signed_bits(et, b) < 0
    a_s = signed_bits(et, a)
    odd = (unsigned_bits(et, b) & one) != 0
    for_negative = np.where(a_s == 1, 1, np.where(a_s == -1, np.where(odd, -1, 1), 0))
    return np.where(negative, for_negative.astype(np.int64), acc.astype(np.int64))


@typed
def _shift_left(et, a, b):
    n = unsigned_bits(et, b)
    big = n >= et.bits
    r = unsigned_bits(et, a).astype(np.uint64) << np.where(big, 0, n).astype(np.uint64)
    return np.where(big, np.uint64(0), r)


@typed
def _shift_right_logical(et, a, b):
    n = unsigned_bits(et, b)
    big = n >= et.bits
    r = unsigned_bits(et, a).astype(np.uint64) >> np.where(big, 0, n).astype(np.uint64)
    return np.where(big, np.uint64(0), r)


@typed
def _shift_right_arithmetic(et, a, b):
    n = unsigned_bits(et, b)
    s = np.where(n >= et.bits, et.bits - 1, n).astype(np.int64)
    return signed_bits(et, a).astype(np.int64) >> s


@typed
def _mulhi(et, a, b):
    if et.bits <= 32:
        if et.kind == "int":
            return (signed_bits(et, a).astype(np.int64) * signed_bits(et, b).astype(np.int64)) >> et.bits
        p = unsigned_bits(et, a).astype(np.uint64) * unsigned_bits(et, b).astype(np.uint64)
        return p >> np.uint64(et.bits)
    ua, ub = a.astype(np.uint64), b.astype(np.uint64)    # 64 bits: schoolbook on 32-bit halves
    m32, s32 = np.uint64(0xFFFFFFFF), np.uint64(32)
    a0, a1, b0, b1 = ua & m32, ua >> s32, ub & m32, ub >> s32
    t = a0 * b0
    u = a1 * b0 + (t >> s32)
    w = a0 * b1 + (u & m32)
    hi = a1 * b1 + (u >> s32) + (w >> s32)
    if et.kind == "int":                                  # signed: subtract the wrapped operands
        hi = hi - np.where(a < 0, ub, np.uint64(0)) - np.where(b < 0, ua, np.uint64(0))
    return hi


# ============================================================================= unary rules

unary("abs", {FLOAT: np.abs, COMPLEX: _abs_complex, INT: _abs_int}, **KEEP_DENORMALS, nan=None,
      doc="|x| (a float for complex). XLA: abs(INT_MIN) = INT_MIN; a sign-bit operation on floats "
          "(denormals kept).")
unary("negate", {FLOAT: np.negative, COMPLEX: np.negative, INT: np.negative}, **KEEP_DENORMALS, nan=None,
      doc="-x. XLA: integers wrap (-INT_MIN = INT_MIN, -1u = max); floats flip the sign bit.")
unary("sign", {FLOAT: _sign_float, COMPLEX: _sign_complex, INT: _sign_int},
      doc="-1, 0 or 1 (x/|x| for complex; 0 or 1 unsigned). XLA: sign(+-0) = +-0, sign(NaN) = NaN, "
          "f32/f64 denormals read as +-0.")
unary("not", {INT: _not_int, PRED: np.logical_not}, doc="Bitwise not (logical for pred).")
unary("popcnt", {INT: _popcnt}, doc="Set bits of the two's-complement pattern, wrapped into the type. "
      "XLA: s4 counts its sign-extended s8 container (popcnt(s4 -8) = 5; popcnt(s4 -1) = 8 -> -8).")
unary("count-leading-zeros", {INT: _clz}, doc="Leading zero bits of the pattern: the width for 0, 0 "
      "for negatives.")
unary("floor", np.floor, doc="Round toward -inf. XLA: denormals read as +-0 (floor(-denormal) = -0).")
unary("ceil", np.ceil, doc="Round toward +inf. XLA: denormals read as +-0 (ceil(denormal) = 0).")
unary("round-nearest-even", np.rint, doc="Round half to even: 0.5 -> 0, 2.5 -> 2, -0.5 -> -0.")
unary("round-nearest-afz", _round_afz, doc="Round half away from zero: 0.5 -> 1, -2.5 -> -3, "
      "0.49999997 -> 0.")
unary("is-finite", np.isfinite, doc="Neither NaN nor +-inf.")
unary("real", {FLOAT: _real, COMPLEX: _real}, **KEEP_DENORMALS, doc="Real part (identity on floats).")
unary("imag", {FLOAT: _imag, COMPLEX: _imag}, **KEEP_DENORMALS, doc="Imaginary part (0 for floats).")
unary("exponential", {FLOAT: _exp, COMPLEX: np.exp}, doc="e^x. XLA: own polynomial for f32/f64.")
unary("exponential-minus-one", {FLOAT: _expm1, COMPLEX: np.expm1}, **KEEP_DENORMALS,
      doc="e^x - 1. XLA: expm1(denormal) = the denormal; f16 follows XLA's f16 expansion (tanh(x/2) * "
          "(e^x + 1) for |x| <= 0.5), rounded step by step.")
unary("log", {FLOAT: _log, COMPLEX: np.log}, nan=_log_nan,
      doc="Natural log: log(+-0) = -inf, log(x < 0) = NaN. XLA: denormals read as 0 (-> -inf); its "
          "f32 code for a few short lengths (3, 5-7 elements) takes the exact log of a denormal instead.")
unary("log-plus-one", {FLOAT: _log1p, COMPLEX: _log1p_complex}, nan=_log1p_nan,
      doc="log(1 + x). XLA: denormals read as +-0; NaN results are -NaN except for f64.")
unary("sqrt", {FLOAT: _sqrt, COMPLEX: _sqrt_complex}, doc="Square root: sqrt(-0) = -0, x < 0 -> NaN. "
      "XLA: sqrt(x - 0j) takes the +0j branch.")
unary("rsqrt", {FLOAT: _rsqrt, COMPLEX: _rsqrt}, doc="1/sqrt(x). XLA: a hardware estimate refined by "
      "Newton steps (not correctly rounded); rsqrt(+-0) = +-inf.")
unary("cbrt", _cbrt, daz=False, doc="Cube root. XLA: glibc cbrtf under DAZ gives -5.5951735e-16 for "
      "every f32 denormal; f64 denormals read as 0.")
unary("tanh", {FLOAT: _tanh, COMPLEX: np.tanh}, **KEEP_DENORMALS, doc="Hyperbolic tangent. XLA: keeps "
      "f32 denormals, flushes f64 ones; f32 reaches +-1 beyond |x| ~ 7.9.")
unary("logistic", {FLOAT: _logistic, COMPLEX: _logistic}, nan=("flip", "-"),
      doc="1 / (1 + e^-x). XLA expands it into exp, add, divide (so a NaN's sign flips); for f16 each "
          "step rounds to f16 (logistic(-11.1) = 1/(1+inf) = 0).")
unary("sine", {FLOAT: _sin, COMPLEX: np.sin}, **KEEP_DENORMALS, doc="sin(x). XLA: sin(denormal) = "
      "the denormal.")
unary("cosine", {FLOAT: _cos, COMPLEX: np.cos}, doc="cos(x).")
unary("tan", {FLOAT: _tan, COMPLEX: np.tan}, **KEEP_DENORMALS, doc="tan(x). XLA: tan(denormal) = "
      "the denormal.")
unary("erf", _erf, doc="The error function. XLA: f32/f64 denormals read as +-0.")
unary("acos", {FLOAT: _f64(np.arccos), COMPLEX: np.arccos}, nan=("keep", "+"),
      doc="arccos(x), NaN outside [-1, 1] (XLA CPU runs it for bf16/f8 only).")
unary("acosh", {FLOAT: _f64(np.arccosh), COMPLEX: np.arccosh}, doc="arccosh(x) (XLA CPU: bf16/f8 only).")
unary("asin", {FLOAT: _f64(np.arcsin), COMPLEX: np.arcsin}, **KEEP_DENORMALS, nan=("keep", "+"),
      doc="arcsin(x), +NaN outside [-1, 1] (XLA CPU: bf16/f8 only; keeps denormals).")
unary("asinh", {FLOAT: _f64(np.arcsinh), COMPLEX: np.arcsinh}, **KEEP_DENORMALS, doc="arcsinh(x) (XLA CPU: "
      "bf16/f8 only; keeps denormals).")
unary("atanh", {FLOAT: _f64(np.arctanh), COMPLEX: np.arctanh}, **KEEP_DENORMALS, doc="arctanh(x) (XLA CPU: "
      "bf16/f8 only; keeps denormals).")
unary("cosh", {FLOAT: _f64(np.cosh), COMPLEX: np.cosh}, doc="cosh(x) (XLA CPU: bf16/f8 only).")
unary("sinh", {FLOAT: _f64(np.sinh), COMPLEX: np.sinh}, **KEEP_DENORMALS, doc="sinh(x) (XLA CPU: bf16/f8 "
      "only; keeps denormals).")

# ============================================================================= binary rules

binary("add", {FLOAT: np.add, COMPLEX: np.add, INT: np.add, PRED: np.logical_or},
       doc="x + y. XLA: integers wrap; pred adds as or; f32/f64 denormals flush (in and out).")
binary("subtract", {FLOAT: np.subtract, COMPLEX: np.subtract, INT: np.subtract},
       doc="x - y. XLA: integers wrap; f32/f64 denormals flush.")
binary("multiply", {FLOAT: np.multiply, COMPLEX: _multiply_complex, INT: np.multiply, PRED: np.logical_and},
       doc="x * y. XLA: integers wrap; pred multiplies as and; complex parts are FMAs: "
           "re = fma(ar, br, -(ai bi)), im = fma(ai, br, ar bi).")
binary("divide", {FLOAT: np.divide, COMPLEX: _divide_complex, INT: _int_divide},
       doc="x / y. XLA: integers truncate toward zero, x/0 = -1 (all ones, so max unsigned), "
           "INT_MIN/-1 = INT_MIN; complex by Smith's algorithm.")
binary("remainder", {FLOAT: np.fmod, INT: _int_remainder}, daz=(False, True), ftz=False,
       doc="x - trunc(x/y)*y, with the dividend's sign (C fmod). XLA: x%0 = x, INT_MIN%-1 = 0; "
           "fmod(+-inf, y) and fmod(x, 0) = NaN, fmod(x, inf) = x; a denormal dividend is kept, a "
           "denormal divisor reads as 0.")
binary("power", {FLOAT: _f64(np.power), COMPLEX: np.power, INT: _int_power}, daz=False,
       doc="x^y. XLA integers: square-and-multiply over the exponent's low 6 bits only (2^64 = 1); a "
           "negative exponent (signed compare, so u8 200 counts) gives 0 except base 1 (1) and -1 "
           "(+-1); 0^0 = 1. Floats: C99 specials (x^0 = 1, 1^NaN = 1), own approximation.")
binary("maximum", {FLOAT: _fmax_typed, INT: np.maximum, PRED: np.logical_or}, nan=None,
       doc="max(x, y). XLA: NaN if either is NaN (x's NaN, else y's with the sign AND of both; f16 "
           "and f8: +NaN 0x7E00); max(-0, +0) = +0; denormals read as 0.")
binary("minimum", {FLOAT: _fmin_typed, INT: np.minimum, PRED: np.logical_and}, nan=None,
       doc="min(x, y). XLA: NaN if either is NaN (x's NaN, else y's with the sign OR of both; f16 "
           "and f8: +NaN 0x7E00); min(-0, +0) = -0; denormals read as 0.")
binary("atan2", _atan2, **KEEP_DENORMALS, nan=("keep2", "-"),
       doc="atan2(y, x) in [-pi, pi] with C's signed zeros: atan2(+-0, -0) = +-pi, atan2(+-0, +0) = "
           "+-0, atan2(+-y, 0) = +-pi/2. XLA: x's NaN wins over y's.")
binary("complex", _complex, **KEEP_DENORMALS, doc="re + i*im (f32 -> c64, f64 -> c128).")
binary("and", {INT: np.bitwise_and, PRED: np.logical_and}, doc="Bitwise and (logical for pred).")
binary("or", {INT: np.bitwise_or, PRED: np.logical_or}, doc="Bitwise or (logical for pred).")
binary("xor", {INT: np.bitwise_xor, PRED: np.logical_xor}, doc="Bitwise xor (logical for pred).")
binary("shift-left", {INT: _shift_left}, doc="x << n. XLA: n reads as unsigned (negative n is huge); "
       "n >= bits gives 0.")
binary("shift-right-logical", {INT: _shift_right_logical}, doc="Zero-filling x >> n of the unsigned "
       "pattern. XLA: n reads as unsigned; n >= bits gives 0.")
binary("shift-right-arithmetic", {INT: _shift_right_arithmetic}, doc="Sign-filling x >> n of the "
       "signed pattern, also for unsigned types. XLA: n reads as unsigned; n >= bits gives 0 or -1.")
binary("mulhi", {INT: _mulhi}, doc="High half of the double-width product, signed or unsigned by the "
       "type (XLA's HLO->StableHLO path cannot run mulhi; checked against exact integer arithmetic).")


# ============================================================================= select, clamp, compare

@evaluator("select")
def eval_select(inst, args, ec):
    """pred ? on_true : on_false elementwise; a scalar pred picks a whole operand. XLA: copies bits
    (denormals and NaN payloads survive), except that bf16 and f8 NaNs come out as the NaN their
    conversion from f32 (bf16) or f16 (f8) makes."""
    p, t, f = args
    if isinstance(t, tuple):
        return t if bool(p) else f
    r = t if p.ndim == 0 and bool(p) else f if p.ndim == 0 else np.where(p, t, f).astype(t.dtype, copy=False)
    return _normalized_nans(r)


def _normalized_nans(r):
    """XLA CPU selects bf16 values as f32 ones and f8 values as f16 ones (float normalization): a
    NaN comes out as the NaN the conversion back makes (bf16: 0x7FC0 with the sign; e5m2: 0x7F;
    e4m3, e3m4: 0x7C/0x78 with the sign), not with its own bits (measured)."""
    dt = r.dtype
    if dt == BF16:
        wide = F32
    elif dt.itemsize == 1 and dt != E8M0 and kind(dt) == "float" and etype(dt).bits == 8:
        wide = F16
    else:
        return r
    if r.size == 0:
        return r
    if dt == BF16 and not np.maximum.reduce(r.view(np.uint16) & np.uint16(0x7FFF), axis=None) > 0x7F80:
        return r                              # no NaN (two cheap passes; ml_dtypes' isnan is slower)
    with np.errstate(invalid="ignore"):
        nan = np.isnan(r)
    if not nan.any():
        return r
    return np.where(nan, round_float(widen_float(r).astype(wide), dt), r)


@evaluator("clamp")
def eval_clamp(inst, args, ec):
    """min(max(x, lo), hi), lo/hi possibly scalars. XLA: lo > hi gives hi; NaN in any operand gives
    NaN; max(-0, +0) = +0 rules apply; f32/f64 denormals read as 0."""
    lo, x, hi = args
    lo, hi = np.broadcast_to(lo, x.shape), np.broadcast_to(hi, x.shape)
    dom = _domain(x.dtype)
    mx = {FLOAT: _fmax, INT: np.maximum, PRED: np.logical_or}[dom]
    mn = {FLOAT: _fmin, INT: np.minimum, PRED: np.logical_and}[dom]
    return np.asarray(_apply("clamp", {dom: lambda lo_, x_, hi_: mn(mx(x_, lo_), hi_)}, [lo, x, hi],
                             np_dtype(inst.shape), True, True))


eval_clamp.elementwise = True


def _total_order_key(x: np.ndarray) -> np.ndarray:
    """int64 keys ordered like TOTALORDER: -NaN < -inf < ... < -0 < +0 < ... < inf < +NaN."""
    et = etype(x.dtype)
    if et.name.endswith("fnuz") or et.name == "f8e8m0fnu":
        x, et = x.astype(F32), etype(F32)        # XLA orders these by their f32 values: NaN is -NaN
    if et.bits >= 8:
        s = x.view({8: np.int8, 16: np.int16, 32: np.int32, 64: np.int64}[et.bits]).astype(np.int64)
    else:
        half = 1 << (et.bits - 1)
        s = ((x.view(np.uint8) & np.uint8((1 << et.bits) - 1)).astype(np.int64) ^ half) - half
    return np.where(s < 0, s ^ np.int64((1 << (et.bits - 1)) - 1), s)


_daz_compares = None


def _hw_compares():
    """fpenv.hardware() if NumPy's f32 comparisons read subnormals as zeros under its DAZ flag
    (checked once, on SIMD-sized and scalar-tail lengths), else None."""
    global _daz_compares
    if _daz_compares is None:
        hw = hardware()
        ok = hw is not None
        if ok:
            fset, on, off = hw
            for n in (1, 7, 8, 33, 1000):
                x = np.full(n, 1e-40, F32)
                z = np.zeros(n, F32)
                fset(on)
                try:
                    r = [(x == z).all(), (x > z).any(), (-x < z).any(), (x != z).any()]
                finally:
                    fset(off)
                ok = ok and bool(r[0]) and not any(bool(v) for v in r[1:])
        _daz_compares = hw if ok else False
    return _daz_compares or None


def _compare_floats(op, a, b):
    """op on float operands as XLA CPU compares them: in f32 (f64), f32/f64 subnormals (so bf16 ones)
    read as zeros.  bf16 under the processor's DAZ flag when NumPy's comparisons honour it; f16 and
    the 1-byte types widen exactly to normal f32 values (e8m0's 2^-127 excepted), large 1-byte
    arrays through a table."""
    dt = a.dtype
    if dt == BF16 and b.dtype == dt and a.size >= TABLE_MIN:
        hw = _hw_compares()
        if hw is not None:
            x, y = (v.astype(F32) for v in _scalar_views(a, b))
            fset, on, off = hw
            fset(on)
            try:
                return op(x, y)
            finally:
                fset(off)
    if dt == F16 and b.dtype == dt:
        x, y = (v.astype(F32) for v in _scalar_views(a, b))
        return op(x, y)
    if dt.itemsize == 1 and dt != E8M0 and b.dtype == dt:
        if a.size >= TABLE_MIN:
            return op(convert(a, F32), convert(b, F32))
        return op(widen_float(a), widen_float(b))
    return op(flush(widen_float(a)), flush(widen_float(b)))


_COMPARE = {"EQ": np.equal, "NE": np.not_equal, "LT": np.less, "LE": np.less_equal,
            "GT": np.greater, "GE": np.greater_equal}


@evaluator("compare")
def eval_compare(inst, args, ec):
    """Elementwise comparison to pred. FLOAT (order=PARTIAL): IEEE (NaN is unordered, so only NE is
    true; -0 == +0); XLA reads f32/f64/bf16 denormals as 0. TOTALORDER (order=TOTAL): -NaN < -inf <
    ... < -0 < +0 < ... < +inf < +NaN by bit pattern (fnuz NaN sorts as -NaN). order=WEAK: the
    total order with -0 == +0 and the NaNs of each sign equal (C++'s weak_order). SIGNED/UNSIGNED by the type; pred
    false < true; complex EQ/NE on both parts."""
    a, b = args
    op = _COMPARE[str(inst.attrs["direction"])]
    k = kind(a.dtype)
    with np.errstate(all="ignore"):
        if k == "float":
            ctype = comparison_type(inst.attrs, etype(a.dtype).name)
            if ctype == "TOTALORDER":
                return np.asarray(op(_total_order_key(a), _total_order_key(b)))
            if ctype == "WEAKORDER":
                return np.asarray(op(weak_from_total(a, _total_order_key(a)),
                                     weak_from_total(b, _total_order_key(b))))
            return np.asarray(_compare_floats(op, a, b))
        if k == "complex":
            return np.asarray(op(flush(a), flush(b)))
        return np.asarray(op(int_compute(a), int_compute(b)))


# ============================================================================ prepare stages
# (registry.prepare: once per instruction at compile time; kernels.py)

ndarray = np.ndarray


_NAN_EXACT: dict = {}


def hardware_nan_exact(ufunc, dt) -> bool:
    """True when `ufunc` on f32/f64 under the processor's FTZ/DAZ flags (fpenv.hardware) gives every
    NaN result with at most one NaN operand the bits the rule gives it (_nan_signs with
    DEFAULT_NAN: the NaN operand's, quieted; x86's default NaN, sign set, where none is NaN), in
    every layout of kernels.probe_layouts.  (Where both operands are NaN, NumPy's loops do not keep
    the operands' order -- a SIMD body's tail swaps those of add and multiply --: the kernels check
    for such positions.)  Measured once per ufunc and type on this processor and NumPy build."""
    return probed(_NAN_EXACT, _probe_nan_exact, ufunc, dt)


def hardware_nan_pairs_exact(ufunc, dt) -> bool:
    """hardware_nan_exact, and where both operands are NaN too (NumPy's loops keep the operands'
    order in every layout: subtract and divide).  Measured once per ufunc and type."""
    return probed(_NAN_PAIRS, _probe_nan_pairs, ufunc, dt)


_NAN_PAIRS: dict = {}


def _probe_nan_exact(ufunc, dt, pairs=False) -> bool:
    hw = hardware()
    if hw is None or dt not in PROBE_BITS:
        return False
    u = np.uint32 if dt.itemsize == 4 else np.uint64
    r, x, y, _ = probe_results(ufunc, dt, hw)
    with np.errstate(all="ignore"):
        want = np.asarray(_nan_signs(np.array(r), [x, y], etype(dt), DEFAULT_NAN))
    if pairs:
        return bool(np.array_equal(r.view(u), want.view(u)))
    one = ~(np.isnan(x) & np.isnan(y))
    return bool(np.array_equal(r.view(u)[one], want.view(u)[one]))


def _probe_nan_pairs(ufunc, dt) -> bool:
    return _probe_nan_exact(ufunc, dt, pairs=True)


def two_nans(a, b):
    """The mask of the positions with NaN operands on both sides, or None where there is none
    (one pass when an operand holds no NaN)."""
    la, lb = min_reduce(a, axis=None), min_reduce(b, axis=None)
    if la == la or lb == lb:
        return None
    both = np.isnan(a) & np.isnan(b)
    return both if both.any() else None


def _two_nan_signs(r, a, b, both):
    """`r` with the rule's NaN sign (the first operand's) where both operands are NaN (`both`);
    its other NaNs are already the rule's (hardware_nan_exact).  (As _signed_nans gives it: NumPy's
    NaN, its sign bit set from `a`'s, copysign being a bit operation that keeps every payload.)"""
    return np.where(both, np.copysign(r, a), r)


def flat_take(x, at, shape):
    """The elements of `x` broadcast to `shape` at the row-major positions `at` (flat indices
    where the view allows: a multi-dimensional nonzero costs several times more)."""
    v = np.broadcast_to(x, shape)
    if v.flags.c_contiguous:
        return v.reshape(-1)[at]
    return v[np.unravel_index(at, shape)]


# the bits, as unsigned, above which a float is a NaN with its sign set; per float width
_NEG_NAN_ABOVE = {4: (np.uint32, np.uint32(0xFF800000)), 8: (np.uint64, np.uint64(0xFFF0000000000000))}
# as signed, above which a float is a NaN with its sign clear
_POS_NAN_ABOVE = {4: (np.int32, np.int32(0x7F800000)), 8: (np.int64, np.int64(0x7FF0000000000000))}


def _nan_free_scalars(x, y) -> bool:
    """No operand is a lone value that is NaN (the one layout kernels.minmax_keeps_nan leaves out)."""
    for v in (x, y):
        s = lone_value(v)
        if s is not None and s != s:
            return False
    return True


def _minmax_nan_fix(big: bool, r, x):
    """np.maximum's (np.minimum's) result `r` of x and y (NumPy keeping the bits of x's NaN, else
    of y's: kernels.minmax_keeps_nan) with the rule's NaN signs (_fmax/_fmin): they differ where x
    is not NaN and y's NaN takes x's sign by AND (OR), a negative (positive) NaN in `r` beside an
    x with its sign clear (set).  One pass over `r` when there is none."""
    view, above = (_NEG_NAN_ABOVE if big else _POS_NAN_ABOVE)[r.itemsize]
    cand = r.view(view) > above
    if not cand.any():
        return r
    r = np.array(r, order="C")                          # (flat positions)
    at = np.flatnonzero(cand)
    xs = flat_take(x, at, r.shape)
    at = at[~np.isnan(xs) & (np.signbit(xs) != big)]
    if at.size:
        flat = r.reshape(-1)
        flat[at] = np.abs(flat[at]) if big else -np.abs(flat[at])
    return r


def _prepare_float_arith(opcode, ufunc):
    """f32/f64 add, subtract, multiply, divide: the NumPy ufunc with XLA CPU's DAZ on operands that
    may hold subnormals and FTZ on the result (the processor's flags where fpenv has them); under
    the flags a result holding a NaN is already the rule's where no position has two NaN operands
    (hardware_nan_exact), else gets the rule's NaN signs (_nan_signs); without the flags a result
    holding a NaN or a value below the smallest normal goes to the rule."""
    def prep(inst, ops, st):
        dt = shape_dtype(inst)
        if dt not in TINY or len(ops) != 2 or any(d != dt for d in operand_dtypes(ops, st)):
            return None
        tiny = TINY[dt]
        rule = rule_for(opcode)
        et = etype(dt)
        daz_a, daz_b = not st.is_clean(ops[0]), not st.is_clean(ops[1])

        def slow(a, b):                                  # NaN or a small result: the rule decides
            return rule(inst, [a, b], None)

        hw = hardware()
        if hw is not None:
            fset, on, off = hw

            exact = hardware_nan_exact(ufunc, dt)
            pairs = exact and hardware_nan_pairs_exact(ufunc, dt)

            def fn(a, b):                                # the processor flushes, as in XLA
                fset(on)                                 # (fpenv.flushing inlined: a hot path)
                try:
                    r = ufunc(a, b)
                finally:
                    fset(off)
                if r.__class__ is not ndarray:
                    r = np.asarray(r)
                if r.size:
                    low = min_reduce(r, axis=None)         # NaN if a NaN is present
                    if low != low:                       # NaN: the rule's signs
                        if not exact:
                            return _nan_signs(r, [a, b], et, DEFAULT_NAN)
                        if pairs:                        # NumPy's bits are the rule's
                            return r
                        both = two_nans(a, b)            # only where two NaNs met (NumPy's order)
                        if both is not None:
                            return _two_nan_signs(r, a, b, both)
                return r
            declare(fn, hw_ufunc=ufunc, nan_exact=exact, nan_pairs=pairs)   # (compiler.py: runs)
            return Fast(fn, clean=True, elementwise=True)

        def fn(a, b):
            r = ufunc(flush(a) if daz_a else a, flush(b) if daz_b else b)
            if r.__class__ is not ndarray:
                r = np.asarray(r)
            if r.size:
                m = np.abs(r)
                low = m.min()                            # NaN if a NaN is present
                if not low >= tiny and not (low == 0 and not ((m < tiny) & (m > 0)).any()):
                    return slow(a, b)
            return r
        return Fast(fn, clean=True, elementwise=True)
    return prep


# ============================================================================ integers and pred

_INT_UFUNCS = {"add": np.add, "subtract": np.subtract, "multiply": np.multiply, "and": np.bitwise_and,
               "or": np.bitwise_or, "xor": np.bitwise_xor}
_PRED_UFUNCS = {"add": np.logical_or, "multiply": np.logical_and, "and": np.logical_and,
                "or": np.logical_or, "xor": np.logical_xor}


def _prepare_int_binary(opcode):
    """Integer and pred arithmetic and bit operations of the native widths (NumPy wraps like XLA)."""
    def prep(inst, ops, st):
        dt = shape_dtype(inst)
        if dt is None or len(ops) != 2 or any(d != dt for d in operand_dtypes(ops, st)):
            return None
        rank0 = inst.shape.rank == 0
        if dt.kind in "iu":
            uf = _INT_UFUNCS.get(opcode)
        elif dt.kind == "b":
            uf = _PRED_UFUNCS.get(opcode)
        else:
            return None
        if uf is None:
            return None
        return Fast(scalar_safe(uf, rank0), clean=True, ufunc=None if rank0 else uf, elementwise=True)
    return prep


def _prepare_arith(opcode, ufunc):
    """add, subtract, multiply: the float stage for f32/f64, else the integer/pred one."""
    fprep, iprep = _prepare_float_arith(opcode, ufunc), _prepare_int_binary(opcode)

    def prep(inst, ops, st):
        dt = shape_dtype(inst)
        if dt in TINY:
            return fprep(inst, ops, st)
        return iprep(inst, ops, st)
    return prep


def _prepare_shift(kind):
    """Shifts: NumPy's already give XLA's results for amounts >= the width or negative (0, or the
    sign for arithmetic right shifts); the logical/arithmetic pattern read through a same-width view."""
    def prep(inst, ops, st):
        dt = shape_dtype(inst)
        if dt is None or dt.kind not in "iu" or any(d != dt for d in operand_dtypes(ops, st)):
            return None
        rank0 = inst.shape.rank == 0
        if kind == "left":
            fn = np.left_shift
        else:
            want = UINT_OF_BITS if kind == "logical" else SINT_OF_BITS
            view = want[8 * dt.itemsize]
            if view == dt:
                fn = np.right_shift
            else:
                def fn(a, b, view=view, dt=dt):
                    return np.right_shift(a.view(view), b.view(view)).view(dt)
        plain = fn in (np.left_shift, np.right_shift) and not rank0
        return Fast(scalar_safe(fn, rank0), clean=True, ufunc=fn if plain else None, elementwise=True)
    return prep


@prepares("not")
def _prepare_not(inst, ops, st):
    """not of pred (logical) and integers (bitwise)."""
    dt = shape_dtype(inst)
    if dt is None or operand_dtypes(ops, st)[0] != dt:
        return None
    if dt.kind == "b":
        fn = np.logical_not
    elif dt.kind in "iu":
        fn = np.invert
    else:
        return None
    return Fast(scalar_safe(fn, inst.shape.rank == 0), clean=True, elementwise=True)


@prepares("negate")
def _prepare_negate(inst, ops, st):
    """negate of integers (wrapping) and f32/f64 (exact: the operand's cleanliness carries over)."""
    dt = shape_dtype(inst)
    if dt is None or operand_dtypes(ops, st)[0] != dt or not (dt.kind in "iu" or dt in TINY):
        return None
    return Fast(scalar_safe(np.negative, inst.shape.rank == 0), clean=st.is_clean(ops[0]), elementwise=True)


@prepares("compare")
def _prepare_compare(inst, ops, st):
    dts = operand_dtypes(ops, st)
    dt = dts[0]
    if dt is None or dts[1] != dt:
        return None
    direction = str(inst.attrs.get("direction"))
    uf = _COMPARE.get(direction)
    ctype = inst.attrs.get("type")
    ctype = None if ctype is None else str(ctype)
    if uf is None or ctype == "TOTALORDER":
        return None
    if dt.kind not in "iub" and str(inst.attrs.get("order", "PARTIAL")) != "PARTIAL":
        return None                                     # a total or weak float order: the rule
    rank0 = inst.shape.rank == 0
    if dt in TINY:
        if ctype not in (None, "FLOAT"):
            return None
        daz_a, daz_b = not st.is_clean(ops[0]), not st.is_clean(ops[1])
        if daz_a or daz_b:
            def fn(a, b):
                return uf(flush(a) if daz_a else a, flush(b) if daz_b else b)
        else:
            fn = uf
    elif dt.kind in "iub":
        fn = uf                                         # the rule compares integers by their dtype
    else:
        return None
    return Fast(scalar_safe(fn, rank0), clean=True, elementwise=True)


@prepares("select")
def _prepare_select(inst, ops, st):
    """select with an array predicate: np.where (bf16/f8 left to the rule for their NaN bits)."""
    dts = operand_dtypes(ops, st)
    p = st.node(ops[0])
    if p.shape.is_tuple or p.shape.rank == 0 or dts[0] != np.dtype(bool):
        return None
    dt = shape_dtype(inst)
    if dt is None or dts[1] != dt or dts[2] != dt:
        return None
    if dt.kind == "V" or (dt.itemsize == 1 and dt.kind == "f"):
        return None          # bf16 / f8 NaNs come out as XLA's f32 round trip makes them: the rule
    clean = st.is_clean(ops[1]) and st.is_clean(ops[2])
    if dt.kind in "iubfc":
        return Fast(np.where, clean=clean, elementwise=True)
    return Fast(lambda c, t, f: np.where(c, t, f).astype(dt, copy=False), clean=clean, elementwise=True)


_KEEPS: dict = {}


def unary_keeps_nan(np_fn, wide: bool, dt) -> bool:
    """True when `np_fn` (in f64 rounded to f32 when `wide`) gives every NaN operand (both signs,
    quiet and signaling, with payloads; SIMD body and tail) a NaN result of the operand's sign:
    the rule's "keep" needs no fix-up there.  Measured once per function and type."""
    key = (np_fn, wide, np.dtype(dt))
    got = _KEEPS.get(key)
    if got is None:
        v = np.array(PROBE_BITS[np.dtype(dt)], np.uint32 if np.dtype(dt).itemsize == 4 else np.uint64)
        v = v.view(dt)
        v = v[np.isnan(v)]
        got = True
        with np.errstate(all="ignore"):
            for n in range(1, 40):
                y = np.resize(v, n)
                r = np_fn(y.astype(F64)).astype(F32) if wide else np_fn(y)
                if not (np.isnan(r).all() and np.array_equal(np.signbit(r), np.signbit(y))):
                    got = False
        _KEEPS[key] = got
    return got


def _prepare_unary_f64(np_fn, daz, own_nan=True):
    """An f32 unary op the rule computes as `np_fn` in f64 rounded to f32 (f64: `np_fn` itself),
    with DAZ of the operand for the types in `daz`; NaN results get the rule's signs on this
    result (none to give where every NaN is an operand's -- always, unless `own_nan`: the function
    makes NaN of non-NaN operands -- and `np_fn` keeps its sign: unary_keeps_nan); zero or
    subnormal results are the rule's (FTZ): computed at their positions alone when they are few
    (the rule is elementwise), else over the whole operand."""
    def prep(inst, ops, st):
        dt = shape_dtype(inst)
        if dt not in TINY or operand_dtypes(ops, st)[0] != dt or inst.shape.num_elements == 0:
            return None
        rule = rule_for(inst.opcode)
        if not factory_rule(rule):
            return None
        tiny = TINY[dt]
        flush_in = dt in daz and not st.is_clean(ops[0])
        wide = dt == F32
        rank0 = inst.shape.rank == 0

        nan_rule = getattr(rule, "nan_rule", None)
        signs = nan_rule if isinstance(nan_rule, tuple) else None
        keeps = signs is not None and signs[0] == "keep" and unary_keeps_nan(np_fn, wide, dt)
        et = etype(dt)

        def fn(x):
            y = flush(x) if flush_in else x
            r = np_fn(y.astype(F64)).astype(F32) if wide else np_fn(y)
            if rank0:
                r = np.asarray(r)
            m = np.abs(r)
            low = min_reduce(m, axis=None)
            if low >= tiny:
                return r
            if low == low:
                bad = m < tiny                           # zero or subnormal: the rule's
            elif signs is None:
                bad = ~(m >= tiny)                       # NaN too
            else:                                        # NaN: the rule's signs on this result
                kept = keeps and (not own_nan or np.count_nonzero(np.isnan(r)) == np.count_nonzero(np.isnan(y)))
                if not kept:                             # (kept: every NaN an operand's, its sign kept)
                    r = _nan_signs(r, [y], et, signs)
                bad = m < tiny
            count = np.count_nonzero(bad)
            if count * SPARSE_NAN_SHARE >= bad.size:
                return rule(inst, [x], None)
            if count:                                    # few: at their positions only
                r = np.array(r, order="C")
                at = np.flatnonzero(bad)
                r.reshape(-1)[at] = rule(inst, [flat_take(x, at, r.shape)], None)
            return r
        if wide:                                 # (loopgen.py: the f64 core, run with the flags set)
            declare(fn, raw_unary=np_fn)
        return Fast(fn, clean=bool(getattr(rule, "ftz_result", False)), elementwise=True)
    return prep


def _rsqrt_core(v):
    return 1 / np.sqrt(v)


@prepares("sqrt")
def _prepare_sqrt(inst, ops, st):
    """sqrt: np.sqrt of the flushed operand in the operand's own type (the rule's _sqrt)."""
    dt = shape_dtype(inst)
    if dt not in TINY or operand_dtypes(ops, st)[0] != dt or inst.shape.num_elements == 0:
        return None
    rule = rule_for("sqrt")
    if not factory_rule(rule):
        return None
    tiny = TINY[dt]
    flush_in = not st.is_clean(ops[0])
    rank0 = inst.shape.rank == 0

    def fn(x):
        r = np.sqrt(flush(x) if flush_in else x)
        if rank0:
            r = np.asarray(r)
        if not min_reduce(np.abs(r), axis=None) >= tiny:
            return rule(inst, [x], None)
        return r
    return Fast(fn, clean=True, elementwise=True)


def _prepare_minmax(opcode):
    """f32/f64 maximum/minimum: NumPy's on the flushed operands, XLA's -0 < +0 where both are
    zeros (the rule's _fmax/_fmin); NaN results as NumPy gives them (the first NaN operand's bits,
    kernels.minmax_keeps_nan) but for the sign the rule merges in (_minmax_nan_fix); without that
    probe's guarantee, the rule's at their positions when they are few, else the rule over the
    whole arrays."""
    def prep(inst, ops, st):
        dt = shape_dtype(inst)
        if dt not in TINY or len(ops) != 2 or any(d != dt for d in operand_dtypes(ops, st)) \
                or inst.shape.num_elements == 0:
            return None
        rule = rule_for(opcode)
        if not factory_rule(rule):
            return None
        daz_a, daz_b = not st.is_clean(ops[0]), not st.is_clean(ops[1])
        uf = np.maximum if opcode == "maximum" else np.minimum
        big = opcode == "maximum"
        pick = _fmax if big else _fmin               # (the rule's for f32/f64)
        rank0 = inst.shape.rank == 0

        exact = minmax_keeps_nan(uf, dt)         # (_fmax/_fmin differ then only where _minmax_nan_fix looks)

        def fn(a, b):
            x = flush(a) if daz_a else a
            y = flush(b) if daz_b else b
            r = uf(x, y)
            if rank0:
                r = np.asarray(r)
            low = min_reduce(np.abs(r), axis=None)
            if low > 0:
                return r
            if low != low and exact and _nan_free_scalars(x, y):
                r = _minmax_nan_fix(big, r, x)           # the rule's NaN signs, where they differ
            elif low != low:                             # NaN: the rule's signs
                nan = np.isnan(r)
                if np.count_nonzero(nan) * SPARSE_NAN_SHARE >= nan.size:
                    return rule(inst, [a, b], None)
                r = np.array(r)                          # few: the rule at their positions only
                r[nan] = pick(np.broadcast_to(x, r.shape)[nan], np.broadcast_to(y, r.shape)[nan])
            both = (x == 0) & (y == 0)
            if both.any():
                r = np.where(both, x + y if big else -((-x) + (-y)), r)
            return r
        return Fast(fn, clean=True, elementwise=True)
    return prep


prepares("add")(_prepare_arith("add", np.add))
prepares("subtract")(_prepare_arith("subtract", np.subtract))
prepares("multiply")(_prepare_arith("multiply", np.multiply))
prepares("divide")(_prepare_float_arith("divide", np.divide))
prepares("and")(_prepare_int_binary("and"))
prepares("or")(_prepare_int_binary("or"))
prepares("xor")(_prepare_int_binary("xor"))
prepares("shift-left")(_prepare_shift("left"))
prepares("shift-right-logical")(_prepare_shift("logical"))
prepares("shift-right-arithmetic")(_prepare_shift("arithmetic"))
prepares("exponential")(_prepare_unary_f64(np.exp, (F32, F64), own_nan=False))
prepares("tanh")(_prepare_unary_f64(np.tanh, (F64,), own_nan=False))
prepares("rsqrt")(_prepare_unary_f64(_rsqrt_core, (F32, F64)))
prepares("maximum")(_prepare_minmax("maximum"))
prepares("minimum")(_prepare_minmax("minimum"))


# ============================================================================ fused multiply-add
# XLA CPU's contracted multiply-add (hlo_cli/interpreter/contraction.py decides where): a * b + c
# rounded once, operands read with DAZ and the result written with FTZ.  f32: the product is exact
# in f64 and so is the sign of the f64 sum's error (TwoSum), which decides the one case where
# rounding the f64 sum to f32 is a double rounding: a sum exactly halfway between two f32 values.
# f64: Boldo and Melquiond's emulation, an exact product (Dekker) and an exact sum (TwoSum) whose
# low parts are added rounding to odd, then one rounding to nearest; exact integer arithmetic
# (fractions) for the few elements outside its range (a huge operand, a product near underflow).

FMA_BLOCK = 1 << 14                     # elements per block (its f64 temporaries stay in cache)
_F32_LOW = np.uint64((1 << 29) - 1)     # the f64 mantissa bits below an f32 one
_F32_HALF = np.uint64(1 << 28)          # ... exactly halfway between two f32 values
_SPLIT = F64.type(134217729.0)          # 2^27 + 1: Dekker's splitting constant
_SPLIT_MAX = F64.type(2.0 ** 995)       # larger operands would overflow the split
max_reduce = np.maximum.reduce          # (NaN if a NaN is present)
_PRODUCT_MIN = F64.type(2.0 ** -960)    # smaller products: their low part may underflow
_F64_TINY = F64.type(2.0 ** -1022)      # the smallest normal f64


def fma(a, b, c, negate_product: bool = False, negate_addend: bool = False):
    """(-)a * b (-) c of f32 or f64 arrays (one dtype, one shape) rounded once, with XLA CPU's
    DAZ/FTZ and NaN signs (an input NaN: the first of a, b, c comes out with its own sign, not
    negated; inf * 0 and inf - inf give x86's default -NaN).  A new array, never an operand."""
    if a.__class__ is not ndarray or b.__class__ is not ndarray or c.__class__ is not ndarray:
        a, b, c = (np.asarray(v) for v in (a, b, c))
    dt = a.dtype
    shape = a.shape
    if not (shape == b.shape == c.shape):
        shape = np.broadcast_shapes(a.shape, b.shape, c.shape)
        a, b, c = (np.broadcast_to(v, shape) for v in (a, b, c))
    r = hwfma.fma(a, b, c, negate_product, negate_addend)
    if r is not None:                   # the processor's FMA (no NaN among the results)
        return r
    with np.errstate(all="ignore"):
        if dt == F32 and (_FLAGGED or _flagged()):
            xs = (a, b, c)
            if a.size <= FMA_BLOCK:
                r = _fma32_flagged(a, b, c, None, negate_product, negate_addend)
            else:
                r = _blocks(_fma32_flagged, xs, np.empty(shape, F32), negate_product, negate_addend)
        else:
            xs = [flush(v) for v in (a, b, c)]
            kernel = _fma32 if dt == F32 else _fma64
            r = flush(_blocks(kernel, xs, np.empty(shape, dt), negate_product, negate_addend))
        if r.size:
            low = min_reduce(r, axis=None)
            if low != low:
                r = _nan_signs(r, xs, etype(dt), DEFAULT_NAN)
    return r


_FLAGGED = False                        # the f32 kernel may run under the processor's flags


def _flagged() -> bool:
    global _FLAGGED
    _FLAGGED = hardware_casts()
    return _FLAGGED


def _blocks(kernel, xs, out, negate_product, negate_addend):
    """kernel(a, b, c, out, negate_product, negate_addend) over cache-sized blocks of C-contiguous
    operands (else over the whole arrays); returns `out`."""
    if out.size <= FMA_BLOCK:
        if out.size:
            kernel(*xs, out, negate_product, negate_addend)
        return out
    flat = [v.reshape(-1) if v.flags.c_contiguous else None for v in xs]
    if any(v is None for v in flat):
        return _row_blocks(kernel, xs, out, negate_product, negate_addend)
    o = out.reshape(-1)
    for s in range(0, o.size, FMA_BLOCK):
        e = s + FMA_BLOCK
        kernel(flat[0][s:e], flat[1][s:e], flat[2][s:e], o[s:e], negate_product, negate_addend)
    return out


def _row_blocks(kernel, xs, out, negate_product, negate_addend):
    """_blocks for operands of any layout (a broadcast, a transposed view): blocks of whole rows of
    the leading dim, a row at a time (recursively) when one row is over a block, so the kernel's
    f64 temporaries stay block-sized whatever the operands' strides."""
    if out.size <= FMA_BLOCK or out.ndim == 0:
        if out.size:
            kernel(*xs, out, negate_product, negate_addend)
        return out
    rows = out.shape[0]
    inner = out.size // rows
    if inner > FMA_BLOCK and out.ndim > 1:
        for i in range(rows):
            _row_blocks(kernel, [v[i] for v in xs], out[i], negate_product, negate_addend)
        return out
    step = max(1, FMA_BLOCK // inner)
    for s in range(0, rows, step):
        e = s + step
        kernel(*(v[s:e] for v in xs), out[s:e], negate_product, negate_addend)
    return out


def _fma32_flagged(a, b, c, out, negate_product, negate_addend):
    """f32 (-)a * b (-) c into `out` with the processor's FTZ/DAZ flags set: the conversions to f64
    read subnormals as zeros (kernels.hardware_casts) and the one back to f32 flushes."""
    fset, on, off = hardware()
    fset(on)
    try:
        return _fma32(a, b, c, out, negate_product, negate_addend)
    finally:
        fset(off)


def _fma32(a, b, c, out, negate_product, negate_addend):
    """f32 (-)a * b (-) c rounded once into `out` (or a new array, `out` None): the product exact in
    f64, the sum rounded once in f64, then to f32 (operands free of subnormals or read under DAZ;
    FTZ left to the caller or the flags).  Each operand converted to f64 on its own: f64 ufuncs of
    one dtype are several times cheaper per call than mixed ones (small arrays: a scan's step)."""
    s = a.astype(F64)
    np.multiply(s, b.astype(F64), out=s)        # exact
    if negate_product:
        np.negative(s, out=s)
    if negate_addend:
        np.subtract(s, c.astype(F64), out=s)
    else:
        np.add(s, c.astype(F64), out=s)
    if count_nonzero(np.equal(np.bitwise_and(s.view(U64), _LOW_BITS), _HALFWAY)):
        repair_f32_midpoints(s, a, b, c, negate_product, negate_addend)
    if out is None:
        return s.astype(F32)
    out[...] = s
    return out


count_nonzero = np.count_nonzero
U64 = np.dtype(np.uint64)
_LOW_BITS, _HALFWAY = np.array(_F32_LOW), np.array(_F32_HALF)   # (0-d arrays: cheaper operands than
                                                                # NumPy scalars in a ufunc call)


def fma_bare(negate_product: bool, negate_addend: bool):
    """The f32 FMA `fma` computes as a function of (a, b, c) to call with the processor's FTZ/DAZ
    flags already set (kernels.hardware_casts true) and floating-point errors ignored (as every
    ``hw_ufunc``: compiler.run_compiled), the bits of `fma` but for NaN signs (no fix-up: the
    caller checks for NaN and runs `fma` again) -- the form a run of float steps under one
    setting of the flags holds (kernels.Capabilities.hw_ufunc)."""
    key = (negate_product, negate_addend)
    bare = _BARE.get(key)
    if bare is None:
        held = [0, 1]       # (calls left before hwfma is asked again, the calls the next ask stands for)

        def bare(a, b, c):
            n = held[0]
            if n and a.shape == b.shape == c.shape and a.size <= FMA_BLOCK:
                held[0] = n - 1         # (the common case: a small FMA, hwfma not asked this time)
                return _fma32(a, b, c, None, negate_product, negate_addend)
            return _bare_call(a, b, c, held, negate_product, negate_addend)
        _BARE[key] = bare
    return bare


def _bare_call(a, b, c, held, negate_product, negate_addend):
    """fma_bare's function past its common case: broadcast operands, large arrays, and the calls
    that ask hwfma -- once per ASK_EVERY calls until its kernels are built (for all of them: a
    small array's FMA costs less than hwfma's gate), then every call."""
    shape = a.shape
    if not (shape == b.shape == c.shape):
        shape = np.broadcast_shapes(a.shape, b.shape, c.shape)
        a, b, c = (np.broadcast_to(v, shape) for v in (a, b, c))
    if held[0]:
        held[0] -= 1
    else:
        r = hwfma.fma(a, b, c, negate_product, negate_addend, held[1])
        held[0], held[1] = (0, 1) if hwfma.ready() else (ASK_EVERY - 1, ASK_EVERY)
        if r is not None:
            return r
    if a.size <= FMA_BLOCK:
        return _fma32(a, b, c, None, negate_product, negate_addend)
    return _blocks(_fma32, (a, b, c), np.empty(shape, F32), negate_product, negate_addend)


_BARE: dict = {}
ASK_EVERY = 16                          # fma_bare asks hwfma once per this many calls until it is ready


def fma_kernel(negate_product: bool, negate_addend: bool, dt):
    """The kernel of a compiled FMA step of dtype `dt` (f32 or f64): `fma`'s bits; for f32 where
    the processor's flags apply to conversions, the bare form under the flags with a NaN check
    (a NaN: `fma` again, for the rule's NaN signs), declared as its ``hw_ufunc``."""
    if not (dt == F32 and hardware_casts()):
        def fn(a, b, c):
            return fma(a, b, c, negate_product, negate_addend)
        return fn
    bare = fma_bare(negate_product, negate_addend)
    fset, on, off = hardware()

    def fn(a, b, c):
        fset(on)
        try:
            r = bare(a, b, c)
        finally:
            fset(off)
        if r.size:
            low = min_reduce(r, axis=None)
            if low != low:
                return fma(a, b, c, negate_product, negate_addend)
        return r
    return declare(fn, hw_ufunc=bare)


def repair_f32_midpoints(s, a, b, c, negate_product=False, negate_addend=False):
    """The f64 sums `s` that lie exactly halfway between two f32 values moved one f64 ulp towards
    the exact value (the sign of the f64 sum's error, TwoSum), so that rounding them to f32 once
    is correct."""
    sv = s.reshape(-1)
    half = np.flatnonzero((np.bitwise_and(sv.view(np.uint64), _F32_LOW) == _F32_HALF))
    shape = s.shape
    pick = (lambda v: np.broadcast_to(v, shape).reshape(-1)[half].astype(F64))
    ph = pick(a) * pick(b)
    ch = pick(c)
    if negate_product:
        ph = -ph
    if negate_addend:
        ch = -ch
    sh = sv[half]
    t = sh - ch
    err = (ph - t) + (ch - (sh - t))
    sv[half] = np.where(err != 0, np.nextafter(sh, np.where(err > 0, np.inf, -np.inf)), sh)


def _split_into(x, t, hi, lo):
    """Veltkamp's split of `x` into `hi` + `lo` (26 and 27 significant bits) exactly; `t` scratch."""
    np.multiply(x, _SPLIT, out=t)
    np.subtract(t, x, out=hi)
    np.subtract(t, hi, out=hi)
    np.subtract(x, hi, out=lo)


def _two_sum_into(x, y, s, e, z):
    """Knuth's TwoSum: s = x + y rounded, e its exact error (s, e, z: buffers, z scratch; x, y are
    not among them)."""
    np.add(x, y, out=s)
    np.subtract(s, x, out=z)
    np.subtract(s, z, out=e)
    np.subtract(x, e, out=e)
    np.subtract(y, z, out=z)
    e += z


def _fma64(a, b, c, out, negate_product, negate_addend):
    """f64 (-)a * b (-) c rounded once into `out` (operands free of subnormals): Dekker's exact
    product ph + pl, TwoSum's exact c + ph = th + tl, tl + pl rounded to odd (TwoSum, then the last
    bit), th plus that rounded to nearest; every pass in place on six block-sized buffers."""
    if negate_product:
        a = -a
    if negate_addend:
        c = -c
    shape = out.shape
    ph, pl, t, u, v, w = (np.empty(shape, F64) for _ in range(6))
    np.multiply(a, b, out=ph)
    _split_into(a, t, u, v)                             # u, v = ah, al
    _split_into(b, t, w, pl)                            # w, pl = bh, bl
    np.multiply(u, pl, out=t)                           # pl = ((ah bh - ph) + ah bl + al bh) + al bl
    np.multiply(v, pl, out=pl)
    np.multiply(u, w, out=u)
    u -= ph
    u += t
    np.multiply(v, w, out=w)
    u += w
    u += pl                                             # a * b = ph + u exactly
    _two_sum_into(c, ph, out, t, w)                     # c + ph = out + t exactly
    _two_sum_into(t, u, v, pl, w)                       # t + u = v + pl exactly
    inexact = pl != 0
    if inexact.any():                                   # v rounded to odd: towards zero, last bit set
        bits = v.view(np.uint64)
        down = np.signbit(pl)
        down ^= np.signbit(v)
        down &= inexact
        np.subtract(bits, down, out=bits, casting="unsafe")
        np.bitwise_or(bits, inexact, out=bits, casting="unsafe")
    finite = np.isfinite(min_reduce(out, axis=None)) and np.isfinite(max_reduce(out, axis=None))
    out += v
    if not out.all():                   # an exact zero: its sign as IEEE's sum gives it (ph exact)
        zero = out == 0
        np.add(ph, c, out=t)
        out[zero] = t[zero]
    np.abs(ph, out=ph)
    np.abs(out, out=t)                  # (a result of exactly the smallest normal: FTZ may apply)
    if finite and min_reduce(ph, axis=None) >= _PRODUCT_MIN and min_reduce(t, axis=None) > _F64_TINY and \
            _SPLIT_MAX > max(-min_reduce(a, axis=None), max_reduce(a, axis=None),
                             -min_reduce(b, axis=None), max_reduce(b, axis=None)):
        return                          # (the common case: no element needs a closer look)
    ap, bp = np.abs(a), np.abs(b)
    exotic = ~((ap < _SPLIT_MAX) & (bp < _SPLIT_MAX) & ((ph >= _PRODUCT_MIN) | (a == 0) | (b == 0))
               & np.isfinite(c + a * b) & (t != _F64_TINY))
    if exotic.any():
        _fma64_exact(a, b, c, out, exotic)


def _fma64_exact(a, b, c, out, where):
    """The elements of `out` at mask `where` computed with exact rational arithmetic (the
    non-finite ones as the plain expression, which is then exact, or the infinite addend)."""
    from fractions import Fraction
    idx = np.nonzero(where)
    av, bv, cv = (np.broadcast_to(v, where.shape)[idx] for v in (a, b, c))
    res = np.empty(av.shape, F64)
    for i, (x, y, z) in enumerate(zip(av.tolist(), bv.tolist(), cv.tolist())):
        if not (np.isfinite(x) and np.isfinite(y) and np.isfinite(z)):
            # an infinite addend and a finite product: the addend (the exact product has no
            # overflow to meet it); else the plain expression, exact then
            res[i] = z if np.isfinite(x) and np.isfinite(y) and not np.isnan(z) else x * y + z
            continue
        exact = Fraction(x) * Fraction(y) + Fraction(z)
        try:
            res[i] = float(exact) if exact else (x * y + z)     # (a zero: its sign as IEEE gives it)
            if exact and abs(res[i]) <= _F64_TINY and _rounds_below_normal(exact):
                res[i] = -0.0 if exact < 0 else 0.0             # FTZ: tininess after rounding
        except OverflowError:
            res[i] = np.inf if exact > 0 else -np.inf
    out[idx] = res


def _rounds_below_normal(q) -> bool:
    """Whether the nonzero rational `q` rounded to f64's 53 bits with an unbounded exponent is below
    the smallest normal in magnitude (x86 detects tininess after rounding: FTZ flushes it then)."""
    from fractions import Fraction
    m = abs(q)
    e = m.numerator.bit_length() - m.denominator.bit_length()
    if Fraction(2) ** e > m:
        e -= 1
    unit = Fraction(2) ** (e - 52)
    return round(m / unit) * unit < Fraction(float(_F64_TINY))
