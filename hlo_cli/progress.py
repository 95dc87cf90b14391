"""What a running module is doing, seen from outside: the progress display of `hlo run`.

The evaluator is never asked to report: a daemon thread looks at the running thread's Python frames
a few times a second (``sys._current_frames()``) and reads the positions the evaluator's loops keep
anyway, so the run pays nothing for being watched (no call, no counter in the hot loops):

* compiler.run_compiled(ec, c, args): the computation being run (`c`, a Compiled: `c.comp`,
  `c.n`, `c.steps`, `c.line_step`) and its context `ec` (`loop_iterations`, `executed`);
  - called from it, the generated code of the computation (tier 2): a frame whose file name starts
    with "<hlo computation "; its current line maps to a step through `c.line_step`;
  - or the step loop Compiled.run_steps (tier 1, also when profiling): the local `step`, whose
    [3] is the instruction's index and [4] the instruction;
* compiler.run_while(ec, cond, body, ...) (a while loop of compiled computations): `c`, the
  condition or body being run (its generated code called directly), and `n`, the iterations done;
* evaluator.EvalContext._run (the generic loop, used with hooks): `plan`, `k`, `n`, `inst`;
* devices/spmd.Spmd.call (the multi-device walk): `plan`, `k`, `n`, `inst` and `devs`, the devices
  running it;
* ops/control.eval_while (`n`, `inst`) and Spmd._while (`it`, `inst`): a loop's iteration.

`sample(thread_id)` returns the nesting of computations being run, outermost first (`Level`s),
with the loop iterations and the devices; `describe` makes the status line; `Display` shows it on
a terminal (rich, transient) from its own thread.  Anything unexpected in the frames gives a
shorter answer or None, never an exception in the run.
"""
from __future__ import annotations

import contextlib
import sys
import threading
import time
from dataclasses import dataclass, field

