"""Collectives of a multi-device run: pure functions along the device axis, within their groups.

Operands arrive with a leading axis over `devices` (the devices running this instruction, in
device-id order); results leave the same way, with exactly the per-device structure the
single-device rules of hlo_cli/interpreter/ops/control.py return.  Every rule works on whole
groups at once (fancy indexing over the device axis), never element by element.

What XLA CPU does (hlo_cli/SEMANTICS.md, "Collectives"; measured by the differential tests in
tests/devices/test_collectives.py):

- all-reduce / reduce-scatter with add, multiply, maximum, minimum (and/or on pred) start from
  the reduction's identity and fold the group's contributions one by one in RANK order (a device's
  position in its replica group as written, not its id): acc = 0; acc += x[rank 0]; acc += x[rank 1]
  ...  So -0.0 from every device sums to +0.0, and subnormals are flushed (DAZ/FTZ).
- f16 adds in f16, rounding after every step; bf16 is promoted: XLA CPU's AllReducePromotion turns
  a bf16 all-reduce into an f32 one, and its reduce-scatter is computed in f32 too, so bf16 sums
  fold in f32 and round once at the end.  XLA CPU has no other narrow floats in collectives; f8 types here fold in
  f32 and round once like bf16.
- maximum / minimum are C++'s std::max / std::min from -inf / +inf (the lowest / highest value of
  an integer type): acc = (acc < x) ? x : acc.  A NaN is never taken (a group of NaNs gives -inf
  for maximum), and of +0 / -0 the first in rank order stays.
- complex products are C++'s (ac - bd) + (ad + bc)i in the component type (not NumPy's).
- any other reducer (subtract, and on integers, a computation of several instructions): XLA CPU
  refuses it ("Unsupported reduction computation"); here the computation is folded in rank order
  from the first contribution: acc = x[rank 0]; acc = f(acc, x[rank 1]) ...
- all-gather concatenates in rank order; reduce-scatter gives rank k block k of the reduction;
  all-to-all (array form) sends block k of the split dimension to rank k, which concatenates what
  it receives in the senders' rank order; all-to-all (tuple form) gives rank k, as element j, the
  k-th operand of rank j.
- collective-permute: a device no pair targets gets zeros.  XLA CPU cannot run the combined form
  (several operands) or the in-place form (buffers, offsets, slice_sizes); the combined form
  permutes each operand alike; the in-place form (see `_permute_in_place`) is our reading.
- collective-broadcast (XLA's operation semantics; XLA CPU cannot run it): every member of a group
  gets the value of the group's first device; a device in no group gets zeros.
- ragged-all-to-all (operation semantics and XLA GPU's runtime; XLA CPU crashes on it): see
  `_ragged_all_to_all`.
"""
from __future__ import annotations

from typing import Callable, Sequence

import ml_dtypes
import numpy as np

from ..interpreter.computations import combine, flush, recognize_binary
from ..interpreter.values import np_dtype
from ..topology.grid import DeviceGrid, base_opcode, collective_groups, fail, permute_pairs, send_recv_pairs


class OutsideSubset(Exception):
    """A collective's group needs devices that are not running this instruction (they are in the
    other branch of a divergent conditional or loop)."""

    def __init__(self, instruction, group: tuple[int, ...], missing: tuple[int, ...]):
        self.instruction = instruction
        self.group = tuple(group)
        self.missing = tuple(missing)
        super().__init__(f"{instruction.opcode} {instruction.name}: its group {list(self.group)} needs devices "
                         f"{list(self.missing)}, which are not running it")

    def __reduce__(self):                      # crosses processes (the Ray backend's coordinator)
        return (OutsideSubset, (self.instruction, self.group, self.missing))


# ============================================================================ helpers

