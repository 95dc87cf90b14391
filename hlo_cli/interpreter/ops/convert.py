"""Element-type changes (convert, bitcast-convert, reduce-precision, stochastic-convert), and the
numeric machinery the elementwise family shares: what XLA CPU computes in which width, how it
rounds back, and its flushing of denormals.

The facts every rule here relies on (hlo_cli/SEMANTICS.md, "Floating-point environment", "NaN",
"Conversions"): XLA CPU flushes f32/f64 subnormals on the way in and out (``flush``), bit
operations and software conversions keep them; bf16/f16 compute in f32 and f8/f6/f4 in f16,
rounded back once per operation; conversions round to nearest even once, into bf16 through f32.
"""
from __future__ import annotations

import functools

import ml_dtypes
import numpy as np

from ...ir.dtypes import ELEMENT_TYPES, ElementType, from_numpy
from ..kernels import Fast, flush, shape_dtype
from ..registry import evaluator, prepares
from ..values import np_dtype

F32 = np.dtype(np.float32)
F64 = np.dtype(np.float64)
C64 = np.dtype(np.complex64)
C128 = np.dtype(np.complex128)
BOOL = np.dtype(np.bool_)
BF16 = ELEMENT_TYPES["bf16"].numpy
F16 = np.dtype(np.float16)
E8M0 = ELEMENT_TYPES["f8e8m0fnu"].numpy
F4E2M1 = ELEMENT_TYPES["f4e2m1fn"].numpy
_FNUZ = frozenset(ELEMENT_TYPES[n].numpy for n in ("f8e4m3fnuz", "f8e5m2fnuz", "f8e4m3b11fnuz"))
# The NaN XLA writes into the types with a fixed NaN encoding, by the sign of the NaN: (+, -).  For
# f8e5m2 only conversions from f32/f64 keep the sign (from f16/bf16/f8, and e5m2 arithmetic: 0x7F).
_NAN_BITS = {"f8e5m2": (0x7E, 0xFE), "f8e4m3": (0x7C, 0xFC), "f8e4m3fn": (0x7F, 0xFF),
             "f8e3m4": (0x78, 0xF8), "f4e2m1fn": (0x8, 0x8), "f6e2m3fn": (0x20, 0x20),
             "f6e3m2fn": (0x20, 0x20)}       # the NaN-less f4/f6 types: -0
_NAN_BITS = {ELEMENT_TYPES[k].numpy: v for k, v in _NAN_BITS.items()}
E5M2 = ELEMENT_TYPES["f8e5m2"].numpy

UINT_OF_BITS = {8: np.dtype(np.uint8), 16: np.dtype(np.uint16), 32: np.dtype(np.uint32), 64: np.dtype(np.uint64)}
SINT_OF_BITS = {8: np.dtype(np.int8), 16: np.dtype(np.int16), 32: np.dtype(np.int32), 64: np.dtype(np.int64)}


# ----------------------------------------------------------------------------- element types

def etype(dtype) -> ElementType:
    """The HLO element type of a NumPy dtype."""
    return from_numpy(dtype)


def kind(dtype) -> str:
    """'pred', 'int', 'uint', 'float' or 'complex'."""
    return from_numpy(dtype).kind


def container_bits(bits: int) -> int:
    """Storage width NumPy computes an integer type of `bits` bits in (sub-byte types use 8)."""
    return max(8, bits)


def int_range(et: ElementType) -> tuple[int, int]:
    if et.kind == "uint":
        return 0, (1 << et.bits) - 1
    return -(1 << (et.bits - 1)), (1 << (et.bits - 1)) - 1


# ----------------------------------------------------------------------------- integers

def int_compute(x: np.ndarray) -> np.ndarray:
    """An integer (or pred) array in a NumPy integer dtype that holds its values: sub-byte
    ml_dtypes types widen to int8/uint8, pred to uint8; the others are returned as they are."""
    et = etype(x.dtype)
    if et.kind == "pred":
        return x.astype(np.uint8)
    if et.bits < 8:
        return x.astype(np.int8 if et.kind == "int" else np.uint8)
    return x


