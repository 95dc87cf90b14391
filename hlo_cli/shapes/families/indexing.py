"""Shape rules of gather and scatter, with every dimension number (batching dims included).

XLA: ``ShapeInference::InferGatherShape`` / ``InferScatterShape`` with their
``Validate{Gather,Scatter}DimensionNumbers``, and ``VerifyReducerShape`` for scatter's update
computation.  A few constraints that XLA's shape inference leaves implicit but StableHLO (and so
XLA's JAX pipeline) states are checked as well: batching dimensions are disjoint from the
collapsed/inserted and start-index dimensions, the index vector dimension is not a batching
dimension, batching dimensions have equal sizes in the operand and the indices, and the inputs
(and updates) of a variadic scatter share their dimensions.

Index vectors: when ``index_vector_dim`` equals the rank of the indices, the indices are read as
if they had a trailing dimension of size 1 (XLA's "expanded" indices shape).
"""
from __future__ import annotations

from ...ir.shape import UNBOUNDED, Shape
from ..registry import fail
from .elementwise import (ATTRIBUTE, ELEMENT_TYPE, INTEGRAL, check_kind, compatible_dim, dims_attr,
                          dims_text, family, int_attr, is_array, kind, like, array, require_array,
                          same_dims, seq)
from .reduction import same_element_type_ignoring_fp


def _check_list(op, operands, name, dims, bound, *, sorted_=False, range_text=None):
    for d in dims:
        if not 0 <= d < bound:
            fail(op, f"every entry of {name}", f"be in {range_text or f'[0, {bound})'}", seq(dims),
                 operands, ATTRIBUTE)
    if len(set(dims)) != len(dims):
        fail(op, f"the entries of {name}", "not repeat", seq(dims), operands, ATTRIBUTE)
    if sorted_ and list(dims) != sorted(dims):
        fail(op, f"the entries of {name}", "be sorted", seq(dims), operands, ATTRIBUTE)


def _disjoint(op, operands, name_a, a, name_b, b):
    common = sorted(set(a) & set(b))
    if common:
        fail(op, f"{name_a} and {name_b}", "have no dimension in common",
             f"{seq(common)} in both ({name_a}={seq(a)}, {name_b}={seq(b)})", operands, ATTRIBUTE)


def _expanded_indices(op, operands, idx_pos, ivd, what):
    """Checks the indices operand and returns its (dims, dynamic) with the implicit trailing 1."""
    idx = require_array(op, operands, idx_pos, what)
    check_kind(op, operands, idx_pos, INTEGRAL, f"the {what}' element type")
    if not 0 <= ivd <= idx.rank:
        fail(op, "index_vector_dim", f"be in [0, {idx.rank}] (the rank of the {what} is {idx.rank})",
             ivd, operands, ATTRIBUTE)
    dims, dyn = list(idx.dims), list(idx.dynamic)
    if ivd == idx.rank:
        dims.append(1)
        dyn.append(False)
    return dims, dyn


def _check_batching_dims(op, operands, rank, index_rank, ivd, removed, operand_batch, index_batch):
    """The batching dimensions of gather and scatter, each a (name, dims) pair: as many of the operand's
    as of the indices', each list in range (the operand's sorted), the operand's apart from the
    `removed` dimensions (collapsed / inserted) and the indices' without index_vector_dim."""
    (oname, obatch), (iname, ibatch) = operand_batch, index_batch
    if len(obatch) != len(ibatch):
        fail(op, f"{oname} and {iname}", "have the same length", f"{seq(obatch)} and {seq(ibatch)}", operands,
             ATTRIBUTE)
    _check_list(op, operands, oname, obatch, rank, sorted_=True)
    _check_list(op, operands, iname, ibatch, index_rank)
    _disjoint(op, operands, removed[0], removed[1], oname, obatch)
    if ivd in ibatch:
        fail(op, iname, f"not contain index_vector_dim ({ivd})", seq(ibatch), operands, ATTRIBUTE)


