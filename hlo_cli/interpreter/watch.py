"""Where a run is, read from another thread: the reading side of hooks.py, shared by the progress
display of `hlo run` (hlo_cli/cli/progress.py) and the --profile sampler (profiling.py).

`sample(thread_id)` turns the levels a thread's runners publish into a `Sample`: the nesting of
computations being run, outermost first (`Level`s: the instruction each is at, the while loop
iteration, the devices of the multi-device walk), the loop iterations and instructions executed so
far, and the computation being prepared, if any.  Anything unexpected gives None, never an exception
in the run being watched.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from . import hooks

__all__ = ["Level", "Sample", "sample"]


@dataclass
class Level:
    """One computation being run: instruction `index` (1-based) of `count`."""
    computation: str
    index: int | None
    count: int | None
    instruction: object = None          # the Instruction being run, if known
    devices: int | None = None          # the walk over several devices: how many run it
    iteration: int | None = None        # the instruction is a while loop: the iteration running (1-based)
    trips: int | None = None            # ... and its known trip count, if the text gives one


@dataclass
class Sample:
    levels: list[Level] = field(default_factory=list)
    loop_iterations: int = 0
    executed: int = 0
    devices: int | None = None
    compiling: Level | None = None      # a computation being prepared (compiler.compile_computation)


def sample(thread_id: int, _cache: dict | None = None) -> Sample | None:
    """Where thread `thread_id` is in the evaluation of a module, or None (not running one, or
    its position not readable).  `_cache`: unused (kept for callers that pass one)."""
    try:
        positions = hooks.snapshot(thread_id)
    except Exception:                   # noqa: BLE001 -- never fail the run being watched
        return None
    if positions is None:
        return None
    out = Sample()
    contexts = {}
    for p in positions:
        if p.preparing:
            out.compiling = Level(p.computation, p.index, p.count)
            continue
        out.compiling = None            # (a preparation shows only when it is the innermost work)
        lv = Level(p.computation, p.index, p.count, p.instruction, p.devices)
        if p.devices is not None and out.devices is None:
            walk = p.ec                 # the multi-device walk (devices/spmd.py): its own counts
            out.devices = walk.device_count
            out.executed, out.loop_iterations = walk.total_executed(), walk.total_loop_iterations()
        if p.iteration is not None:
            lv.iteration, lv.trips = p.iteration, _known_trips(p.instruction)
        out.levels.append(lv)
        if p.ec is not None:
            contexts[id(p.ec)] = p.ec
    if not out.levels and out.compiling is None:
        return None
    if out.devices is None:
        for ec in contexts.values():
            out.loop_iterations += getattr(ec, "loop_iterations", 0)
            out.executed += getattr(ec, "executed", 0)
    return out


def _known_trips(inst) -> int | None:
    """A while loop's trip count when its backend_config gives it (known_trip_count), else None."""
    bc = getattr(inst, "attrs", {}).get("backend_config") if inst is not None else None
    j = getattr(bc, "json", None)
    if isinstance(j, dict) and isinstance(j.get("known_trip_count"), dict):
        try:
            return int(j["known_trip_count"].get("n"))
        except (TypeError, ValueError):
            return None
    return None