_COMPILER = ("interpreter/compiler.py", "interpreter\\compiler.py")
_EVALUATOR = ("interpreter/evaluator.py", "interpreter\\evaluator.py")
_SPMD = ("devices/spmd.py", "devices\\spmd.py")
_CONTROL = ("ops/control.py", "ops\\control.py")
_GENERATED = "<hlo computation "


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
    frames not understood).  `_cache` (optional): a dict reused between calls (step lookups)."""
    try:
        frame = sys._current_frames().get(thread_id)
    except Exception:                   # noqa: BLE001 -- never fail the run being watched
        return None
    if frame is None:
        return None
    try:
        return _walk(frame, _cache if _cache is not None else {})
    except Exception:                   # noqa: BLE001
        return None
    finally:
        del frame


def _walk(frame, cache) -> Sample | None:
    levels: list[Level] = []            # innermost first while walking
    out = Sample()
    contexts = []
    pending = None                      # ("line", code, lineno) or ("step", step) from the frame below
    whole_loop = None                   # iterations done by a loop generated whole (interpreter/loopgen.py)
    loops = []                          # (index of the level outside it, iteration, while instruction)
    f = frame
    while f is not None:
        code = f.f_code
        filename = code.co_filename
        name = code.co_name
        if filename.startswith(_GENERATED):
            pending = ("line", code, f.f_lineno)
        elif filename.startswith("<hlo loop "):
            whole_loop = f.f_locals.get("n")
        elif name == "run_steps":
            step = f.f_locals.get("step")
            pending = ("step", step) if step is not None else None
        elif name == "run_compiled" and filename.endswith(_COMPILER):
            loc = f.f_locals
            c, ec = loc.get("c"), loc.get("ec")
            if c is not None:
                levels.append(_compiled_level(c, pending, cache))
                contexts.append(ec)
            pending = None
        elif name == "run_while" and filename.endswith(_COMPILER):
            # a while loop of compiled computations: `c` is the condition or body being run
            # (called directly once both are generated code, else through run_compiled)
            loc = f.f_locals
            c, ec, it = loc.get("c"), loc.get("ec"), loc.get("n")
            if whole_loop is not None:
                it, whole_loop = whole_loop, None
            if c is not None and pending is not None:      # its generated code runs right below
                levels.append(_compiled_level(c, pending, cache))
                contexts.append(ec)
            if isinstance(it, int):
                loops.append((len(levels), it + 1, None))
            pending = None
        elif (name == "eval_while" and filename.endswith(_CONTROL)) or (name == "_while" and filename.endswith(_SPMD)):
            loc = f.f_locals
            it = loc.get("n" if name == "eval_while" else "it")
            if isinstance(it, int):
                loops.append((len(levels), it + 1, loc.get("inst")))
        elif name == "compile_computation" and filename.endswith(_COMPILER):
            if not levels and out.compiling is None:
                loc = f.f_locals
                plan, k = loc.get("plan"), loc.get("k")
                comp = loc.get("comp")
                if comp is not None:
                    out.compiling = Level(comp.name, None if k is None else k + 1,
                                          len(plan.insts) if plan is not None else None)
        elif name == "_run" and filename.endswith(_EVALUATOR):
            loc = f.f_locals
            plan = loc.get("plan")
            if plan is not None:
                k, n = loc.get("k"), loc.get("n")
                levels.append(Level(plan.comp.name, None if k is None else k + 1, n, loc.get("inst")))
                contexts.append(loc.get("self"))
            pending = None
        elif name == "call" and filename.endswith(_SPMD):
            loc = f.f_locals
            plan, sp, devs = loc.get("plan"), loc.get("self"), loc.get("devs")
            if plan is not None:
                k, n = loc.get("k"), loc.get("n")
                ndev = len(devs) if devs is not None else None
                levels.append(Level(plan.comp.name, None if k is None else k + 1, n, loc.get("inst"), ndev))
            if sp is not None:
                out.devices = sp.grid.count
                dv = sp.devices
                out.executed = sp.executed + dv.executed()
                out.loop_iterations = dv.loop_iterations + sum(
                    getattr(ec, "loop_iterations", 0) for ec in [dv.global_context, *dv._contexts.values()])
                contexts = []
            pending = None
        f = f.f_back
    if not levels and out.compiling is None:
        return None
    for idx, it, inst in loops:
        if idx < len(levels):
            lv = levels[idx]
            if inst is None or lv.instruction is None or lv.instruction is inst:
                lv.instruction = lv.instruction or inst
                lv.iteration, lv.trips = it, _known_trips(lv.instruction)
    levels.reverse()
    out.levels = levels
    if out.devices is None:
        seen = set()
        for ec in contexts:
            if ec is not None and id(ec) not in seen:
                seen.add(id(ec))
                out.loop_iterations += getattr(ec, "loop_iterations", 0)
                out.executed += getattr(ec, "executed", 0)
    return out


def _compiled_level(c, pending, cache) -> Level:
    comp = getattr(getattr(c, "comp", None), "name", "?")
    n = getattr(c, "n", None)
    step = None
    if pending is not None and pending[0] == "line":
        if pending[1] is getattr(c, "code", None):
            k = getattr(c, "line_step", {}).get(pending[2])
            if k is not None:
                steps = cache.get(id(c))
                if steps is None or steps[0] is not c:
                    steps = cache[id(c)] = (c, _steps_by_index(c))
                step = steps[1].get(k)
    elif pending is not None:
        step = pending[1]
    if step is None:
        return Level(comp, None, n)
    k = step[3]
    if isinstance(k, tuple):            # a fused region: its last member
        k = k[-1]
    return Level(comp, k + 1, n, step[4])


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


def _steps_by_index(c) -> dict:
    out = {}
    for step in getattr(c, "steps", ()):
        k = step[3]
        out[k[0] if isinstance(k, tuple) else k] = step
    return out


def _fmt_elapsed(s: float) -> str:
    s = int(s)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


def describe(smp: Sample | None, elapsed: float, width: int = 200, phase: str = "running") -> str:
    """One status line: the computations being run with their positions, the current
    instruction (opcode, shape), the loop iterations and devices, and the time so far; before
    any computation runs, `phase` (what the command is doing: parsing, reading inputs...)."""
    tail = [_fmt_elapsed(elapsed)]
    if smp is None or (not smp.levels and smp.compiling is None):
        line = f"{phase}... ({tail[0]})"
        return line if len(line) <= width else line[:max(0, width - 3)] + "..."
    if smp.loop_iterations and not any(lv.iteration is not None for lv in smp.levels[:-1]):
        # (a loop's own iteration, shown on its level, says more than the count of all loops)
        tail.insert(0, f"{smp.loop_iterations:,} loop iteration{'s' if smp.loop_iterations != 1 else ''}")
    if smp.devices:
        tail.insert(0, f"{smp.devices} devices")
    parts = []
    for lv in smp.levels:
        pos = f" {lv.index:,}/{lv.count:,}" if lv.index is not None and lv.count else ""
        if lv.iteration is not None and lv is not smp.levels[-1]:
            pos += f" (iteration {lv.iteration:,}" + (f"/{lv.trips:,}" if lv.trips else "") + ")"
        parts.append(f"{lv.computation}{pos}")
    last = []
    if smp.compiling is not None:
        lv = smp.compiling
        pos = f" {lv.index:,}/{lv.count:,}" if lv.index is not None and lv.count else ""
        last = [f"preparing {lv.computation}{pos}"]
    inst = smp.levels[-1].instruction if smp.levels and smp.compiling is None else None
    what, shape_text = "", ""
    if inst is not None:
        shape = getattr(inst, "shape", None)
        shape_text = shape.to_str(False) if shape is not None else ""
        if len(shape_text) > 60:
            shape_text = shape_text[:57] + "..."
        what = f": {inst.name} {inst.opcode}"
    end = "  (" + ", ".join(tail) + ")"
    # the widest form that fits: every level, then the outermost (how far the run is) and the
    # innermost ones; the shape goes first, then the levels between, then the innermost computation
    if len(parts) > 2:
        chains = [parts, parts[:1] + ["..."] + parts[-2:], parts[:1] + ["..."] + parts[-1:]]
        chains = [c for n, c in enumerate(chains) if n == 0 or len(c) < len(parts)]
    else:
        chains = [parts]
    shaped = " " + shape_text if shape_text else ""
    forms = [(c, shaped) for c in chains] + [(c, "") for c in chains]
    if len(parts) > 1:
        forms.append((parts[:1] + ["..."], ""))      # cut at the end if even this is too wide
    for chain, shape_part in forms:
        line = " > ".join(chain + last) + what + shape_part + end
        if len(line) <= width:
            return line
    return line[:max(0, width - len(end) - 3)] + "..." + end


class Display:
    """A transient status line on stderr, refreshed every `interval` seconds from a daemon thread
    watching `thread_id` (default: the calling thread), shown once the run has taken `delay`
    seconds.  `start()`, then `stop()` (also as a context manager).  `phase`: what the command is
    doing while no computation runs (set by the caller); `hold()`: a context in which the line is
    taken away, to print something else on stderr."""

    def __init__(self, thread_id: int | None = None, interval: float = 0.25, delay: float = 0.5, console=None):
        self.thread_id = thread_id if thread_id is not None else threading.get_ident()
        self.interval, self.delay = interval, delay
        self._console = console
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._live = None
        self._lock = threading.Lock()
        self.t0 = time.monotonic()
        self.updates = 0
        self.phase = "running"

    def start(self):
        self.t0 = time.monotonic()
        self._thread = threading.Thread(target=self._loop, name="hlo-progress", daemon=True)
        self._thread.start()
        return self

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def _loop(self):
        try:
            cache: dict = {}
            if self._stop.wait(self.delay):
                return
            while not self._stop.is_set():
                elapsed = time.monotonic() - self.t0
                smp = sample(self.thread_id, cache)
                self._show(smp, elapsed)
                if self._stop.wait(self.interval):
                    return
        except Exception:               # noqa: BLE001 -- the display must never stop the run
            return

    def _show(self, smp, elapsed):
        from rich.text import Text
        with self._lock:
            if self._stop.is_set():
                return
            if self._live is None:
                from rich.console import Console
                from rich.live import Live
                con = self._console or Console(stderr=True)
                self._live = Live(console=con, transient=True, auto_refresh=False,
                                  redirect_stdout=False, redirect_stderr=False)
                self._live.start()
                self._width = max(20, con.width - 1)
            self._live.update(Text(describe(smp, elapsed, self._width, self.phase), no_wrap=True,
                                   overflow="ellipsis"), refresh=True)
            self.updates += 1

    @contextlib.contextmanager
    def hold(self):
        """The line is taken away (and comes back at the next refresh) while the block runs."""
        with self._lock:
            self._take_away()
            yield

    def _take_away(self):
        if self._live is not None:
            try:
                self._live.stop()
            except Exception:           # noqa: BLE001
                pass
            self._live = None

    def stop(self):
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
        with self._lock:
            self._take_away()
