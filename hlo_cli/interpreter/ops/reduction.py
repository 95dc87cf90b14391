"""Reductions and the other ops driven by a called computation: reduce, reduce-window,
select-and-scatter, map, sort, topk, scan.

The computations are recognized and mapped to NumPy where possible, else applied vectorized with
`ec.apply` (hlo_cli/interpreter/computations.py).  XLA CPU's fold orders, the init value's
multiplicity, NaN and -0 handling: hlo_cli/SEMANTICS.md ("Reductions and windows").

The rules of the ops here:
- select-and-scatter: per window the first valid (non-padding) position is selected, then each
  later one replaces it when select(selected, candidate) is false (GE keeps the first maximum, GT
  the last; NaN candidates win against GE/GT).  The output starts at the init value everywhere and
  the source values are combined in row-major source order: out = scatter(out, source).
- topk: XLA's TOTALORDER (-NaN < -inf < ... < -0 < +0 < ... < inf < +NaN), largest first (or
  smallest first), ties in index order; for every element type.
- scan: to_apply(input slices..., carries...) -> (outputs..., new carries...); outputs are stacked
  along `dimensions` (in place when is_reverse), the result is (outputs..., final carries...).
"""
from __future__ import annotations

from types import SimpleNamespace

import ml_dtypes
import numpy as np

from ...errors import HloEvalError
from ...ir.attributes import comparison_type
from .. import computations as C, ynn_sum
from ..fpenv import hardware
from ..kernels import TINY, WITH_EC, Fast, declare, min_reduce, shape_dtype
from ..registry import evaluator, prepares, rule_for
from .elementwise import hardware_nan_exact
from ..values import np_dtype


def _leaf_dtypes(shape):
    return [np_dtype(s) for s in shape.leaves()] if shape.is_tuple else [np_dtype(shape)]


def _result(inst, outs):
    dts = _leaf_dtypes(inst.shape)
    outs = [_own(np.asarray(o).astype(dt, copy=False)) for o, dt in zip(outs, dts)]
    return tuple(outs) if inst.shape.is_tuple else outs[0]


def _own(a: np.ndarray) -> np.ndarray:
    """A writable array that owns its data (no broadcast views leak out of the rules)."""
    return a if a.flags.writeable else np.array(a)


@evaluator("reduce")
def eval_reduce(inst, args, ec):
    """Reduce N inputs over `dimensions` with to_apply(accumulators..., values...) from the N init
    values; XLA CPU's order (a left fold in row-major order, tree-rewritten in windows of 32 when a
    reduced dimension is longer than 32, so a non-identity init is combined once per window), except
    that f32/f64 add-reduces of at least 4096 input elements add the init once to the sum, and a
    reduce of size-1 dimensions only ignores the init (hlo_cli/SEMANTICS.md)."""
    n = len(args) // 2
    name, dims = inst.attrs["to_apply"].name, inst.attrs["dimensions"]
    split = C.concatenated_parts(ec, inst, dims) if n == 1 else None
    if split is None or len(split[1]) < 2:
        return _result(inst, C.reduce_arrays(ec, name, args[:n], args[n:], dims))
    # XLA's simplifier: reduce(concatenate(a, b, ...)) = f(f(reduce(a), reduce(b)), ...)
    cat, lengths = split
    pieces = np.split(np.asarray(args[0]), np.cumsum(lengths)[:-1], axis=cat)
    red = C.reducer(ec, name, 1)
    acc = None
    for piece in pieces:
        r = C.reduce_arrays(ec, name, [piece], args[1:], dims)
        acc = r if acc is None else C.combine_all(ec, red, acc, r)
    return _result(inst, acc)


@evaluator("reduce-window")
def eval_reduce_window(inst, args, ec):
    """Reduce every window of the N inputs (size/stride/padding/dilations) from the N init values;
    padding and base-dilation holes are skipped, long cumulative windows are computed in XLA CPU's
    blocks of 16, large f16/bf16 max/min pooling compares sign-magnitude integers as XLA CPU's
    YNNPACK does (computations.py)."""
    n = len(args) // 2
    wd = C.window_dims(inst.attrs.get("window"), np.ndim(args[0]))
    outs = C.reduce_window_arrays(ec, inst.attrs["to_apply"].name, args[:n], args[n:], wd)
    return _result(inst, outs)


