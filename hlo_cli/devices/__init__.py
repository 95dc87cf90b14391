"""Multi-device runs: every replica and partition of a program simulated in one process.

    from hlo_cli.devices import run_devices
    from hlo_cli.topology import grid_of
    grid = grid_of(module)                       # replica_count x num_partitions (or a Shardy mesh)
    result = run_devices(module, args, grid)     # args: one Uniform/Stacked value per parameter
    result.value                                 # Stacked: leaves [devices, ...]; Uniform: one value

Layers: values.py (Uniform / Stacked), hlo_cli/topology (the device grid, replica groups,
shardings: global arrays <-> per-device pieces; a layer below the checker, which uses it too),
collectives.py (the exchange semantics), runtime.py (the devices of
a run: the seam a distributed backend would replace), spmd.py (the evaluator that walks a program
once for all devices), manual.py (shard_map regions of unpartitioned modules), inputs.py (what a
user gives, per device).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..topology import grid_of, partitioned
from .values import DeviceValue, Grouped, Stacked, Uniform, grouped, map_leaves

__all__ = ["DeviceResult", "Stacked", "Uniform", "needs_devices", "run_devices"]


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
    from ..interpreter.ops.numerics import settle as settle_numerics
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

