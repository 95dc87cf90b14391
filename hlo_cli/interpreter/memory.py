"""Out of memory as its own error, and what a run can never hold.

A module that asks for more memory than the machine has is not a wrong module: `hlo run` reports
it as an HloResourceError (exit code 4) that says which instruction asked, how large its result
is (from its shape, as the interpreter stores it) and how much the failing allocation asked for
(NumPy says so).  Before a run starts, every instruction whose result alone is larger than the
memory this process can ever have (physical memory plus swap, or the container's limit if lower)
is refused at once, rather than left to swap or to the kernel's OOM killer half-way through.

The same pre-flight refuses results of more than 64 dimensions: XLA has no rank limit, but NumPy
arrays have at most 64 (NumPy 2), so `hlo run` cannot hold such a value.
"""
from __future__ import annotations

import os

from ..errors import HloEvalError, HloResourceError
from ..errors import instruction_diagnostic as _diag
from ..ir.dtypes import ELEMENT_TYPES
from ..ir.module import Instruction, Module
from ..ir.shape import NUMPY_MAX_RANK, UNBOUNDED, Shape

def result_bytes(shape: Shape | None) -> int | None:
    """Bytes the interpreter needs to hold a value of `shape` (each element at its NumPy storage
    size; bounded dynamic dimensions at their bound); None when unknown (no shape, unbounded dims)."""
    if shape is None:
        return None
    total = 0
    for leaf in shape.leaves():
        et = ELEMENT_TYPES.get(leaf.element_type)
        if et is None or et.bits == 0:
            continue                             # token, opaque: no storage
        if any(d == UNBOUNDED for d in leaf.dims):
            return None
        size = et.numpy.itemsize if et.numpy is not None else (et.bits + 7) // 8
        total += leaf.num_elements * size
    return total


def memory_limit() -> int | None:
    """The most memory this process could ever use: physical memory plus swap, or the cgroup's
    limit when that is lower; None if unknown."""
    limit = None
    try:
        limit = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("SwapTotal:"):
                    limit += int(line.split()[1]) * 1024
                    break
    except (OSError, ValueError, AttributeError):
        pass
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            with open(path) as f:
                text = f.read().strip()
        except OSError:
            continue
        if text.isdigit() and (limit is None or int(text) < limit):
            limit = int(text)
        break
    return limit


def human(n: int) -> str:
    """8000000000000 -> '8,000,000,000,000 bytes (7.28 TiB)'."""
    size, unit = float(n), "bytes"
    for u in ("KiB", "MiB", "GiB", "TiB", "PiB", "EiB"):
        if size < 1024:
            break
        size, unit = size / 1024, u
    return f"{n:,} bytes" + (f" ({size:.2f} {unit})" if unit != "bytes" else "")


def resource_error(inst: Instruction | None, e: BaseException | None = None, *,
                   limit: int | None = None, devices: int = 1) -> HloResourceError:
    """The out-of-memory error of `inst` (None: not known) after MemoryError `e`, or, with `limit`,
    for a result larger than `limit` bytes found before the run (on `devices` simulated devices,
    one copy each)."""
    need = result_bytes(inst.shape) if inst is not None else None
    asked = getattr(e, "_total_size", None) if e is not None else None     # NumPy's _ArrayMemoryError
    if not isinstance(asked, int):
        asked = None
    parts = []
    if inst is not None and need is not None and devices > 1:
        parts.append(f"its result {inst.shape.to_str(False)} on {devices} devices needs {human(need * devices)}")
        need *= devices
    elif inst is not None and need is not None:
        parts.append(f"its result {inst.shape.to_str(False)} needs {human(need)}")
    if limit is not None:
        parts.append(f"more than this machine can ever hold, {human(limit)}")
    elif asked is not None:
        parts.append(f"NumPy could not allocate {human(asked)}")
    detail = ", ".join(parts) if parts else str(e) if e is not None and str(e) else "an allocation failed"
    if inst is None:
        return HloResourceError(f"out of memory: {detail}", requested_bytes=asked)
    msg = f"{inst.name}: {inst.opcode}: out of memory: {detail}"
    return HloResourceError(msg, [_diag(inst, msg, "R013")], instruction=inst.name,
                            requested_bytes=asked, result_bytes=need)


def preflight(module: Module, devices: int = 1) -> None:
    """Refuse, before running, what no run of `module` on this machine could hold: a result larger
    than the memory limit (HloResourceError; on several simulated devices, the devices' copies
    together) or of more dimensions than NumPy arrays have (HloEvalError); the instruction found
    first in text order is reported.  A module that passed is not walked again for the same limit
    (the walk costs ~50 ms on 15k instructions)."""
    limit = memory_limit()
    from .compiler import module_cache
    per = module_cache(module)
    if per.get("preflight_passed", ()) == (limit, devices):
        return
    if limit is not None and devices > limit // 64:
        raise HloResourceError(f"out of memory: {devices} simulated devices need more than this machine can "
                               f"ever hold, {human(limit)}, for their bookkeeping alone")
    _preflight(module, limit, devices)
    per["preflight_passed"] = (limit, devices)


def _preflight(module: Module, limit: int | None, devices: int = 1) -> None:
    for comp in module.computations:
        for inst in comp.instructions:
            shape = inst.shape
            if shape is None:
                continue
            for leaf in shape.leaves():
                if leaf.rank > NUMPY_MAX_RANK:
                    msg = (f"{inst.name}: {inst.opcode}: hlo run holds arrays of at most {NUMPY_MAX_RANK} "
                           f"dimensions (NumPy's limit), got {leaf.rank} in {leaf.to_str(False)[:120]}"
                           f"{'...' if len(leaf.to_str(False)) > 120 else ''}")
                    raise HloEvalError(msg, [_diag(inst, msg, "R014")])
            if limit is not None:
                need = result_bytes(shape)
                if need is not None and need * devices > limit:
                    raise resource_error(inst, limit=limit, devices=devices)