def wrap_int(x: np.ndarray, dst) -> np.ndarray:
    """Integer values -> integer type `dst`, two's-complement wrapping to its width (what XLA's
    integer arithmetic and integer -> integer convert do)."""
    dst = np.dtype(dst)
    et = etype(dst)
    if et.bits >= 8:
        return x.astype(dst, copy=False)
    mask = (1 << et.bits) - 1
    u = x.astype(np.uint8) & np.uint8(mask)
    if et.kind == "int":
        half = np.int8(1 << (et.bits - 1))
        return ((u.view(np.int8) ^ half) - half).astype(dst)
    return u.astype(dst)


def unsigned_bits(et: ElementType, c: np.ndarray) -> np.ndarray:
    """Values `c` of integer type `et` (in their int_compute container) as unsigned bit patterns of
    et.bits bits, in the unsigned container."""
    u = c.astype(UINT_OF_BITS[container_bits(et.bits)], copy=False)
    return u & np.uint8((1 << et.bits) - 1) if et.bits < 8 else u


def signed_bits(et: ElementType, c: np.ndarray) -> np.ndarray:
    """Values `c` of integer type `et` (in their container) read as two's-complement numbers of
    et.bits bits, in the signed container."""
    if et.kind == "int":
        return c.astype(SINT_OF_BITS[container_bits(et.bits)], copy=False)
    s = c.astype(SINT_OF_BITS[container_bits(et.bits)])
    if et.bits < 8:
        half = np.int8(1 << (et.bits - 1))
        s = ((s & np.int8((1 << et.bits) - 1)) ^ half) - half
    return s


# ----------------------------------------------------------------------------- floats

def float_compute_dtype(dtype) -> np.dtype:
    """The width XLA CPU computes a float (complex) type in: f64 / c128 as themselves, every
    narrower float in f32, c64 in c64."""
    dtype = np.dtype(dtype)
    if dtype == F64 or dtype == C128 or dtype == C64:
        return dtype
    return F32


def widen_float(x: np.ndarray) -> np.ndarray:
    """A float array in its compute width (exact: every narrow float is an f32 value; XLA widens
    the fnuz NaN, which has the sign bit's pattern, to +NaN)."""
    cd = float_compute_dtype(x.dtype)
    if x.dtype == cd:
        return x
    w = x.astype(cd)
    if x.dtype in _FNUZ:
        w = np.where(np.isnan(w), np.array(np.nan, cd), w)
    return w


def round_float(x: np.ndarray, dst, origin=None) -> np.ndarray:
    """A float array (any float type) rounded to float type `dst` the way XLA CPU converts: to
    nearest even; f32 <-> f64 under FTZ/DAZ; f64 into bf16 and e8m0 through f32 (rounding twice,
    flushing f32 denormals), into f16/f8/f6/f4 once; f32 into the narrow types in software
    (denormals kept); overflow per type (inf where it has one, NaN for the fn/fnuz f8 types,
    saturation for f4e2m1fn and f6, which have neither); NaN into those NaN-less types gives -0,
    into the other f8 types XLA's quiet NaN (see _NAN_BITS; `origin` is the type the value came
    from when it is not x's own, e.g. the operand type of an op computed in f32)."""
    dst = np.dtype(dst)
    src = x.dtype
    origin = src if origin is None else np.dtype(origin)
    if src == dst:
        return x
    with np.errstate(all="ignore"):
        if dst == F64:
            if src == E8M0:
                return x.astype(F64)                     # XLA converts e8m0 directly: 2^-127 kept
            return flush(widen_float(x)).astype(F64)
        if src == F64 and (dst == F32 or dst == BF16):
            x = flush(x.astype(F32))                     # cvtsd2ss under FTZ
            if dst == F32:
                return x
        elif src == F64 and dst == E8M0:                 # direct; below 2^-127 -> NaN (not 2^-127)
            return np.where(x < 2.0 ** -127, np.array(np.nan, dst), x.astype(dst))
        elif src != F32 and src != F64:
            x = widen_float(x)                           # exact
            if dst == F32:
                return x
        r = x.astype(dst)
        if dst in _NAN_BITS:
            nan = np.isnan(x)
            if nan.any():
                pos, neg = _NAN_BITS[dst]
                if dst == E5M2 and origin != F32 and origin != F64:
                    pos = neg = 0x7F
                bits = np.where(np.signbit(x), np.uint8(neg), np.uint8(pos)).astype(np.uint8)
                r = np.where(nan, bits.view(dst) if dst.itemsize == 1 else bits, r)
        return r


