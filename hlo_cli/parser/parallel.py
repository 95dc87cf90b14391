"""Parsing (and checking) a large module on two cores.

The text is cut at a computation boundary; a forked child parses the second part (the tail) while
this process parses the first (the head).  Computations are defined before they are called, so the
head never calls the tail; the tail may call the head's computations (`known_computations`).  The
tail's text keeps the module's header and sections (the text before the first computation) and
the tail's own lines at their places, so every position in it is its position in the whole text.

`split_parse` runs a function on each part's module in its own process (the checker checks each
part there); `join` makes one module of the two parts when the tail's IR is shipped back (for the
cache, and for the custom calls `hlo check` asks about).  Anything unusual
(no clean boundary, an error in either part, no fork on this platform) gives None: the caller then
does the ordinary sequential work, so errors are always reported exactly as the sequential path
reports them.

    HLO_NO_PARALLEL=1                never use two processes
    HLO_PARALLEL=1                   use them whatever the machine's load (for measuring and tests)
    HLO_PARALLEL_MIN_BYTES=N         the size from which a text is worth it (PARALLEL_MIN_BYTES)
"""
from __future__ import annotations

import multiprocessing
import os
import pickle
import re
import signal
import sys

from ..ir.gcpause import NoGC

_COMP_NAME = re.compile(r"(?m)^(?:ENTRY[ \t]+)?%?([A-Za-z_][\w.\-]*)[ \t]*(?:\(|\{)")
_COMP_NAMES = re.compile(r"\n(?:ENTRY[ \t]+)?%?([A-Za-z_][\w.\-]*)[ \t]*[({]")     # in "\n" + text: faster
_BLANK = re.compile(r"\s*")

# Where the cut goes, as a fraction of the text's bytes, so that both processes finish together: the
# child also makes the tail's text and reads the signatures the tail calls, and a byte of the tail
# (the entry computation's) costs more to check; the head's process joins the findings afterwards
# (measured on the 72k-instruction benchmark dump, benchmarks/bench_parse.py: CPU seconds of each side)
HEAD_SHARE = 0.57


THREADED_RUNTIMES = ("jax", "jaxlib", "torch", "tensorflow")     # runtimes that start threads of their own


def min_bytes() -> int:
    """The size from which a text is parsed on two cores (HLO_PARALLEL_MIN_BYTES overrides
    PARALLEL_MIN_BYTES)."""
    from . import PARALLEL_MIN_BYTES
    try:
        return int(os.environ.get("HLO_PARALLEL_MIN_BYTES", PARALLEL_MIN_BYTES))
    except ValueError:
        return PARALLEL_MIN_BYTES


def wanted(text: str) -> bool:
    """Whether `text` is large enough, and the machine able, for the two-process path."""
    return len(text) >= min_bytes() and usable()


def usable() -> bool:
    """Fork is possible, and a core is free now: on a busy machine the child only competes with
    this process for the same core, and the work of cutting and joining makes the whole slower than
    the sequential path.  "Free" is read from the tasks runnable at this moment where the system
    says (`others_running`), else from the load average; the cores are those this process may use.
    Not in a process that runs threads of its own (JAX's runtime, loaded by a caller): a fork copies
    only the calling thread.  HLO_NO_PARALLEL=1 says never; HLO_PARALLEL=1 says always (when fork
    exists)."""
    if "fork" not in multiprocessing.get_all_start_methods() or os.environ.get("HLO_NO_PARALLEL"):
        return False
    if os.environ.get("HLO_PARALLEL"):
        return True
    cpus = cores()
    if cpus < 2 or any(m in sys.modules for m in THREADED_RUNTIMES):
        return False
    others = others_running()
    if others is not None:
        return others <= cpus - 2
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):       # no load average on this platform: assume a free core
        return True
    return load <= cpus - 1


def cores() -> int:
    """The processors this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def others_running() -> int | None:
    """How many other tasks are runnable at this moment (Linux's /proc/loadavg: its running count
    less this process; the least of three readings, a passing kernel thread aside), None where the
    system does not say.  The load average alone is a minute's memory: right after a few commands
    it says a quiet machine is busy."""
    try:
        least = None
        for _ in range(3):
            with open("/proc/loadavg", "rb") as f:
                running = int(f.read().split()[3].split(b"/")[0])
            least = running if least is None else min(least, running)
        return max(least - 1, 0)
    except (OSError, ValueError, IndexError):
        return None


def _starts_computation(text: str, at: int) -> bool:
    m = _BLANK.match(text, at)
    nxt = text[m.end():m.end() + 200]
    return bool(nxt) and not nxt[0].isspace() and _COMP_NAME.match(nxt) is not None


def _entry_line(text: str) -> int | None:
    """The offset of the first line starting with `ENTRY `, or None."""
    if text.startswith(("ENTRY ", "ENTRY\t")):
        return 0
    at = text.find("\nENTRY")
    while at >= 0:
        if text[at + 6:at + 7] in (" ", "\t"):
            return at + 1
        at = text.find("\nENTRY", at + 1)
    return None


def _cut(text: str, share: float = 0.5) -> int | None:
    """Offset where the tail starts: just after a `}` line that closes a computation, near `share` of
    the text, and not after the ENTRY computation's start (the tail holds the entry)."""
    mid = int(len(text) * share)
    entry = _entry_line(text)
    for pos in (text.find("\n}\n", mid), text.rfind("\n}\n", 0, mid)):
        if pos > 0:
            cut = pos + 3
            if entry is not None and entry < cut:
                continue
            if _starts_computation(text, cut):
                return cut
    if entry is not None:           # the last boundary before the entry
        pos = text.rfind("\n}\n", 0, entry)
        if pos > 0 and _starts_computation(text, pos + 3):
            return pos + 3
    return None


