"""Called computations applied vectorized: recognition, folds, windows, scatter combining, sorting.

Reducers, comparators, map and scatter computations are first RECOGNIZED and mapped to NumPy:

- binary ops of the two parameters (`recognize_binary`): add, multiply, maximum, minimum, and,
  or, xor (operands in either order);
- variadic reducers made of such ops, one per output, applied to parameters k and N+k;
- the (value, index) argmax / argmin pairs JAX emits (`jnp.argmax`, `jnp.argmin`): recognized by
  behaviour, by running the computation once (`ec.apply`) on probes that cover NaN of both signs,
  ±inf, ±0 and index ties, and comparing with the reference pair reducer;
- sort comparators that compare one elementwise key function of each operand, f(p[2k]) < f(p[2k+1])
  (or >), possibly lexicographically over several keys as `lax.sort(num_keys=...)` emits them:
  the keys are computed once on whole arrays and sorted with a stable (lex)sort in XLA's order.

Anything else runs through generic vectorized paths that evaluate the computation with `ec.apply`
on whole arrays: a sequential left fold (one step per reduced position, all outputs at once) up to
`FOLD_BUDGET` steps and a pairwise tree beyond it, sequential rounds for scatter combiners, and a
bottom-up merge sort whose merges binary-search with the comparator for sort.

What XLA CPU computes, and the few things not reproduced, are in hlo_cli/SEMANTICS.md ("Reductions
and windows", "NaN", "Sort, compare, top-k").  In short: reduce is a left fold from the init in
row-major order, rewritten into windows of 32 along longer dimensions (the init counts once per
window) except that f32/f64 add-reduces of 4096 elements or more add the init once; reduce-window
skips padding and holes and blocks long cumulative scans by 16; float maximum/minimum order -0 < +0
with XLA's NaN signs; sort is stable, TOTALORDER puts -NaN first and +NaN last.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Sequence

import ml_dtypes
import numpy as np

from ..errors import HloEvalError
from ..ir.attributes import WindowDim
from ..ir.module import Computation, Instruction, Module
from ..ir.opcodes import CONTROL_FLOW, IO, READS_RNG, with_trait
from .fpenv import flushing, hardware
from .parallel import run_parts, split, threads
from .kernels import minmax_keeps_nan, subnormals
from .registry import rule_for
from .schedule import post_order
from . import ynn_sum

# Generic folds longer than this (per output) are evaluated as a pairwise tree instead of
# sequentially: exact for associative reducers up to rounding, not for order-dependent ones.
FOLD_BUDGET = 2048
# Reduce-windows gather (outputs x window positions) elements at a time, at most this many.
GATHER_LIMIT = 1 << 22
TREE_WINDOW = 32          # XLA CPU's TreeReductionRewriter window
SCAN_BASE = 16            # XLA CPU's ReduceWindowRewriter base length

BINARY_OPS = ("add", "multiply", "maximum", "minimum", "and", "or", "xor")


# =============================================================================== dtype helpers

def is_float(dt: np.dtype) -> bool:
    return dt.kind in "fc" or (dt.kind == "V" and dt.name.startswith(("bfloat", "float")))


def _is_int(dt: np.dtype) -> bool:
    return dt.kind in "iu" or (dt.kind == "V" and dt.name.startswith(("int", "uint")))


_FLUSH_TINY = {np.dtype(np.float32): 2.0 ** -126, np.dtype(np.float64): 2.0 ** -1022,
               np.dtype(ml_dtypes.bfloat16): 2.0 ** -126,
               np.dtype(np.complex64): 2.0 ** -126, np.dtype(np.complex128): 2.0 ** -1022}


def flushes_subnormals(dt) -> bool:
    """True if XLA CPU computes this type with subnormals flushed to zero (DAZ/FTZ)."""
    return np.dtype(dt) in _FLUSH_TINY


def flush(a: np.ndarray) -> np.ndarray:
    """Subnormals replaced by zeros of the same sign, for the types XLA CPU flushes (else `a`)."""
    dt = a.dtype
    tiny = _FLUSH_TINY.get(dt)
    if tiny is None or a.size == 0:
        return a
    if dt.kind == "c":
        re, im = flush(a.real.copy()), flush(a.imag.copy())
        if re is a.real and im is a.imag:
            return a
        out = np.empty_like(a)
        out.real, out.imag = re, im
        return out
    if dt.kind == "f" and dt.itemsize >= 4:           # f32/f64: one pass in the common case
        m = subnormals(a)
        if m is None:
            return a
    else:
        with np.errstate(invalid="ignore"):
            m = (a != 0) & (np.abs(a) < dt.type(tiny))
        if not m.any():
            return a
    with np.errstate(invalid="ignore"):
        return np.where(m, a * dt.type(0), a)


def _has_subnormal(a: np.ndarray) -> bool:
    tiny = _FLUSH_TINY.get(a.dtype)
    if tiny is None or a.size == 0:
        return False
    if a.dtype.kind == "c":
        return _has_subnormal(a.real) or _has_subnormal(a.imag)
    if a.dtype.kind == "f" and a.dtype.itemsize >= 4:
        return subnormals(a) is not None
    with np.errstate(invalid="ignore"):
        return bool(((a != 0) & (np.abs(a) < a.dtype.type(tiny))).any())


_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def _sign_set(a: np.ndarray, neg) -> np.ndarray:
    """`a` with its sign bit set where `neg` is true and cleared elsewhere (NaN payloads kept)."""
    dt = a.dtype
    if dt.itemsize in _UINT and (dt.kind == "f" or ml_dtypes.finfo(dt).bits == dt.itemsize * 8):
        u = _UINT[dt.itemsize]
        bits = np.array(a, copy=True).view(u)
        m = u(1 << (dt.itemsize * 8 - 1))
        return np.where(neg, bits | m, bits & ~m).view(dt)
    return np.copysign(np.abs(a.astype(np.float32)), np.where(neg, -1.0, 1.0)).astype(dt)


def _native_float(dt: np.dtype) -> bool:
    """Floats NumPy computes with the hardware (NaN bits as XLA CPU produces them)."""
    return dt in (np.float32, np.float64, np.complex64, np.complex128)


_DEFAULT_NAN32 = np.array([0xFFC00000], np.uint32).view(np.float32)    # x86's generated NaN


def _int_bits(dt: np.dtype) -> int:
    return ml_dtypes.iinfo(dt).bits


def _wrap_int(a64: np.ndarray, dt: np.dtype) -> np.ndarray:
    """int64/uint64 values wrapped into the (possibly narrow) integer type `dt`."""
    if dt.kind in "iu":
        return a64.astype(dt)
    bits = _int_bits(dt)
    v = a64.astype(np.int64) & ((1 << bits) - 1)
    if ml_dtypes.iinfo(dt).min < 0:
        v = np.where(v >= 1 << (bits - 1), v - (1 << bits), v)
    return v.astype(dt)


def _identity(kind: str, dt: np.dtype):
    """A neutral element of `kind` for `dt` (used only where the position is masked out anyway)."""
    if kind == "add":
        return dt.type(-0.0) if is_float(dt) else dt.type(0)
    if kind == "multiply":
        return dt.type(1)
    if dt == np.bool_:
        return {"maximum": False, "minimum": True, "and": True, "or": False, "xor": False}[kind]
    if kind in ("maximum", "minimum"):
        if is_float(dt):
            return dt.type(-np.inf if kind == "maximum" else np.inf)
        info = ml_dtypes.iinfo(dt)
        return dt.type(info.min if kind == "maximum" else info.max)
    if kind == "and":
        return dt.type(-1) if ml_dtypes.iinfo(dt).min < 0 else dt.type(ml_dtypes.iinfo(dt).max)
    return dt.type(0)


# =============================================================================== binary ops

def combine(kind: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """`kind`(a, b) elementwise with XLA CPU's semantics: integers wrap; floats flush subnormals;
    maximum/minimum propagate NaN (a's first) and order -0 < +0."""
    a = np.asarray(a)
    b = np.asarray(b)
    dt = a.dtype
    if dt == np.bool_:
        fn = {"add": np.logical_or, "maximum": np.logical_or, "minimum": np.logical_and,
              "and": np.logical_and, "or": np.logical_or, "xor": np.logical_xor,
              "multiply": np.logical_and}[kind]
        return fn(a, b)
    if is_float(dt):
        a, b = flush(a), flush(b)
        if kind in ("add", "multiply"):
            fn = np.add if kind == "add" else np.multiply
            with np.errstate(all="ignore"):
                if _native_float(dt):
                    r = fn(a, b)
                else:       # XLA computes narrow floats in f32 and rounds once (NaN bits included)
                    wide = np.complex64 if dt.kind == "c" else np.float32
                    r = fn(a.astype(wide), b.astype(wide)).astype(dt)
            return flush(np.asarray(r, dtype=dt))
        if kind in ("maximum", "minimum"):
            return _float_minmax(kind, a, b)
        raise HloEvalError(f"{kind} is not defined on {dt}")
    fn = {"add": np.add, "multiply": np.multiply, "maximum": np.maximum, "minimum": np.minimum,
          "and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor}[kind]
    with np.errstate(all="ignore"):
        if dt.kind not in "iu":          # 1/2/4-bit ml_dtypes integers: compute wide, wrap back
            wide = np.uint64 if ml_dtypes.iinfo(dt).min >= 0 else np.int64
            return _wrap_int(fn(a.astype(wide), b.astype(wide)), dt)
        return np.asarray(fn(a, b), dtype=dt)


def _float_minmax(kind: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """XLA CPU's float maximum/minimum (measured bit by bit): -0 < +0; a NaN `a` is returned as is;
    otherwise a NaN `b` is returned with its sign OR-ed with a's sign (minimum) or AND-ed with it
    (maximum)."""
    dt = a.dtype
    a, b = np.broadcast_arrays(a, b)
    with np.errstate(invalid="ignore"):
        if kind == "maximum":
            r = np.where(a > b, a, np.where(b > a, b, np.where(np.signbit(a), b, a)))
            nb = _sign_set(b, np.signbit(a) & np.signbit(b))
        else:
            r = np.where(a < b, a, np.where(b < a, b, np.where(np.signbit(a), a, b)))
            nb = _sign_set(b, np.signbit(a) | np.signbit(b))
        r = np.where(np.isnan(b), nb, r)
        r = np.where(np.isnan(a), a, r)
    return np.asarray(r, dtype=dt)


def _argpair(kind: str, v0, i0, v1, i1):
    """JAX's argmax/argmin reducer on whole arrays: the value side keeps the accumulator when it is
    strictly better or NaN, the index side also keeps the smaller index on equal values."""
    with np.errstate(invalid="ignore"):
        better = (v0 > v1) if kind == "argmax" else (v0 < v1)
        if is_float(v0.dtype):
            better = better | np.isnan(v0)
        keep_i = better | ((v0 == v1) & (i0 < i1))
    return np.where(better, v0, v1).astype(v0.dtype), np.where(keep_i, i0, i1).astype(i0.dtype)


# =============================================================================== recognition

def _params(comp: Computation) -> dict[int, Instruction]:
    return {i.parameter_number: i for i in comp.instructions if i.opcode == "parameter"}


def _binary_of(comp: Computation, inst: Instruction, p: int, q: int):
    """(opcode, swapped) if `inst` is one of BINARY_OPS applied to parameters p and q, else None."""
    if inst.opcode not in BINARY_OPS or len(inst.operands) != 2:
        return None
    a, b = (comp.by_name[o] for o in inst.operands)
    if a.opcode != "parameter" or b.opcode != "parameter":
        return None
    nums = (a.parameter_number, b.parameter_number)
    if nums == (p, q):
        return inst.opcode, False
    if nums == (q, p):
        return inst.opcode, True
    return None


def _computation(module: Module, name: str) -> Computation:
    comp = module.computation_map.get(name)
    if comp is None:
        raise HloEvalError(f"computation '{name}' is not defined")
    return comp


def recognize_binary(module: Module, comp_name: str) -> str | None:
    """'add' | 'multiply' | 'maximum' | 'minimum' | 'and' | 'or' | 'xor' if the computation is that
    op of its two scalar parameters (in either order), else None."""
    comp = _computation(module, comp_name)
    ps = _params(comp)
    if len(ps) != 2 or ps[0].shape.element_type != ps[1].shape.element_type or ps[0].shape.dims:
        return None
    root = comp.root_instruction
    if root.shape.is_tuple or root.shape.element_type != ps[0].shape.element_type:
        return None
    hit = _binary_of(comp, root, 0, 1)
    return hit[0] if hit else None


@dataclass(frozen=True)
class Reducer:
    """How to apply a reducer / combiner computation of N accumulators and N values.

    kinds: per output, (op, swapped) for a recognized binary op of parameters k and N+k (swapped:
    written as op(p[N+k], p[k])), or None.  pair: 'argmax' / 'argmin' for JAX's (value, index)
    reducers.  Generic when neither covers every output."""
    name: str
    n: int
    kinds: tuple | None = None
    pair: str | None = None

    @property
    def generic(self) -> bool:
        return self.pair is None and (self.kinds is None or any(k is None for k in self.kinds))


def _cache(ec) -> dict:
    """What was recognized about the module's computations: facts of the module alone, kept with
    its compiled form for later runs."""
    from .per_module import module_cache
    return module_cache(ec.module)


def reducer(ec, comp_name: str, n: int) -> Reducer:
    """Recognize the reducer `comp_name` of n accumulators (cached per module)."""
    key = ("reducer", comp_name, n)
    cache = _cache(ec)
    if key not in cache:
        cache[key] = _recognize_reducer(ec, comp_name, n)
    return cache[key]


def _recognize_reducer(ec, name: str, n: int) -> Reducer:
    comp = _computation(ec.module, name)
    ps = _params(comp)
    if len(ps) != 2 * n or any(ps[k].shape.is_tuple or ps[k].shape.dims for k in range(2 * n)):
        return Reducer(name, n)
    root = comp.root_instruction
    outs = [root] if n == 1 else ([comp.by_name[o] for o in root.operands]
                                  if root.opcode == "tuple" and len(root.operands) == n else None)
    if outs is None:
        return Reducer(name, n)
    kinds = []
    for k, inst in enumerate(outs):
        hit = _binary_of(comp, inst, k, n + k)
        ok = (hit is not None and ps[k].shape.element_type == ps[n + k].shape.element_type
              == inst.shape.element_type)
        kinds.append(hit if ok else None)
    if all(k is not None for k in kinds):
        return Reducer(name, n, tuple(kinds))
    if n == 2:
        pair = _probe_argpair(ec, name, ps)
        if pair:
            return Reducer(name, n, None, pair)
    return Reducer(name, n, tuple(kinds))


def _probe_values(dt: np.dtype) -> np.ndarray:
    if is_float(dt):
        vals = [np.nan, -np.nan, -np.inf, -1.5, -0.0, 0.0, 1.0, 2.5, np.inf]
        with np.errstate(invalid="ignore", over="ignore"):
            return np.array(vals, dtype=np.float64).astype(dt)
    if dt == np.bool_:
        return np.array([False, True])
    if _is_int(dt):
        info = ml_dtypes.iinfo(dt)
        vals = sorted({int(info.min), -1 if info.min < 0 else 0, 0, 1, 2, int(info.max)})
        return np.array(vals, dtype=np.int64).astype(dt)
    return np.zeros(0, dt)


def _probe_argpair(ec, name: str, ps) -> str | None:
    """'argmax' / 'argmin' if the 4-parameter computation behaves exactly like JAX's pair reducer on
    probes covering NaN (both signs), ±inf, ±0, extremes and index ties, else None."""
    from .values import np_dtype
    vt, it = ps[0].shape.element_type, ps[1].shape.element_type
    if ps[2].shape.element_type != vt or ps[3].shape.element_type != it:
        return None
    try:
        vdt, idt = np_dtype(vt), np_dtype(it)
    except HloEvalError:
        return None
    if not _is_int(idt) or not (is_float(vdt) or _is_int(vdt)) or vdt.kind == "c":
        return None
    vals = _probe_values(vdt)
    idx = np.array([0, 1, 2, 5], dtype=np.int64).astype(idt)
    g = np.meshgrid(np.arange(vals.size), np.arange(idx.size), np.arange(vals.size), np.arange(idx.size),
                    indexing="ij")
    v0, i0, v1, i1 = vals[g[0].ravel()], idx[g[1].ravel()], vals[g[2].ravel()], idx[g[3].ravel()]
    try:
        got = ec_apply(ec, name, [v0, i0, v1, i1])
    except Exception:        # a computation that cannot run vectorized is not one of ours
        return None
    if not isinstance(got, tuple) or len(got) != 2:
        return None
    gv = np.broadcast_to(np.asarray(got[0]), v0.shape)
    gi = np.broadcast_to(np.asarray(got[1]), v0.shape)
    if gv.dtype != vdt or gi.dtype != idt:
        return None
    for kind in ("argmax", "argmin"):
        wv, wi = _argpair(kind, v0, i0, v1, i1)
        if _same_bits(gv, wv) and np.array_equal(gi, wi):
            return kind
    return None


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    if a.dtype.itemsize in (1, 2, 4, 8):
        u = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize]
        return np.array_equal(a.view(u), b.view(u))
    return np.array_equal(a, b)


# =============================================================================== generic apply

def ec_apply(ec, comp_name: str, arrays: Sequence) -> object:
    """ec.apply with one array per declared parameter; parameters the computation never reads (a
    comparator's unused value operands) are left out when the evaluator's plan drops them."""
    arrays = list(arrays)
    slots = ec.plan(comp_name).param_slots
    if len(slots) != len(arrays):
        arrays = [arrays[p] for p, _ in sorted(slots) if p < len(arrays)]
    return ec.apply(comp_name, arrays)


def apply(ec, comp_name: str, arrays: Sequence[np.ndarray], shape, dtypes) -> list[np.ndarray]:
    """Run the scalar computation on whole arrays (`ec.apply`) and return its results as arrays of
    `shape` with the given dtypes (a constant result is broadcast)."""
    res = ec_apply(ec, comp_name, arrays)
    res = list(res) if isinstance(res, tuple) else [res]
    if len(res) != len(dtypes):
        raise HloEvalError(f"computation '{comp_name}' returned {len(res)} values, expected {len(dtypes)}")
    return [np.broadcast_to(np.asarray(r), shape).astype(dt, copy=False) for r, dt in zip(res, dtypes)]


def combine_all(ec, red: Reducer, accs: list, xs: list) -> list[np.ndarray]:
    """The reducer applied elementwise to (accs..., xs...) (broadcasting)."""
    shape = np.broadcast_shapes(*(np.shape(a) for a in accs), *(np.shape(x) for x in xs))
    if red.pair:
        v, i = _argpair(red.pair, *(np.broadcast_to(a, shape) for a in (accs[0], accs[1], xs[0], xs[1])))
        return [v, i]
    if not red.generic:
        out = []
        for (kind, swapped), a, x in zip(red.kinds, accs, xs):
            a, x = np.broadcast_to(a, shape), np.broadcast_to(x, shape)
            out.append(combine(kind, x, a) if swapped else combine(kind, a, x))
        return out
    return apply(ec, red.name, list(accs) + list(xs), shape, [np.asarray(a).dtype for a in accs])


# =============================================================================== folds

def fold(ec, red: Reducer, accs: list, xs: list, valid: np.ndarray | None = None) -> list[np.ndarray]:
    """Left fold along the last axis: acc = f(acc, x[..., j]) for j = 0, 1, ... (positions where
    `valid` is False are skipped), starting from `accs` (shape = xs' shape without the last axis).
    XLA CPU's elemental order, exactly, for recognized reducers; sequential ec.apply steps for
    generic ones (a pairwise tree beyond FOLD_BUDGET steps)."""
    accs = [np.asarray(a) for a in accs]
    xs = [np.asarray(x) for x in xs]
    n = xs[0].shape[-1]
    if n == 0:
        return [a.copy() for a in accs]
    if valid is not None:
        valid = np.broadcast_to(valid, xs[0].shape)
        if valid.all():
            valid = None
    if red.pair:
        return list(_fold_argpair(red.pair, accs[0], accs[1], xs[0], xs[1], valid))
    if not red.generic:
        return [_fold_kind(kind, swapped, a, x, valid) for (kind, swapped), a, x in zip(red.kinds, accs, xs)]
    if n <= FOLD_BUDGET:
        for j in range(n):
            res = combine_all(ec, red, accs, [x[..., j] for x in xs])
            if valid is None:
                accs = res
            else:
                m = valid[..., j]
                accs = [np.where(m, r, a) for r, a in zip(res, accs)]
        return accs
    return _tree_fold(ec, red, accs, xs, valid)


def _tree_fold(ec, red, accs, xs, valid):
    """Pairwise tree over the last axis (neighbours combined in order), then f(acc, total)."""
    if valid is None:
        valid = np.ones(xs[0].shape, bool)
    while xs[0].shape[-1] > 1:
        m = xs[0].shape[-1]
        if m % 2:
            xs = [np.concatenate([x, x[..., -1:]], -1) for x in xs]
            valid = np.concatenate([valid, np.zeros(valid.shape[:-1] + (1,), bool)], -1)
        a = [x[..., 0::2] for x in xs]
        b = [x[..., 1::2] for x in xs]
        va, vb = valid[..., 0::2], valid[..., 1::2]
        c = combine_all(ec, red, a, b)
        xs = [np.where(va & vb, cc, np.where(va, aa, bb)) for cc, aa, bb in zip(c, a, b)]
        valid = va | vb
    tot = combine_all(ec, red, accs, [x[..., 0] for x in xs])
    return [np.where(valid[..., 0], t, a) for t, a in zip(tot, accs)]


def _fold_kind(kind: str, swapped: bool, acc: np.ndarray, x: np.ndarray, valid) -> np.ndarray:
    dt = acc.dtype
    if dt == np.bool_ or _is_int(dt):
        return _fold_int(kind, acc, x, valid)
    if kind in ("add", "multiply"):
        return _fold_float_arith(kind, acc, x, valid)
    if kind in ("maximum", "minimum"):
        return _fold_float_minmax(kind, swapped, acc, x, valid)
    raise HloEvalError(f"{kind} is not defined on {dt}")


def _fold_int(kind, acc, x, valid):
    dt = acc.dtype
    if valid is not None:
        x = np.where(valid, x, _identity(kind, dt))
    if dt == np.bool_:
        fn = {"add": np.logical_or, "maximum": np.logical_or, "minimum": np.logical_and,
              "and": np.logical_and, "or": np.logical_or, "xor": np.logical_xor,
              "multiply": np.logical_and}[kind]
        return fn(acc, fn.reduce(x, axis=-1))
    fn = {"add": np.add, "multiply": np.multiply, "maximum": np.maximum, "minimum": np.minimum,
          "and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor}[kind]
    if dt.kind in "iu":
        with np.errstate(all="ignore"):
            return fn(acc, fn.reduce(x, axis=-1, dtype=dt)).astype(dt)
    wide = np.uint64 if ml_dtypes.iinfo(dt).min >= 0 else np.int64
    with np.errstate(all="ignore"):
        r = fn(acc.astype(wide), fn.reduce(x.astype(wide), axis=-1))
    return _wrap_int(r, dt)


def _fold_float_arith(kind, acc, x, valid):
    """Sequential sum/product; ufunc.accumulate keeps the order (numpy's reduce would pair up)."""
    dt = acc.dtype
    x, acc = flush(x), flush(acc)
    uf = np.add if kind == "add" else np.multiply
    if valid is None and dt.kind == "f" and _native_float(dt) and acc.size >= 4 * x.shape[-1]:
        # many short folds: the positions made the leading axis, so that each step is one
        # vectorized operation over all the folds (an accumulate along short rows is slow)
        xt = np.ascontiguousarray(np.moveaxis(x, -1, 0))
        if kind == "add" and (acc.ndim == 0 or not any(acc.strides)):
            init = dt.type(acc.flat[0])
            if _no_subnormal_partial_sums(xt, init):
                # NumPy reduces a C-contiguous array along its first axis row after row, starting
                # from `initial`: the same left fold, in C
                with np.errstate(all="ignore"):
                    r = np.add.reduce(xt, axis=0, initial=init)
                return np.broadcast_to(r, acc.shape).astype(dt, copy=False)
        r = acc
        with np.errstate(all="ignore"):
            for j in range(xt.shape[0]):
                r = uf(r, xt[j])
                if subnormals(r) is not None:
                    r = flush(r)
        return np.asarray(r).astype(dt, copy=False)
    if valid is not None:
        x = np.where(valid, x, _identity(kind, dt))
    seq = np.concatenate([acc[..., None], x], axis=-1)
    with np.errstate(all="ignore"):
        cum = uf.accumulate(seq, axis=-1)
    if not _native_float(dt):
        return _narrow_nan_fix(seq, cum)
    if not _has_subnormal(cum):
        return cum[..., -1].astype(dt, copy=False)
    # a partial result went subnormal: XLA flushed it before going on -- redo step by step
    r = acc
    with np.errstate(all="ignore"):
        for j in range(x.shape[-1]):
            r = flush(uf(r, x[..., j]).astype(dt, copy=False))
    return r


# f32/f64 magnitudes from which on every value is a multiple of the smallest normal number (its
# ulp is at least that): sums of such values and zeros are zero or normal, never subnormal
_SUBNORMAL_FREE_SUMS = {np.dtype(np.float32): np.float32(2.0 ** -103), np.dtype(np.float64): np.float64(2.0 ** -970)}


def _no_subnormal_partial_sums(x: np.ndarray, init) -> bool:
    """True if no partial sum of `init` and elements of `x` (flushed) can be subnormal, so XLA's
    flushing of partial results changes nothing."""
    lim = _SUBNORMAL_FREE_SUMS[x.dtype]
    if init != 0 and abs(init) < lim:
        return False
    if x.size == 0:
        return True
    a = np.abs(x)
    # np.minimum, not np.fmin: NumPy 2.4's fmin.reduce can miss the minimum of an array holding
    # NaNs; a NaN minimum falls through to the full check
    if np.minimum.reduce(a, axis=None) >= lim:
        return True
    return not ((a > 0) & (a < lim)).any()


def _narrow_nan_fix(seq, cum):
    """The last partial result of a narrow-float accumulate, with XLA's NaN bits: NumPy/ml_dtypes
    return a canonical NaN, XLA (computing in f32) keeps the first NaN operand or produces x86's
    negative default NaN (inf - inf, 0 * inf), and later steps keep it."""
    dt = seq.dtype
    last = cum[..., -1]
    isn = np.isnan(cum)
    anyn = isn.any(axis=-1)
    if not anyn.any():
        return last
    k = np.argmax(isn, axis=-1)[..., None]
    at = np.take_along_axis(seq, k, -1)[..., 0]
    gen = _DEFAULT_NAN32.astype(np.complex64 if dt.kind == "c" else np.float32).astype(dt)[0]
    nan = np.where(np.isnan(at), at, gen)
    return np.where(anyn, nan, last).astype(dt)


def _fold_float_minmax(kind, swapped, acc, x, valid):
    """max/min over (acc, x...) as XLA CPU's reduction loop computes it (measured):
    - subnormals read as zeros of their sign (DAZ) and -0 < +0: a zero result is -0 only if all the
      zeros are negative (maximum) / if any is (minimum);
    - NaN: the first NaN in fold order wins, its sign OR-ed (minimum) / AND-ed (maximum) with the
      sign of the running result before it; for a computation written max(x, acc) the last NaN wins
      and every later element's sign is merged into it."""
    dt = acc.dtype
    raw = np.concatenate([acc[..., None], x], axis=-1)
    seq = flush(raw)
    ok = np.ones(seq.shape, bool)
    if valid is not None:
        ok[..., 1:] = valid
    isn = np.isnan(seq) & ok
    real = ok & ~isn
    lim = -np.inf if kind == "maximum" else np.inf
    plain = np.where(real, seq, dt.type(lim))
    m = plain.max(axis=-1) if kind == "maximum" else plain.min(axis=-1)
    zero = m == 0
    if zero.any():
        z = real & (seq == 0)
        if kind == "maximum":
            neg = ~(z & ~np.signbit(seq)).any(axis=-1)
        else:
            neg = (z & np.signbit(seq)).any(axis=-1)
        m = np.where(zero, np.where(neg, dt.type(-0.0), dt.type(0.0)), m)
    anyn = isn.any(axis=-1)
    if anyn.any():
        n = seq.shape[-1]
        pos = np.arange(n)
        neg = np.signbit(seq) & real
        if swapped:
            k = n - 1 - np.argmax(isn[..., ::-1], axis=-1)
            side = (pos > k[..., None]) & real          # the elements merged into it later
        else:
            k = np.argmax(isn, axis=-1)
            side = (pos < k[..., None]) & real          # the running result before it
        nanv = np.take_along_axis(raw, k[..., None], -1)[..., 0]
        if kind == "minimum":
            sign = np.signbit(nanv) | (neg & side).any(axis=-1)
        else:
            sign = np.signbit(nanv) & ~(side & ~neg).any(axis=-1)
        m = np.where(anyn, _sign_set(nanv, sign), m)
    return np.asarray(m, dtype=dt)


def fold_minmax_rows(kind: str, swapped: bool, init, rows: np.ndarray) -> np.ndarray:
    """The rule's float max/min of each row of the 2-D array `rows` (fold order) from the
    scalar `init`: _fold_float_minmax."""
    return _fold_float_minmax(kind, swapped, np.full(rows.shape[0], init, rows.dtype), rows, None)


def minmax_nan_results(kind: str, swapped: bool, init, rows: np.ndarray, nan_rows: np.ndarray) -> np.ndarray:
    """The results of _fold_float_minmax for the rows `nan_rows` (indices) of the 2-D array
    `rows` (outputs, elements in fold order) folded from the scalar `init`, rows that hold a NaN
    (and `init` not NaN): the NaN that wins with its sign merged as there, found in a few passes
    over those rows instead of the closed form's.  Signs are unchanged by DAZ, so no flush."""
    edge = rows[nan_rows, -1 if swapped else 0]
    at_edge = np.isnan(edge)
    init_neg = bool(np.signbit(init))
    if at_edge.all():
        # NaN-filled rows: the edge NaN wins; nothing real lies before the first element but
        # the init, nothing after the last
        if swapped:
            return edge
        hit = (not init_neg) if kind == "maximum" else init_neg
        sign = np.signbit(edge) & (not hit) if kind == "maximum" else np.signbit(edge) | hit
        return _sign_set(edge, sign)
    sub = np.take(rows, nan_rows, axis=0)           # (several times faster than rows[nan_rows])
    isn = np.isnan(sub)
    n = sub.shape[1]
    idx = np.arange(len(nan_rows))
    k = (n - 1 - np.argmax(isn[:, ::-1], axis=1)) if swapped else np.argmax(isn, axis=1)
    nanv = sub[idx, k]
    if not (np.signbit(nanv) if kind == "maximum" else ~np.signbit(nanv)).any():
        return nanv                     # (AND with a clear sign, OR with a set one: nothing to merge)
    if kind == "maximum":               # sign AND-ed: cleared by a real non-negative one
        flag = ~np.signbit(sub) & ~isn
        init_hit = not init_neg
    else:                               # sign OR-ed: set by a real negative one
        flag = np.signbit(sub) & ~isn
        init_hit = init_neg
    if swapped:                         # every real element after the last NaN
        last = n - 1 - np.argmax(flag[:, ::-1], axis=1)
        hit = flag[idx, last] & (last > k)
    else:                               # the running result before the first NaN, init included
        first = np.argmax(flag, axis=1)
        hit = (flag[idx, first] & (first < k)) | init_hit
    sign = np.signbit(nanv) & ~hit if kind == "maximum" else np.signbit(nanv) | hit
    return _sign_set(nanv, sign)


def _fold_argpair(kind, av, ai, xv, xi, valid):
    """Closed form of folding JAX's argmax/argmin reducer: the first NaN (value and index) if any;
    otherwise the best value m, its bits from the LAST element equal to m (so -0/+0 and subnormals,
    which compare equal to zero, come from the last tie) and the SMALLEST index among them."""
    raw = np.concatenate([av[..., None], xv], axis=-1)
    i = np.concatenate([ai[..., None], xi], axis=-1)
    ok = np.ones(raw.shape, bool)
    if valid is not None:
        ok[..., 1:] = valid
    v = flush(raw) if is_float(raw.dtype) else raw       # compares read subnormals as 0 (DAZ)
    if is_float(v.dtype):
        isn = np.isnan(v) & ok
    else:
        isn = np.zeros(v.shape, bool)
    real = ok & ~isn
    if is_float(v.dtype):
        fill = v.dtype.type(-np.inf if kind == "argmax" else np.inf)
    else:
        info = ml_dtypes.iinfo(v.dtype)
        fill = v.dtype.type(info.min if kind == "argmax" else info.max)
    plain = np.where(real, v, fill)
    m = plain.max(axis=-1) if kind == "argmax" else plain.min(axis=-1)
    eq = real & (v == m[..., None])
    last = v.shape[-1] - 1 - np.argmax(eq[..., ::-1], axis=-1)
    rv = np.take_along_axis(raw, last[..., None], -1)[..., 0]            # select keeps the bits
    big = np.array(ml_dtypes.iinfo(i.dtype).max, dtype=i.dtype)
    ri = np.where(eq, i, big).min(axis=-1)
    anyn = isn.any(axis=-1)
    if anyn.any():
        k = np.argmax(isn, axis=-1)[..., None]
        rv = np.where(anyn, np.take_along_axis(raw, k, -1)[..., 0], rv)
        ri = np.where(anyn, np.take_along_axis(i, k, -1)[..., 0], ri)
    return rv.astype(av.dtype, copy=False), ri.astype(ai.dtype, copy=False)


# =============================================================================== reduce

def reduce_arrays(ec, comp_name: str, inputs: Sequence[np.ndarray], inits: Sequence[np.ndarray],
                  dims: Sequence[int]) -> list[np.ndarray]:
    """XLA CPU's reduce of `inputs` over `dims` with the reducer `comp_name` (N inputs, N inits):
    XLA's tree rewrite (windows of 32) for long non-variadic reductions, then a sequential fold in
    row-major order of the reduced dimensions, the init value first."""
    red = reducer(ec, comp_name, len(inputs))
    xs = [np.asarray(x) for x in inputs]
    inits = [np.asarray(i) for i in inits]
    dims = sorted(int(d) for d in dims)
    keep = [d for d in range(xs[0].ndim) if d not in dims]
    out_shape = tuple(xs[0].shape[d] for d in keep)
    if any(xs[0].shape[d] == 0 for d in dims):
        return [np.broadcast_to(i, out_shape).astype(i.dtype) for i in inits]
    if all(xs[0].shape[d] == 1 for d in dims):
        # one element per output: XLA's simplifier makes the reduce a reshape (the init unused)
        return [x.reshape(out_shape).astype(i.dtype) for x, i in zip(xs, inits)]
    kind = red.kinds[0][0] if len(xs) == 1 and red.kinds and red.kinds[0] else None
    if kind == "add":
        if _library_reduce(xs[0], inits[0], _LIBRARY_SUM):
            # the init value is added once, to the sum of the elements (which starts at +0),
            # summed in YNNPACK's order where it is known (ynn_sum)
            r = library_sum(xs[0], dims)
            if r is None:
                r = _native_sum(xs[0], inits[0].dtype.type(0), dims, out_shape)
            return [combine("add", np.broadcast_to(inits[0], out_shape), r)]
        r = _native_sum(xs[0], inits[0], dims, out_shape)
        if r is not None:
            return [r]
    if kind in ("maximum", "minimum") and _library_reduce(xs[0], inits[0], _SIGN_MAGNITUDE):
        return [_sign_magnitude_extreme(kind, xs[0], inits[0], keep, dims, out_shape)]
    if len(xs) == 1:
        while any(xs[0].shape[d] > TREE_WINDOW for d in dims):
            xs = _tree_stage(ec, red, xs, inits, dims)
    perm = keep + dims
    flat = [np.transpose(x, perm).reshape(out_shape + (-1,)) for x in xs]
    accs = [np.broadcast_to(i, out_shape) for i in inits]
    return fold(ec, red, accs, flat)


def concatenated_parts(ec, inst: Instruction, dims: Sequence[int]) -> tuple[int, list[int]] | None:
    """(dimension, lengths) of the pieces of a reduce's operand when XLA's algebraic simplifier
    splits the reduce: `inst`'s first operand is a concatenate along a reduced dimension, of any
    element type but bf16 (measured on jaxlib 0.10.2: bf16 reduces are not split; pieces of
    different lengths are).  XLA then reduces each piece from the init value and combines the
    results with the reducer, left to right, so a non-identity init counts once per piece (and
    each piece follows the rules of reduce_arrays).  None otherwise."""
    cache = _cache(ec)
    owners = cache.get("owners")
    if owners is None:
        owners = cache["owners"] = {id(i): c for c in ec.module.computations for i in c.instructions}
    comp = owners.get(id(inst))
    if comp is None or len(inst.operands) != 2:
        return None
    src = comp.by_name.get(inst.operands[0])
    if src is None or src.opcode != "concatenate" or src.shape.element_type == "bf16":
        return None
    cat = src.attrs.get("dimensions")
    cat = cat[0] if isinstance(cat, (list, tuple)) and cat else cat
    if cat not in dims:
        return None
    return cat, [comp.by_name[o].shape.dims[cat] for o in src.operands]


# XLA CPU hands a reduce to its reduction library (YNNPACK) from this many input elements on
LIBRARY_REDUCE_MIN = 4096
LIBRARY_REDUCE_MAX_RANK = 8
_LIBRARY_SUM = frozenset({np.dtype(np.float32), np.dtype(np.float64)})
_SIGN_MAGNITUDE = frozenset({np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16)})


def _library_reduce(x: np.ndarray, init: np.ndarray, types) -> bool:
    """True for the reduces XLA CPU gives to YNNPACK (measured on jaxlib 0.10.2) among those of
    `types`: add-reduces of f32/f64 (_LIBRARY_SUM) and max/min-reduces of f16/bf16/f32/f64/s8/u8;
    one input of at least LIBRARY_REDUCE_MIN elements and rank at most LIBRARY_REDUCE_MAX_RANK,
    the init of the same type.  Sums add the elements from +0 and the init value once, at the
    end; f16/bf16 max/min compare sign-magnitude integers (_sign_magnitude_extreme)."""
    return (x.dtype in types and init.dtype == x.dtype and init.shape == ()
            and x.size >= LIBRARY_REDUCE_MIN and x.ndim <= LIBRARY_REDUCE_MAX_RANK)


def library_sum(x: np.ndarray, dims) -> np.ndarray | None:
    """YNNPACK's f32/f64 sum of `x` over `dims` from +0 (ynn_sum.reduce_sum), with the
    processor's FTZ/DAZ flags (else the elements and the result flushed); None where its order
    is not known (ynn_sum.tiled_sum declines)."""
    if hardware() is not None:
        return flushing(ynn_sum.reduce_sum, x, dims, pooled_rows)
    r = ynn_sum.reduce_sum(flush(x), dims, pooled_rows)
    return None if r is None else flush(r)


# rows per block of a pooled k1 sum (blocks are independent; their number a function of the shape)
POOL_ROW_ELEMENTS = 1 << 20


def pooled_rows(fn, rows: np.ndarray) -> list:
    """[fn(block) for the row blocks of the 2-D `rows`] on the pool's threads (with the
    processor's FTZ/DAZ flags where available), blocks of about POOL_ROW_ELEMENTS elements."""
    m, k = rows.shape
    step = max(1, POOL_ROW_ELEMENTS // max(1, k))
    blocks = [slice(i, min(i + step, m)) for i in range(0, m, step)]
    hw = hardware() is not None

    def part(bs):
        with np.errstate(all="ignore"):
            return [flushing(fn, rows[b]) if hw else fn(rows[b]) for b in bs]
    return [r for rs in run_parts(part, split(blocks, threads())) for r in rs]


def _sign_magnitude_extreme(kind: str, x: np.ndarray, init: np.ndarray, keep, dims, out_shape) -> np.ndarray:
    """YNNPACK's f16/bf16 max/min (measured bit for bit): the values compare as sign-magnitude
    integers, so -NaN < -inf < ... < -0 < +0 < ... < +inf < +NaN, subnormals as they are (bf16
    too), and the result is the extreme element of the init and the row, with its bits."""
    rows = np.transpose(x, list(keep) + list(dims)).reshape(out_shape + (-1,))
    vals = np.concatenate([np.broadcast_to(init, out_shape + (1,)), rows], axis=-1)
    key = _sign_magnitude_key(vals)
    pick = np.argmax(key, axis=-1) if kind == "maximum" else np.argmin(key, axis=-1)
    return np.take_along_axis(vals, pick[..., None], axis=-1)[..., 0]


def _sign_magnitude_key(a: np.ndarray) -> np.ndarray:
    """16-bit floats as integers in sign-magnitude order (-NaN lowest, +NaN highest)."""
    i = a.view(np.int16).astype(np.int32)
    return (i & 0x7FFF) ^ (i >> 15)


def tree_stage(shape, dims):
    """One stage of XLA CPU's tree reduction over `dims` of an array of `shape`: each reduced dim
    longer than TREE_WINDOW becomes (windows, positions) with SAME padding.  Returns (pads, split
    shape, position axes, window axes, the stage's result shape)."""
    pads, split, pos_axes, out_axes, stage_shape = [], [], [], [], []
    for d, n in enumerate(shape):
        if d in dims:
            w = min(n, TREE_WINDOW)
            nw = -(-n // w)
            tot = nw * w - n
            pads.append((tot // 2, tot - tot // 2))
            out_axes.append(len(split))
            pos_axes.append(len(split) + 1)
            split += [nw, w]
            stage_shape.append(nw)
        else:
            pads.append((0, 0))
            out_axes.append(len(split))
            split.append(n)
            stage_shape.append(n)
    return pads, split, pos_axes, out_axes, stage_shape


def _native_sum(x: np.ndarray, init: np.ndarray, dims: list[int], out_shape) -> np.ndarray | None:
    """The add-reduce of an f32/f64 array exactly as the general path computes it (XLA's windows of
    32, then left folds from the init value), each fold over the leading axis of a C-contiguous
    (positions, outputs) array: one NumPy reduction, which adds row after row starting from
    `initial`, when no partial sum can be subnormal (or always, with the processor's FTZ/DAZ
    flags set: fpenv.py), else one vectorized add per row with XLA's flushing of partial sums.
    None when it does not apply."""
    dt = x.dtype
    if dt not in _SUBNORMAL_FREE_SUMS or init.shape != () or init.dtype != dt:
        return None
    init = dt.type(flush(init)[()])
    if init == 0 and np.signbit(init):
        return None                 # -0 partial sums: padding with +0 would not be skipping it
    hw = hardware() is not None
    if not hw:
        x = flush(x)
        safe = _no_subnormal_partial_sums(x, init)

    def fold_rows(rows):                # left fold of the rows of a 2-D array, from init
        if hw:                          # the processor reads subnormal elements and flushes
            return flushing(np.add.reduce, rows, axis=0, initial=init)   # partial sums, as XLA
        if safe:
            return np.add.reduce(rows, axis=0, initial=init)
        r = np.full(rows.shape[1:], init, dt)
        for j in range(rows.shape[0]):      # a partial sum that goes subnormal is flushed
            r = np.add(r, rows[j])
            if subnormals(r) is not None:
                r = flush(r)
        return r
    with np.errstate(all="ignore"):
        while any(x.shape[d] > TREE_WINDOW for d in dims):
            # one window stage: reduced dim d -> (windows, positions), SAME padding with +0.0
            # (adding +0 to a partial sum that is not -0 changes nothing: as if skipped)
            pads, split, pos_axes, out_axes, stage_shape = tree_stage(x.shape, dims)
            if any(lo or hi for lo, hi in pads):
                x = np.pad(x, pads)
            xs = x.reshape(split)
            x = fold_rows(_positions_first(xs, pos_axes, out_axes)).reshape(stage_shape)
        keep = [d for d in range(x.ndim) if d not in dims]
        r = fold_rows(_positions_first(x, dims, keep))
    return r.reshape(out_shape).astype(dt, copy=False)


_TRANSPOSE_BLOCK = 1 << 17          # elements per block of a blocked transpose (fits in L2)


def _positions_first(x: np.ndarray, pos: list[int], out: list[int]) -> np.ndarray:
    """A C-contiguous 2-D copy of `x` with the `pos` axes (flattened, in order) as rows and the
    `out` axes as columns.  When the positions are x's trailing axes this is a transpose of a
    (outputs, positions) matrix, done in cache-sized blocks (NumPy's own transposing copy is
    several times slower on such shapes)."""
    p = int(np.prod([x.shape[d] for d in pos], dtype=np.int64))
    o = int(np.prod([x.shape[d] for d in out], dtype=np.int64))
    if list(out) + list(pos) == list(range(x.ndim)) and x.flags.c_contiguous:
        src = x.reshape(o, p)
        dst = np.empty((p, o), x.dtype)
        step = max(1, _TRANSPOSE_BLOCK // max(p, 1))
        for i in range(0, o, step):
            dst[:, i:i + step] = src[i:i + step].T
        return dst
    return np.ascontiguousarray(np.transpose(x, list(pos) + list(out))).reshape(p, o)


def _tree_stage(ec, red, xs, inits, dims):
    """One step of XLA's TreeReductionRewriter: a reduce-window with windows (and strides) of
    min(size, 32) along the reduced dimensions, SAME padding."""
    x = xs[0]
    pads, wins = [], []
    for d in range(x.ndim):
        if d in dims:
            n = x.shape[d]
            w = min(n, TREE_WINDOW)
            out = -(-n // w)
            tot = out * w - n
            pads.append((tot // 2, tot - tot // 2))
            wins.append(w)
        else:
            pads.append((0, 0))
            wins.append(1)
    if any(lo or hi for lo, hi in pads):
        xp = np.pad(x, pads)
        valid = np.pad(np.ones(x.shape, bool), pads)
    else:                                          # the windows tile the dimensions exactly
        xp, valid = x, None
    split = []
    for d in range(x.ndim):
        split += [xp.shape[d] // wins[d], wins[d]]
    order = [2 * d for d in range(x.ndim)] + [2 * d + 1 for d in range(x.ndim)]
    xr = np.transpose(xp.reshape(split), order)
    outs = xr.shape[:x.ndim]
    xr = xr.reshape(outs + (-1,))
    vr = None if valid is None else np.transpose(valid.reshape(split), order).reshape(outs + (-1,))
    return fold(ec, red, [np.broadcast_to(inits[0], outs)], [xr], vr)


# =============================================================================== reduce-window

TRIVIAL_WINDOW = WindowDim()         # size 1, stride 1, no padding, no dilation


def trivial_window(w: WindowDim) -> bool:
    """A window dimension of size 1, stride 1, no padding, no dilation."""
    return w == TRIVIAL_WINDOW


def window_dims(window, rank: int) -> list[WindowDim]:
    """The Window attribute's dimensions, reversal left out (missing window = trivial in every
    dimension)."""
    ds = list(getattr(window, "dimensions", ()) or ())
    out = [WindowDim(d.size, d.stride, d.padding_low, d.padding_high, d.window_dilation, d.base_dilation)
           for d in ds]
    return out + [TRIVIAL_WINDOW] * (rank - len(out))


def _out_len(n: int, w: WindowDim) -> int:
    dil = (n - 1) * w.base_dilation + 1 if n > 0 else 0
    padded = dil + w.padding_low + w.padding_high
    span = (w.size - 1) * w.window_dilation + 1
    return 0 if padded < span or w.size == 0 else (padded - span) // w.stride + 1


def _window_index(n: int, w: WindowDim, out: int):
    """For one dimension: the source index (out, size) of each window position and its validity."""
    o = np.arange(out)[:, None]
    k = np.arange(w.size)[None, :]
    p = o * w.stride + k * w.window_dilation - w.padding_low
    ok = (p >= 0) & (p <= (n - 1) * w.base_dilation) & (p % w.base_dilation == 0)
    src = np.where(ok, p // w.base_dilation, 0)
    return src, ok


def reduce_window_arrays(ec, comp_name: str, inputs: Sequence[np.ndarray], inits: Sequence[np.ndarray],
                         wdims: Sequence[WindowDim]) -> list[np.ndarray]:
    """XLA CPU's reduce-window: per output acc = init, then the window positions in row-major order
    (padding and base-dilation holes skipped); long cumulative scans rewritten in blocks of 16;
    f16/bf16 max/min pooling of at least 4096 elements in YNNPACK's sign-magnitude order; a
    scalar operand is returned as it is."""
    red = reducer(ec, comp_name, len(inputs))
    xs = [np.asarray(x) for x in inputs]
    inits = [np.asarray(i) for i in inits]
    if xs[0].ndim == 0:
        # measured: XLA CPU returns a scalar operand as it is (the init value is not used)
        return [x.astype(i.dtype) for x, i in zip(xs, inits)]
    kind = red.kinds[0][0] if len(xs) == 1 and red.kinds and red.kinds[0] else None
    if kind in ("maximum", "minimum") and _library_window(xs[0], inits[0], wdims, _SIGN_MAGNITUDE):
        return [_sign_magnitude_window(kind, xs[0], inits[0], wdims)]
    if kind == "add" and _library_reduce(xs[0], inits[0], _LIBRARY_SUM):
        whole = whole_window_dims(xs[0].shape, wdims)
        r = library_sum(xs[0], whole) if whole else None
        if r is not None:               # a global pooling: YNNPACK's sum, the init added last
            out = tuple(1 if d in whole else n for d, n in enumerate(xs[0].shape))
            return [combine("add", np.broadcast_to(inits[0], out), r.reshape(out))]
    scan = scan_form(xs[0].shape, wdims)
    if scan is not None:
        return _blocked_scan(ec, red, comp_name, xs, inits, wdims, *scan)
    if _taps_pay(xs[0].shape, wdims):
        if len(xs) == 1 and not red.generic and not red.pair:
            return [_tap_window(red.kinds[0], xs[0], inits[0], wdims)]
        if int(np.prod([w.size for w in wdims], dtype=np.int64)) <= FOLD_BUDGET:
            return _tap_window_any(ec, red, xs, inits, wdims)
    return _naive_reduce_window(ec, red, xs, inits, wdims)


# Window positions from which on the per-position sweep (one vectorized step per position over
# all outputs) gives way to the gather when there are few outputs (each Python step has a fixed cost)
TAP_LIMIT = 64
TAP_MIN_OUTPUTS = 1024


def _taps_pay(shape, wdims) -> bool:
    if not len(shape):
        return False
    taps = int(np.prod([w.size for w in wdims], dtype=np.int64)) if wdims else 1
    outs = int(np.prod([_out_len(n, w) for n, w in zip(shape, wdims)], dtype=np.int64)) if wdims else 1
    return taps <= TAP_LIMIT or outs >= TAP_MIN_OUTPUTS


def tap_slices(n: int, w: WindowDim, out: int) -> list[tuple[slice, slice] | None]:
    """For one dimension, per window position k: (outputs, operand elements) as two slices of the
    same length -- the outputs whose position k falls on an operand element (not on padding nor
    on a base-dilation hole) and those elements -- or None when there is none."""
    src, ok = _window_index(n, w, out)
    res = []
    for k in range(w.size):
        o = np.flatnonzero(ok[:, k])
        if o.size == 0:
            res.append(None)
            continue
        i = src[o, k]
        ostep = int(o[1] - o[0]) if o.size > 1 else 1
        istep = int(i[1] - i[0]) if i.size > 1 else 1
        res.append((slice(int(o[0]), int(o[-1]) + 1, ostep), slice(int(i[0]), int(i[-1]) + 1, istep)))
    return res


def window_taps(shape, wdims, outs) -> list:
    """(tap number, output slices, operand slices) for every window position in row-major order
    that reads at least one operand element (strided views both sides: no gather, no padding)."""
    return _window_taps(tuple(shape), tuple(wdims), tuple(outs))


@functools.lru_cache(maxsize=256)
def _window_taps(shape, wdims, outs) -> list:
    per_dim = [tap_slices(n, w, o) for n, w, o in zip(shape, wdims, outs)]
    res = []
    for t, offsets in enumerate(np.ndindex(*(w.size for w in wdims))):
        sl = [per_dim[d][k] for d, k in enumerate(offsets)]
        if any(s is None for s in sl):
            continue
        res.append((t, tuple(s[0] for s in sl), tuple(s[1] for s in sl)))
    return res


# outputs per block of an in-place sweep: a block's accumulators stay in the cache while every
# window position passes over them (faster than whole-array passes on pooling-sized arrays)
SWEEP_BLOCK_BYTES = 1 << 18


def _in_blocks(x: np.ndarray, acc: np.ndarray, wdims):
    """(operand block, accumulator block, window positions) to sweep one after the other: the
    leading dimensions without a window merged into one (both arrays C-contiguous) and cut into
    blocks of about SWEEP_BLOCK_BYTES of accumulators; the whole arrays when the first dimension
    has a window."""
    k = 0
    while k < len(wdims) and trivial_window(wdims[k]):
        k += 1
    if k == 0:
        yield x, acc, window_taps(x.shape, wdims, acc.shape)
        return
    if k > 1 and x.flags.c_contiguous and acc.flags.c_contiguous:
        x = x.reshape((-1,) + x.shape[k:])
        acc = acc.reshape((-1,) + acc.shape[k:])
        wdims = [TRIVIAL_WINDOW] + list(wdims[k:])
    per = int(np.prod(acc.shape[1:], dtype=np.int64)) * acc.dtype.itemsize
    n = max(1, SWEEP_BLOCK_BYTES // max(per, 1))
    for b in range(0, acc.shape[0], n):
        xb, ab = x[b:b + n], acc[b:b + n]
        yield xb, ab, window_taps(xb.shape, wdims, ab.shape)


def _phased(xb: np.ndarray, w: WindowDim):
    """source slices -> operand view; with a stride s > 1 along the minor dimension, the block is
    first split into its s phases (x[..., p::s], contiguous copies made in the cache) so every
    window position reads contiguous rows (PyTorch's NCHW pooling) instead of every s-th element."""
    s = w.stride
    if s == 1 or w.base_dilation != 1 or xb.ndim == 0 or xb.shape[-1] < 2 * s:
        return xb.__getitem__
    ph = [np.ascontiguousarray(xb[..., p::s]) for p in range(s)]

    def get(i):
        last = i[-1]
        n = len(range(last.start, last.stop, last.step))
        return ph[last.start % s][i[:-1] + (slice(last.start // s, last.start // s + n),)]
    return get


# the ufunc of a recognized reducer kind on integers (wrapping like XLA) and on pred
_INT_REDUCER_UFUNCS = {"add": np.add, "multiply": np.multiply, "maximum": np.maximum, "minimum": np.minimum,
                       "and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor}
_PRED_REDUCER_UFUNCS = {"add": np.logical_or, "maximum": np.logical_or, "minimum": np.logical_and,
                        "and": np.logical_and, "or": np.logical_or, "xor": np.logical_xor,
                        "multiply": np.logical_and}


def _exact_ufunc(kind: str, dt):
    """The ufunc of reducer `kind` on integer or pred arrays of dtype `dt`."""
    return (_PRED_REDUCER_UFUNCS if dt == np.bool_ else _INT_REDUCER_UFUNCS)[kind]


def _tap_window(kind, x: np.ndarray, init: np.ndarray, wdims) -> np.ndarray:
    """A reduce-window of a recognized binary reducer as one sweep over the window positions: the
    accumulator (one per output, from the init value) is combined with the strided view of the
    operand elements each position reads, so every output takes its elements in row-major window
    order with padding and holes skipped -- XLA CPU's order, without gathering (outputs x
    positions) elements.  f32/f64 add/multiply and integers run in place (FTZ/DAZ as XLA), f32/f64
    max/min in place (f16/bf16 in f32) when no NaN is involved (zero results checked), the rest
    through combine()."""
    op, swapped = kind
    dt = x.dtype
    outs = tuple(_out_len(n, w) for n, w in zip(x.shape, wdims))
    acc = np.empty(outs, dt)
    acc[...] = init
    if acc.size == 0 or x.size == 0:
        return acc
    taps = window_taps(x.shape, wdims, outs)
    if dt.kind in "iu" or dt == np.bool_:
        uf = _exact_ufunc(op, dt)
        with np.errstate(all="ignore"):
            for xb, ab, tb in _in_blocks(x, acc, wdims):
                for _, o, i in tb:
                    a = ab[o]
                    uf(a, xb[i], out=a)
        return acc
    if dt in (np.float32, np.float64) and op in ("add", "multiply"):
        uf = np.add if op == "add" else np.multiply
        hw = hardware()
        if hw is not None:
            def sweep():
                for xb, ab, tb in _in_blocks(x, acc, wdims):
                    for _, o, i in tb:
                        a = ab[o]
                        uf(a, xb[i], out=a)
            with np.errstate(all="ignore"):
                flushing(sweep)
            return acc
        xf = flush(x)
        acc[...] = flush(acc)
        with np.errstate(all="ignore"):
            for xb, ab, tb in _in_blocks(np.ascontiguousarray(xf), acc, wdims):
                for _, o, i in tb:
                    a = ab[o]
                    uf(a, xb[i], out=a)
                    if subnormals(a) is not None:
                        a[...] = flush(a)
        return acc
    if op in ("maximum", "minimum") and dt in _MINMAX_WIDE:
        return _minmax_sweep(kind, x, init, wdims, outs)
    for _, o, i in taps:
        a, v = acc[o], x[i]
        acc[o] = combine(op, v, a) if swapped else combine(op, a, v)
    return acc


def _tap_window_any(ec, red, xs, inits, wdims):
    """A reduce-window of any reducer (variadic, argmax pairs, computations applied with
    ec.apply) as the same sweep over the window positions as _tap_window: per position, the
    reducer applied once to the accumulators and the strided views of the operands, over the
    outputs that position reaches -- the sequential fold of _naive_reduce_window without its
    gather."""
    outs = tuple(_out_len(n, w) for n, w in zip(xs[0].shape, wdims))
    accs = []
    for i in inits:
        a = np.empty(outs, i.dtype)
        a[...] = i
        accs.append(a)
    if accs[0].size == 0 or xs[0].size == 0:
        return accs
    for _, o, i in window_taps(xs[0].shape, wdims, outs):
        res = combine_all(ec, red, [a[o] for a in accs], [x[i] for x in xs])
        for a, r in zip(accs, res):
            a[o] = r
    return accs


# max/min pooling computed in place in these types: f32/f64 as they are, f16/bf16 in f32 as XLA
# computes them (exact: max/min pick an element; bf16 subnormals are f32 subnormals, flushed,
# f16 ones are normal f32 numbers, kept)
_MINMAX_WIDE = {np.dtype(np.float32): np.float32, np.dtype(np.float64): np.float64,
                np.dtype(np.float16): np.float32, np.dtype(ml_dtypes.bfloat16): np.float32}


def _minmax_sweep(kind, x, init, wdims, outs):
    """The max/min of every window with np.maximum/np.minimum in place (in f32 for f16/bf16),
    the accumulator first (max(acc, x)) or second (max(x, acc)) as the reducer has it, so that the
    NaN kept is the one XLA's fold lets win (kernels.minmax_keeps_nan), then XLA's rules where
    they can differ from NumPy's pick, checked on the results alone: a NaN whose sign XLA's rule
    could change (it ANDs the signs before it for maximum, ORs them for minimum: a negative NaN
    result of maximum, a positive one of minimum), a zero of the wrong sign possible (XLA orders
    -0 < +0) or a subnormal one (DAZ could choose otherwise; without one, reading subnormals as
    zeros changes no winner).  Only those windows are folded again exactly."""
    op, swapped = kind
    uf = np.maximum if op == "maximum" else np.minimum
    wide = _MINMAX_WIDE[x.dtype]
    xw = x.astype(wide, copy=False)
    acc = np.empty(outs, wide)
    acc[...] = np.asarray(init).astype(wide)
    for xb, ab, tb in _in_blocks(xw, acc, wdims):
        get = _phased(xb, wdims[-1])
        for _, o, i in tb:
            a = ab[o]
            if swapped:                     # max(x, acc): the last NaN met wins
                uf(get(i), a, out=a)
            else:                           # max(acc, x): the first
                uf(a, get(i), out=a)
    nan = np.isnan(acc)
    bad = nan.copy()
    zero = acc == 0
    bad |= zero & (np.signbit(acc) if op == "maximum" else ~np.signbit(acc))
    sub = subnormals(acc)
    if sub is not None:
        bad |= sub
    res = acc.astype(x.dtype, copy=False)
    if x.dtype == wide and minmax_keeps_nan(uf, wide) and nan.any():
        # NumPy kept the bits of the NaN that wins in XLA's fold; XLA's sign rule can only clear
        # (maximum: AND) or set (minimum: OR) its sign: the NaNs of the other sign are exact
        nan &= np.signbit(acc) if op == "maximum" else ~np.signbit(acc)
        bad = (bad & ~np.isnan(acc)) | nan
    if x.dtype == wide and np.count_nonzero(nan) * NAN_SWEEP_SHARE >= nan.size:
        np.copyto(res, _nan_windows(kind, x, init, wdims, outs), where=nan)
        bad &= ~nan
    if bad.any():
        where = np.nonzero(bad)
        res[where] = _exact_windows(kind, x, init, wdims, outs, where)
    return res


# a max/min reduce-window whose NaN results are at least 1 in NAN_SWEEP_SHARE of its outputs finds
# their bits in one more sweep over the window positions (_nan_windows) rather than one gather each
NAN_SWEEP_SHARE = 64


def _nan_windows(kind, x, init, wdims, outs) -> np.ndarray:
    """Every output's NaN result by XLA's rule (_fold_float_minmax), meaningful where its window
    holds a NaN, in one sweep over the window positions in fold order (the init value first; for
    max(x, acc) backwards, the init value last): the first NaN met keeps its payload, its sign
    AND-ed (maximum) or OR-ed (minimum) with the signs of the elements met before it (the running
    result's sign: -0 < +0, and a subnormal keeps its sign when read as zero).  f32/f64 `x`."""
    op, swapped = kind
    dt = x.dtype
    nanv = np.empty(outs, dt)
    found = np.zeros(outs, bool)
    signs = np.empty(outs, bool)             # maximum: all negative so far; minimum: any negative
    index = np.arange(nanv.size).reshape(outs)
    init = np.broadcast_to(np.asarray(init, dt), outs)

    def meet(v, o_nanv, o_found, o_signs):
        isn = np.isnan(v)
        neg = np.signbit(v)
        new = isn & ~o_found
        if new.any():
            sign = (neg & o_signs) if op == "maximum" else (neg | o_signs)
            np.copyto(o_nanv, _sign_set(v, sign), where=new)
            o_found |= isn
        if op == "maximum":
            o_signs &= neg | isn
        else:
            o_signs |= neg & ~isn

    signs[...] = op == "maximum"
    if not swapped:
        meet(init, nanv, found, signs)
    flat = [a.reshape(-1) for a in (nanv, found, signs)]
    with np.errstate(invalid="ignore"):
        for xb, ib, tb in _in_blocks(x, index, wdims):
            start = int(ib.reshape(-1)[0]) if ib.size else 0
            st = [f[start:start + ib.size].reshape(ib.shape) for f in flat]
            for _, o, i in (reversed(tb) if swapped else tb):
                meet(xb[i], *(a[o] for a in st))
    if swapped:
        meet(init, nanv, found, signs)
    return nanv


def _exact_windows(kind, x, init, wdims, outs, where):
    """The reduce-window of the outputs at `where` (index arrays), folded with XLA's elemental
    rules (_fold_kind): their windows gathered, at most GATHER_LIMIT elements at a time."""
    rank = x.ndim
    idx = [_window_index(x.shape[d], wdims[d], outs[d]) for d in range(rank)]
    sizes = [w.size for w in wdims]
    taps = np.indices(sizes).reshape(rank, -1)
    n = where[0].size
    step = max(1, GATHER_LIMIT // max(taps.shape[1], 1))
    out = np.empty(n, x.dtype)
    for lo in range(0, n, step):
        sel = [w[lo:lo + step, None] for w in where]
        src = tuple(idx[d][0][sel[d], taps[d]] for d in range(rank))
        ok = np.logical_and.reduce([idx[d][1][sel[d], taps[d]] for d in range(rank)])
        acc = np.broadcast_to(np.asarray(init, x.dtype), (src[0].shape[0],))
        out[lo:lo + step] = _fold_kind(kind[0], kind[1], acc, x[src], ok)
    return out


def whole_window_dims(shape, wdims) -> list[int] | None:
    """The dims a reduce-window sums whole (window = the dim, no padding, no dilation: one output
    there) when every other dim has a window of 1 at stride 1 without padding: the reduce over
    those dims (XLA CPU gives it to YNNPACK as one, measured on a 7x7 global average pool).  None
    for any other window."""
    dims = []
    for d, (n, w) in enumerate(zip(shape, wdims)):
        if w.window_dilation != 1 or w.base_dilation != 1 or w.padding_low or w.padding_high:
            return None
        if w.size == n and n > 1:
            dims.append(d)
        elif w.size != 1 or w.stride != 1:
            return None
    return dims or None


def _library_window(x: np.ndarray, init: np.ndarray, wdims, types) -> bool:
    """True for the reduce-windows XLA CPU gives to YNNPACK (measured on jaxlib 0.10.2), among
    those of `types`: at least LIBRARY_REDUCE_MIN input elements, no dilation, every window
    dimension either of size 1 or with its stride equal to its size, and the rank plus the number
    of dimensions with a window or a stride at most LIBRARY_REDUCE_MAX_RANK."""
    if not _library_reduce(x, init, types) or len(wdims) != x.ndim:
        return False
    if any(w.window_dilation != 1 or w.base_dilation != 1 or (w.size > 1 and w.stride != w.size) for w in wdims):
        return False
    axes = sum(1 for w in wdims if w.size > 1 or w.stride > 1)
    return 0 < axes and x.ndim + axes <= LIBRARY_REDUCE_MAX_RANK


def _sign_magnitude_window(kind: str, x: np.ndarray, init: np.ndarray, wdims) -> np.ndarray:
    """The f16/bf16 max/min of every window (padding reads as the init value, which every window
    also counts) in sign-magnitude integer order, as _sign_magnitude_extreme."""
    outs = tuple(_out_len(x.shape[d], w) for d, w in enumerate(wdims))
    best = np.full(outs, init, x.dtype)
    if 0 in outs or x.size == 0:
        return best
    padded = np.full(tuple(n + w.padding_low + w.padding_high for n, w in zip(x.shape, wdims)), init, x.dtype)
    padded[tuple(slice(w.padding_low, w.padding_low + n) for n, w in zip(x.shape, wdims))] = x
    best_key = _sign_magnitude_key(best)
    for offsets in np.ndindex(*(w.size for w in wdims)):
        v = padded[tuple(slice(k, k + w.stride * (n - 1) + 1, w.stride) for k, w, n in zip(offsets, wdims, outs))]
        key = _sign_magnitude_key(v)
        take = key > best_key if kind == "maximum" else key < best_key
        best = np.where(take, v, best)
        best_key = np.where(take, key, best_key)
    return best


def scan_form(shape, wdims):
    """(dim, forward, exclusive) if XLA's ReduceWindowRewriter turns this reduce-window into a
    blocked scan, else None."""
    nontrivial = [d for d, w in enumerate(wdims) if not trivial_window(w)]
    if len(nontrivial) != 1:
        return None
    d = nontrivial[0]
    n, w = shape[d], wdims[d]
    fwd = w.padding_low in (n - 1, n) and w.padding_high == 0
    rev = w.padding_high in (n - 1, n) and w.padding_low == 0
    if w.stride != 1 or w.size != n or not (fwd or rev) or w.base_dilation != 1 or w.window_dilation != 1 or n <= SCAN_BASE:
        return None
    excl = (w.padding_low == n) if fwd else (w.padding_high == n)
    return d, fwd, excl


def _blocked_scan(ec, red, comp_name, xs, inits, wdims, d, fwd, excl):
    rank = xs[0].ndim
    n = xs[0].shape[d]
    B = SCAN_BASE
    xs = [np.moveaxis(x, d, -1) for x in xs]
    L = -(-n // B) * B
    if L != n:
        xs = [np.concatenate([x, np.broadcast_to(i, x.shape[:-1] + (L - n,))], -1) for x, i in zip(xs, inits)]
    C = L // B
    tiled = [x.reshape(x.shape[:-1] + (C, B)) for x in xs]
    outer_w = [TRIVIAL_WINDOW] * rank + [WindowDim(B, 1, B - 1, 0) if fwd else WindowDim(B, 1, 0, B - 1)]
    outer = reduce_window_arrays(ec, comp_name, tiled, inits, outer_w)
    cols = [o[..., B - 1] if fwd else o[..., 0] for o in outer]
    inner_w = [TRIVIAL_WINDOW] * (rank - 1) + [WindowDim(C, 1, C, 0) if fwd else WindowDim(C, 1, 0, C)]
    inner = reduce_window_arrays(ec, comp_name, cols, inits, inner_w)
    prefix = [i[..., :C] if fwd else i[..., 1:] for i in inner]
    res = combine_all(ec, red, outer, [p[..., None] for p in prefix])
    res = [r.reshape(r.shape[:-2] + (L,))[..., :n] for r in res]
    if excl:
        res = [np.concatenate([np.broadcast_to(i, r.shape[:-1] + (1,)), r] if fwd else
                              [r, np.broadcast_to(i, r.shape[:-1] + (1,))], -1).astype(r.dtype)
               for r, i in zip(res, inits)]
    return [np.moveaxis(r, -1, d) for r in res]


def _naive_reduce_window(ec, red, xs, inits, wdims):
    shape = xs[0].shape
    rank = len(shape)
    outs = tuple(_out_len(shape[d], wdims[d]) for d in range(rank))
    accs = [np.broadcast_to(i, outs) for i in inits]
    sizes = [w.size for w in wdims]
    total = int(np.prod(sizes)) if sizes else 1
    if total == 0 or 0 in outs or 0 in shape:
        return [np.broadcast_to(i, outs).astype(i.dtype) for i in inits]
    idx = [_window_index(shape[d], wdims[d], outs[d]) for d in range(rank)]
    positions = np.indices(sizes).reshape(rank, -1) if rank else np.zeros((0, 1), int)
    out_size = int(np.prod(outs)) if outs else 1
    chunk = max(1, min(total, GATHER_LIMIT // max(out_size, 1)))
    for start in range(0, total, chunk):
        pos = positions[:, start:start + chunk]
        c = pos.shape[1]
        src, ok = [], None
        for d in range(rank):
            s, v = idx[d]
            s, v = s[:, pos[d]], v[:, pos[d]]          # (out_d, c)
            bshape = [1] * rank + [c]
            bshape[d] = outs[d]
            src.append(s.reshape(bshape))
            v = v.reshape(bshape)
            ok = v if ok is None else ok & v
        gathered = [x[tuple(src)] if rank else np.broadcast_to(x, (c,)) for x in xs]
        if ok is None:
            ok = np.ones((c,), bool)
        accs = fold(ec, red, accs, gathered, ok)
    return [np.asarray(a, dtype=i.dtype) for a, i in zip(accs, inits)]


# =============================================================================== scatter combining

def scatter_combine(ec, comp_name: str, targets: list[np.ndarray], lin: np.ndarray,
                    updates: list[np.ndarray]) -> None:
    """targets[k][lin[j]] = f(targets..., updates...[j]) for j in order (sequential per target, as XLA
    CPU does): flat 1-D `targets` are updated in place; f is the combiner `comp_name` of N
    accumulators and N values."""
    lin = np.asarray(lin, dtype=np.int64)
    if lin.size == 0:
        return
    red = reducer(ec, comp_name, len(targets))
    if not red.generic and not red.pair and _scatter_fast(red, targets, lin, updates):
        return
    order = np.argsort(lin, kind="stable")
    sl = lin[order]
    pos = np.arange(sl.size)
    first = np.r_[True, sl[1:] != sl[:-1]]
    rank = pos - np.maximum.accumulate(np.where(first, pos, 0))
    by_round = order[np.argsort(rank, kind="stable")]
    bounds = np.r_[0, np.cumsum(np.bincount(rank))]
    for r in range(bounds.size - 1):
        sel = by_round[bounds[r]:bounds[r + 1]]
        t = lin[sel]
        res = combine_all(ec, red, [o[t] for o in targets], [u[sel] for u in updates])
        for o, v in zip(targets, res):
            o[t] = v


def _scatter_fast(red, targets, lin, updates) -> bool:
    """ufunc.at for recognized combiners where it is exact; False to take the rounds path."""
    for (kind, swapped), o, u in zip(red.kinds, targets, updates):
        dt = o.dtype
        if is_float(dt):
            if kind != "add" or not _native_float(dt):      # f16/bf16/f8: NaN bits via combine()
                return False
            if flushes_subnormals(dt) and _tiny_present(dt, o[lin], u):
                return False
        elif not (dt == np.bool_ or dt.kind in "iu"):
            return False
    for (kind, swapped), o, u in zip(red.kinds, targets, updates):
        uf = _exact_ufunc(kind, o.dtype)
        with np.errstate(all="ignore"):
            uf.at(o, lin, flush(np.asarray(u, dtype=o.dtype)))
    return True


def _tiny_present(dt, *arrays) -> bool:
    """Any nonzero below 2^-103 (f32/bf16) / 2^-970 (f64): only then can a sum of them go
    subnormal (all larger values are multiples of the smallest normal's ulp)."""
    tiny = 2.0 ** -970 if dt in (np.float64, np.complex128) else 2.0 ** -103
    for a in arrays:
        for p in ((a.real, a.imag) if a.dtype.kind == "c" else (a,)):
            m = np.abs(p.astype(np.float64))
            if ((m > 0) & (m < tiny)).any():
                return True
    return False


# =============================================================================== sort

@dataclass(frozen=True)
class SortKey:
    """One key of a recognized comparator: operand `operand`'s key function rooted at `root` (an
    instruction of the comparator reading only parameter `param`), ascending or not, compare type."""
    operand: int
    root: str
    param: int
    descending: bool
    ctype: str


def comparator_keys(module: Module, comp_name: str, n: int) -> list[SortKey] | None:
    """The lexicographic keys of a sort comparator over n operands, or None if it is not of the form
    f(a) < f(b)  |  f(a) < f(b) or (f(a) == f(b) and <rest>)   (also with >, and operands swapped)."""
    comp = _computation(module, comp_name)
    ps = _params(comp)
    if len(ps) != 2 * n:
        return None
    an = _Analysis(comp, module)
    return an.lex(comp.root_instruction)


# instructions whose value is not a function of their operands alone, or that run other code (a
# call or fusion is followed into its computation instead: _pure)
_IMPURE = (with_trait(READS_RNG, IO, CONTROL_FLOW) | {"rng-bit-generator", "custom-call"}) - {"call"}


def _pure(module: Module, name: str, seen: set | None = None) -> bool:
    """True if computation `name` and everything it calls (call, fusion) is free of _IMPURE
    instructions, so that applying it to whole arrays is an elementwise function."""
    seen = set() if seen is None else seen
    if name in seen:
        return False                                    # recursion
    seen.add(name)
    comp = module.computation_map.get(name)
    if comp is None:
        return False
    for inst in comp.instructions:
        if inst.opcode in _IMPURE:
            return False
        if inst.opcode in ("call", "fusion"):
            callee = _callee(inst)
            if callee is None or not _pure(module, callee, seen):
                return False
    seen.discard(name)
    return True


def _callee(inst: Instruction) -> str | None:
    ref = inst.attrs.get("to_apply" if inst.opcode == "call" else "calls")
    return getattr(ref, "name", None)


class _Analysis:
    def __init__(self, comp: Computation, module: Module | None = None):
        self.comp = comp
        self.module = module
        self.by = comp.by_name
        self._deps: dict[str, frozenset] = {}

    def deps(self, name: str) -> frozenset:
        d = self._deps.get(name)
        if d is None:
            stack, seen, out = [name], set(), set()
            while stack:
                k = stack.pop()
                if k in seen:
                    continue
                seen.add(k)
                inst = self.by[k]
                if inst.opcode == "parameter":
                    out.add(inst.parameter_number)
                if inst.opcode in _IMPURE or (inst.opcode in ("call", "fusion") and not (
                        self.module is not None and _pure(self.module, _callee(inst) or ""))):
                    out.add(-1)          # not a pure elementwise key function
                stack.extend(inst.operands)
            d = self._deps[name] = frozenset(out)
        return d

    def same(self, a: str, b: str, pa: int, pb: int) -> bool:
        """Structurally the same function, a of parameter pa and b of parameter pb."""
        if a == b:
            return not (self.deps(a) & {pa, pb})
        x, y = self.by[a], self.by[b]
        if x.opcode != y.opcode or x.shape.element_type != y.shape.element_type or \
                len(x.operands) != len(y.operands):
            return False
        if x.opcode == "parameter":
            return x.parameter_number == pa and y.parameter_number == pb
        if x.opcode == "constant":
            return x.literal == y.literal
        ax = {k: v for k, v in x.attrs.items() if k not in ("metadata", "sharding", "frontend_attributes",
                                                              "backend_config", "origin", "statistics")}
        ay = {k: v for k, v in y.attrs.items() if k not in ("metadata", "sharding", "frontend_attributes",
                                                              "backend_config", "origin", "statistics")}
        if ax != ay:
            return False
        return all(self.same(p, q, pa, pb) for p, q in zip(x.operands, y.operands))

    def key_compare(self, inst: Instruction, directions=("LT", "GT")):
        """(operand, root, param, direction) if inst = compare(f(p[2k]), f(p[2k+1])) (either order)."""
        if inst.opcode != "compare" or inst.attrs.get("direction") not in directions:
            return None
        a, b = inst.operands
        da, db = self.deps(a), self.deps(b)
        if len(da) != 1 or len(db) != 1 or -1 in da or -1 in db:
            return None
        (pa,), (pb,) = da, db
        if pa // 2 != pb // 2 or pa == pb or not self.same(a, b, pa, pb):
            return None
        direction = str(inst.attrs["direction"])
        if pa % 2 == 1:                      # f(rhs) ? f(lhs): flip
            direction = {"LT": "GT", "GT": "LT"}.get(direction, direction)
            a, pa = b, pb
        return pa // 2, a, pa, direction

    def ctype(self, inst: Instruction) -> str:
        from ..ir.attributes import comparison_type
        return comparison_type(inst.attrs, self.by[inst.operands[0]].shape.element_type)

    def lex(self, inst: Instruction) -> list[SortKey] | None:
        kc = self.key_compare(inst)
        if kc is not None:
            k, root, p, direction = kc
            return [SortKey(k, root, p, direction == "GT", self.ctype(inst))]
        if inst.opcode != "or" or len(inst.operands) != 2:
            return None
        for first, rest in (inst.operands, inst.operands[::-1]):
            kc = self.key_compare(self.by[first])
            r = self.by[rest]
            if kc is None or r.opcode != "and" or len(r.operands) != 2:
                continue
            k, root, p, direction = kc
            ct = self.ctype(self.by[first])
            for eqn, tail in (r.operands, r.operands[::-1]):
                e = self.by[eqn]
                ek = self.key_compare(e, ("EQ",))
                if ek is None or ek[0] != k or not self.same(ek[1], root, ek[2], p) or self.ctype(e) != ct:
                    continue
                more = self.lex(self.by[tail])
                if more is not None:
                    return [SortKey(k, root, p, direction == "GT", ct)] + more
        return None


def eval_subgraph(ec, comp: Computation, root: str, bindings: dict[int, np.ndarray]):
    """Evaluate instruction `root` of `comp` with parameters bound to whole arrays (elementwise;
    the computations it calls are applied to the arrays too, see EvalContext.apply)."""
    ec.batched += 1
    try:
        return _eval_subgraph(ec, comp, root, bindings)
    finally:
        ec.batched -= 1


def _eval_subgraph(ec, comp: Computation, root: str, bindings: dict[int, np.ndarray]):
    insts = comp.instructions
    index = {i.name: k for k, i in enumerate(insts)}
    vals: dict[str, object] = {}
    for k in post_order(insts, index, (index[root],)):
        inst = insts[k]
        if inst.opcode == "parameter":
            vals[inst.name] = bindings[inst.parameter_number]
            continue
        rule = rule_for(inst.opcode)
        if rule is None:
            raise HloEvalError(f"{inst.opcode} cannot be evaluated yet")
        vals[inst.name] = rule(inst, [vals[o] for o in inst.operands], ec)
    return vals[root]


def order_key(a: np.ndarray, ctype: str) -> np.ndarray:
    """An array whose natural (integer) order is the compare type's order on `a`."""
    dt = a.dtype
    if dt == np.bool_:
        return a.astype(np.uint8)
    if is_float(dt) and dt.kind != "c":
        if dt.kind == "V" and ml_dtypes.finfo(dt).bits < dt.itemsize * 8:
            return order_key(a.astype(np.float32), ctype)       # f4/f6: widen exactly
        if dt == ml_dtypes.bfloat16 and ctype == "TOTALORDER":
            a = flush(a)        # measured: bf16 TOTALORDER reads subnormals as zeros of their sign
        if ctype != "TOTALORDER" and ctype != "WEAKORDER":
            a = flush(a)
            a = np.where(a == 0, dt.type(0.0), a).astype(dt)      # -0 == +0
        bits = dt.itemsize * 8
        s = a.view({1: np.int8, 2: np.int16, 4: np.int32, 8: np.int64}[dt.itemsize]).astype(np.int64)
        key = np.where(s < 0, s ^ ((1 << (bits - 1)) - 1), s)
        return weak_from_total(a, key) if ctype == "WEAKORDER" else key
    if _is_int(dt):
        if dt.kind not in "iu":
            a = a.astype(np.int64)
            if ctype == "UNSIGNED" and ml_dtypes.iinfo(dt).min < 0:
                a = a & ((1 << _int_bits(dt)) - 1)
            return a
        if ctype == "UNSIGNED" and dt.kind == "i":
            return a.view(np.dtype(f"u{dt.itemsize}"))
        if ctype == "SIGNED" and dt.kind == "u":
            return a.view(np.dtype(f"i{dt.itemsize}"))
        return a
    raise HloEvalError(f"cannot order values of type {dt}")


def descending_key(k: np.ndarray) -> np.ndarray:
    return ~k if k.dtype.kind in "iu" else -k


def sort_arrays(ec, comp_name: str, operands: Sequence[np.ndarray], dim: int, is_stable: bool = True):
    """The operands sorted together along `dim` by the comparator (stably in every case: XLA leaves
    the order of ties of unstable sorts unspecified)."""
    ops = [np.asarray(o) for o in operands]
    n = ops[0].shape[dim] if ops[0].ndim else 1
    if n <= 1 or ops[0].size == 0:
        return [o.copy() for o in ops]
    cache = _cache(ec)
    ck = ("sortkeys", comp_name, len(ops))
    if ck not in cache:
        cache[ck] = comparator_keys(ec.module, comp_name, len(ops))
    keys = cache[ck]
    perm = None
    if keys is not None:
        comp = ec.module.computation_map[comp_name]
        try:
            arrays = []
            for k in keys:
                v = np.broadcast_to(np.asarray(eval_subgraph(ec, comp, k.root, {k.param: ops[k.operand]})),
                                    ops[0].shape)
                o = order_key(np.moveaxis(v, dim, -1), k.ctype)
                arrays.append(descending_key(o) if k.descending else o)
            perm = np.lexsort(arrays[::-1], axis=-1)
        except HloEvalError:
            perm = None
    if perm is None:
        perm = _merge_sort_perm(ec, comp_name, [np.moveaxis(o, dim, -1) for o in ops])
    return [np.moveaxis(np.take_along_axis(np.moveaxis(o, dim, -1), perm, -1), -1, dim) for o in ops]


def _merge_sort_perm(ec, comp_name, ops):
    """Stable bottom-up merge sort of the last axis with the comparator evaluated by ec.apply:
    each merge places an element by binary search in the other run, all elements at once."""
    shape = ops[0].shape
    n = shape[-1]
    flat = [o.reshape(-1, n) for o in ops]
    B = flat[0].shape[0]
    rows = np.arange(B)[:, None]
    perm = np.broadcast_to(np.arange(n), (B, n)).copy()
    pos = np.arange(n)

    def less(lhs_pos, rhs_pos):
        li, ri = perm[rows, lhs_pos], perm[rows, rhs_pos]
        args = []
        for f in flat:
            args += [f[rows, li], f[rows, ri]]
        r = ec_apply(ec, comp_name, args)
        return np.broadcast_to(np.asarray(r), li.shape).astype(bool)

    w = 1
    while w < n:
        blk = pos // (2 * w)
        start = blk * 2 * w
        off = pos - start
        left = off < w
        rstart = start + w
        rlen = np.clip(n - rstart, 0, w)
        llen = np.minimum(w, n - start)
        other_start = np.where(left, rstart, start)
        other_len = np.where(left, rlen, llen)
        lo = np.zeros((B, n), np.int64)
        hi = np.broadcast_to(other_len, (B, n)).astype(np.int64)
        for _ in range(int(np.ceil(np.log2(w + 1)))):
            active = lo < hi
            if not active.any():
                break
            mid = (lo + hi) // 2
            other = np.minimum(other_start + np.minimum(mid, np.maximum(other_len - 1, 0)), n - 1)
            me = np.broadcast_to(pos, (B, n))
            c = less(np.where(left, other, me), np.where(left, me, other))
            go = np.where(left, c, ~c) & active
            lo = np.where(go, mid + 1, lo)
            hi = np.where(active & ~go, mid, hi)
        new_off = np.where(left, off, off - w) + lo
        newpos = start + new_off
        nperm = np.empty_like(perm)
        nperm[rows, newpos] = perm
        perm = nperm
        w *= 2
    return perm.reshape(shape)


def weak_from_total(a: np.ndarray, key: np.ndarray) -> np.ndarray:
    """The newest XLA's weak order (`order=WEAK`) from total-order keys of the floats `a`: the
    total order with -0 and +0 one class (the total key of -0 is -1 at every width, of +0 is 0),
    every negative NaN one class below -inf and every positive NaN one class above +inf: C++'s
    std::weak_order on IEEE floats, whose name XLA's order takes (TOTAL being strong_order's
    totalOrder).  XLA's comparison_util says only that a weak order is reflexive and has an
    inverse; XLA CPU cannot be asked (jax 0.10.2 has no weak order)."""
    i64 = np.iinfo(np.int64)
    nan = np.where(key < 0, i64.min, i64.max)
    return np.where(np.isnan(a), nan, np.where(key == -1, 0, key))


def total_order_key(a: np.ndarray) -> np.ndarray:
    """Integers ordered like XLA's TOTALORDER on `a` (floats: -NaN < -inf < ... < -0 < +0 < ... < NaN)."""
    return order_key(a, "TOTALORDER")