def _check_batching_sizes(op, operands, x, x_name, x_batch, idx_dims, idx_batch, idx_name):
    for a, b in zip(x_batch, idx_batch):
        if not compatible_dim(x.dims[a], idx_dims[b]):
            fail(op, "the batching dimensions' sizes",
                 f"be equal in the {x_name} and the {idx_name}",
                 f"{x.dims[a]} ({x_name} dimension {a}) vs {idx_dims[b]} ({idx_name} dimension {b})",
                 operands, ATTRIBUTE)


# ----------------------------------------------------------------------------- gather

@family("gather")
def infer_gather(operands, attrs, ctx):
    """gather(operand, start_indices), offset_dims, collapsed_slice_dims, start_index_map,
    index_vector_dim, slice_sizes[, operand_batching_dims, start_indices_batching_dims]:
    result rank len(offset_dims) + rank(indices) - 1 (with the index vector dimension removed);
    offset dimensions take the slice sizes of the operand dimensions neither collapsed nor
    batching, the others the index batch dimensions."""
    op = ctx.opcode
    if len(operands) != 2:
        fail(op, "the operand count", "be 2 (operand, start_indices)", len(operands), operands)
    x = require_array(op, operands, 0, "the operand")
    ivd = int_attr(op, attrs, "index_vector_dim", operands)
    idims, idyn = _expanded_indices(op, operands, 1, ivd, "start indices")
    offset = dims_attr(op, attrs, "offset_dims", operands)
    collapsed = dims_attr(op, attrs, "collapsed_slice_dims", operands)
    start_map = dims_attr(op, attrs, "start_index_map", operands)
    obatch = dims_attr(op, attrs, "operand_batching_dims", operands, default=())
    ibatch = dims_attr(op, attrs, "start_indices_batching_dims", operands, default=())
    sizes = dims_attr(op, attrs, "slice_sizes", operands)

    out_rank = len(offset) + len(idims) - 1
    _check_list(op, operands, "offset_dims", offset, out_rank, sorted_=True,
                range_text=f"[0, {out_rank}) (the result rank)")
    if idims[ivd] != UNBOUNDED and len(start_map) != idims[ivd]:
        fail(op, "start_index_map",
             f"have one entry per index vector element ({idims[ivd]}, dimension {ivd} of the start indices)",
             seq(start_map), operands, ATTRIBUTE)
    _check_list(op, operands, "start_index_map", start_map, x.rank)
    _check_list(op, operands, "collapsed_slice_dims", collapsed, x.rank, sorted_=True)
    # start_index_map may name a batching dimension: XLA's shape inference does not forbid it (its
    # tests do it) and its evaluator takes the batch index there, the start index being ignored
    _check_batching_dims(op, operands, x.rank, len(idims), ivd, ("collapsed_slice_dims", collapsed),
                         ("operand_batching_dims", obatch), ("start_indices_batching_dims", ibatch))
    if len(sizes) != x.rank:
        fail(op, "slice_sizes", f"have one entry per operand dimension ({x.rank})", seq(sizes),
             operands, ATTRIBUTE)
    if len(offset) + len(collapsed) + len(obatch) != x.rank:
        fail(op, "offset_dims, collapsed_slice_dims and operand_batching_dims together",
             f"account for every operand dimension ({x.rank})",
             f"{len(offset)} + {len(collapsed)} + {len(obatch)}", operands, ATTRIBUTE)
    for i, (s, n) in enumerate(zip(sizes, x.dims)):
        if n != UNBOUNDED and not 0 <= s <= n:
            fail(op, f"slice_sizes[{i}]", f"be in [0, {n}] (operand dimension {i})", s, operands,
                 ATTRIBUTE)
    for name, group in (("collapsed_slice_dims", collapsed), ("operand_batching_dims", obatch)):
        for d in group:
            if sizes[d] > 1:
                fail(op, f"the slice size of every dimension in {name}", "be 0 or 1",
                     f"{sizes[d]} for dimension {d}", operands, ATTRIBUTE)
    _check_batching_sizes(op, operands, x, "operand", obatch, idims, ibatch, "start indices")

    window = [d for d in range(x.rank) if d not in collapsed and d not in obatch]
    batch = [d for d in range(len(idims)) if d != ivd]
    out_dims, out_dyn = [], []
    wi = bi = 0
    offset_set = set(offset)
    for i in range(out_rank):
        if i in offset_set:
            d = window[wi]
            wi += 1
            out_dims.append(sizes[d])
            out_dyn.append(bool(x.dynamic[d]) and sizes[d] == x.dims[d])
        else:
            d = batch[bi]
            bi += 1
            out_dims.append(idims[d])
            out_dyn.append(bool(idyn[d]))
    return array(x.element_type, out_dims, out_dyn)


