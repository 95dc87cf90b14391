"""Shape rules of the shape-manipulation family: broadcast, reshape, transpose, slices, pad, ...

XLA's rules (``ShapeInference::Infer{Slice,DynamicSlice,DynamicUpdateSlice,Concat,Pad,Reverse,
Transpose,GetDimensionSize,SetDimensionSize}Shape`` and the HLO verifier's own checks of
broadcast, reshape, dynamic-reshape, iota and bitcast).  Operands must have the element type of
the result where data only moves (no mixed precision).  Opcodes whose result XLA cannot infer
(reshape, dynamic-reshape, iota, bitcast) take it from the declared shape and check what can be
checked; broadcast without a declared shape follows XLA's parser (``dimensions`` are then read as
the sizes of new major dimensions).
"""
from __future__ import annotations

from ...ir.shape import UNBOUNDED
from ..registry import fail
from .elementwise import (ATTRIBUTE, INTEGRAL, check_arity, check_kind, check_same_element_type,
                          dims_attr, dims_text, family, int_attr, is_array, is_scalar, kind,
                          like, array, one_operand, require_array, require_declared,
                          require_operand_type, seq, bits)
from .reduction import expect_arrays

_INT32_MAX = 2**31 - 1


def _check_dims_in_range(op, what, dims, rank, operands, unique=True, sorted_=False):
    for d in dims:
        if not 0 <= d < rank:
            fail(op, f"every entry of {what}", f"be in [0, {rank})", seq(dims), operands, ATTRIBUTE)
    if unique and len(set(dims)) != len(dims):
        fail(op, f"the entries of {what}", "be distinct", seq(dims), operands, ATTRIBUTE)
    if sorted_ and list(dims) != sorted(dims):
        fail(op, f"the entries of {what}", "be sorted", seq(dims), operands, ATTRIBUTE)


def _elements(shape) -> int:
    n = 1
    for d in shape.dims:
        n *= d
    return n


# ----------------------------------------------------------------------------- broadcast

@family("broadcast")
def infer_broadcast(operands, attrs, ctx):
    """broadcast(x), dimensions=D: x's dimension i becomes result dimension D[i] (same size); the
    other result dimensions come from the declared shape."""
    op = ctx.opcode
    x = one_operand(op, operands)
    if "dimensions" not in attrs and x.rank:
        fail(op, "the attribute dimensions", "be given for a non-scalar operand", "none", operands,
             ATTRIBUTE)
    dims = dims_attr(op, attrs, "dimensions", operands, default=())
    declared = getattr(ctx, "declared", None)
    if declared is None:
        # XLA's parser infers dimensions + operand dims (dimensions read as sizes)
        if any(d < 0 for d in dims):
            fail(op, "dimensions", "be non-negative sizes (no result shape was written)", seq(dims),
                 operands, ATTRIBUTE)
        return array(x.element_type, tuple(dims) + x.dims, (False,) * len(dims) + x.dynamic)
    out = require_declared(op, ctx, operands)
    require_operand_type(op, x, out, operands)
    if len(dims) != x.rank:
        fail(op, "dimensions", f"have one entry per operand dimension ({x.rank})", seq(dims),
             operands, ATTRIBUTE)
    _check_dims_in_range(op, "dimensions", dims, out.rank, operands)
    for i, d in enumerate(dims):
        if out.dims[d] != x.dims[i]:
            # XLA's verifier (HandleBroadcast) wants equal sizes: HLO's broadcast never expands a
            # size-1 dimension (StableHLO's broadcast_in_dim does, and reaches HLO as reshape + broadcast)
            hint = (" (HLO's broadcast does not expand a size-1 dimension: reshape it away and leave it out "
                    "of dimensions)") if x.dims[i] == 1 else ""
            fail(op, f"result dimension {d} (operand dimension {i})",
                 f"have the operand's size {x.dims[i]}{hint}",
                 f"{out.dims[d]} in {dims_text(out)}", operands)
    return like(out)