# ----------------------------------------------------------------------------- narrow floats by table
# A conversion out of a 1-byte float type (f8, f6, f4, e8m0), or out of a 2-byte one (bf16, f16)
# into a 1-byte type, has at most 65536 inputs: its results are computed once, by the same rule as
# element by element (`convert`, `widen_float`), into a table indexed by the operand's bit pattern,
# and an array converts with one np.take (several times cheaper per element than ml_dtypes' own
# casts of these types).  An f32 array converts into a 1-byte type through bf16 rounded to odd (the upper
# 16 bits, the lowest of them set when any lower bit is): rounding to odd at 8 significant bits and
# then to nearest even at 4 or fewer equals rounding the f32 value to nearest even directly (the
# classic double-rounding result; bf16 has f32's exponent range, so the target's subnormals,
# overflow and NaN are decided on the same value), and the bf16 -> target table is built from the
# bf16 values read as f32 (f32's rules: e5m2 keeps a NaN's sign).

TABLE_MIN = 4096                    # smaller arrays convert directly


@functools.lru_cache(maxsize=None)
def _table(src: np.dtype, dst: np.dtype, how: str) -> np.ndarray:
    codes = np.arange(1 << (8 * src.itemsize), dtype=UINT_OF_BITS[8 * src.itemsize]).view(src)
    if how == "widen16":                                  # the f8 ops' widening: exact, via f32
        t = widen_float(codes).astype(F16)
    elif how == "from_f32":                               # bf16 codes as the f32 values they are
        t = _convert(codes.astype(F32), dst)
    else:
        t = _convert(codes, dst)
    t = np.ascontiguousarray(t)
    t.flags.writeable = False
    return t


def by_table(x: np.ndarray, dst, how: str = "convert") -> np.ndarray:
    """`convert(x, dst)` (how="convert") or the f8 ops' widening to f16 (how="widen16") of a 1- or
    2-byte float array, through the table of all its bit patterns."""
    t = _table(x.dtype, np.dtype(dst), how)
    return np.take(t, x.view(UINT_OF_BITS[8 * x.dtype.itemsize]))


def _tabled(src: np.dtype, dst: np.dtype) -> bool:
    """Whether convert(src -> dst) goes through a table (see above)."""
    if kind(src) != "float":
        return False
    if src.itemsize == 1:
        return dst.kind != "c"
    return src.itemsize == 2 and dst.itemsize == 1 and kind(dst) == "float"


def f32_to_byte_float(x: np.ndarray, dst) -> np.ndarray:
    """convert(x, dst) of an f32 array into a 1-byte float type: bf16 rounded to odd, then the
    table (see above)."""
    bits = x.view(np.uint32)
    hi = (bits >> np.uint32(16)).astype(np.uint16)
    hi |= (bits & np.uint32(0xFFFF)) != 0
    return np.take(_table(BF16, np.dtype(dst), "from_f32"), hi)


# ----------------------------------------------------------------------------- convert

def convert(x: np.ndarray, dst) -> np.ndarray:
    """XLA's `convert` of array `x` to dtype `dst` (see eval_convert for the semantics)."""
    dst = np.dtype(dst)
    if x.dtype == dst:
        return x
    if x.size >= TABLE_MIN:
        if _tabled(x.dtype, dst):
            return by_table(x, dst)
        if x.dtype == F32 and dst.itemsize == 1 and kind(dst) == "float":
            return f32_to_byte_float(x, dst)
    return _convert(x, dst)