# ----------------------------------------------------------------------------- scatter

def _compatible_ignoring_fp(a: Shape, b: Shape) -> bool:
    """XLA's ShapeUtil::CompatibleIgnoringFpPrecision for arrays."""
    if not (is_array(a) and is_array(b)):
        return False
    return same_element_type_ignoring_fp(a.element_type, b.element_type) and same_dims(a, b)


def _check_update_computation(op, operands, name, params, result, inputs, updates):
    """XLA's VerifyReducerShape for scatter: (accumulators..., updates...) -> accumulators, scalars."""
    n = len(inputs)
    if len(params) != 2 * n:
        fail(op, f"the update computation {name}", f"take {2 * n} parameters", len(params), operands)
    if result is None:
        return
    if result.is_tuple:
        acc = list(result.tuple_shapes)
        if len(acc) != n:
            fail(op, f"the result of {name}", f"be a tuple of {n} scalars", result.to_str(False),
                 operands)
    else:
        if n != 1:
            fail(op, f"the result of {name}", f"be a tuple of {n} scalars", result.to_str(False),
                 operands)
        acc = [result]
    for a in acc:
        if not (is_array(a) and a.rank == 0):
            fail(op, f"the result of {name}", "be a scalar or a tuple of scalars",
                 result.to_str(False), operands)
    for i in range(n):
        p, pu = params[i], params[n + i]
        if not (is_array(p) and p.element_type == acc[i].element_type and p.rank == 0):
            fail(op, f"parameter {i} of {name}", f"have its result's shape {acc[i].to_str(False)}",
                 p.to_str(False), operands)
        init = Shape.array(inputs[i].element_type)
        if not _compatible_ignoring_fp(acc[i], init):
            fail(op, f"result {i} of {name}", f"be a scalar of input {i}'s type {inputs[i].element_type}",
                 acc[i].to_str(False), operands, ELEMENT_TYPE)
        upd = Shape.array(updates[i].element_type)
        if not _compatible_ignoring_fp(pu, upd):
            fail(op, f"parameter {n + i} of {name}",
                 f"be a scalar of update {i}'s type {updates[i].element_type}", pu.to_str(False),
                 operands, ELEMENT_TYPE)
        if not _compatible_ignoring_fp(acc[i], pu):
            fail(op, f"parameter {n + i} of {name}", f"have its result's shape {acc[i].to_str(False)}",
                 pu.to_str(False), operands, ELEMENT_TYPE)


