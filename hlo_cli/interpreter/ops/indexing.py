"""Indexing: dynamic-slice, dynamic-update-slice, gather, scatter.

XLA CPU's index semantics (hlo_cli/SEMANTICS.md, "Indexing"):
- dynamic-slice / dynamic-update-slice / gather clamp every start index into [0, dim - size]
  (negative -> 0, too large -> dim - size); unsigned index types are read as unsigned, so u32
  4294967295 is a large start, clamped to dim - size.
- scatter never clamps: an update window that would not lie entirely inside the operand is skipped
  as a whole (a partly in-bounds window writes nothing).
- scatter applies the updates one scatter index after the other, in row-major order of the
  update-scatter dimensions: the combiner runs as combiner(current, update), duplicates combine
  sequentially in that order (float sums round step by step), and with the assignment combiner the
  last update wins.  indices_are_sorted / unique_indices do not change any of this on CPU.
- two exceptions, with an empty index vector (no scatter_dims_to_operand_dims) and no batching dims:
  if the indices have no elements and the updates have the operand's shape, XLA's simplifier makes
  the scatter map(to_apply, operand, updates) whatever the window dims say; otherwise, with a
  one-element update window, XLA CPU combines each update with the original operand value, so only
  the last update shows (with a larger window all updates combine sequentially).
- combining: the assignment combiner is done here (last update per target); recognized binary
  combiners use ufunc.at (float maximum/minimum with XLA's -0 < +0 fixed up afterwards), everything
  else the shared sequential-rounds path of interpreter/computations.py (`scatter_combine`).
"""
from __future__ import annotations

import numpy as np

from ...errors import HloEvalError
from .. import computations as C
from ..kernels import Fast, declare, shape_dtype
from ..registry import evaluator, prepares


def _as_int64(a: np.ndarray) -> np.ndarray:
    """Indices as int64 with their unsigned/signed value preserved (u64 beyond 2^63-1 saturates,
    which keeps it out of bounds / clamped exactly like the real value)."""
    a = np.asarray(a)
    if a.dtype == np.uint64:
        return np.minimum(a, np.uint64(2**63 - 1)).astype(np.int64)
    return a.astype(np.int64)


def _starts(indices, operand_shape, sizes):
    """Python int start indices, clamped into [0, dim - size] as XLA does."""
    if len(indices) == 1 and np.ndim(indices[0]) == 1:          # legacy form: one index vector
        indices = list(indices[0])
    return tuple(min(max(int(i), 0), max(n - s, 0)) for i, n, s in zip(indices, operand_shape, sizes))


@evaluator("dynamic-slice")
def eval_dynamic_slice(inst, args, ec):
    """operand[start:start+size] per dimension, each start clamped into [0, dim - size]."""
    x = args[0]
    sizes = inst.attrs["dynamic_slice_sizes"]
    starts = _starts(args[1:], x.shape, sizes)
    return np.array(x[tuple(slice(s, s + n) for s, n in zip(starts, sizes))])


@evaluator("dynamic-update-slice")
def eval_dynamic_update_slice(inst, args, ec):
    """The operand with `update` written at the start indices, each clamped into [0, dim - update dim]."""
    x, upd = args[0], args[1]
    starts = _starts(args[2:], x.shape, upd.shape)
    out = np.array(x)
    out[tuple(slice(s, s + n) for s, n in zip(starts, upd.shape))] = upd
    return out


def _index_vectors(indices: np.ndarray, index_vector_dim: int) -> np.ndarray:
    """The indices with the index vector as the last dimension (int64)."""
    if index_vector_dim == indices.ndim:
        indices = indices[..., None]
    elif index_vector_dim != indices.ndim - 1:
        indices = np.moveaxis(indices, index_vector_dim, -1)
    return _as_int64(indices)


def _batch_coord(batch_shape, pos: int) -> np.ndarray:
    """arange over batch dimension `pos`, shaped to broadcast against batch_shape."""
    view = [1] * len(batch_shape)
    view[pos] = batch_shape[pos]
    return np.arange(batch_shape[pos], dtype=np.int64).reshape(view)