def _convert(x: np.ndarray, dst: np.dtype) -> np.ndarray:
    """convert() element by element (the reference the tables are built from)."""
    sk, dk = kind(x.dtype), kind(dst)
    with np.errstate(all="ignore"):
        if sk == "complex":
            if dk == "complex":
                return flush(flush(x).astype(dst))           # c64 <-> c128 under DAZ/FTZ
            x = x.real.copy()                            # complex -> real drops the imaginary part
            sk = "float"
        if dk == "pred":
            if sk == "float":                            # NaN -> true; f32/f64 denormals read as 0
                w = x.astype(F32) if x.dtype != F64 else x
                return (flush(w) if x.dtype in (F32, F64, E8M0) else w) != 0
            return int_compute(x) != 0
        if sk in ("pred", "int", "uint"):
            c = int_compute(x)
            if dk in ("int", "uint"):
                return wrap_int(c, dst)
            if dk == "complex":
                return convert(c, F32 if dst == C64 else F64).astype(dst)
            if dst == BF16:
                return c.astype(F32).astype(dst)         # integer -> f32 -> bf16 (two roundings)
            return c.astype(dst)
        if dk == "complex":
            return round_float(x, F32 if dst == C64 else F64).astype(dst)
        if dk in ("int", "uint"):
            return _float_to_int(x, dst)
        r = round_float(x, dst)
        if (dst == F16 and (x.dtype == F32 or x.dtype == BF16)) or (x.dtype == F16 and dst == F32):
            r = _quiet_nans(x, r)
        return r


def _quiet_nans(x: np.ndarray, r: np.ndarray) -> np.ndarray:
    """XLA converts NaNs between f16 and f32 (bf16) as the processor does (measured): quieted, the
    payload's top bits kept -- f32 -> f16 gives sign | 0x7E00 | mantissa >> 13 (0x7F800001 ->
    0x7E00 where NumPy gives 0x7C01), f16 -> f32 sets the quiet bit (0x7C01 -> 0x7FC02000)."""
    nan = np.isnan(r)
    if not nan.any():
        return r
    if r.dtype == F16:
        b = widen_float(x).view(np.uint32)
        q = ((b >> np.uint32(16)) & np.uint32(0x8000)) | np.uint32(0x7E00) | ((b >> np.uint32(13)) & np.uint32(0x3FF))
        return np.where(nan, q.astype(np.uint16).view(F16), r)
    return np.where(nan, (r.view(np.uint32) | np.uint32(0x400000)).view(F32), r)


def _float_to_int(x: np.ndarray, dst: np.dtype) -> np.ndarray:
    """Truncate toward zero, saturate to the integer range, NaN -> 0."""
    et = etype(dst)
    lo, hi = int_range(et)
    w = widen_float(x).astype(F64)                       # exact for every float type
    if x.dtype == F4E2M1:                                # XLA reads f4e2m1fn's +-6 as +-inf here
        w = np.where(np.abs(w) == 6.0, np.copysign(np.inf, w), w)
    t = np.trunc(w)
    nan = np.isnan(t)
    over = t >= float(hi) + 1.0 if et.bits == 64 else t > hi
    under = t < lo
    safe = np.where(nan | over | under, 0.0, t)
    if et.bits == 64:
        r = safe.astype(np.uint64 if et.kind == "uint" else np.int64)
        r = np.where(over, r.dtype.type(hi), np.where(under, r.dtype.type(lo), r))
        return r.astype(dst)
    r = np.where(over, hi, np.where(under, lo, safe)).astype(np.int64)
    return np.asarray(wrap_int(np.asarray(r), dst))


@evaluator("convert")
def eval_convert(inst, args, ec):
    """Element-type conversion.  XLA: float -> int truncates toward zero and saturates (NaN -> 0,
    +-inf -> max/min); int -> float and float -> narrower float round to nearest even (into bf16
    through f32, so f64/s64 -> bf16 rounds twice); overflow gives inf, or NaN for the f8 fn/fnuz types
    (f4e2m1fn saturates); float -> pred is x != 0 (NaN -> true); complex -> real keeps the real
    part; f32 <-> f64 flush denormals (FTZ/DAZ) while f32 <-> bf16/f16/f8 keep them; NaNs between
    f16 and f32/bf16 come out quiet with their payload's top bits."""
    return np.asarray(convert(args[0], np_dtype(inst.shape)))


eval_convert.elementwise = True             # element i of the result depends on element i only


def _clean_from_integers(inst, st) -> bool:
    """An integer or pred -> float convert writes no subnormal (kernels.rule_result_clean)."""
    src = st.comp.by_name[inst.operands[0]].shape
    return not src.is_tuple and (src.element_type == "pred" or src.element_type[0] in "su")


