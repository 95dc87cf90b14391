"""Where the time of a run went (`hlo run --profile`).

A `Profile` is put in a run's options (``RunOptions(profile=Profile())``); every evaluation context
of the run then runs its compiled computations through `Profile.runner` instead of the compiled
loop or the generated code (compiler.run_compiled): the step loop ``Compiled.run_steps`` (tier 1)
in its timed mode, every step as prepared timed with ``time.perf_counter`` (`_StepTimer`) and
charged to its (computation, instruction).  The
values are the same as without the profile, bit for bit: only the order of the Python dispatch
around each step changes, never a NumPy call.

Time is kept two ways per instruction:

* total: from the step's start to its end, computations it calls included (a while loop's total
  holds its body's instructions);
* self: the total minus the totals of the steps of the computations it called, so the self times
  of all instructions add up to the run (the table's "% of run").

A REGION step (a fused group of large elementwise instructions run block by block, compiler.py)
is timed as one: its row is the group, named after its last member, with the members listed.

Runs with hooks (--dump-dir, --check-finite) use the generic loop, which has no steps to time; there
`Profile.hook` wraps the run's hook and charges the time between two hook events (without the time
the hooks themselves take) to the instruction of the later event: self time only.

What the steps cannot time is sampled (`start_sampling`: a thread reading where the running thread
is every 5 ms, as the progress display does: hlo_cli/interpreter/watch.sample, from the levels the runners
publish in interpreter/hooks.py): preparing a computation on its first call
(compiling it into steps) happens inside the calling step, and is taken off that step's
instruction and reported as preparation; on several devices, the compiled computations each device
runs (fusions, called computations, loop bodies) are timed in the device's own context, and what
the device walk (devices/spmd.py) does itself -- collectives, elementwise instructions on the
devices' stacked values, its control flow -- is charged to its instructions by sampling (their
rows count samples, not calls).

The profile adds two clock readings per executed step, and the generated code (tier 2) is not used
while profiling: runs of many small instructions take longer than without --profile; the shares
between instructions stay meaningful.
"""
from __future__ import annotations

import functools
import time

from .kernels import REGION, RULE, WITH_EC


class _Row:
    """The time of one instruction (or fused group) of one computation; `samples` > 0: a row of
    the multi-device walk, timed by sampling (`calls` unknown)."""
    __slots__ = ("computation", "inst", "calls", "self_s", "total_s", "members", "samples")

    def __init__(self, computation: str, inst, members=None):
        self.computation, self.inst = computation, inst
        self.calls = self.samples = 0
        self.self_s = self.total_s = 0.0
        self.members = members


class _StepTimer:
    """The step loop's timer (compiler.Compiled.run_steps) for one compiled computation: charges
    the time of its step number `n` to ``rows[n]``, its total less the time of the steps of the
    computations it called to its self time.  `stack`, shared by every timer of the profile: per
    running step that may call computations (``nests[n]``: a rule, a step given the context), the
    time of the steps they ran so far, innermost last."""
    __slots__ = ("rows", "nests", "stack")

    def __init__(self, rows: list, nests: list, stack: list):
        self.rows, self.nests, self.stack = rows, nests, stack

    def start(self) -> int:
        return len(self.stack)

    def enter(self, n: int, _clock=time.perf_counter) -> float:
        if self.nests[n]:
            self.stack.append(0.0)
        return _clock()

    def leave(self, n: int, t0: float, _clock=time.perf_counter):
        dt = _clock() - t0
        stack = self.stack
        inner = stack.pop() if self.nests[n] else 0.0
        row = self.rows[n]
        row.calls += 1
        row.total_s += dt
        row.self_s += dt - inner
        if stack:
            stack[-1] += dt

    def stopped(self, n: int, depth: int, t0: float):
        """Step `n` raised (an error, ^C; -1: none had begun): it keeps the time it took."""
        stack = self.stack
        if n < 0 or (self.nests[n] and len(stack) <= depth):       # no step of this loop running
            del stack[depth:]
            return
        del stack[depth + 1 if self.nests[n] else depth:]          # (entries of steps it called)
        self.leave(n, t0)


