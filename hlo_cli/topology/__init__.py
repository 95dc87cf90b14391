"""The devices of a program, statically: how many replicas and partitions a run simulates (`grid_of`),
whether a module is per-device or global (`partitioned`), the device grid and its replica groups
(grid.py) and shardings (sharding.py: global arrays <-> per-device pieces).

A layer below the checker (which checks replica groups and shardings against it) and the device
runtime (hlo_cli/devices, which runs programs on the grid); it reads the IR only.
"""
from __future__ import annotations

from ..ir.opcodes import COLLECTIVE, DEVICE_ID, with_trait

__all__ = ["grid_of", "partitioned"]

# an instruction that makes a module per-device: collectives, device ids, peer-to-peer transfers
_LOOKS_AT_DEVICES = with_trait(COLLECTIVE, DEVICE_ID) | {"send", "recv"}


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
    tiled = devices_used = False
    for _, inst in module.instructions():
        if inst.opcode == "custom-call" and inst.attrs.get("custom_call_target") in _BEFORE_PARTITIONING:
            return False
        if inst.opcode in _LOOKS_AT_DEVICES:
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