eval_convert.result_clean = _clean_from_integers


# ----------------------------------------------------------------------------- bitcast-convert

def contig(x: np.ndarray) -> np.ndarray:
    """C-contiguous `x` (np.ascontiguousarray would turn a 0-d array into shape [1])."""
    return x if x.flags.c_contiguous else np.array(x, order="C")


def _bits_of(x: np.ndarray) -> np.ndarray:
    """Bit patterns of `x` as unsigned integers of the element width (uint8 for sub-byte types)."""
    et = etype(x.dtype)
    if et.bits < 8 or et.kind == "pred":
        if et.kind in ("int", "uint"):
            return unsigned_bits(et, int_compute(x))
        return x.view(np.uint8) & np.uint8((1 << et.bits) - 1) if et.bits < 8 else x.view(np.uint8)
    return contig(x).view(UINT_OF_BITS[et.bits])


def _from_bits(u: np.ndarray, dst: np.dtype) -> np.ndarray:
    et = etype(dst)
    if et.bits < 8:
        u8 = u.astype(np.uint8) & np.uint8((1 << et.bits) - 1)
        if et.kind in ("int", "uint"):
            return wrap_int(u8, dst)
        return u8.view(dst)
    if et.kind == "pred":
        return u.astype(np.uint8).view(BOOL)
    return contig(u.astype(UINT_OF_BITS[et.bits], copy=False)).view(dst)


@evaluator("bitcast-convert")
def eval_bitcast_convert(inst, args, ec):
    """Reinterpret each element's bits as the result type.  Between widths the narrower side has an
    extra minor dimension of size wide/narrow, holding the wide element's pieces little-endian
    (element 0 = the lowest bits; sub-byte types likewise, lowest nibble first).  Bits are copied
    as they are: NaN payloads and denormals survive."""
    x = args[0]
    dst = np_dtype(inst.shape)
    a, b = etype(x.dtype).bits, etype(dst).bits
    if x.dtype.kind == "c" or dst.kind == "c":          # complex: plain memory reinterpretation
        if a == b:
            return np.asarray(contig(x).view(dst))
        if a > b:
            return np.asarray(contig(x)[..., None].view(dst))
        return np.asarray(contig(x).view(dst)[..., 0])
    bits = _bits_of(x)
    if a == b:
        return np.asarray(_from_bits(bits, dst))
    if a > b:
        k = a // b
        wide = bits.astype(np.uint64)[..., None]
        shifts = (np.arange(k, dtype=np.uint64) * np.uint64(b))
        pieces = (wide >> shifts) & np.uint64((1 << b) - 1 if b < 64 else ~0)
        return np.asarray(_from_bits(pieces, dst))
    k = b // a
    parts = bits.astype(np.uint64) << (np.arange(k, dtype=np.uint64) * np.uint64(a))
    return np.asarray(_from_bits(np.bitwise_or.reduce(parts, axis=-1), dst))


# ----------------------------------------------------------------------------- reduce-precision

def reduce_precision(x: np.ndarray, exponent_bits: int, mantissa_bits: int) -> np.ndarray:
    """XLA's ReducePrecision on an f16/bf16/f32/f64 array, on its own bits (no flushing).

    The mantissa rounds to nearest even; then an exponent above the reduced range becomes +-inf and
    one at or below its minimum -- denormals of the reduced type included -- becomes +-0; NaN stays
    NaN (quieted), also for mantissa_bits = 0."""
    ui = UINT_OF_BITS[x.dtype.itemsize * 8]
    nbits = x.dtype.itemsize * 8
    src_m = ml_dtypes.finfo(x.dtype).nmant
    src_e = nbits - 1 - src_m
    one = ui.type(1)
    xi = x.view(ui)
    sign_mask = ui.type(1 << (nbits - 1))
    exp_mask = ui.type(((1 << src_e) - 1) << src_m)
    is_nan = (xi & ~sign_mask) > exp_mask
    if mantissa_bits < src_m:
        shift = src_m - mantissa_bits
        last = ui.type(1 << shift)
        bias = (xi & last) >> ui.type(shift)
        bias = bias + ui.type((1 << (shift - 1)) - 1)
        rounded = (xi + bias) & ~(last - one)
        xi = np.where(is_nan, xi, rounded)
    if exponent_bits < src_e:
        ebias = (1 << (src_e - 1)) - 1
        rbias = (1 << (exponent_bits - 1)) - 1
        max_e = ui.type((ebias + rbias) << src_m)
        min_e = ui.type((ebias - rbias) << src_m)
        e = xi & exp_mask
        signed_zero = xi & sign_mask
        xi = np.where(e > max_e, signed_zero | exp_mask, xi)
        xi = np.where(e <= min_e, signed_zero, xi)
    out = xi.astype(ui, copy=False).view(x.dtype)
    quiet = (x.view(ui) | ui.type(1 << (src_m - 1))).astype(ui, copy=False).view(x.dtype)
    return np.where(is_nan, quiet, out)