# ----------------------------------------------------------------------------- reshape

def _check_element_count(op, x, out, operands, what):
    """reshape and dynamic-reshape keep the operand's element count (unbounded dimensions aside)."""
    if UNBOUNDED not in x.dims and UNBOUNDED not in out.dims and _elements(x) != _elements(out):
        fail(op, what, f"be preserved ({_elements(x)} in {dims_text(x)})",
             f"{_elements(out)} in {dims_text(out)}", operands)


@family("reshape")
def infer_reshape(operands, attrs, ctx):
    """reshape(x): the declared shape, with x's element type and element count."""
    op = ctx.opcode
    x = one_operand(op, operands)
    out = require_declared(op, ctx, operands)
    require_operand_type(op, x, out, operands)
    _check_element_count(op, x, out, operands, "the element count")
    if "inferred_dimension" in attrs:
        k = int_attr(op, attrs, "inferred_dimension", operands)
        if not 0 <= k < out.rank:
            fail(op, "inferred_dimension", f"be in [0, {out.rank})", k, operands, ATTRIBUTE)
    return like(out)


@family("dynamic-reshape")
def infer_dynamic_reshape(operands, attrs, ctx):
    """dynamic-reshape(x, sizes...): one s32[] size per result dimension; the declared shape
    (bounds) keeps x's element type and element count."""
    op = ctx.opcode
    x = require_array(op, operands, 0, "the operand")
    out = require_declared(op, ctx, operands)
    sizes = operands[1:]
    if len(sizes) != out.rank:
        fail(op, "the number of size operands", f"be the result rank {out.rank}", len(sizes), operands)
    for i, s in enumerate(sizes, 1):
        if not (is_array(s) and s.rank == 0 and s.element_type == "s32"):
            fail(op, f"size operand {i}", "be s32[]", s.to_str(False), operands)
    require_operand_type(op, x, out, operands)
    _check_element_count(op, x, out, operands, "the element count (of the bounds)")
    return like(out)


# ----------------------------------------------------------------------------- transpose / reverse

@family("transpose")
def infer_transpose(operands, attrs, ctx):
    """transpose(x), dimensions=P: result dimension i is x's dimension P[i]."""
    op = ctx.opcode
    x = one_operand(op, operands)
    perm = dims_attr(op, attrs, "dimensions", operands)
    if sorted(perm) != list(range(x.rank)):
        fail(op, "dimensions", f"be a permutation of {seq(range(x.rank))}", seq(perm), operands,
             ATTRIBUTE)
    return array(x.element_type, [x.dims[p] for p in perm], [x.dynamic[p] for p in perm])


@family("reverse")
def infer_reverse(operands, attrs, ctx):
    """reverse(x), dimensions=D: distinct dimensions of x; result: x's shape."""
    op = ctx.opcode
    x = one_operand(op, operands)
    dims = dims_attr(op, attrs, "dimensions", operands)
    _check_dims_in_range(op, "dimensions", dims, x.rank, operands)
    return like(x)


# ----------------------------------------------------------------------------- slice

def _per_dimension(op, attrs, name, entry, x, operands):
    """The attribute `name` (slice, padding): given, with one `entry` per dimension of the operand x."""
    cfg = attrs.get(name)
    if cfg is None:
        fail(op, f"the attribute {name}", "be given", "none", operands, ATTRIBUTE)
    if len(cfg.dimensions) != x.rank:
        fail(op, name, f"have one {entry} per operand dimension ({x.rank})",
             f"{len(cfg.dimensions)} in {cfg}", operands, ATTRIBUTE)
    return cfg