def _positions(inst, groups, devices: Sequence[int]) -> list[np.ndarray]:
    """Per group size, an index array [groups, size] of stack positions, for the groups that meet
    `devices` (every member must be running: else OutsideSubset)."""
    pos = {d: i for i, d in enumerate(devices)}
    by_size: dict[int, list[list[int]]] = {}
    for g in groups:
        inside = [d for d in g if d in pos]
        if not inside:
            continue
        if len(inside) != len(g):
            raise OutsideSubset(inst, g, tuple(d for d in g if d not in pos))
        by_size.setdefault(len(g), []).append([pos[d] for d in g])
    return [np.asarray(rows, dtype=np.intp) for rows in by_size.values()]


def _one_or_tuple(values: list):
    return values[0] if len(values) == 1 else tuple(values)


_WIDE_NARROW = {np.dtype(ml_dtypes.bfloat16)}


def _is_narrow_float(dt: np.dtype) -> bool:
    """Floats XLA CPU's collectives do not handle natively: bf16 (promoted to f32 by XLA) and f8s."""
    return dt in _WIDE_NARROW or (dt.kind == "V" and dt.name.startswith("float") and dt.itemsize == 1)


def _reducer_kind(module, comp_name: str, dt: np.dtype) -> str | None:
    """XLA's MatchReductionComputation: add / multiply / maximum / minimum of the two parameters
    (and / or only on pred, as minimum / maximum); None for anything else."""
    if module is None:
        return None
    kind = recognize_binary(module, comp_name)
    if kind in ("add", "multiply", "maximum", "minimum"):
        return kind
    if kind in ("and", "or") and dt == np.bool_:
        return "minimum" if kind == "and" else "maximum"
    return None


def _identity(kind: str, dt: np.dtype):
    if kind == "add":
        return np.zeros((), dt)
    if kind == "multiply":
        return np.ones((), dt)
    if dt == np.bool_:
        return np.asarray(kind == "minimum")
    if dt.kind in "iu" or dt.name.startswith(("int", "uint")):         # ml_dtypes' int2 / int4 too
        info = ml_dtypes.iinfo(dt)
        return np.asarray(info.max if kind == "minimum" else info.min, dt)
    return np.asarray(np.inf if kind == "minimum" else -np.inf, dt)


def _fold(inst, x: np.ndarray, comp_name: str, module, apply) -> np.ndarray:
    """Reduce x [groups, size, ...] over axis 1 in rank order, XLA CPU's way."""
    dt = x.dtype
    n = x.shape[1]
    kind = _reducer_kind(module, comp_name, dt)
    if kind is None:
        acc = x[:, 0]
        for k in range(1, n):
            res = apply(comp_name, [acc, x[:, k]])
            res = res[0] if isinstance(res, (tuple, list)) else res
            acc = np.broadcast_to(np.asarray(res), acc.shape).astype(dt, copy=False)
        return np.array(acc, dtype=dt, copy=True)
    if kind in ("maximum", "minimum"):
        if dt.kind == "c":
            raise fail(inst, f"{kind} is not defined on complex numbers (XLA CPU refuses it too)")
        work = x.astype(np.float32) if _is_narrow_float(dt) else x
        acc = np.broadcast_to(_identity(kind, work.dtype), work[:, 0].shape)
        with np.errstate(invalid="ignore"):
            for k in range(n):
                v = flush(np.ascontiguousarray(work[:, k]))
                acc = np.where(acc < v, v, acc) if kind == "maximum" else np.where(v < acc, v, acc)
        return np.asarray(acc).astype(dt)
    if _is_narrow_float(dt):                     # promoted: f32 steps, one rounding
        work = x.astype(np.float32)
        acc = np.broadcast_to(_identity(kind, work.dtype), work[:, 0].shape)
        for k in range(n):
            acc = combine(kind, acc, work[:, k])
        return np.asarray(acc).astype(dt)
    acc = np.broadcast_to(_identity(kind, dt), x[:, 0].shape)
    step = _complex_product if kind == "multiply" and dt.kind == "c" else (lambda a, b: combine(kind, a, b))
    for k in range(n):
        acc = step(acc, x[:, k])
    return np.array(acc, dtype=dt, copy=True)