def _batch_pos(indices_dim: int, index_vector_dim: int) -> int:
    """Position among the batch dims (the index dims other than index_vector_dim) of an index dim."""
    return indices_dim if indices_dim < index_vector_dim else indices_dim - 1


@evaluator("gather")
def eval_gather(inst, args, ec):
    """Slices of `slice_sizes` at the start indices (clamped into [0, dim - size] per operand dim),
    collapsed_slice_dims and operand_batching_dims dropped, window dims placed at offset_dims and
    the batch dims (the start indices' dims but index_vector_dim) in the remaining positions."""
    operand, indices = args
    a = inst.attrs
    offset_dims = tuple(a["offset_dims"])
    collapsed = set(a["collapsed_slice_dims"])
    start_index_map = tuple(a["start_index_map"])
    ivd = a["index_vector_dim"]
    sizes = tuple(a["slice_sizes"])
    obd = tuple(a.get("operand_batching_dims") or ())
    sibd = tuple(a.get("start_indices_batching_dims") or ())
    ind = _index_vectors(indices, ivd)
    batch_shape = ind.shape[:-1]
    nb, r = len(batch_shape), operand.ndim
    index = []
    for d in range(r):
        if d in obd:        # before start_index_map: XLA's evaluator lets the batch index win
            s = _batch_coord(batch_shape, _batch_pos(sibd[obd.index(d)], ivd))
        elif d in start_index_map:
            s = np.clip(ind[..., start_index_map.index(d)], 0, max(operand.shape[d] - sizes[d], 0))
        else:
            s = np.zeros((1,) * nb, np.int64)
        w = np.arange(sizes[d], dtype=np.int64).reshape([sizes[d] if k == d else 1 for k in range(r)])
        index.append(s.reshape(s.shape + (1,) * r) + w)
    g = operand[tuple(index)] if r else operand[()]
    g = np.broadcast_to(g, batch_shape + sizes)
    kept = [d for d in range(r) if d not in collapsed and d not in obd]
    g = g.reshape(batch_shape + tuple(sizes[d] for d in kept))
    # output dim p: a window dim if p in offset_dims, else the next batch dim
    perm, b = [], 0
    for p in range(nb + len(kept)):
        if p in offset_dims:
            perm.append(nb + offset_dims.index(p))
        else:
            perm.append(b)
            b += 1
    g = g.transpose(perm)
    return g if g.flags.c_contiguous else g.copy()


# --------------------------------------------------------------------------- scatter

def _is_assignment(ec, name: str, n: int) -> bool:
    """True if the combiner returns its update operands unchanged: `ROOT = parameter(1)` (or a tuple
    of parameters n..2n-1 for a variadic scatter), what JAX's x.at[i].set(v) emits."""
    comp = ec.module.computation_map.get(name)
    if comp is None:
        raise HloEvalError(f"computation '{name}' is not defined")
    root = comp.root_instruction
    outs = [root] if n == 1 else ([comp.by_name[o] for o in root.operands]
                                  if root.opcode == "tuple" and len(root.operands) == n else [])
    return len(outs) == n and all(o.opcode == "parameter" and o.parameter_number == n + k
                                  for k, o in enumerate(outs))


def _assign_last(targets, lin, updates):
    """targets[k][lin[j]] = updates[k][j] where j is the last update of each target."""
    _, first = np.unique(lin[::-1], return_index=True)
    sel = lin.size - 1 - first
    for o, u in zip(targets, updates):
        o[lin[sel]] = u[sel]


_NO_FLUSH = (np.dtype(np.float16),)


