"""Shape manipulation without arithmetic: broadcast, reshape, transpose, reverse, slice, concatenate,
pad, iota, bitcast, and the dynamic-shape ops (dynamic-reshape, get/set-dimension-size).

Values carry logical dims; layouts matter only to `bitcast`, which reinterprets the physical buffer.
A value of a dynamic shape (`f32[<=8]`) is an array of its runtime size.
"""
from __future__ import annotations

import numpy as np

from ...errors import HloEvalError
from ...ir.dtypes import ELEMENT_TYPES
from ..kernels import SAME, Fast, all_clean, declare, flag_free, shape_dtype
from ..registry import evaluator, prepares
from ..values import np_dtype


@evaluator("broadcast")
def eval_broadcast(inst, args, ec):
    """Result[i...] = operand[i at `dimensions`]: operand dim k becomes result dim dimensions[k]
    (a read-only broadcast view, no copy)."""
    x = args[0]
    dims = tuple(inst.attrs.get("dimensions") or ())
    order = sorted(range(len(dims)), key=lambda k: dims[k])
    if order != list(range(len(dims))):          # unsorted dimensions also transpose the operand
        x = x.transpose(order)
        dims = tuple(dims[k] for k in order)
    out = list(inst.shape.dims)
    for k, d in enumerate(dims):                 # dynamic operand dims give the result's runtime size
        out[d] = x.shape[k]
    view = [1] * len(out)
    for k, d in enumerate(dims):
        view[d] = x.shape[k]
    return np.broadcast_to(x.reshape(view), tuple(out))


@evaluator("reshape")
def eval_reshape(inst, args, ec):
    """The operand's elements in row-major (logical) order, regrouped into the result dims;
    layouts play no part (unlike bitcast)."""
    x = args[0]
    shape = inst.shape
    if shape.is_dynamic and x.size != shape.num_elements:
        dims = [-1 if dyn else n for n, dyn in zip(shape.dims, shape.dynamic)]
        if dims.count(-1) > 1:
            raise HloEvalError(f"reshape of a dynamic {list(x.shape)} into {shape.to_str(False)}: "
                               f"more than one dynamic dimension to infer")
        return x.reshape(dims)
    return x.reshape(shape.dims)


@evaluator("transpose")
def eval_transpose(inst, args, ec):
    """Result dim i is operand dim dimensions[i] (numpy's transpose(axes) exactly)."""
    return args[0].transpose(tuple(inst.attrs["dimensions"]))


@evaluator("reverse")
def eval_reverse(inst, args, ec):
    """The operand with the order of elements reversed along each of `dimensions`."""
    x = args[0]
    dims = set(inst.attrs["dimensions"])
    return x[tuple(slice(None, None, -1) if d in dims else slice(None) for d in range(x.ndim))]


@evaluator("slice")
def eval_slice(inst, args, ec):
    """operand[start:limit:stride] in every dimension (copied, so the operand can be freed)."""
    x = args[0]
    spec = inst.attrs["slice"]
    return np.array(x[tuple(slice(d.start, d.limit, d.stride) for d in spec.dimensions)])


@evaluator("concatenate")
def eval_concatenate(inst, args, ec):
    """The operands joined along dimensions[0]."""
    return np.concatenate(args, axis=inst.attrs["dimensions"][0])