class Profile:
    """Time per instruction of one run (see the module's docstring)."""

    def __init__(self):
        self._rows: dict[tuple[int, int], _Row] = {}       # (id(compiled), step index) -> row
        self._by_name: dict[tuple[str, str], _Row] = {}    # hook mode: (computation, instruction)
        self._runners: dict[int, object] = {}
        self._keep: list = []                               # the compiled computations timed (ids stay valid)
        self._stack: list[list] = []                        # the running steps' start and callee time, innermost last
        self._walk: dict[tuple[str, str], _Row] = {}       # the multi-device walk's instructions, sampled
        self._prep: dict[tuple[str, str], float] = {}      # preparing computations inside a step, sampled
        self.preparing_s = 0.0                              # preparing computations, sampled
        self._prepared: dict[str, float] = {}              # ... per computation prepared
        self._sampler = None
        self.mode = "steps"

    # -- compiled computations ---------------------------------------------------------
    def runner(self, c):
        """A function (ec, args) -> value running compiled computation `c` step by step, timing each step."""
        fn = self._runners.get(id(c))
        if fn is None:
            fn = self._runners[id(c)] = self._make_runner(c)
            self._keep.append(c)
        return fn

    def _make_runner(self, c):
        name = c.comp.name
        rows = []
        for st in c.steps:
            members = [m.inst.name for m in st.payload.members] if st.kind == REGION else None
            rows.append(_Row(name, st.inst, members))
        self._rows.update(((id(c), n), r) for n, r in enumerate(rows))
        # only rules (and rules given the context) can call computations: only they keep a stack entry
        nests = [st.kind == RULE or st.kind == WITH_EC for st in c.steps]
        return functools.partial(c.run_steps, timer=_StepTimer(rows, nests, self._stack))

    # -- runs with hooks (the generic loop) --------------------------------------------------
    def hook(self, inner):
        """A hook that charges the time since the previous event (hooks' own time excluded) to each
        event's instruction, then calls `inner` (None: no other hook)."""
        self.mode = "hook events"
        clock = time.perf_counter
        last = [None]                   # the first event (a parameter) ends the preparation: no time
        rows = self._by_name

        def profiled(ev):
            now = clock()
            if last[0] is None:
                last[0] = now
            key = (ev.computation.name, ev.instruction.name)
            row = rows.get(key)
            if row is None:
                row = rows[key] = _Row(ev.computation.name, ev.instruction)
            row.calls += 1
            dt = now - last[0]
            row.self_s += dt
            row.total_s += dt
            try:
                if inner is not None:
                    inner(ev)
            finally:
                last[0] = clock()
        return profiled

    # -- sampled: preparing computations, the multi-device walk ---------------------------------
    def start_sampling(self, thread_id: int, interval: float = 0.005):
        """Start sampling thread `thread_id` (the run's) every `interval` seconds, for what the
        steps cannot time (`stop_sampling()` ends it):

        * preparing a computation (compiler.compile_computation) on its first call happens inside
          the calling step: the time between samples that find it is taken off that step's
          instruction in `summary` and counted as preparation ("outside instructions");
        * the multi-device walk (devices/spmd.py) runs instructions itself, outside any step: the
          time between samples that find it running one goes to that instruction."""
        import threading

        from .watch import sample
        stop = threading.Event()
        clock = time.perf_counter
        walk, prep, prepared = self._walk, self._prep, self._prepared
        cap = 4 * interval

        def loop():
            cache: dict = {}
            last = None                 # when the previous sample found the module running
            try:
                while not stop.wait(interval):
                    smp = sample(thread_id, cache)
                    now = clock()
                    if smp is None or (not smp.levels and smp.compiling is None):
                        last = None     # before the run (or after it): no time to give
                        continue
                    # a sampler the machine left waiting (other processes, a thread holding the
                    # GIL) gives at most a few intervals to what it finds, not the whole wait
                    dt, last = (0.0 if last is None else min(now - last, cap)), now
                    lv = smp.levels[-1] if smp.levels else None
                    if smp.compiling is not None:
                        self.preparing_s += dt
                        name = smp.compiling.computation
                        prepared[name] = prepared.get(name, 0.0) + dt
                        if lv is not None and lv.instruction is not None and lv.devices is None:
                            key = (lv.computation, lv.instruction.name)
                            prep[key] = prep.get(key, 0.0) + dt
                        continue
                    if lv.devices is None or lv.instruction is None:
                        continue
                    key = (lv.computation, lv.instruction.name)
                    row = walk.get(key)
                    if row is None:
                        row = walk[key] = _Row(lv.computation, lv.instruction)
                    row.samples += 1
                    row.self_s += dt
                    row.total_s += dt
            except Exception:       # noqa: BLE001 -- the profile must never stop the run
                return
        th = threading.Thread(target=loop, name="hlo-profile", daemon=True)
        self._sampler = (th, stop)
        th.start()

    def stop_sampling(self):
        if self._sampler is not None:
            th, stop = self._sampler
            stop.set()
            th.join(timeout=2)
            self._sampler = None

    # -- the report --------------------------------------------------------------------
    def rows(self) -> list[_Row]:
        """Every instruction that ran, the largest self time first (the variants of one computation
        compiled for different callers are one row per instruction; the preparation of
        computations found inside a step is taken off its instruction)."""
        merged: dict[tuple, _Row] = {}
        for r in list(self._rows.values()) + list(self._by_name.values()):
            if not r.calls:
                continue
            key = (r.computation, r.inst.name, r.members is not None)
            m = merged.get(key)
            if m is None:
                m = merged[key] = _Row(r.computation, r.inst, r.members)
            m.calls += r.calls
            m.self_s += r.self_s
            m.total_s += r.total_s
        for (comp, name), t in list(self._prep.items()):
            m = merged.get((comp, name, False))
            if m is not None:
                cut = min(t, m.self_s)
                m.self_s -= cut
                m.total_s -= cut
        rows = list(merged.values())
        rows += [r for r in list(self._walk.values()) if r.samples]
        rows.sort(key=lambda r: (-r.self_s, r.computation, r.inst.name))
        return rows

    def summary(self, run_s: float, top: int = 20) -> dict:
        """The profile as a JSON-ready dictionary: the `top` instructions by self time and every
        opcode by self time, against `run_s` (the run's execute time, seconds)."""
        rows = self.rows()
        timed = sum(r.self_s for r in rows)
        base = run_s if run_s > 0 else (timed or 1.0)

        def pct(s):
            return round(100.0 * s / base, 2) if base else 0.0
        insts = []
        for r in rows[:top]:
            d = {"computation": r.computation, "instruction": r.inst.name,
                 "opcode": "fused elementwise" if r.members else r.inst.opcode,
                 "shape": r.inst.shape.to_str(False) if r.inst.shape is not None else "",
                 "calls": r.calls, "self_ms": round(r.self_s * 1e3, 3), "total_ms": round(r.total_s * 1e3, 3),
                 "percent": pct(r.self_s)}
            if r.members:
                d["members"] = list(r.members)
            if r.samples:                   # the multi-device walk's own instruction, sampled
                d["calls"] = None
                d["samples"] = r.samples
            insts.append(d)
        ops: dict[str, list] = {}
        for r in rows:
            key = "fused elementwise" if r.members else r.inst.opcode
            o = ops.setdefault(key, [0, 0.0, 0, 0])
            o[0] += r.calls
            o[1] += r.self_s
            o[2] += 1
            o[3] += r.samples
        opcodes = []
        for k, (c, s, n, smp) in sorted(ops.items(), key=lambda kv: -kv[1][1]):
            opcodes.append({"opcode": k, "instructions": n, "calls": c, "self_ms": round(s * 1e3, 3),
                            "percent": pct(s)})
            if smp:
                opcodes[-1]["samples"] = smp
        return {"mode": self.mode, "run_ms": round(run_s * 1e3, 3), "timed_ms": round(timed * 1e3, 3),
                "untimed_ms": round(max(0.0, run_s - timed) * 1e3, 3),
                "preparing_ms": round(self.preparing_s * 1e3, 3),
                "preparing_top": [{"computation": k, "ms": round(v * 1e3, 3)} for k, v in
                                  sorted(self._prepared.items(), key=lambda kv: -kv[1])[:10] if v > 0],
                "instructions_timed": len(rows),
                "top_instructions": insts, "opcodes": opcodes}