def _compare(a, b, direction: str, ctype: str):
    if ctype == "FLOAT" and C.is_float(a.dtype):
        a, b = C.flush(a), C.flush(b)
    else:
        a, b = C.order_key(a, ctype), C.order_key(b, ctype)
    with np.errstate(invalid="ignore"):
        return {"EQ": np.equal, "NE": np.not_equal, "LT": np.less, "LE": np.less_equal,
                "GT": np.greater, "GE": np.greater_equal}[direction](a, b)


def _select_fn(ec, name: str):
    """select(selected, candidate) -> keep, and (direction, compare type) when it is a direct
    compare of the two parameters (run in NumPy), else None (the computation applied vectorized)."""
    comp = ec.module.computation_map.get(name)
    if comp is None:
        raise HloEvalError(f"computation '{name}' is not defined")
    root = comp.root_instruction
    if root.opcode == "compare" and len(root.operands) == 2:
        a, b = (comp.by_name[o] for o in root.operands)
        if a.opcode == b.opcode == "parameter" and {a.parameter_number, b.parameter_number} == {0, 1}:
            direction = str(root.attrs["direction"])
            if a.parameter_number == 1:
                direction = {"LT": "GT", "GT": "LT", "LE": "GE", "GE": "LE"}.get(direction, direction)
            et = a.shape.element_type
            ctype = comparison_type(root.attrs, et)
            return (lambda s, c: _compare(s, c, direction, ctype)), (direction, ctype)
    return (lambda s, c: C.apply(ec, name, [s, c], s.shape, [np.dtype(bool)])[0]), None


# select = compare(picked, candidate, direction): when no NaN is involved the candidate replaces
# the pick exactly when `take`(picked, candidate), and the picked value is a running max / min
_TAKE = {"GE": (np.less, np.maximum), "GT": (np.less_equal, np.maximum),
         "LE": (np.greater, np.minimum), "LT": (np.greater_equal, np.minimum)}


def _nan_max(sv, cand, out):
    """The pick's value after `cand` for GE/GT with NaN: the larger, a NaN candidate, or the
    candidate after a NaN pick (only its comparisons matter, not its NaN's bits; quiet NaNs:
    NumPy's strided fmax is libm's, which gives NaN for a signaling one)."""
    np.fmax(sv, cand, out=out)
    return np.maximum(out, cand, out=out)


def _nan_min(sv, cand, out):
    np.fmin(sv, cand, out=out)
    return np.minimum(out, cand, out=out)


# select's compare (keep the pick when true) and the pick's value after a candidate, with NaN
_KEEP_UFUNCS = {"GE": (np.greater_equal, _nan_max), "GT": (np.greater, _nan_max),
                "LE": (np.less_equal, _nan_min), "LT": (np.less, _nan_min)}


def _running_select(x: np.ndarray, how):
    """(take, running, start, operand) when select is a GE/GT/LE/LT compare NumPy computes as XLA
    does on `operand` (`x` or its f32 form): f32/f64 compared as FLOAT (subnormals read as zeros
    by the processor's DAZ flag, fpenv.py; with a NaN in `x`, NaN-aware take and running value:
    _KEEP_UFUNCS), f16/bf16 the same in f32, native integers of the compare's signedness; else
    None."""
    if how is None or how[0] not in _TAKE:
        return None
    direction, ctype = how
    take, running = _TAKE[direction]
    dt = x.dtype
    if dt in (np.float32, np.float64) and ctype == "FLOAT" and C.hardware() is not None:
        start = dt.type(-np.inf if running is np.maximum else np.inf)
        if x.size and np.isnan(x.max()):
            # NaN: an unordered compare is false, so a NaN candidate is taken and a NaN pick is
            # replaced by the next candidate; the pick is no running max/min: copied where taken
            keep, nan_running = _KEEP_UFUNCS[direction]
            quiet_x = np.where(np.isnan(x), dt.type(np.nan), x)     # (libm's fmax: sNaN -> NaN)
            return (lambda sv, cand: np.logical_not(keep(sv, cand))), nan_running, start, quiet_x
        return take, running, start, x
    if (dt.kind == "i" and ctype == "SIGNED") or (dt.kind == "u" and ctype == "UNSIGNED"):
        info = np.iinfo(dt)
        return take, running, dt.type(info.min if running is np.maximum else info.max), x
    if dt in (np.float16, ml_dtypes.bfloat16) and ctype == "FLOAT":
        # compared in f32, as XLA computes them (bf16 subnormals are f32 subnormals: DAZ)
        return _running_select(x.astype(np.float32), (direction, ctype))
    return None


