"""What a running module is doing, seen from outside: the progress display of `hlo run`.

The interpreter's runners publish where they are on the running thread's track
(hlo_cli/interpreter/hooks.py: the computations being run, the instruction each is at, the
iteration of the while loops, the computation being prepared); a daemon thread reads it a few
times a second (`sample`), so the run pays a few stores per computation and loop iteration and
nothing per instruction of compiled code; the multi-device walk (devices/spmd.py) publishes the
same way.  A run whose devices run in other processes (--cluster ray) hands the display a
function giving the Sample instead (`Display.source`, set through RunHooks.watch).

`sample(thread_id)` (hlo_cli/interpreter/watch.py) returns the nesting of computations being run,
outermost first (`Level`s), with the loop iterations and the devices; `describe` makes the status line; `Display` shows it on
a terminal (rich, transient) from its own thread.  Anything unexpected gives a shorter answer or
None, never an exception in the run.
"""
from __future__ import annotations

import contextlib
import threading
import time

from ..interpreter.watch import Level, Sample, sample

__all__ = ["Display", "Level", "Sample", "describe", "sample"]


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
        # where the run is when it runs in other processes (--cluster ray: the Ray actors' walks,
        # pipeline/ray_backend.py): a function giving a Sample, read instead of the watched thread
        self.source = None

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
                source = self.source
                smp = source() if source is not None else sample(self.thread_id, cache)
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