@evaluator("pad")
def eval_pad(inst, args, ec):
    """The operand with `interior` padding values between elements and `low`/`high` values at the
    edges of each dimension; negative low/high padding removes elements from that edge."""
    x, value = args
    cfg = inst.attrs["padding"].dimensions
    out_dims = []
    for n, p in zip(x.shape, cfg):
        out_dims.append(max(p.low + p.high + n + max(n - 1, 0) * p.interior, 0))
    out = np.full(out_dims, value, dtype=x.dtype)
    dst, src = [], []
    for n, p, m in zip(x.shape, cfg, out_dims):
        step = p.interior + 1
        # operand element i lands at p.low + i*step; keep those inside [0, m)
        i0 = (-p.low + step - 1) // step if p.low < 0 else 0
        i1 = min(n - 1, (m - 1 - p.low) // step) if m > 0 else -1
        if i1 < i0:
            return out
        dst.append(slice(p.low + i0 * step, p.low + i1 * step + 1, step))
        src.append(slice(i0, i1 + 1))
    out[tuple(dst)] = x[tuple(src)]
    return out


def _from_index(i: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Integer indices converted as XLA converts integers: wrap to narrow integer types, nonzero
    to true, round to nearest even for floats (exact up to 2^53, so one rounding)."""
    if dtype == np.bool_:
        return i != 0
    if dtype.kind in "iu":
        return i.astype(dtype)
    et = next((e for e in ELEMENT_TYPES.values() if e.numpy == dtype), None)
    if et is not None and et.kind == "int":                   # s1/s2/s4 (ml_dtypes): wrap
        b = et.bits
        return (((i + (1 << (b - 1))) % (1 << b)) - (1 << (b - 1))).astype(dtype)
    if et is not None and et.kind == "uint":                  # u1/u2/u4
        return (i % (1 << et.bits)).astype(dtype)
    if dtype.kind == "c":
        return i.astype(np.float64).astype(dtype)
    with np.errstate(over="ignore", invalid="ignore"):
        return i.astype(np.float64).astype(dtype)


@evaluator("iota")
def eval_iota(inst, args, ec):
    """result[i...] = i[iota_dimension], converted to the element type (a broadcast view)."""
    dims = tuple(inst.shape.dims)
    d = inst.attrs["iota_dimension"]
    vals = _from_index(np.arange(dims[d], dtype=np.int64), np_dtype(inst.shape))
    view = [1] * len(dims)
    view[d] = dims[d]
    return np.broadcast_to(vals.reshape(view), dims)


def _to_physical(x: np.ndarray, layout) -> np.ndarray:
    """The array in memory order (major to minor) given its layout; a default layout is the identity."""
    if layout is None or not x.ndim:
        return x
    major_to_minor = tuple(reversed(layout.minor_to_major))
    return x if major_to_minor == tuple(range(x.ndim)) else x.transpose(major_to_minor)


@evaluator("bitcast")
def eval_bitcast(inst, args, ec):
    """Reinterpret the operand's buffer: logical -> physical order (operand layout) -> flat bytes ->
    the result's physical dims -> logical order (result layout).  Same byte size; the element type
    may change (raw bytes viewed as the new type)."""
    x = args[0]
    shape = inst.shape
    if shape.rank == 0 and np.size(x) != 1:
        # a scalar computation applied to whole arrays (ec.apply: comparators, reducers) gets an
        # array of scalars: reinterpret each element
        return np.asarray(x).view(np_dtype(shape))
    src_layout = _operand_layout(inst, ec)
    phys = np.ascontiguousarray(_to_physical(x, src_layout)).reshape(-1)
    dt = np_dtype(shape)
    if dt != phys.dtype:
        if phys.dtype.itemsize * phys.size != dt.itemsize * shape.num_elements or _is_subbyte(dt) \
                or _is_subbyte(phys.dtype):
            raise HloEvalError(f"bitcast of {x.dtype}{list(x.shape)} to {shape.to_str(False)}: the byte sizes "
                               f"differ or a sub-byte type is involved")
        phys = phys.view(dt)
    lay = shape.layout
    m2m = tuple(lay.minor_to_major) if lay is not None else tuple(range(len(shape.dims) - 1, -1, -1))
    major_to_minor = tuple(reversed(m2m))
    pdims = [shape.dims[d] for d in major_to_minor]
    out = phys.reshape(pdims)
    return out.transpose(np.argsort(major_to_minor)) if major_to_minor != tuple(range(len(pdims))) else out


def _is_subbyte(dt: np.dtype) -> bool:
    et = next((e for e in ELEMENT_TYPES.values() if e.numpy == dt), None)
    return et is not None and et.bits < 8 and et.kind != "pred"


_BITCAST_LAYOUTS: dict[int, tuple] = {}     # id(module) -> (module, {id(bitcast inst): operand layout})


def _operand_layout(inst, ec):
    """The layout of the bitcast's operand: its inline operand shape if written, else its definition's."""
    if inst.operand_shapes and inst.operand_shapes[0] is not None and inst.operand_shapes[0].layout is not None:
        return inst.operand_shapes[0].layout
    module = ec.module
    entry = _BITCAST_LAYOUTS.get(id(module))
    if entry is None or entry[0] is not module:
        table = {}
        for comp in module.computations:
            for i in comp.instructions:
                if i.opcode == "bitcast" and i.operands and i.operands[0] in comp.by_name:
                    table[id(i)] = comp.by_name[i.operands[0]].shape.layout
        if len(_BITCAST_LAYOUTS) > 16:
            _BITCAST_LAYOUTS.clear()
        entry = _BITCAST_LAYOUTS[id(module)] = (module, table)
    if id(inst) not in entry[1]:
        raise HloEvalError(f"bitcast {inst.name}: cannot find the definition of its operand {inst.operands[0]}")
    return entry[1][id(inst)]


# --------------------------------------------------------------------------- dynamic shapes

@evaluator("get-dimension-size")
def eval_get_dimension_size(inst, args, ec):
    """The runtime size of dimension `dimensions[0]` as an s32 scalar.  (XLA echoes the value given to
    set-dimension-size even when it is outside [0, bound]; we report the clamped size.)"""
    return np.array(args[0].shape[inst.attrs["dimensions"][0]], dtype=np.int32)


@evaluator("set-dimension-size")
def eval_set_dimension_size(inst, args, ec):
    """The operand with dimension `dimensions[0]` given the runtime size `size`, clamped to
    [0, the operand's size] (XLA reads sizes beyond the bound as the bound)."""
    x, size = args
    d = inst.attrs["dimensions"][0]
    n = int(np.clip(int(size), 0, x.shape[d]))
    return x[(slice(None),) * d + (slice(0, n),)]


@evaluator("dynamic-reshape")
def eval_dynamic_reshape(inst, args, ec):
    """The first prod(sizes) elements of the operand (row-major) arranged into the runtime sizes
    (one s32 scalar per result dimension; a static result dimension keeps its declared size)."""
    x = args[0]
    shape = inst.shape
    dims = []
    for k, (n, dyn) in enumerate(zip(shape.dims, shape.dynamic)):
        dims.append(int(np.clip(int(args[1 + k]), 0, n)) if dyn else n)
    total = int(np.prod(dims, dtype=np.int64))
    if total > x.size:
        raise HloEvalError(f"dynamic-reshape of {x.size} elements into runtime sizes {dims} "
                           f"({total} elements)")
    return x.reshape(-1)[:total].reshape(dims)


# ============================================================================ prepare stages
# (registry.prepare: once per instruction at compile time; kernels.py)

@prepares("broadcast")
def _prepare_broadcast(inst, ops, st):
    """A read-only zero-stride view, its transpose and reshape decided once; a no-op broadcast is
    the operand itself."""
    src = st.node(ops[0]).shape
    if inst.shape.is_dynamic or src.is_dynamic or src.is_tuple:
        return None
    dims = tuple(inst.attrs.get("dimensions") or ())
    order = sorted(range(len(dims)), key=lambda k: dims[k])
    perm = None if order == list(range(len(dims))) else tuple(order)
    sdims = [dims[k] for k in order]
    out = tuple(inst.shape.dims)
    view = [1] * len(out)
    for k, d in enumerate(sdims):
        view[d] = src.dims[order[k]]
    view = tuple(view)
    dt = shape_dtype(inst)
    if dt is None:
        return None
    if perm is None and tuple(src.dims) == out and shape_dtype(st.node(ops[0])) == dt:
        return Fast(kind=SAME, clean=st.clean.get(ops[0], False))      # (XLA's no-op broadcasts)
    expand = [d for d in range(len(out)) if view[d] == 1 and out[d] != 1]

    def fn(x):
        if perm is not None:
            x = x.transpose(perm)
        x = x.reshape(view)
        if not x.flags.c_contiguous or x.dtype != dt:
            return np.broadcast_to(x, out)
        strides = list(x.strides)
        for d in expand:
            strides[d] = 0
        # a view of x with zero strides along the new dimensions (what np.broadcast_to makes,
        # without its argument handling), read-only like broadcast_to's
        r = np.ndarray(out, dt, x, 0, strides)
        r.flags.writeable = False
        return r
    declare(fn, flag_free=True)
    return Fast(fn, clean=st.is_clean(ops[0]))


@prepares("reshape")
def _prepare_reshape(inst, ops, st):
    """A reshape view (the operand itself when the dims do not change)."""
    if inst.shape.is_dynamic or st.node(ops[0]).shape.is_dynamic:
        return None
    dims = tuple(inst.shape.dims)
    if tuple(st.node(ops[0]).shape.dims) == dims and shape_dtype(st.node(ops[0])) == shape_dtype(inst):
        return Fast(kind=SAME, clean=st.clean.get(ops[0], False))
    return Fast(flag_free(lambda x: x.reshape(dims)), clean=st.is_clean(ops[0]))


@prepares("transpose")
def _prepare_transpose(inst, ops, st):
    """A transpose view."""
    perm = tuple(inst.attrs["dimensions"])
    return Fast(flag_free(lambda x: x.transpose(perm)), clean=st.is_clean(ops[0]))


@prepares("slice")
def _prepare_slice(inst, ops, st):
    """operand[start:limit:stride], copied (the rule's np.array of the view)."""
    if inst.shape.is_dynamic or st.node(ops[0]).shape.is_dynamic:
        return None
    key = tuple(slice(d.start, d.limit, d.stride) for d in inst.attrs["slice"].dimensions)
    array = np.array
    return Fast(lambda x: array(x[key]), clean=st.is_clean(ops[0]))


@prepares("concatenate")
def _prepare_concatenate(inst, ops, st):
    """np.concatenate along the attribute's dimension."""
    if inst.shape.is_dynamic or any(st.node(j).shape.is_dynamic for j in ops):
        return None
    axis = inst.attrs["dimensions"][0]
    cat = np.concatenate
    return Fast(lambda *xs: cat(xs, axis=axis), clean=all_clean(ops, st))


@prepares("bitcast")
def _prepare_bitcast(inst, ops, st):
    """A bitcast that keeps the element type: the operand in memory order (its layout), read in
    the result's memory order (the rule's reinterpretation, by reshapes and transposes)."""
    shape, src = inst.shape, st.node(ops[0]).shape
    if shape.is_tuple or src.is_tuple or shape.is_dynamic or src.is_dynamic or shape.rank == 0:
        return None
    dt = shape_dtype(inst)
    if dt is None or shape_dtype(st.node(ops[0])) != dt:
        return None
    given = inst.operand_shapes[0] if inst.operand_shapes else None
    layout = given.layout if given is not None and given.layout is not None else src.layout
    into = None
    if layout is not None and src.rank:
        into = tuple(reversed(layout.minor_to_major))
        if into == tuple(range(src.rank)):
            into = None
    lay = shape.layout
    m2m = tuple(lay.minor_to_major) if lay is not None else tuple(range(shape.rank - 1, -1, -1))
    major_to_minor = tuple(reversed(m2m))
    pdims = tuple(shape.dims[d] for d in major_to_minor)
    back = None if major_to_minor == tuple(range(shape.rank)) else tuple(int(d) for d in np.argsort(major_to_minor))

    def fn(x):
        if into is not None:
            x = x.transpose(into)
        x = x.reshape(pdims)
        return x if back is None else x.transpose(back)
    return Fast(flag_free(fn), clean=st.is_clean(ops[0]))