def split(text: str, share: float | None = None) -> tuple[str, str] | None:
    """(head, tail) texts, or None when the text has no usable cut.  The tail is the text before
    the first computation (header, sections), blank lines in place of the head's computations,
    then the tail's computations: each line at its line number in `text`."""
    at = _cuts(text, share)
    return None if at is None else (text[:at[1]], _tail(text, *at))


def _cuts(text: str, share: float | None) -> tuple[int, int] | None:
    """(where the first computation starts, where the tail starts), or None."""
    cut = _cut(text, HEAD_SHARE if share is None else share)
    if cut is None:
        return None
    first = _COMP_NAME.search(text)
    if first is None or first.start() >= cut:
        return None
    return first.start(), cut


def _tail(text: str, first: int, cut: int) -> str:
    return text[:first] + "\n" * text.count("\n", first, cut) + text[cut:]


def warm_up() -> None:
    """Load what every parse needs (the scanner's regular expressions, the builder's tables) in this
    process, before a fork, so that the child does not load it again (Lark is not loaded: a text
    the scanner reads whole does not need it)."""
    from .builder import build_module
    from .frontend import parse_raw, warm_up as warm_front_end
    warm_front_end()
    text = ("HloModule warm\n\n%f (p: f32[2]) -> f32[2] {\n  %p = f32[2]{0} parameter(0)\n"
            "  ROOT %n = f32[2]{0} negate(%p)\n}\n\nENTRY %e (a: f32[2]) -> f32[2] {\n"
            "  %a = f32[2]{0} parameter(0)\n  ROOT %c = f32[2]{0} fusion(%a), kind=kLoop, calls=%f\n}\n")
    build_module(parse_raw(text, "<warm-up>"), text, "<warm-up>")


def _parse_part(text: str, filename: str, known=()):
    from .builder import build_module
    from .frontend import parse_raw
    return build_module(parse_raw(text, filename), text, filename, known_computations=known)


def split_parse(text: str, filename: str, on_head, on_tail, share: float | None = None):
    """(head module, on_head(head module, head text), on_tail(tail module, tail text, head text)),
    with the tail parsed and `on_tail` run in a forked child (its value comes back pickled), or
    None when the text has no usable cut, either part does not parse, or the child fails."""
    at = _cuts(text, share)
    if at is None:
        return None
    read_fd, write_fd = os.pipe()
    try:
        pid = os.fork()
    except OSError:
        os.close(read_fd)
        os.close(write_fd)
        return None
    if pid == 0:                                                    # the child
        os.close(read_fd)
        _child(write_fd, text, at, filename, on_tail)
    os.close(write_fd)
    head_text = text[:at[1]]
    data = b""
    try:
        with NoGC(promote=True):    # (as parse() does: collections would traverse the IR being built)
            head = _parse_part(head_text, filename)
            head_value = on_head(head, head_text)
            with os.fdopen(read_fd, "rb", closefd=False) as f:
                data = f.read()
    except Exception:           # the sequential path reports it
        if os.environ.get("HLO_DEBUG"):
            raise
    finally:
        os.close(read_fd)
        if not data:            # (the child's work is of no use any more)
            os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    if not data:
        return None
    try:
        return head, head_value, pickle.loads(data)
    except Exception:
        return None


def _child(fd: int, text: str, at: tuple[int, int], filename: str, on_tail):
    """Parse the tail, run `on_tail`, write its pickled value (nothing on any failure), and leave at
    once (no clean-up of the parent's state: it is the parent's)."""
    data = b""
    try:
        import gc
        gc.disable()
        head_text, tail_text = text[:at[1]], _tail(text, *at)
        known = set(_COMP_NAMES.findall("\n" + head_text))
        tail = _parse_part(tail_text, filename, known)
        data = pickle.dumps(on_tail(tail, tail_text, head_text), pickle.HIGHEST_PROTOCOL)
    except BaseException:   # noqa: BLE001 -- the parent falls back to the sequential path
        if os.environ.get("HLO_DEBUG"):
            import traceback
            traceback.print_exc()
        data = b""
    try:
        view = memoryview(data)
        while view:
            n = os.write(fd, view)
            view = view[n:]
    finally:
        os._exit(0)


def _named_from(comps, text: str) -> int | None:
    """The index of the first computation named in `text` (those before it are inline ones)."""
    names = [c.name for c in comps]
    for m in _COMP_NAMES.finditer("\n" + text):
        return names.index(m.group(1)) if m.group(1) in names else None
    return None


def join(head, tail, text: str, share: float | None = None):
    """The whole module of its two parts (as split_parse cut `text` at `share`), or None when they do
    not make one (a computation defined in both, two entries)."""
    from dataclasses import replace
    comps = tail.computations
    # a part's inline computations (`to_apply={...}`) come before its named ones, and the whole
    # module's before all the named ones
    head_text, tail_text = split(text, share)
    h, t = _named_from(head.computations, head_text), _named_from(comps, tail_text)
    if h is None or t is None:
        return None
    all_comps = head.computations[:h] + comps[:t] + head.computations[h:] + comps[t:]
    entries = [c for c in all_comps if c.is_entry]
    if len(entries) > 1:
        return None
    entry = entries[0].name if entries else all_comps[-1].name
    if len({c.name for c in all_comps}) != len(all_comps):
        return None
    return replace(head, computations=all_comps, entry=entry)