@family("scatter")
def infer_scatter(operands, attrs, ctx):
    """scatter(inputs..., scatter_indices, updates...), update_window_dims, inserted_window_dims,
    scatter_dims_to_operand_dims, index_vector_dim[, input_batching_dims,
    scatter_indices_batching_dims], to_apply=f: the inputs' shapes (a tuple when variadic)."""
    op = ctx.opcode
    if len(operands) < 3 or len(operands) % 2 == 0:
        fail(op, "the operand count", "be odd and at least 3 (inputs, indices, updates)",
             len(operands), operands)
    n = len(operands) // 2
    inputs, updates = operands[:n], operands[n + 1:]
    for i in list(range(n)) + list(range(n + 1, 2 * n + 1)):
        require_array(op, operands, i, f"input {i}" if i < n else f"update {i - n - 1}")
    ivd = int_attr(op, attrs, "index_vector_dim", operands)
    idims, _ = _expanded_indices(op, operands, n, ivd, "scatter indices")
    uwd = dims_attr(op, attrs, "update_window_dims", operands)
    iwd = dims_attr(op, attrs, "inserted_window_dims", operands)
    sdod = dims_attr(op, attrs, "scatter_dims_to_operand_dims", operands)
    ibd = dims_attr(op, attrs, "input_batching_dims", operands, default=())
    sibd = dims_attr(op, attrs, "scatter_indices_batching_dims", operands, default=())

    x0 = inputs[0]
    for i, s in enumerate(inputs[1:], 1):
        if s.dims != x0.dims:
            fail(op, "the inputs' dimensions", "be equal", f"{dims_text(x0)} vs {dims_text(s)} (input {i})",
                 operands)
    for i, s in enumerate(updates[1:], 1):
        if s.dims != updates[0].dims:
            fail(op, "the updates' dimensions", "be equal",
                 f"{dims_text(updates[0])} vs {dims_text(s)} (update {i})", operands)
    for i, (x, u) in enumerate(zip(inputs, updates)):
        if x.element_type != u.element_type:
            fail(op, f"the element type of update {i}", f"be input {i}'s ({x.element_type})",
                 u.element_type, operands, ELEMENT_TYPE)
    floats = sorted({s.element_type for s in inputs if kind(s) == "float"})
    if len(floats) > 1:
        fail(op, "the floating-point inputs", "have one precision (mixed precision is not allowed)",
             " vs ".join(floats), operands, ELEMENT_TYPE)

    u0 = updates[0]
    expected_rank = len(idims) - 1 + len(uwd)
    if u0.rank != expected_rank:
        fail(op, "the updates' rank",
             f"be {expected_rank} (scatter indices' batch dims {len(idims) - 1} + {len(uwd)} window dims)",
             u0.rank, operands)
    _check_list(op, operands, "update_window_dims", uwd, u0.rank, sorted_=True)
    _check_list(op, operands, "inserted_window_dims", iwd, x0.rank, sorted_=True)
    if len(uwd) + len(iwd) + len(ibd) != x0.rank:
        fail(op, "update_window_dims, inserted_window_dims and input_batching_dims together",
             f"account for every input dimension ({x0.rank})", f"{len(uwd)} + {len(iwd)} + {len(ibd)}",
             operands, ATTRIBUTE)
    if not compatible_dim(len(sdod), idims[ivd]):
        fail(op, "scatter_dims_to_operand_dims",
             f"have one entry per index vector element ({idims[ivd]}, dimension {ivd} of the scatter indices)",
             seq(sdod), operands, ATTRIBUTE)
    _check_list(op, operands, "scatter_dims_to_operand_dims", sdod, x0.rank)
    # scatter_dims_to_operand_dims may name a batching dimension (as gather's start_index_map may):
    # XLA's shape inference allows it and its evaluator takes the batch index there
    _check_batching_dims(op, operands, x0.rank, len(idims), ivd, ("inserted_window_dims", iwd),
                         ("input_batching_dims", ibd), ("scatter_indices_batching_dims", sibd))
    _check_batching_sizes(op, operands, x0, "inputs", ibd, idims, sibd, "scatter indices")

    window = [d for d in range(x0.rank) if d not in iwd and d not in ibd]
    for k, ud in enumerate(uwd):
        bound = x0.dims[window[k]]
        if UNBOUNDED not in (u0.dims[ud], bound) and u0.dims[ud] > bound:
            fail(op, f"the updates' window dimension {ud}",
                 f"not exceed the inputs' dimension {window[k]} ({bound})", f"{u0.dims[ud]}",
                 operands)
    batch = [d for d in range(len(idims)) if d != ivd]
    uwd_set = set(uwd)
    bi = 0
    for i in range(u0.rank):
        if i in uwd_set:
            continue
        d = batch[bi]
        bi += 1
        if not compatible_dim(u0.dims[i], idims[d]):
            fail(op, f"the updates' scatter dimension {i}",
                 f"have the size of scatter indices dimension {d} ({idims[d]})", u0.dims[i], operands)

    comp = attrs.get("to_apply")
    if comp is not None:
        name = getattr(comp, "name", str(comp))
        params, result = ctx.computation(name)
        _check_update_computation(op, operands, name, params, result, inputs, updates)
    if n == 1:
        return like(x0)
    return Shape.tuple_of(like(s) for s in inputs)
