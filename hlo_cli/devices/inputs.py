"""The inputs of a multi-device run: user arrays placed on the devices of a grid.

What an input array may be, for an entry parameter of per-device shape L with sharding S:
- in a module after SPMD partitioning (its parameters have per-device shapes), the GLOBAL array:
  a shape G whose per-device shape under S is L (`local_dims(G, S) == L`); it is split by S, one
  tile per device (`Stacked`).  A parameter that S does not split (replicated, maximal, no
  sharding, or tiled only along a replication dimension) takes an array of shape L, which goes
  to every device (`Uniform`);
- in a module before partitioning (Shardy/GSPMD annotations on global values), the parameter's
  own (global) shape, held once for all devices (`Uniform`);
- with `per_device`, one value per device stacked on a new leading axis in device-id order:
  `[count, *L]` (`Stacked`), whatever the sharding says.  Without it, an array of shape
  `[count, *L]` is taken as such too (with a note): a global array has the parameter's rank, so
  that shape can mean nothing else.
Anything else is an HloInputError naming the parameter, its sharding, the shapes it accepts and
the shape given.

`--random-inputs` draws GLOBAL values (the single-device drawing, with the global shapes) and
splits them, so that replicated parameters agree across devices, as in any real run.
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ..errors import HloEvalError, HloInputError, instruction_diagnostic
from ..interpreter.inputs import coerce, label
from ..interpreter.values import TOKEN
from ..ir.shape import Shape
from .values import Stacked, Uniform

def _fail(msg: str):
    raise HloInputError(msg)


def values_are_global(module) -> bool:
    """Whether MODULE computes on global values: a module before SPMD partitioning, whose header
    names no several devices (the device layer's own rule, `topology.partitioned`)."""
    from ..topology import partitioned
    return not partitioned(module)


# ----------------------------------------------------------------------------- one parameter leaf

def _leaf_shardings(sharding, shape: Shape) -> list:
    from ..topology.sharding import leaf_shardings
    return leaf_shardings(sharding, shape)


def tiles_per_dim(sharding, rank: int) -> tuple[int, ...]:
    """How many tiles SHARDING cuts each of RANK data dimensions into (1 where it does not split)."""
    from ..topology.sharding import layout
    return tuple(layout(sharding, rank).tiles)


def _splits(sharding, rank: int) -> bool:
    return any(t > 1 for t in tiles_per_dim(sharding, rank))


def global_dims(local: tuple, sharding) -> tuple:
    """The global dims whose tiles are exactly LOCAL (no padding): LOCAL times the tile counts."""
    return tuple(int(d) * t for d, t in zip(local, tiles_per_dim(sharding, len(local))))


def _dims_text(et: str, dims) -> str:
    return f"{et}[{','.join(str(d) for d in dims)}]"


def _accepted(shape: Shape, sharding) -> str:
    """The global shapes a split parameter accepts, e.g. f32[7..8,5] when padding is possible."""
    parts = []
    for d, t in zip(shape.dims, tiles_per_dim(sharding, shape.rank)):
        lo, hi = max((d - 1) * t + 1, 0), d * t
        parts.append(str(hi) if t == 1 or lo == hi else f"{lo}..{hi}")
    return f"{shape.element_type}[{','.join(parts)}]"


@dataclass(frozen=True)
class Placement:
    """How one parameter leaf takes its input: the Shape the given array must have, and whether it
    is split by `sharding` (`split`), stacked per device (`stacked`) or held once (neither)."""
    shape: Shape
    sharding: Any = None
    split: bool = False
    stacked: bool = False
    recognized: bool = False         # stacked without --per-device: its shape can mean nothing else


def placement(param, leaf: Shape, sharding, given_dims, grid, per_device: bool, global_values: bool,
              what: str | None = None) -> Placement:
    """How an array of GIVEN_DIMS becomes the value of the parameter leaf LEAF (sharded by
    SHARDING) on GRID's devices; an HloInputError saying what is accepted otherwise."""
    what = what or label(param)
    count = grid.count
    given_dims = tuple(int(d) for d in given_dims)
    given = _dims_text(leaf.element_type, given_dims)
    if per_device:
        want = Shape.array(leaf.element_type, (count,) + tuple(leaf.dims), dynamic=(False,) + tuple(
            leaf.dynamic or (False,) * leaf.rank))
        if given_dims[:1] != (count,):
            _fail(f"{what}: --per-device expects one value per device stacked on a leading axis: "
                  f"{want.to_str(False)} ({count} devices x {leaf.to_str(False)}), got {given}")
        return Placement(want, sharding, stacked=True)
    if (leaf.rank + 1 == len(given_dims) and given_dims[0] == count and given_dims[1:] == tuple(leaf.dims)
            and not leaf.is_dynamic):
        # one more dimension than the parameter, of the device count: one value per device (a global
        # array has the parameter's rank)
        return Placement(Shape.array(leaf.element_type, given_dims), sharding, stacked=True, recognized=True)
    if global_values or sharding is None or not _splits(sharding, leaf.rank):
        if given_dims != tuple(leaf.dims) and not leaf.is_dynamic:
            how = "the global array" if global_values else "the array every device holds"
            stacked = _dims_text(leaf.element_type, (count,) + tuple(leaf.dims))
            sh = f", sharding={sharding}" if sharding is not None else ""
            _fail(f"{what}: expected {how}, {leaf.to_str(False)}{sh}, or with --per-device one value per "
                  f"device, {stacked}; got {given}")
        return Placement(leaf, sharding)
    # a parameter split across devices: its global array
    local = tuple(leaf.dims)
    ok = False
    if len(given_dims) == len(local):
        from ..topology.sharding import local_dims
        ok = tuple(local_dims(given_dims, sharding)) == local
    if not ok:
        stacked = _dims_text(leaf.element_type, (count,) + local)
        per = (" (that is the per-device shape; give the global array, or pass --per-device)"
               if given_dims == local else "")
        _fail(f"{what}: sharding={sharding} splits it across devices: expected the global array, "
              f"{_accepted(leaf, sharding)} (each device's tile {leaf.to_str(False)}), or with --per-device "
              f"one value per device, {stacked}; got {given}{per}")
    return Placement(Shape.array(leaf.element_type, given_dims), sharding, split=True)


def _place(arr: np.ndarray, pl: Placement, leaf: Shape, grid, devices=None):
    """ARR (of pl.shape) on every device (or on DEVICES only): the stacked tiles, or the array itself."""
    if pl.stacked:
        return (arr if devices is None else arr[np.asarray(devices, dtype=np.intp)]), True
    if pl.split:
        from ..topology.sharding import shard
        return shard(arr, pl.sharding, tuple(leaf.dims), grid.count, devices=devices,
                     partitions=grid.partitions), True
    return arr, False


# ----------------------------------------------------------------------------- the entry parameters

def _params(module):
    return module.entry_computation.parameters


def parameter_shardings(module) -> list:
    """Each entry parameter's sharding (None where it has none)."""
    from ..topology.sharding import parameter_sharding
    return [parameter_sharding(p, module) for p in _params(module)]


def expected_shape(module, k: int, given_dims, grid, per_device: bool, global_values: bool | None = None,
                   what: str | None = None) -> Shape:
    """The Shape an input array of GIVEN_DIMS for entry parameter K must have (for reading a file's
    header before its data); an HloInputError if no array of those dims can be that input."""
    p = _params(module)[k]
    if p.shape.is_tuple or p.shape.element_type == "token":
        return p.shape
    if global_values is None:
        global_values = values_are_global(module)
    from ..topology.sharding import parameter_sharding
    with _at(p):
        sh = _leaf_shardings(parameter_sharding(p, module), p.shape)[0]
        return placement(p, p.shape, sh, given_dims, grid, per_device, global_values, what).shape


def distribute(module, arrays, grid, per_device: bool = False, global_values: bool | None = None,
               notes: list | None = None, devices=None) -> list:
    """One DeviceValue per entry parameter of MODULE from ARRAYS (one value per parameter: an
    array, a tuple for a tuple parameter, anything for a token), placed on GRID's devices as the
    module's docstring says.  Every problem is an HloInputError naming the parameter.  DEVICES: only
    these device ids' rows (a process holding some of the devices: the Ray backend); a value that is
    already a DeviceValue is taken as it is."""
    params = _params(module)
    if len(arrays) != len(params):
        _fail(f"{len(arrays)} inputs given but the entry computation takes {len(params)} parameter"
              f"{'s' if len(params) != 1 else ''}")
    if global_values is None:
        global_values = values_are_global(module)
    shardings = parameter_shardings(module)
    out = []
    for p, value, sh in zip(params, arrays, shardings):
        if isinstance(value, (Uniform, Stacked)):
            out.append(value)
            continue
        out.append(_distribute_one(p, value, sh, grid, per_device, global_values, notes, devices))
    return out


@contextmanager
def _at(p):
    """A sharding that does not fit its parameter (a module run with --no-check) is an error
    located at the parameter."""
    try:
        yield
    except HloEvalError as e:
        if e.diagnostics:
            raise
        msg = f"{label(p)}: {e}"
        raise HloEvalError(msg, [instruction_diagnostic(p, msg, "R030")]) from None


def _distribute_one(p, value, sharding, grid, per_device, global_values, notes, devices=None):
    with _at(p):
        return _distribute_leaves(p, value, sharding, grid, per_device, global_values, notes, devices)


def _distribute_leaves(p, value, sharding, grid, per_device, global_values, notes, devices=None):
    shape = p.shape
    leaf_shapes = list(shape.leaves())
    leaf_shs = _leaf_shardings(sharding, shape)
    if shape.element_type == "token" and not shape.is_tuple:
        return Uniform(TOKEN)
    flat = _flatten(value, shape, label(p))
    placed, any_stacked = [], False
    for k, (v, leaf, sh) in enumerate(zip(flat, leaf_shapes, leaf_shs)):
        what = label(p) + (f"[{k}]" if shape.is_tuple else "")
        if leaf.element_type == "token":
            placed.append((TOKEN, False))
            continue
        try:
            dims = np.shape(v)
        except (TypeError, ValueError):
            dims = ()
        pl = placement(p, leaf, sh, dims, grid, per_device, global_values, what)
        arr = coerce(v, pl.shape, what, notes=notes, allow_rounding=True)
        if pl.recognized and notes is not None:
            notes.append(f"{what}: {_dims_text(leaf.element_type, dims)} taken as one value per device "
                         f"({grid.count} devices x {leaf.to_str(False)}, in device-id order)")
        placed.append(_place(arr, pl, leaf, grid, devices))
        any_stacked = any_stacked or placed[-1][1]
    if any_stacked:       # every leaf of a stacked tuple gets the device axis
        rows = grid.count if devices is None else len(devices)
        leaves = [a if st or a is TOKEN else np.broadcast_to(a, (rows,) + a.shape) for a, st in placed]
        return Stacked(_unflatten(leaves, shape))
    return Uniform(_unflatten([a for a, _ in placed], shape))


def _flatten(value, shape: Shape, what: str) -> list:
    if not shape.is_tuple:
        return [value]
    if not isinstance(value, (tuple, list)) or len(value) != len(shape.tuple_shapes):
        _fail(f"{what}: expected a tuple of {len(shape.tuple_shapes)} values for {shape.to_str(False)}")
    out = []
    for v, s in zip(value, shape.tuple_shapes):
        out.extend(_flatten(v, s, what))
    return out


def _unflatten(leaves: list, shape: Shape):
    it = iter(leaves)

    def build(s):
        if s.is_tuple:
            return tuple(build(e) for e in s.tuple_shapes)
        return next(it)
    return build(shape)


# ----------------------------------------------------------------------------- random inputs

def _global_shape(shape: Shape, sharding) -> Shape:
    if shape.is_tuple:
        shs = _leaf_shardings(sharding, shape)
        it = iter(shs)

        def build(s):
            if s.is_tuple:
                return Shape.tuple_of([build(e) for e in s.tuple_shapes])
            return _global_shape(s, next(it))
        return build(shape)
    if shape.element_type == "token":
        return shape
    return Shape.array(shape.element_type, global_dims(tuple(shape.dims), sharding))


def global_parameters(module) -> list:
    """MODULE's entry parameters with their global shapes (each parameter's shape on a device
    grown by its sharding): what --random-inputs draws and a user's global arrays hold.  A sharding
    that does not fit its parameter is an HloEvalError located at the parameter."""
    out = []
    for p, sh in zip(_params(module), parameter_shardings(module)):
        with _at(p):
            out.append(replace(p, shape=_global_shape(p.shape, sh)))
    return out


def random_global_inputs(module, grid, seed: int = 0, global_values: bool | None = None) -> list:
    """--random-inputs on devices: GLOBAL values drawn as a single-device run draws them (the same
    generator, the global shapes), then split by each parameter's sharding."""
    from ..interpreter.inputs import random_inputs
    if global_values is None:
        global_values = values_are_global(module)
    from ..interpreter.memory import check_rank
    params = _params(module)
    for p in params:
        check_rank(p)
    drawn = random_inputs(params if global_values else global_parameters(module), seed)
    return distribute(module, drawn, grid, False, global_values)