@evaluator("reduce-precision")
def eval_reduce_precision(inst, args, ec):
    """Round to a float format of `exponent_bits`/`mantissa_bits` and back, on the operand's bits
    (f8/f4 in f16, e8m0 in f32). XLA: mantissa to nearest even (denormals round on their own bit
    pattern); overflow -> +-inf; values at or below the reduced minimum exponent (its denormals
    included) -> +-0; NaN stays NaN, also with mantissa_bits=0; dropped when it reduces nothing."""
    x = args[0]
    e, m = int(inst.attrs["exponent_bits"]), int(inst.attrs["mantissa_bits"])
    wide = x.dtype if x.dtype.itemsize >= 2 else F32 if x.dtype == E8M0 else F16   # f8/f6/f4 in f16
    info = ml_dtypes.finfo(wide)
    if e >= info.nexp and m >= info.nmant:               # nothing to reduce there: XLA drops the op
        return np.asarray(x)
    if wide == x.dtype:
        return np.asarray(reduce_precision(x, e, m))
    return np.asarray(round_float(reduce_precision(widen_float(x).astype(wide), e, m), x.dtype))


# ----------------------------------------------------------------------------- stochastic-convert

@evaluator("stochastic-convert")
def eval_stochastic_convert(inst, args, ec):
    """Float -> signed integer, rounding |x| up when the random unsigned operand is below the
    fraction scaled to 2^bits(random).  XLA decomposes it to: sign, abs, floor, fraction*2^bits
    converted to the random type, compare, +1, negate; then x <= min -> min and x >= max -> max
    (NaN -> 0).  The float steps run in the operand's type, each rounded like its own op."""
    x, rnd = args
    dst = np_dtype(inst.shape)
    lo, hi = int_range(etype(dst))
    src = x.dtype

    def op(v):                                           # one float op: flush, round to `src`
        return round_float(flush(v), src)
    with np.errstate(all="ignore"):
        w = flush(widen_float(x))
        a = widen_float(np.abs(x))
        trunc = op(np.floor(flush(a)))
        frac = op(flush(a) - flush(widen_float(trunc)))
        wide = F32 if src == F16 else src               # XLA upcasts f16's fraction to f32 here
        frac = widen_float(round_float(frac, wide))
        fixed = round_float(flush(frac * frac.dtype.type(2.0 ** etype(rnd.dtype).bits)), wide)
        up = rnd < convert(fixed, rnd.dtype)
        r = int_compute(convert(trunc, dst)).astype(np.int64)
        r = np.where(up, r + 1, r)
        r = np.where(w < 0, -r, r)
        r = np.where(w <= lo, lo, np.where(w >= hi, hi, r))
    return np.asarray(wrap_int(np.asarray(r), dst))


# ============================================================================ prepare stages
# (registry.prepare: once per instruction at compile time; kernels.py)

_NATIVE_INTS = frozenset(np.dtype(t) for t in (np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16,
                                               np.uint32, np.uint64, np.bool_))


@prepares("convert")
def _prepare_convert(inst, ops, st):
    """Integer and pred conversions among the native widths: NumPy's cast wraps, sign-extends
    and reads nonzero as true, as XLA's convert does."""
    dt, src = shape_dtype(inst), shape_dtype(st.node(ops[0]))
    if dt not in _NATIVE_INTS or src not in _NATIVE_INTS:
        return None
    return Fast(lambda x: x.astype(dt), clean=True, elementwise=True)