def _float_minmax_at(kind, target, lin, upd) -> bool:
    """maximum/minimum of float updates into `target` with ufunc.at, XLA's way: NaN propagates and
    -0 < +0 (NumPy returns either zero on ties, so the zero signs are fixed afterwards).  False if a
    subnormal is involved (XLA CPU flushes them; the shared rounds path handles that)."""
    dt = target.dtype
    if not (dt.kind == "f" or dt.name == "bfloat16"):
        return False
    if dt not in _NO_FLUSH:
        tiny = 2.0 ** -1022 if dt == np.float64 else 2.0 ** -126
        for a in (target[lin], upd):
            m = np.abs(a if dt.kind == "f" else a.astype(np.float32))
            with np.errstate(invalid="ignore"):
                if ((m > 0) & (m < m.dtype.type(tiny))).any():
                    return False
    want_pos = kind == "maximum"
    with np.errstate(all="ignore"):
        flag = (target == 0) & (np.signbit(target) != want_pos)        # a zero of the winning sign
        np.logical_or.at(flag, lin, (upd == 0) & (np.signbit(upd) != want_pos))
        (np.maximum if want_pos else np.minimum).at(target, lin, upd)
    zero = target == 0
    if zero.any():
        negative = ~flag[zero] if want_pos else flag[zero]
        target[zero] = np.where(negative, -0.0, 0.0).astype(dt)
    return True


def _combine(ec, name, targets, lin, updates):
    """Sequential combination of the updates into the flat targets (see the module docstring)."""
    if lin.size == 0:
        return
    n = len(targets)
    if _is_assignment(ec, name, n):
        _assign_last(targets, lin, updates)
        return
    red = C.reducer(ec, name, n)
    if n == 1 and not red.generic and red.kinds[0][0] in ("maximum", "minimum") and \
            _float_minmax_at(red.kinds[0][0], targets[0], lin, updates[0]):
        return
    C.scatter_combine(ec, name, targets, lin, updates)


@evaluator("scatter")
def eval_scatter(inst, args, ec):
    """Copies of the operands with each update window combined (`to_apply(current, update)`) into
    the window at its scatter index; out-of-bounds windows are skipped whole, duplicates combine
    sequentially in row-major scatter-index order (see the module docstring)."""
    n = (len(args) - 1) // 2
    operands, indices, updates = args[:n], args[n], args[n + 1:]
    a = inst.attrs
    uwd = tuple(a["update_window_dims"])
    iwd = set(a["inserted_window_dims"])
    sdod = tuple(a["scatter_dims_to_operand_dims"])
    ivd = a["index_vector_dim"]
    ibd = tuple(a.get("input_batching_dims") or ())
    sibd = tuple(a.get("scatter_indices_batching_dims") or ())
    comb = a["to_apply"].name
    shape = operands[0].shape
    r = len(shape)
    ind = _index_vectors(indices, ivd)
    batch_shape = ind.shape[:-1]
    upd0 = updates[0]
    scatter_dims = [d for d in range(upd0.ndim) if d not in uwd]
    window_shape = tuple(upd0.shape[d] for d in uwd)
    nw = len(window_shape)
    wdims = [d for d in range(r) if d not in iwd and d not in ibd]
    strides = np.cumprod((1,) + tuple(reversed(shape[1:])), dtype=np.int64)[::-1] if r else ()
    valid = np.ones(batch_shape, bool)
    lin = np.zeros(batch_shape + (1,) * nw, np.int64)
    for d in range(r):
        if d in ibd:        # before scatter_dims_to_operand_dims: XLA's evaluator lets the batch index win
            s = _batch_coord(batch_shape, _batch_pos(sibd[ibd.index(d)], ivd))
        elif d in sdod:
            s = ind[..., sdod.index(d)]
        else:
            s = None
        size = window_shape[wdims.index(d)] if d in wdims else 1
        if s is not None:
            valid &= (s >= 0) & (s <= shape[d] - size)
            lin = lin + s.reshape(s.shape + (1,) * nw) * strides[d]
        if d in wdims:
            k = wdims.index(d)
            w = np.arange(size, dtype=np.int64).reshape([size if j == k else 1 for j in range(nw)])
            lin = lin + w * strides[d]
    full = batch_shape + window_shape
    lin = np.broadcast_to(lin, full)
    keep = np.broadcast_to(valid.reshape(batch_shape + (1,) * nw), full)
    perm = scatter_dims + list(uwd)
    all_valid = bool(valid.all())
    lin = lin.reshape(-1) if all_valid else lin[keep]
    upds = []
    for u in updates:
        u = u.transpose(perm)
        upds.append(u.reshape(-1) if all_valid else u[keep])
    if not sdod and not ibd:
        if n == 1 and updates[0].shape == shape and indices.size == 0:
            # XLA's simplifier turns a scatter with zero-element indices whose updates have the
            # operand's shape into map(to_apply, operand, updates), whatever the window dims say
            lin = np.arange(operands[0].size, dtype=np.int64)
            upds = [updates[0].reshape(-1)]
        elif lin.size > 1 and int(np.prod(window_shape, dtype=np.int64)) == 1:
            # XLA CPU (measured): with an empty index vector and a one-element window every update
            # is combined with the original operand value, so only the last one shows
            lin, upds = lin[-1:], [u[-1:] for u in upds]
    outs = [np.array(o) for o in operands]
    _combine(ec, comb, [o.reshape(-1) for o in outs], lin,
             [np.asarray(u, dtype=o.dtype) for u, o in zip(upds, outs)])
    return tuple(outs) if n > 1 else outs[0]