@family("slice")
def infer_slice(operands, attrs, ctx):
    """slice(x), slice={[start:limit:stride], ...}: 0 <= start <= limit <= size, stride > 0;
    result size ceil((limit - start) / stride)."""
    op = ctx.opcode
    x = one_operand(op, operands)
    spec = _per_dimension(op, attrs, "slice", "[start:limit:stride]", x, operands)
    sdims = spec.dimensions
    sizes, dyn = [], []
    for i, (sd, n, dn) in enumerate(zip(sdims, x.dims, x.dynamic)):
        where = f"[{sd.start}:{sd.limit}:{sd.stride}] (dimension {i} of size {n})"
        if sd.start < 0:
            fail(op, "a slice start", "be non-negative", where, operands, ATTRIBUTE)
        if n != UNBOUNDED and sd.limit > n:
            fail(op, "a slice limit", "not exceed the dimension size", where, operands, ATTRIBUTE)
        if sd.start > sd.limit:
            fail(op, "a slice start", "not exceed its limit", where, operands, ATTRIBUTE)
        if sd.stride <= 0:
            fail(op, "a slice stride", "be positive", where, operands, ATTRIBUTE)
        size = -(-(sd.limit - sd.start) // sd.stride)
        sizes.append(size)
        dyn.append(bool(dn) and n != UNBOUNDED and size != 1)   # slicing 1 out of a dynamic dim is static
    return array(x.element_type, sizes, dyn)


def _check_indices(op, operands, first, count_expected, what="start indices"):
    """Scalar integer start indices of one element type (or XLA's legacy rank-1 index vector)."""
    idx = operands[first:]
    if len(idx) == 1 and is_array(idx[0]) and idx[0].rank == 1:
        # legacy form: one rank-1 vector holding every start index
        v = idx[0]
        check_kind(op, operands, first, INTEGRAL, f"the {what}' element type")
        if v.dims[0] != count_expected:
            fail(op, f"the {what} vector", f"have one entry per operand dimension ({count_expected})",
                 v.to_str(False), operands)
        return
    if len(idx) != count_expected:
        fail(op, f"the number of {what}", f"be the operand rank {count_expected}", len(idx), operands)
    for i, s in enumerate(idx, first):
        if not is_scalar(s):
            fail(op, "every start index", "be a scalar", f"{s.to_str(False)} (operand {i})",
                 operands)
        check_kind(op, operands, i, INTEGRAL, f"the {what}' element type")
    if idx:
        check_same_element_type(op, operands, range(first, len(operands)), f"the {what}' element types")


@family("dynamic-slice")
def infer_dynamic_slice(operands, attrs, ctx):
    """dynamic-slice(x, starts...), dynamic_slice_sizes=S: one scalar integer start per dimension
    (one type), 0 <= S[i] <= size[i]; result dimensions S."""
    op = ctx.opcode
    if not operands:
        fail(op, "the operand count", "be at least 1", 0, operands)
    x = require_array(op, operands, 0, "the operand")
    _check_indices(op, operands, 1, x.rank)
    sizes = dims_attr(op, attrs, "dynamic_slice_sizes", operands)
    if len(sizes) != x.rank:
        fail(op, "dynamic_slice_sizes", f"have one entry per operand dimension ({x.rank})", seq(sizes),
             operands, ATTRIBUTE)
    for i, (s, n) in enumerate(zip(sizes, x.dims)):
        if s < 0 or (n != UNBOUNDED and s > n):
            fail(op, f"dynamic_slice_sizes[{i}]", f"be in [0, {n}] (the operand's dimension {i})",
                 s, operands, ATTRIBUTE)
    dyn = [bool(x.dynamic[i]) and s > 1 and s == x.dims[i] for i, s in enumerate(sizes)]
    return array(x.element_type, sizes, dyn)


@family("dynamic-update-slice")
def infer_dynamic_update_slice(operands, attrs, ctx):
    """dynamic-update-slice(x, update, starts...): update of x's rank and element type, no larger
    than x; one scalar integer start per dimension; result: x's shape."""
    op = ctx.opcode
    if len(operands) < 2:
        fail(op, "the operand count", "be at least 2", len(operands), operands)
    x = require_array(op, operands, 0, "the operand")
    u = require_array(op, operands, 1, "the update")
    _check_indices(op, operands, 2, x.rank)
    if u.rank != x.rank:
        fail(op, "the update's rank", f"be the operand's ({x.rank})", u.rank, operands)
    check_same_element_type(op, operands, (0, 1), "the element types of the operand and the update")
    for i, (a, b) in enumerate(zip(u.dims, x.dims)):
        if a != UNBOUNDED and b != UNBOUNDED and a > b:
            fail(op, f"the update's dimension {i}", f"not exceed the operand's ({b})",
                 f"{a} in {dims_text(u)}", operands)
    dyn = [bool(x.dynamic[i]) or (bool(u.dynamic[i]) and u.dims[i] == x.dims[i]) for i in range(x.rank)]
    return array(x.element_type, x.dims, dyn)


# ----------------------------------------------------------------------------- concatenate / pad

@family("concatenate")
def infer_concatenate(operands, attrs, ctx):
    """concatenate(xs...), dimensions={d}: same rank and element type, equal sizes except along d."""
    op = ctx.opcode
    expect_arrays(ctx, operands)
    dims = dims_attr(op, attrs, "dimensions", operands)
    if len(dims) != 1:
        fail(op, "dimensions", "name exactly one dimension", seq(dims), operands, ATTRIBUTE)
    d = dims[0]
    first = operands[0]
    if not 0 <= d < first.rank:
        fail(op, "the concatenation dimension", f"be in [0, {first.rank})", d, operands, ATTRIBUTE)
    for i, s in enumerate(operands[1:], 1):
        if s.rank != first.rank:
            fail(op, "the operands' ranks", "be equal", f"{first.rank} vs {s.rank} (operand {i})",
                 operands)
    check_same_element_type(op, operands, range(len(operands)))
    out_dims, out_dyn = list(first.dims), list(first.dynamic)
    for i, s in enumerate(operands[1:], 1):
        for k in range(first.rank):
            if k == d:
                continue
            a, b = out_dims[k], s.dims[k]
            if a != b and UNBOUNDED not in (a, b):
                fail(op, f"the operands' dimension {k}",
                     f"be equal (only dimension {d} is concatenated)",
                     " vs ".join(dims_text(o) for o in operands), operands)
            if a == UNBOUNDED:
                out_dims[k] = b
            out_dyn[k] = out_dyn[k] or s.dynamic[k]
    along = [s.dims[d] for s in operands]
    out_dims[d] = UNBOUNDED if UNBOUNDED in along else sum(along)
    out_dyn[d] = any(s.dynamic[d] for s in operands)
    return array(first.element_type, out_dims, out_dyn)


@family("pad")
def infer_pad(operands, attrs, ctx):
    """pad(x, value), padding=lo_hi[_interior]x...: value a scalar of x's element type; interior
    >= 0 (edges may be negative); size lo + hi + n + max(n - 1, 0) * interior >= 0."""
    op = ctx.opcode
    check_arity(op, operands, 2)
    x = require_array(op, operands, 0, "the operand")
    v = require_array(op, operands, 1, "the padding value")
    if v.rank != 0:
        fail(op, "the padding value", "be a scalar", v.to_str(False), operands)
    check_same_element_type(op, operands, (0, 1), "the element types of the operand and the padding value")
    cfg = _per_dimension(op, attrs, "padding", "low_high[_interior] entry", x, operands)
    pd = cfg.dimensions
    sizes = []
    for i, (p, n) in enumerate(zip(pd, x.dims)):
        if p.interior < 0:
            fail(op, "interior padding", "be non-negative", f"{p.interior} in dimension {i} ({cfg})",
                 operands, ATTRIBUTE)
        if n == UNBOUNDED:
            sizes.append(UNBOUNDED)
            continue
        size = n + p.low + p.high + max(n - 1, 0) * p.interior
        if size < 0:
            fail(op, f"the padded size of dimension {i}", "be non-negative",
                 f"{size} ({n} + {p.low} + {p.high} + {max(n - 1, 0)}*{p.interior})", operands,
                 ATTRIBUTE)
        sizes.append(size)
    return array(x.element_type, sizes, x.dynamic)


# ----------------------------------------------------------------------------- iota / copy / bitcast

@family("iota")
def infer_iota(operands, attrs, ctx):
    """iota(), iota_dimension=d: the declared shape, an integer, floating-point or complex array of
    rank >= 1 with 0 <= d < rank."""
    op = ctx.opcode
    check_arity(op, operands, 0)
    out = require_declared(op, ctx, operands)
    if out.rank == 0:
        fail(op, "the result", "have rank >= 1 (iota of a scalar)", out.to_str(False), operands)
    d = int_attr(op, attrs, "iota_dimension", operands)
    if not 0 <= d < out.rank:
        fail(op, "iota_dimension", f"be in [0, {out.rank}) for {out.to_str(False)}", d, operands,
             ATTRIBUTE)
    if kind(out) == "pred":
        fail(op, "the result element type", "be integer, floating-point or complex", "pred", operands)
    return like(out)


@family("copy")
def infer_copy(operands, attrs, ctx):
    """copy(x): x's shape (arrays and tuples)."""
    check_arity(ctx.opcode, operands, 1)
    return like(operands[0])


def _bits_of(shape) -> int:
    """The storage bits of an array shape, layout-insensitively: sub-byte types take a byte per
    element unless the layout packs them (E(n))."""
    n = 1
    for d in shape.dims:
        n *= max(d, 0)
    ebits = bits(shape.element_type)
    lay = shape.layout
    if lay is not None and lay.element_size_in_bits:
        ebits = lay.element_size_in_bits
    elif ebits < 8:
        ebits = 8
    return n * ebits


def size_text(nbits: int) -> str:
    """A storage size for messages: whole bytes as bytes, else bits."""
    return f"{nbits // 8} bytes" if nbits % 8 == 0 else f"{nbits} bits"


@family("bitcast")
def infer_bitcast(operands, attrs, ctx):
    """bitcast(x): the declared array shape, of x's size in bytes."""
    op = ctx.opcode
    x = one_operand(op, operands)
    out = require_declared(op, ctx, operands)
    if UNBOUNDED not in x.dims and UNBOUNDED not in out.dims:
        a, b = _bits_of(x), _bits_of(out)
        if a != b:
            fail(op, "the result's size", f"be the operand's ({size_text(a)})",
                 f"{size_text(b)} for {out.to_str(False)}", operands)
    return like(out)


# ----------------------------------------------------------------------------- dimension sizes

def _one_dimension(op, attrs, x, operands):
    dims = dims_attr(op, attrs, "dimensions", operands)
    if len(dims) != 1:
        fail(op, "dimensions", "name exactly one dimension", seq(dims), operands, ATTRIBUTE)
    d = dims[0]
    if not 0 <= d < x.rank:
        fail(op, "the dimension", f"be in [0, {x.rank})", d, operands, ATTRIBUTE)
    if x.dims[d] > _INT32_MAX:
        fail(op, f"the size of dimension {d}", "fit in s32", x.dims[d], operands)
    return d


@family("get-dimension-size")
def infer_get_dimension_size(operands, attrs, ctx):
    """get-dimension-size(x), dimensions={d}: s32[]."""
    op = ctx.opcode
    x = one_operand(op, operands)
    _one_dimension(op, attrs, x, operands)
    return array("s32", ())


@family("set-dimension-size")
def infer_set_dimension_size(operands, attrs, ctx):
    """set-dimension-size(x, size), dimensions={d}: size is s32[]; result: x with dimension d dynamic."""
    op = ctx.opcode
    check_arity(op, operands, 2)
    x = require_array(op, operands, 0, "the operand")
    s = operands[1]
    if not (is_array(s) and s.rank == 0 and s.element_type == "s32"):
        fail(op, "the size operand", "be s32[]", s.to_str(False), operands)
    d = _one_dimension(op, attrs, x, operands)
    dyn = list(x.dynamic)
    dyn[d] = True
    return array(x.element_type, x.dims, dyn)
