"""Where a run is, as the runners publish it: the interface between the interpreter and whoever
watches a run from another thread (the progress display of `hlo run`, the --profile sampler).

Each thread running computations has a `Track`: a stack of `Level`s, one per computation being
run (outermost first), kept by the runners as they go:

* compiler.run_compiled pushes a level per compiled computation it runs; the step loop (tier 1)
  publishes its iterator over the steps (`cursor`), generated code (tier 2) its code object
  (`code`, whose running line `line_step` maps to a step);
* compiler.run_while publishes the loop's iteration on the level running the while instruction,
  and a level of its own for the condition or body it calls directly (generated code); while a
  loop runs as one generated function (loopgen.py) its iterations are counted by the context's
  `loop_iterations` (`counting`);
* evaluator.EvalContext._run (the generic loop: hooks, --no-compile, computations applied to
  arrays) pushes a level and publishes the index of the instruction it runs (`k`);
* compiler.compile_computation pushes a `preparing` level and publishes the instruction it
  prepares;
* the multi-device walk (devices/spmd.py, `Spmd.call`) pushes a level with its `devices` and its
  walk object as `ec` (which answers `device_count`, `total_executed()` and
  `total_loop_iterations()`), publishes the index of the instruction it runs (`k`), and its while
  loops their iteration on the level running the while instruction.

Publishing costs a few stores per computation run and per loop iteration, none per step of
compiled code.  `snapshot(thread_id)` reads a thread's track (from any thread) into plain
`Position`s; reading never raises into the run.
"""
from __future__ import annotations

import sys
import threading
from dataclasses import dataclass

__all__ = ["Level", "Position", "Track", "snapshot", "track"]


class Level:
    """One computation being run (or prepared), as its runner publishes it.

    `ec`: its evaluation context (`executed`, `loop_iterations`); `name`: the computation's name;
    `count`: its number of instructions.  The position, whichever the runner keeps:
    `insts` and `k` (the instruction at index k), or `steps` (steps.Step, or tuples of its fields) with `cursor` (an iterator over `steps`: the step being run is the last one it
    gave) or `code` and `line_step` (the running line of `code` -> a step's slot).  `iteration`:
    the iteration of the while loop its current instruction runs (1-based), or `counting`
    (offset, context): the iteration is offset + context.loop_iterations.  `preparing`: a
    computation being prepared (compiled), not run; `hidden`: nothing to show (a loop running as
    one generated function)."""
    __slots__ = ("ec", "name", "count", "insts", "k", "steps", "walked", "cursor", "code", "line_step",
                 "iteration", "counting", "calls", "preparing", "hidden", "devices")

    def __init__(self, ec, name: str, count: int | None, preparing: bool = False):
        self.ec, self.name, self.count, self.preparing = ec, name, count, preparing
        self.insts = self.k = self.steps = self.walked = self.cursor = self.code = self.line_step = None
        self.iteration = self.counting = None
        self.calls = 0                  # computations this level called while at its instruction
        self.hidden = False
        self.devices = None             # the multi-device walk: how many devices run this level


class Track:
    """The levels of one thread, outermost first."""
    __slots__ = ("levels",)

    def __init__(self):
        self.levels: list[Level] = []


_TRACKS: dict[int, Track] = {}
# the fields of a step (steps.Step, or the plain tuple of its fields the step loop runs) read here
_SLOT, _INST = 3, 4


def track() -> Track:
    """The calling thread's track (made on first use)."""
    tid = threading.get_ident()
    t = _TRACKS.get(tid)
    if t is None:
        t = _TRACKS[tid] = Track()
    return t


@dataclass
class Position:
    """One level as read from outside: instruction `index` (1-based) of `count`."""
    computation: str
    index: int | None
    count: int | None
    instruction: object = None
    iteration: int | None = None
    preparing: bool = False
    ec: object = None
    devices: int | None = None


def snapshot(thread_id: int) -> list[Position] | None:
    """The positions of thread `thread_id`'s levels, outermost first (None: it runs nothing)."""
    t = _TRACKS.get(thread_id)
    if t is None:
        return None
    try:
        levels = list(t.levels)
        frames = None
        out = []
        for lv in levels:
            if lv.hidden:
                continue
            if lv.code is not None and frames is None:
                frames = _code_lines(thread_id)
            index, inst = _where(lv, frames)
            it = lv.iteration
            if lv.counting is not None:
                offset, ec = lv.counting
                it = offset + ec.loop_iterations
            elif it is None and lv.calls and inst is not None and inst.opcode == "while":
                # a while loop run through the context (ops/control.py): it calls its condition,
                # then its body, per iteration; the calls counted since its instruction began
                it = (lv.calls + 1) // 2
            out.append(Position(lv.name, index, lv.count, inst, it, lv.preparing, lv.ec, lv.devices))
        return out
    except Exception:                   # noqa: BLE001 -- a level changing while read: no answer
        return None


def _where(lv: Level, frames) -> tuple:
    """(1-based index, instruction) of a level's position, or (None, None)."""
    if lv.insts is not None and lv.k is not None:
        return lv.k + 1, lv.insts[lv.k]
    step = None
    if lv.code is not None:
        slot = lv.line_step.get(frames.get(lv.code)) if frames else None
        if slot is not None:
            step = next((st for st in lv.steps if _first(st[_SLOT]) == slot), None)
    elif lv.cursor is not None:
        steps = lv.walked
        done = len(steps) - lv.cursor.__length_hint__()
        step = steps[done - 1] if 0 < done <= len(steps) else None
    if step is None:
        return None, None
    k = step[_SLOT]
    if isinstance(k, tuple):            # a fused region: its last member
        k = k[-1]
    return k + 1, step[_INST]


def _first(slot):
    return slot[0] if isinstance(slot, tuple) else slot


def _code_lines(thread_id: int) -> dict:
    """{code object: running line} of the thread's frames (generated code's position)."""
    out = {}
    f = sys._current_frames().get(thread_id)
    while f is not None:
        out.setdefault(f.f_code, f.f_lineno)
        f = f.f_back
    return out