# ============================================================================ prepare stages
# (registry.prepare: once per instruction at compile time; kernels.py)

def _index_reader(ops, st, dims, sizes):
    """For the start-index operands `ops` of a dynamic-(update-)slice: (constant part of the key,
    [(operand position, dimension, largest start)] of the others), or None when an index is not
    a scalar (the legacy index-vector form: the rule)."""
    key, dyn = [], []
    for pos, (j, n, size) in enumerate(zip(ops, dims, sizes)):
        s = st.node(j).shape
        if s.is_tuple or s.rank != 0:
            return None
        hi = max(n - size, 0)
        c = st.const.get(j)
        if c is not None:
            v = min(max(int(c), 0), hi)
            key.append(slice(v, v + size))
        else:
            key.append(None)
            dyn.append((pos, len(key) - 1, hi, size))
    return key, dyn


def _clamped_key(base, dyn):
    """where(*indices): the slicing key of a dynamic-(update-)slice, its starts read from the index
    operands and clamped into [0, dim - size] (base, dyn: _index_reader's); `where.spec` holds them
    (loopgen.py)."""
    def where(*idx):
        key = list(base)
        for pos, d, hi, size in dyn:
            v = int(idx[pos])
            v = 0 if v < 0 else (hi if v > hi else v)
            key[d] = slice(v, v + size)
        return tuple(key)
    where.spec = (base, dyn)
    return where


@prepares("dynamic-slice")
def _prepare_dynamic_slice(inst, ops, st):
    """operand[start:start+size] with every start clamped into [0, dim - size], copied."""
    src = st.node(ops[0]).shape
    if src.is_dynamic or inst.shape.is_dynamic or len(ops) != 1 + src.rank:
        return None
    sizes = tuple(inst.attrs["dynamic_slice_sizes"])
    r = _index_reader(ops[1:], st, src.dims, sizes)
    if r is None:
        return None
    where = _clamped_key(*r)
    array = np.array

    def fn(x, *idx):
        return array(x[where(*idx)])
    declare(fn, where=where)            # (loopgen.py: a view where nothing keeps it)
    return Fast(fn, clean=st.is_clean(ops[0]))


@prepares("dynamic-update-slice")
def _prepare_dynamic_update_slice(inst, ops, st):
    """A copy of the operand with the update written at the clamped start indices."""
    src, upd = st.node(ops[0]).shape, st.node(ops[1]).shape
    if src.is_dynamic or upd.is_dynamic or inst.shape.is_dynamic or len(ops) != 2 + src.rank:
        return None
    if shape_dtype(st.node(ops[0])) != shape_dtype(st.node(ops[1])):
        return None
    r = _index_reader(ops[2:], st, src.dims, tuple(upd.dims))
    if r is None:
        return None
    where = _clamped_key(*r)
    array = np.array

    def fn(x, u, *idx):
        out = array(x)
        out[where(*idx)] = u
        return out
    declare(fn, where=where)            # (loopgen.py: the update written in place)
    return Fast(fn, clean=st.is_clean(ops[0]) and st.is_clean(ops[1]))
