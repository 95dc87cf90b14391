"""Multi-device runs: every replica and partition of a program simulated in one process.

    from hlo_cli.devices import grid_of, run_devices
    grid = grid_of(module)                       # replica_count x num_partitions (or a Shardy mesh)
    result = run_devices(module, args, grid)     # args: one Uniform/Stacked value per parameter
    result.value                                 # Stacked: leaves [devices, ...]; Uniform: one value

Layers: values.py (Uniform / Stacked), grid.py (device ids, replica groups), sharding.py (global
arrays <-> per-device pieces), collectives.py (the exchange semantics), runtime.py (the devices of
a run: the seam a distributed backend would replace), spmd.py (the evaluator that walks a program
once for all devices), manual.py (shard_map regions of unpartitioned modules), inputs.py (what a
user gives, per device).
"""
from __future__ import annotations

from dataclasses import dataclass

from .values import DeviceValue, Grouped, Stacked, Uniform, grouped, map_leaves

__all__ = ["DeviceResult", "Stacked", "Uniform", "distribute", "grid_of", "needs_devices", "partitioned",
           "run_devices"]


@dataclass
class DeviceResult:
    value: DeviceValue                 # the entry root's value
    devices: tuple[int, ...]           # the device ids a Stacked value's leading axis runs over
    grid: object                       # the DeviceGrid of the run
    global_result: bool                # True: a module before partitioning, the root is a global value
    executed: int = 0                  # instructions executed (all devices' per-device work included)

    def per_device(self):
        """The root value with every array leaf stacked over all devices (a Uniform value repeated)."""
        return self.value.stacked(len(self.devices))


def _header_devices(module) -> tuple[int | None, int | None]:
    attrs = module.attrs
    return attrs.get("replica_count"), attrs.get("num_partitions")


_BEFORE_PARTITIONING = frozenset({"SPMDFullToShardShape", "SPMDShardToFullShape", "xla.sdy.GlobalToLocalShape",
                                  "xla.sdy.LocalToGlobalShape"})


def partitioned(module) -> bool:
    """True when `module` is a per-device program (each device runs the text as it is), False when
    it computes on global values (a module before SPMD partitioning, sharding annotations only).

    Replicas always run the text as it is.  With several partitions the header alone does not say:
    JAX's text before partitioning has no num_partitions, PyTorch/XLA's has.  A module with
    shard_map regions (their custom calls exist only before partitioning) is global; one with
    collectives or device ids elsewhere is per-device (whatever its header says: a hand-written
    replica program); so is XLA's partitioned output (`is_scheduled=true`, an entry computation
    named `*_spmd`); one with tiled shardings and nothing else is global."""
    r, p = _header_devices(module)
    if (r or 1) > 1:
        return True
    from .spmd import COLLECTIVES, DEVICE_IDS, PEER_IO
    tiled = devices_used = False
    for _, inst in module.instructions():
        if inst.opcode == "custom-call" and inst.attrs.get("custom_call_target") in _BEFORE_PARTITIONING:
            return False
        if inst.opcode in COLLECTIVES or inst.opcode in DEVICE_IDS or inst.opcode in PEER_IO:
            devices_used = True
        sh = inst.attrs.get("sharding")
        if sh is not None and getattr(sh, "kind", None) == "tiled" and "manual" not in sh.last_tile_dims:
            tiled = True
    if devices_used:
        return True
    if (p or 1) <= 1:
        return False
    if module.attrs.get("is_scheduled") or module.entry.endswith("_spmd"):
        return True
    return not tiled


def grid_of(module, replicas: int | None = None, partitions: int | None = None):
    """The devices a run of `module` simulates: `replicas` x `partitions` when given, else the
    header's replica_count x num_partitions, else (before partitioning) the Shardy mesh's or the
    shardings' device count as partitions."""
    from .grid import DeviceGrid
    r, p = _header_devices(module)
    if r is None and p is None and replicas is None and partitions is None:
        from .sharding import module_devices
        r, p = module_devices(module)
    return DeviceGrid(replicas if replicas is not None else (r or 1),
                      partitions if partitions is not None else (p or 1))


def needs_devices(module, grid) -> bool:
    """True when running `module` on `grid` needs the multi-device evaluator: several devices and a
    program that is per-device (header) or looks at the device (collectives, ids, shard_map)."""
    if grid.count <= 1:
        return False
    from .spmd import device_dependent
    return partitioned(module) or bool(device_dependent(module))


def run_devices(module, args, grid=None, options=None, hook=None, progress=None, compiled: bool = True) -> DeviceResult:
    """Run the entry computation of `module` on every device of `grid` (default: grid_of(module)).
    `args`: one value per entry parameter, each Uniform (the same on every device) or Stacked (one row
    per device, in device-id order); plain values are taken as Uniform.  `hook` receives
    spmd.DeviceEvent's (`devices` None for a value held once)."""
    from ..errors import HloEvalError
    from ..interpreter.allocator import keep_freed_memory
    from ..interpreter.evaluator import RunOptions
    from ..interpreter.excess_precision import prepare as prepare_excess_precision
    from ..interpreter.hoist import hoist_loop_invariants
    from ..interpreter.memory import preflight, resource_error
    from ..interpreter.numerics import settle as settle_numerics
    from ..interpreter.parallel import blas_single
    from .runtime import LocalDevices
    from .spmd import Spmd

    grid = grid or grid_of(module)
    module = prepare_excess_precision(module)
    if hook is None and compiled:
        module = hoist_loop_invariants(module)
    module, _, _ = settle_numerics(module, (options or RunOptions()).numerics)
    preflight(module, grid.count)
    keep_freed_memory()
    devs = tuple(range(grid.count))
    vals = []
    for k, a in enumerate(args):
        if isinstance(a, (Uniform, Stacked)):
            vals.append(a)
        else:
            vals.append(Uniform(a))
    for k, a in enumerate(vals):
        if isinstance(a, Stacked):
            rows = {x.shape[0] for x in _leaves(a.value) if x.ndim}
            if rows and rows != {grid.count}:
                raise HloEvalError(f"parameter {k} holds values for {sorted(rows)} devices; the run has "
                                   f"{grid.count} ({grid.replicas} replicas x {grid.partitions} partitions)")
            vals[k] = grouped(a, grid.count)       # devices holding the same tile share one copy

    devices = LocalDevices(module, grid, options or RunOptions(), context_hooks(hook), compiled)
    sp = Spmd(module, devices, hook, progress)
    try:
        with blas_single():
            value = sp.call(module.entry, vals, devs)
    except MemoryError as e:
        raise resource_error(None, e) from e
    if isinstance(value, Grouped):
        value = Stacked(value.value)
    return DeviceResult(value, devs, grid, isinstance(value, Uniform) and not partitioned(module),
                        sp.executed + devices.executed())


def _leaves(v):
    from .values import leaves
    return leaves(v)


def context_hooks(hook):
    """For runtime.LocalDevices: device d -> the hook of d's own single-device context, which hands
    HOOK spmd.DeviceEvent's (d None: the context of values held once); None without a hook."""
    if hook is None:
        return None
    import numpy as np

    from .spmd import DeviceEvent

    def hook_for(d):
        if d is None:
            def h(ev):
                hook(DeviceEvent(ev.computation, ev.instruction, ev.value, ev.count, ev.operands, None))
        else:
            def h(ev):
                one = map_leaves(lambda a: np.asarray(a)[None], ev.value)
                hook(DeviceEvent(ev.computation, ev.instruction, one, ev.count, ev.operands, (d,)))
        return h
    return hook_for