def _complex_product(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """C++'s complex product as XLA CPU's collectives compute it: (ac - bd) + (ad + bc)i, each
    product and sum rounded in the component type (NumPy's complex multiply differs in the last
    bit; hlo_cli/SEMANTICS.md)."""
    a, b = flush(np.asarray(a)), flush(np.asarray(b))
    with np.errstate(all="ignore"):
        re = a.real * b.real - a.imag * b.imag
        im = a.real * b.imag + a.imag * b.real
    out = np.empty(np.broadcast_shapes(a.shape, b.shape), a.dtype)
    out.real, out.imag = flush(re), flush(im)
    return out


def _group_map(x: np.ndarray, sets, fn) -> np.ndarray:
    """For each group, fn(x[G] [groups, n, ...], n) -> the members' results [groups, n, ...],
    placed at the members' positions of the stack."""
    result = None
    for G in sets:
        rows = fn(x[G], G.shape[1])
        if result is None:
            result = np.empty((x.shape[0],) + rows.shape[2:], rows.dtype)
        result[G.reshape(-1)] = rows.reshape((-1,) + rows.shape[2:])
    return np.array(x) if result is None else result


def _to_members(per_group: np.ndarray, n: int) -> np.ndarray:
    """One result per group [groups, ...] as the result of each of its n members [groups, n, ...]."""
    return np.broadcast_to(per_group[:, None], (per_group.shape[0], n) + per_group.shape[1:])


def _check_split(inst, size: int, n: int, d: int, what: str):
    if size % n:
        raise fail(inst, f"{what} dimension {d} of size {size} does not divide into {n} devices of the group")


# ============================================================================ the ops

def _all_reduce(inst, ops, devices, grid, apply, module):
    sets = _positions(inst, collective_groups(inst, grid), devices)
    comp = inst.attrs["to_apply"].name
    return [_group_map(np.asarray(x), sets, lambda xg, n: _to_members(_fold(inst, xg, comp, module, apply), n))
            for x in ops]


def _all_gather(inst, ops, devices, grid):
    d = int(inst.attrs["dimensions"][0])
    sets = _positions(inst, collective_groups(inst, grid), devices)

    def gather(xg, n):                          # [ng, n, *s] -> [ng, *s[:d], n * s[d], ...]
        s = list(xg.shape[2:])
        res = np.moveaxis(xg, 1, d + 1).reshape([xg.shape[0]] + s[:d] + [n * s[d]] + s[d + 1:])
        return _to_members(res, n)
    return [_group_map(np.asarray(x), sets, gather) for x in ops]


def _reduce_scatter(inst, ops, devices, grid, apply, module):
    d = int(inst.attrs["dimensions"][0])
    sets = _positions(inst, collective_groups(inst, grid), devices)
    comp = inst.attrs["to_apply"].name

    def scatter(xg, n):                         # rank k gets block k of the reduction
        s = list(xg.shape[2:])
        _check_split(inst, s[d], n, d, "the scattered")
        red = _fold(inst, xg, comp, module, apply)
        blocks = red.reshape([xg.shape[0]] + s[:d] + [n, s[d] // n] + s[d + 1:])
        return np.moveaxis(blocks, d + 1, 1)
    return [_group_map(np.asarray(x), sets, scatter) for x in ops]


def _all_to_all(inst, ops, devices, grid):
    sets = _positions(inst, collective_groups(inst, grid), devices)
    dims = inst.attrs.get("dimensions")
    if dims is not None and len(dims):
        d = int(dims[0])

        def exchange(xg, n):                    # [ng, sender j, ..., block k, ...] -> [ng, receiver k, ..., j, ...]
            s = list(xg.shape[2:])
            _check_split(inst, s[d], n, d, "the split")
            blocks = xg.reshape([xg.shape[0], n] + s[:d] + [n, s[d] // n] + s[d + 1:])
            return np.swapaxes(blocks, 1, d + 2).reshape([xg.shape[0], n] + s)
        return [_group_map(np.asarray(ops[0]), sets, exchange)]
    xs = [np.asarray(o) for o in ops]
    out = [np.empty_like(x) for x in xs]
    for G in sets:
        n = G.shape[1]
        if n != len(xs):
            raise fail(inst, f"the tuple form needs one operand per member of the group: {len(xs)} operands, "
                       f"groups of {n}")
        for k in range(n):              # receiver rank k, element j = sender j's operand k
            for j in range(n):
                out[j][G[:, k]] = xs[k][G[:, j]]
    return out


def _collective_broadcast(inst, ops, devices, grid):
    groups = collective_groups(inst, grid, allow_missing=True)
    sets = _positions(inst, groups, devices)
    out = []
    for x in ops:
        x = np.asarray(x)
        res = np.zeros_like(x)
        for G in sets:
            res[G.reshape(-1)] = np.repeat(x[G[:, 0]], G.shape[1], axis=0)
        out.append(res)
    return out


def _routes(inst, pairs, devices):
    """(source positions, target positions) of the pairs that touch `devices`."""
    pos = {d: i for i, d in enumerate(devices)}
    src, dst = [], []
    for s, t in pairs:
        if s not in pos and t not in pos:
            continue
        if s not in pos or t not in pos:
            raise OutsideSubset(inst, (s, t), tuple(d for d in (s, t) if d not in pos))
        src.append(pos[s])
        dst.append(pos[t])
    return np.asarray(src, dtype=np.intp), np.asarray(dst, dtype=np.intp)


def _check_pairs_unique(inst, pairs):
    for k, what in ((0, "source"), (1, "target")):
        seen = set()
        for p in pairs:
            if p[k] in seen:
                raise fail(inst, f"device {p[k]} is the {what} of two source_target_pairs")
            seen.add(p[k])


def _permute(inst, ops, devices, grid):
    pairs = permute_pairs(inst, grid)
    _check_pairs_unique(inst, pairs)
    src, dst = _routes(inst, pairs, devices)
    out = []
    for x in ops:
        x = np.asarray(x)
        res = np.zeros_like(x)
        res[dst] = x[src]
        out.append(res)
    return out


def _offsets(value, buffers: int, count: int) -> list[list[list[np.ndarray]]]:
    """In-place collective-permute offsets as [buffer][slice][dimension] -> stacked scalars [D]."""
    per_buffer = list(value) if buffers > 1 else [value]
    out = []
    for b in per_buffer:
        entries = list(b)
        if entries and isinstance(entries[0], tuple):
            out.append([[np.asarray(i).reshape(count) for i in e] for e in entries])
        else:
            out.append([[np.asarray(i).reshape(count) for i in entries]])
    return out


def _permute_in_place(inst, operands, devices, grid):
    """collective-permute(input, output, input_offsets, output_offsets), slice_sizes={...}: for
    each pair, the source's input[input_offsets : +slice_size] is written into the target's output
    at output_offsets; the rest of the output keeps its value (a device nothing reaches keeps its
    whole output).  With m offset entries per buffer a device may send or receive up to m slices:
    a pair uses the source's k-th input offsets and the target's l-th output offsets, where k (l)
    counts earlier pairs with the same source (target).  Offsets are clamped like
    dynamic-slice.  (No XLA backend we can run implements this form; this is our reading of the
    verifier's allowance of m repeats and of XLA's parser tests.)"""
    src_buf, dst_buf, in_off, out_off = operands[:4]
    tuple_form = isinstance(src_buf, tuple)
    srcs = list(src_buf) if tuple_form else [src_buf]
    dsts = [np.array(b, copy=True) for b in (dst_buf if tuple_form else [dst_buf])]
    D = len(devices)
    ins = _offsets(in_off, len(srcs), D)
    outs = _offsets(out_off, len(srcs), D)
    sizes = [tuple(int(v) for v in s) for s in (inst.attrs.get("slice_sizes") or ())]
    pairs = permute_pairs(inst, grid)
    src, dst = _routes(inst, pairs, devices)
    seen_s: dict[int, int] = {}
    seen_t: dict[int, int] = {}
    for s, t in zip(src.tolist(), dst.tolist()):
        k, l = seen_s.get(s, 0), seen_t.get(t, 0)
        seen_s[s], seen_t[t] = k + 1, l + 1
        for b, (x, y) in enumerate(zip(srcs, dsts)):
            m = len(ins[b])
            if k >= m or l >= len(outs[b]):
                raise fail(inst, f"device {devices[s] if k >= m else devices[t]} takes part in more pairs than "
                           f"the {m} offset entries of buffer {b}")
            idx = b * m + k
            size = sizes[idx] if idx < len(sizes) else (sizes[-1] if sizes else x.shape[1:])
            xs = np.asarray(x)[s]
            a0 = [min(max(int(o[s]), 0), max(xs.shape[i] - size[i], 0)) for i, o in enumerate(ins[b][k])]
            piece = xs[tuple(slice(a, a + z) for a, z in zip(a0, size))]
            yt = y[t]
            b0 = [min(max(int(o[t]), 0), max(yt.shape[i] - piece.shape[i], 0)) for i, o in enumerate(outs[b][l])]
            yt[tuple(slice(a, a + z) for a, z in zip(b0, piece.shape))] = piece
    return dsts


def _ragged_all_to_all(inst, operands, devices, grid):
    """ragged-all-to-all(input, output, input_offsets, send_sizes, output_offsets, recv_sizes):
    for every sender j and peer rank i of its group (offsets of shape [n] or [n, updates], read
    flat as [n, updates]), update u sends input_j[input_offsets_j[i,u] : +send_sizes_j[i,u]]
    (rows of the outermost dimension) to rank i, which writes it into its output at
    output_offsets_j[i,u] -- offsets in the receiver's buffer, given by the sender.  The output
    operand's other rows stay; recv_sizes moves nothing."""
    data, output, in_off, send, out_off = (np.asarray(v) for v in operands[:5])
    res = np.array(output, copy=True)
    D = len(devices)
    sets = _positions(inst, collective_groups(inst, grid), devices)
    meta = [np.asarray(a).reshape(D, -1).astype(np.int64) for a in (in_off, send, out_off)]
    for G in sets:
        n = G.shape[1]
        total = meta[0].shape[1]
        if total % n:
            raise fail(inst, f"offsets of {total} entries do not split into the group's {n} devices")
        upd = total // n
        for row in G:
            for j in range(n):
                sj = row[j]
                for i in range(n):
                    ti = row[i]
                    for u in range(upd):
                        e = i * upd + u
                        a, z, b = (int(m[sj, e]) for m in meta)
                        if z == 0:
                            continue
                        if z < 0 or a < 0 or b < 0 or a + z > data.shape[1] or b + z > res.shape[1]:
                            raise fail(inst, f"device {devices[sj]} sends rows [{a}, {a + z}) of its input "
                                       f"({data.shape[1]} rows) to rows [{b}, {b + z}) of device {devices[ti]}'s "
                                       f"output ({res.shape[1]} rows): out of range")
                        res[ti, b:b + z] = data[sj, a:a + z]
    return res


def _stacked_zeros(shape, count: int):
    """Zeros of `shape` (tuples kept) for `count` devices: a start op's context values."""
    if shape.is_tuple:
        return tuple(_stacked_zeros(s, count) for s in shape.tuple_shapes)
    return np.zeros((count,) + tuple(shape.dims), np_dtype(shape))


def _device_ids(inst, devices, grid):
    fn = grid.replica_of if base_opcode(inst) == "replica-id" else grid.partition_of
    return np.asarray([fn(d) for d in devices], dtype=np_dtype(inst.shape))


# ============================================================================ entry points

def run_collective(inst, operands: list, devices: tuple[int, ...], grid: DeviceGrid,
                   apply: Callable, module=None):
    """The result of collective `inst` on every device of `devices`, stacked like `operands`.

    `apply(comp_name, arrays)` runs a reducer computation on whole arrays; `module` (the module
    holding `inst`; by default the module of the context `apply` is bound to, EvalContext.apply)
    lets add / multiply / maximum / minimum reducers take XLA CPU's exact collective arithmetic
    (see the module docstring) -- without any module every reducer is folded through `apply`."""
    if module is None:
        module = getattr(getattr(apply, "__self__", None), "module", None)
    op = base_opcode(inst)
    start = inst.opcode.endswith("-start")
    if op in ("replica-id", "partition-id"):
        return _device_ids(inst, devices, grid)
    if op == "all-reduce":
        return _one_or_tuple(_all_reduce(inst, operands, devices, grid, apply, module))
    if op == "all-gather":
        res = _one_or_tuple(_all_gather(inst, operands, devices, grid))
        return (_one_or_tuple(list(operands)), res) if start else res
    if op == "reduce-scatter":
        return _one_or_tuple(_reduce_scatter(inst, operands, devices, grid, apply, module))
    if op == "all-to-all":
        res = _all_to_all(inst, operands, devices, grid)
        dims = inst.attrs.get("dimensions")
        return res[0] if dims is not None and len(dims) else tuple(res)
    if op == "collective-broadcast":
        return _one_or_tuple(_collective_broadcast(inst, operands, devices, grid))
    if op == "ragged-all-to-all":
        return _ragged_all_to_all(inst, operands, devices, grid)
    if op == "collective-permute":
        in_place = inst.attrs.get("slice_sizes") is not None
        if in_place:
            res = _one_or_tuple(_permute_in_place(inst, operands, devices, grid))
            first = operands[0]
        else:
            res = _one_or_tuple(_permute(inst, operands, devices, grid))
            first = _one_or_tuple(list(operands))
        if not start:
            return res
        context = tuple(_stacked_zeros(s, len(devices)) for s in inst.shape.tuple_shapes[2:])
        return (first, res) + context
    raise fail(inst, "is not a collective hlo runs across devices")


def route_send_recv(send_inst, recv_inst, value, devices: tuple[int, ...], grid: DeviceGrid):
    """The data each device's recv gets from the matching send (operand `value`, stacked over
    `devices`): pairs from the frontend attribute _xla_send_recv_source_target_pairs of the send
    (else of the recv); a device nothing reaches gets zeros.  Without the attribute a run of one
    device gets its own value back (the single-device rule); several devices are an error."""
    pairs = send_recv_pairs(send_inst, grid)
    if pairs is None:
        pairs = send_recv_pairs(recv_inst, grid)
    if pairs is None:
        if grid.count == 1:
            return np.array(value, copy=True)
        raise fail(recv_inst, "a recv across devices needs the frontend attribute "
                   "_xla_send_recv_source_target_pairs (on the send or the recv) to know where its data comes from")
    _check_pairs_unique(recv_inst, pairs)
    src, dst = _routes(recv_inst, pairs, devices)
    x = np.asarray(value)
    shape = recv_inst.shape.tuple_shapes[0] if recv_inst.shape.is_tuple else recv_inst.shape
    res = np.zeros((len(devices),) + tuple(shape.dims), np_dtype(shape))
    if x.shape[1:] != res.shape[1:]:
        raise fail(recv_inst, f"receives {shape} but the send {send_inst.name} sends an array of shape "
                   f"{list(x.shape[1:])}")
    res[dst] = x[src]
    return res