@evaluator("select-and-scatter")
def eval_select_and_scatter(inst, args, ec):
    """For each window pick one position with `select` (the first valid one, replaced by each later
    candidate c when select(picked, c) is false; padding never picked), then start from the init
    value everywhere and combine each source value into its window's pick with `scatter`, in
    row-major source order.

    One sweep over the window positions picks (strided views of the operand; the picked position's
    number kept per window); a second sweep, over the positions in reverse, scatters: the windows
    that picked position t meet a strided view of the output, one element each, and an operand
    element gets its source values in row-major source order because later positions of a window
    belong to earlier windows."""
    x, src, init = (np.asarray(a) for a in args)
    if x.ndim == 0:                     # a scalar: one window of one element, as a vector
        return _result(inst, [_select_and_scatter_arrays(ec, inst, x.reshape(1), src.reshape(1),
                                                             init, [C.TRIVIAL_WINDOW]).reshape(())])
    wd = C.window_dims(inst.attrs.get("window"), x.ndim)
    return _result(inst, [_select_and_scatter_arrays(ec, inst, x, src, init, wd)])


def _select_and_scatter_arrays(ec, inst, x, src, init, wd):
    """The select-and-scatter of operand `x` (rank >= 1) and source `src` over the window dimensions `wd`."""
    rank = x.ndim
    outs = src.shape
    out = np.empty(x.shape, dtype=init.dtype)
    out[...] = init
    total = int(np.prod([w.size for w in wd], dtype=np.int64)) if rank else 1
    if not (src.size and x.size and total):
        return out
    # windows never cross the leading dimensions without a window: those merged and cut into
    # blocks that stay in the cache through both sweeps (as computations._in_blocks)
    k = 0
    while k < rank and C.trivial_window(wd[k]):
        k += 1
    blocks = [(x, src, out, wd)]
    if k and x.flags.c_contiguous and src.flags.c_contiguous:
        x2, src2, out2 = (a.reshape((-1,) + a.shape[k:]) for a in (x, src, out))
        wd2 = [C.TRIVIAL_WINDOW] + list(wd[k:])
        per = int(np.prod(src2.shape[1:], dtype=np.int64)) * max(x.dtype.itemsize, 4)
        n = max(1, C.SWEEP_BLOCK_BYTES // max(per, 1))
        blocks = [(x2[b:b + n], src2[b:b + n], out2[b:b + n], wd2) for b in range(0, x2.shape[0], n)]
    for xb, sb, ob, wb in blocks:
        taps = C.window_taps(xb.shape, wb, sb.shape)
        have, sel_tap = _select(ec, inst.attrs["select"].name, xb, sb.shape, taps, total)
        _scatter(ec, inst.attrs["scatter"].name, ob, sb, taps, have, sel_tap)
    return out


def _select(ec, name, x, outs, taps, total):
    """(have, tap): per window whether any position is valid and the number of the picked one."""
    keep, how = _select_fn(ec, name)
    have = np.zeros(outs, bool)
    sel_tap = np.zeros(outs, np.min_scalar_type(total))
    tdt = sel_tap.dtype.type
    fast = _running_select(x, how)
    if fast is not None:
        take_fn, running, start, x = fast
        sel_val = np.full(outs, start, x.dtype)

        def sweep():
            for t, o, i in taps:
                cand = x[i]
                h, sv, st = have[o], sel_val[o], sel_tap[o]
                take = take_fn(sv, cand)
                take |= ~h
                d = tdt(t) - st                  # st + take * (t - st), wrapping: no masked copy
                d *= take
                st += d
                running(sv, cand, out=sv)
                h[...] = True
        if x.dtype.kind == "f":
            C.flushing(sweep)
        else:
            sweep()
        return have, sel_tap
    sel_val = np.zeros(outs, x.dtype)
    for t, o, i in taps:
        cand = x[i]
        h, sv, st = have[o], sel_val[o], sel_tap[o]
        take = ~np.asarray(keep(sv, cand), bool)
        take |= ~h
        np.copyto(sv, cand, where=take)
        np.copyto(st, t, where=take, casting="unsafe")
        h[...] = True
    return have, sel_tap


def _scatter(ec, name, out, src, taps, have, sel_tap):
    """out[pick of each window] = scatter(out[...], source value), positions in reverse."""
    red = C.reducer(ec, name, 1)
    dt = out.dtype
    tdt = sel_tap.dtype.type
    partial = not have.all()
    if not red.generic and not red.pair and red.kinds[0][0] == "add" and src.dtype == dt \
            and dt in (np.float32, np.float64, np.float16, ml_dtypes.bfloat16) and C.hardware() is not None \
            and not (out.size and (np.signbit(out.flat[0]) or not np.isfinite(out.flat[0]))) \
            and _scatter_add(out, src, taps, have, sel_tap, partial):
        return
    fast = _scatter_ufunc(red, dt, src)
    # XLA CPU combines a float add/multiply scatter as (source, current) whichever way round the
    # computation writes it: a NaN source beats a NaN already there (hlo_cli/SEMANTICS.md)
    source_first = red.kinds[0][0] if not red.generic and not red.pair and C.is_float(dt) \
        and dt.kind != "c" and red.kinds[0][0] in ("add", "multiply") else None
    for t, o, i in reversed(taps):
        m = sel_tap[o] == tdt(t)
        if partial:
            m &= have[o]
        idx = np.nonzero(m)
        if idx[0].size == 0:
            continue
        tgt = out[i]
        if fast is not None:
            with np.errstate(all="ignore"):
                tgt[idx] = fast(tgt[idx], src[o][idx])
        elif source_first:
            tgt[idx] = _source_first(source_first, src[o][idx], tgt[idx])
        else:
            tgt[idx] = C.combine_all(ec, red, [tgt[idx]], [src[o][idx]])[0]


def _source_first(kind, s, t):
    """kind(s, t) on floats as XLA CPU's scatter computes it: where both are NaN, s's NaN, quieted
    (x86 keeps the first operand's; NumPy's add and multiply loops may swap the operands)."""
    r = np.array(C.combine(kind, s, t))
    both = np.isnan(s) & np.isnan(t)
    if both.any():
        r[both] = quiet(s[both])
    return r


def quiet(v):
    """NaNs `v` with their quiet bit set, as an arithmetic operation passes a NaN on."""
    u = {2: np.uint16, 4: np.uint32, 8: np.uint64}[v.dtype.itemsize]
    bit = u(1) << u(ml_dtypes.finfo(v.dtype).nmant - 1)
    return (v.view(u) | bit).view(v.dtype)


def _scatter_add(out, src, taps, have, sel_tap, partial):
    """The float add scatter into `out` (its init +0-like: finite, sign clear) as one sweep over the
    positions in reverse: each source value or a zero added where its window picked, which leaves
    a sum that started at +0 as it is (only -0 + +0 would change, and such sums are never -0).  The
    value * (picked here) when the source is finite; with non-finite source values (inf * 0 is
    NaN) the value where picked, else +0, and where a NaN source meets a NaN already there the
    source's bits, as XLA's (source, current) order gives them (_scatter; one NaN operand gives its
    bits either way round: elementwise.hardware_nan_exact).  FTZ/DAZ as XLA; f16/bf16 added in f32 and rounded
    after every add, as XLA computes them.  False (nothing done) where the NaN bits could differ."""
    dt = out.dtype
    tdt = sel_tap.dtype.type
    narrow = dt in (np.float16, ml_dtypes.bfloat16)
    vals = src.astype(np.float32) if narrow else src
    finite = bool(np.isfinite(src).all())
    if not finite and not hardware_nan_exact(np.add, vals.dtype):
        return False
    ivals = vals.view(np.int32 if vals.dtype.itemsize == 4 else np.int64)
    srcnan = qvals = None
    if not finite:
        srcnan = np.isnan(vals)
        if srcnan.any():
            qvals = quiet(vals)

    def sweep():
        for t, o, i in reversed(taps):
            m = sel_tap[o] == tdt(t)
            if partial:
                m &= have[o]
            tgt = out[i]
            if finite:
                v = vals[o] * m
                if narrow:
                    tgt[...] = (tgt.astype(np.float32) + v).astype(dt)
                else:
                    tgt += v
                continue
            # the value where picked, else +0: its bits AND-ed with all ones or zeros (np.where
            # on these strided views costs several adds); one NaN operand gives its bits whichever
            # comes first, two give the source's, quieted: XLA's (source, current) order
            v = np.bitwise_and(ivals[o], np.subtract(0, m, dtype=ivals.dtype)).view(vals.dtype)
            w = tgt.astype(np.float32) if narrow else tgt
            clash = None
            if qvals is not None:
                clash = m & srcnan[o]
                clash &= np.isnan(w)
                if not clash.any():
                    clash = None
            w += v
            if clash is not None:
                np.copyto(w, qvals[o], where=clash)
            if narrow:
                tgt[...] = w.astype(dt)
    with np.errstate(all="ignore"):
        C.flushing(sweep)
    return True


def _scatter_ufunc(red, dt: np.dtype, src: np.ndarray):
    """The scatter combiner as a ufunc when NumPy computes it as XLA does (integer and bool
    combiners of the same type), else None (combine())."""
    if red.generic or red.pair or src.dtype != dt or not (dt.kind in "iu" or dt == np.bool_):
        return None
    op = red.kinds[0][0]
    if dt == np.bool_:
        return {"add": np.logical_or, "maximum": np.logical_or, "minimum": np.logical_and,
                "and": np.logical_and, "or": np.logical_or, "xor": np.logical_xor,
                "multiply": np.logical_and}[op]
    return {"add": np.add, "multiply": np.multiply, "maximum": np.maximum, "minimum": np.minimum,
            "and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor}[op]


@evaluator("map")
def eval_map(inst, args, ec):
    """to_apply applied to the operands elementwise (a scalar computation run on whole arrays)."""
    name = inst.attrs["to_apply"].name
    dt = np_dtype(inst.shape)
    kind = C.recognize_binary(ec.module, name) if len(args) == 2 else None
    if kind is not None:
        return _result(inst, [C.combine(kind, np.asarray(args[0]), np.asarray(args[1]))])
    return _result(inst, C.apply(ec, name, args, tuple(inst.shape.dims), [dt]))


@evaluator("sort")
def eval_sort(inst, args, ec):
    """The operands sorted together along `dimensions` by the comparator (comparators of key
    functions are sorted with NumPy, others by a vectorized merge sort).  Always stable: XLA leaves
    the order of ties in an unstable sort unspecified."""
    dim = inst.attrs["dimensions"][0]
    outs = C.sort_arrays(ec, inst.attrs["to_apply"].name, args, dim, bool(inst.attrs.get("is_stable", False)))
    return _result(inst, outs)


@evaluator("topk")
def eval_topk(inst, args, ec):
    """The k largest (largest=true) or smallest entries of the last dimension and their s32 indices,
    in XLA's TOTALORDER (-NaN < -inf < ... < -0 < +0 < ... < +NaN), ties in index order."""
    x = np.asarray(args[0])
    k = int(inst.attrs["k"])
    largest = bool(inst.attrs.get("largest", True))
    key = C.total_order_key(x)
    if largest:
        key = C.descending_key(key)
    order = np.argsort(key, axis=-1, kind="stable")[..., :k]
    return _result(inst, [np.take_along_axis(x, order, -1), order.astype(np.int32)])


def _call(ec, name, args):
    """ec.call, leaving out arguments of parameters the computation never reads (the evaluator's
    plan drops them)."""
    slots = ec.plan(name).param_slots
    if len(slots) != len(args):
        args = [args[p] for p, _ in sorted(slots) if p < len(args)]
    return ec.call(name, args)


@evaluator("scan")
def eval_scan(inst, args, ec):
    """Loop over `dimensions`: to_apply(input slices..., carries...) -> (outputs..., new carries...),
    from the last slice first when is_reverse; outputs stacked along the dimension, then the final
    carries."""
    a = inst.attrs
    nc = int(a["num_carries"])
    dim = a["dimensions"][0]
    name = a["to_apply"].name
    inputs = [np.asarray(x) for x in args[:len(args) - nc]]
    carries = list(args[len(args) - nc:])
    leaves = list(inst.shape.tuple_shapes) if inst.shape.is_tuple else [inst.shape]
    nout = len(leaves) - nc
    length = inputs[0].shape[dim] if inputs else (leaves[0].dims[dim] if nout else 0)
    steps = range(length - 1, -1, -1) if a.get("is_reverse") else range(length)
    slices: list[list] = [[None] * length for _ in range(nout)]
    for t in steps:
        res = _call(ec, name, [np.asarray(np.take(x, t, axis=dim)) for x in inputs] + carries)
        res = list(res) if isinstance(res, tuple) else [res]
        for j in range(nout):
            slices[j][t] = res[j]
        carries = res[nout:]
    outs = []
    for j in range(nout):
        if length:
            outs.append(np.stack([np.asarray(s) for s in slices[j]], axis=dim))
        else:
            outs.append(np.zeros(leaves[j].dims, np_dtype(leaves[j])))
    vals = outs + carries
    if inst.shape.is_tuple:
        return tuple(_own(np.asarray(v)) if isinstance(v, np.ndarray) else v for v in vals)
    return _own(np.asarray(vals[0]))


# ============================================================================ prepare stages
# (registry.prepare: once per instruction at compile time; kernels.py)

ndarray = np.ndarray


@prepares("reduce")
def _prepare_reduce(inst, ops, st):
    """f32/f64 add-, max- and min-reduces of one array with a scalar init (the rule's
    decoding done once): sums follow the rule's order exactly (XLA's windows of 32, then one
    NumPy left fold per stage with the processor's FTZ/DAZ, the init once at the end for the
    library-sized ones); max/min take the extreme on the elements' bits as integers (bit_extreme:
    as fast with NaN in the data) and repair NaN, zero and subnormal results as the rule gives
    them."""
    if len(ops) != 2 or st.module is None:
        return None
    hw = hardware()
    src = st.node(ops[0])
    s, shape = src.shape, inst.shape
    if s.is_tuple or s.is_dynamic or shape.is_tuple or shape.is_dynamic or src.opcode == "concatenate":
        return None
    dt = shape_dtype(inst)
    rdims = inst.attrs["dimensions"]
    if rdims and all(0 <= d < s.rank and s.dims[d] == 1 for d in rdims) and dt is not None:
        # one element per output: XLA's simplifier makes the reduce a reshape (the init unused)
        out_dims = tuple(shape.dims)
        return Fast(lambda x, i: x.reshape(out_dims).astype(dt), clean=st.is_clean(ops[0]))
    if dt not in TINY or shape_dtype(src) != dt:
        return None
    init = st.const.get(ops[1])
    ishape = st.node(ops[1]).shape
    if ishape.is_tuple or ishape.rank != 0 or shape_dtype(st.node(ops[1])) != dt:
        return None
    red = C.reducer(SimpleNamespace(module=st.module), inst.attrs["to_apply"].name, 1)
    if red.pair or not red.kinds or red.kinds[0] is None:
        return None
    kind = red.kinds[0][0]
    dims = sorted(int(d) for d in inst.attrs["dimensions"])
    xdims = tuple(s.dims)
    keep = [d for d in range(len(xdims)) if d not in dims]
    out_shape = tuple(shape.dims)
    if not dims or any(xdims[d] == 0 for d in dims) or all(xdims[d] == 1 for d in dims) \
            or 0 in out_shape or tuple(xdims[d] for d in keep) != out_shape:
        return None
    rule = rule_for("reduce")
    if kind in ("maximum", "minimum"):
        uf = np.maximum if kind == "maximum" else np.minimum
        axes = tuple(dims)
        tiny = TINY[dt]
        scalar = out_shape == ()

        swapped = red.kinds[0][1]
        plain = all(xdims[d] <= C.TREE_WINDOW for d in dims)    # the rule folds whole rows
        perm = tuple(keep + dims)
        inplace = perm == tuple(range(len(xdims)))

        def fn(ec, x, i):
            r = uf(bit_extreme(kind, x, axes), i[()])
            if scalar:
                r = np.asarray(r)
            if min_reduce(np.abs(r), axis=None) >= tiny:
                return r
            if not plain or np.isnan(i[()]):
                return rule(inst, [x, i], ec)
            return _minmax_repair(kind, swapped, x, i, r, inplace, perm, tiny, lambda: rule(inst, [x, i], ec))
        declare(fn, raw_minmax=(uf, axes, scalar))      # (loopgen.py)
        return Fast(fn, WITH_EC)                # (the rule keeps a lone subnormal winner's bits)
    if kind != "add" or hw is None:
        return None
    n = 1
    for d in xdims:
        n *= d
    library = n >= C.LIBRARY_REDUCE_MIN and len(xdims) <= C.LIBRARY_REDUCE_MAX_RANK
    tiny = TINY[dt]
    zero = dt.type(0)
    if init is not None and not library:
        known = dt.type(C.flush(init)[()])
        if known == 0 and np.signbit(known):
            return None
    fset, on, off = hw
    add_reduce, add = np.add.reduce, np.add
    # the window stages (computations._native_sum), then the final fold: all static
    stages = []
    cur = xdims
    while any(cur[d] > C.TREE_WINDOW for d in dims):
        pads, split, pos_axes, out_axes, stage_shape = C.tree_stage(cur, dims)
        padded = None
        if any(lo or hi for lo, hi in pads):
            padded = (tuple(m + lo + hi for m, (lo, hi) in zip(cur, pads)),
                      tuple(slice(lo, lo + m) for m, (lo, _) in zip(cur, pads)))
        p = o = 1
        for a in pos_axes:
            p *= split[a]
        for a in out_axes:
            o *= split[a]
        stages.append((padded, tuple(split), tuple(pos_axes + out_axes), (p, o), tuple(stage_shape)))
        cur = tuple(stage_shape)
    p = o = 1
    for d in dims:
        p *= cur[d]
    for d in keep:
        o *= cur[d]
    final = (tuple(dims + keep), (p, o))

    def start_of(i):
        """The value the fold starts from, or None where the rule decides (a -0 or subnormal init
        starting the fold); with the processor's flags clear."""
        if library:                     # the elements summed from +0, the init added at the end
            return zero
        start = i[()]                   # the init (read with DAZ) starts the fold; -0: the rule
        if not abs(start) >= tiny and (start != 0 or np.signbit(start)):
            return None
        return start

    ynn = library                       # ynn_sum.reduce_sum: None where its order is unknown

    def flagged(x, i, start):
        """The sum from `start` (start_of), with the processor's FTZ/DAZ flags already set."""
        s = ynn_sum.reduce_sum(x, dims) if ynn else None
        if s is not None:               # YNNPACK's order (ynn_sum), then the init
            r = add(i[()], s)
            return r if r.__class__ is ndarray else np.asarray(r)
        for padded, split, perm, rows, stage_shape in stages:
            if padded is not None:
                z = np.zeros(padded[0], dt)
                z[padded[1]] = x
                x = z
            r = np.ascontiguousarray(x.reshape(split).transpose(perm)).reshape(rows)
            x = add_reduce(r, axis=0, initial=start).reshape(stage_shape)
        r = np.ascontiguousarray(x.transpose(final[0])).reshape(final[1])
        r = add_reduce(r, axis=0, initial=start).reshape(out_shape)
        if library:
            r = add(i[()], r)
        if r.__class__ is not ndarray:
            r = np.asarray(r)
        return r

    def fn(ec, x, i):
        start = start_of(i)
        if start is None:
            return rule(inst, [x, i], ec)
        fset(on)
        try:
            return flagged(x, i, start)
        finally:
            fset(off)
    declare(fn, raw_sum=(flagged, start_of))    # (loopgen.py)
    if not stages and not library:      # (loopgen.py: one NumPy reduce, `final` in its operand's order)
        declare(fn, raw_fold=(None if final[0] == tuple(range(len(xdims))) else final[0], final[1], out_shape))
    return Fast(fn, WITH_EC, clean=True)


# per float width: (signed, unsigned) integers of its bits, +inf's bits, -inf's bits as unsigned
_BITS = {4: (np.int32, np.uint32, 0x7F800000, 0xFF800000), 8: (np.int64, np.uint64, 0x7FF0000000000000,
                                                               0xFFF0000000000000)}


def bit_extreme(kind: str, x: np.ndarray, axes):
    """The max (min) of f32/f64 `x` over `axes` found on its bits read as integers, whose
    reductions cost the same with NaN in the data (NumPy's float max/min reductions of short rows
    slow down several times on NaN): a NaN where a row holds one (any NaN: the caller repairs its
    bits), else the row's extreme, -0 and +0 ordered (the caller repairs zero results too).

    max: the largest signed integer is the largest float of a row holding a value with its sign
    clear, or a +NaN; a row of sign-set values takes its smallest signed integer, and holds a -NaN
    when its largest one lies above -inf's.  min: the same with unsigned integers and the sign
    reversed.  A NaN of the other sign hides behind a row's extreme: one more reduction finds
    those rows, when a pass over the whole array finds one at all."""
    sint, uint, pinf, ninf = _BITS[x.itemsize]
    big = kind == "maximum"
    a = x.view(sint if big else uint)
    p = np.maximum.reduce(a, axis=axes)
    p = np.asarray(p)
    flip = p < 0 if big else p < uint(1 << (8 * x.itemsize - 1))      # rows of the other sign alone
    nan = p > (pinf if big else uint(ninf))
    if flip.any():
        rows = np.asarray(np.minimum.reduce(a, axis=axes))
        nan |= flip & (p > (sint(ninf - (1 << (8 * x.itemsize))) if big else uint(pinf)))
        p = np.where(flip, rows, p)
    other = x.view(uint if big else sint)               # NaNs of the other sign: hidden behind p
    hide = uint(ninf) if big else sint(pinf)
    if np.maximum.reduce(other, axis=None) > hide:
        nan |= np.asarray(np.maximum.reduce(other, axis=axes)) > hide
    r = p.view(x.dtype)
    if nan.any():
        r = np.where(nan, x.dtype.type(np.nan), r)
    return r


def _minmax_repair(kind, swapped, x, i, r, inplace, perm, tiny, whole_rule):
    """A max/min reduce's fast result `r` with its NaN, zero and subnormal outputs as the rule
    gives them: NaN outputs by computations.minmax_nan_results (a few passes over their rows),
    zero/subnormal ones (DAZ and the sign of zero decide there) by the rule's closed form on
    their rows alone; the whole rule when those are many."""
    rows = (x if inplace else np.transpose(x, perm)).reshape(r.size, -1)
    flat = np.array(r, copy=True).reshape(-1)
    nan = np.isnan(flat)
    small = np.flatnonzero(~nan & ~(np.abs(flat) >= tiny))
    if small.size * 8 > flat.size:
        return whole_rule()
    bad = np.flatnonzero(nan)
    if bad.size:
        flat[bad] = C.minmax_nan_results(kind, swapped, i[()], rows, bad)
    if small.size:
        flat[small] = C.fold_minmax_rows(kind, swapped, i[()], rows[small])
    return flat.reshape(r.shape)


@prepares("reduce-window")
def _prepare_reduce_window(inst, ops, st):
    """An f32/f64 add reduce-window whose windows tile the operand exactly (stride = size, no
    padding, no dilation: XLA's tree rewrite of long reductions): each output the sequential
    sum, from the init value, of its window in row-major order -- the rule's fold -- as one
    NumPy accumulate over the windows' positions with the processor's FTZ/DAZ (partial sums
    flushed, as XLA does)."""
    hw = hardware()
    if hw is None or len(ops) != 2 or st.module is None:
        return None
    src = st.node(ops[0]).shape
    dt = shape_dtype(inst)
    if dt not in TINY or shape_dtype(st.node(ops[0])) != dt or src.rank == 0 or src.is_dynamic:
        return None
    ishape = st.node(ops[1]).shape
    if ishape.is_tuple or ishape.rank != 0 or shape_dtype(st.node(ops[1])) != dt:
        return None
    red = C.reducer(SimpleNamespace(module=st.module), inst.attrs["to_apply"].name, 1)
    if red.pair or not red.kinds or red.kinds[0] is None or red.kinds[0][0] != "add":
        return None
    wd = C.window_dims(inst.attrs.get("window"), src.rank)
    dims = tuple(src.dims)
    if C.scan_form(dims, wd) is not None or wd[-1].size == 1:
        return None         # no window along the minor dimension (pooling): the rule's sweep is faster
    split, outs, size = [], [], 1
    for n, w in zip(dims, wd):
        if w.stride != w.size or w.padding_low or w.padding_high or w.window_dilation != 1 or w.base_dilation != 1 or w.size < 1 or n % w.size:
            return None
        split += [n // w.size, w.size]
        outs.append(n // w.size)
        size *= w.size
    outs = tuple(outs)
    if outs != tuple(inst.shape.dims) or size < 2 or 0 in outs:
        return None
    rank = src.rank
    perm = tuple(2 * d + 1 for d in range(rank)) + tuple(2 * d for d in range(rank))
    o = 1
    for m in outs:
        o *= m
    fset, on, off = hw
    # the rows of a C-contiguous (positions, outputs) array added in order: NumPy's reduce does
    # that for two or more outputs; for one the positions become its inner loop, which it sums
    # pairwise, so that one takes the accumulate
    # (from -0.0, the exact identity of IEEE addition: NumPy's own start, +0, turns a window of
    # -0s summed from a -0 init into +0)
    add_rows = (lambda a, axis: np.add.reduce(a, axis=axis, initial=-0.0)) if o >= 2 else \
        (lambda a, axis: np.add.accumulate(a, axis=axis)[-1])

    def fn(x, i):
        seq = np.empty((size + 1, o), dt)              # positions first, the init on top
        seq[0] = i
        seq[1:] = x.reshape(split).transpose(perm).reshape(size, o)
        fset(on)
        try:
            r = add_rows(seq, axis=0)
        finally:
            fset(off)
        return r.reshape(outs)
    return Fast(fn, clean=True)
