"""Parsing a large module on two cores.

The text is cut at a computation boundary near its middle; a forked worker parses the second
part while this process parses the first, and the computations are joined.  Anything unusual
(no clean boundary, an error in either part, no fork on this platform) falls back to the ordinary
sequential parse, so errors are always reported exactly as the sequential parser reports them.
"""
from __future__ import annotations

import multiprocessing
import os
import re

_COMP_NAME = re.compile(r"(?m)^(?:ENTRY[ \t]+)?%?([A-Za-z_][\w.\-]*)[ \t]*(?:\(|\{)")


def _cut(text: str) -> int | None:
    """Offset where the second half starts: just after a `}` line that closes a computation."""
    mid = len(text) // 2
    for pos in (text.find("\n}\n", mid), text.rfind("\n}\n", 0, mid)):
        if pos > 0:
            cut = pos + 3
            # the next non-blank line must start a computation at column 0
            m = re.compile(r"\s*").match(text, cut)
            nxt = text[m.end():m.end() + 200]
            if nxt and not nxt[0].isspace() and _COMP_NAME.match(nxt):
                return cut
    return None


def _worker(args):
    text, filename, known = args
    from .builder import build_module
    from .frontend import parse_raw
    import gc
    gc.disable()
    try:
        raw = parse_raw(text, filename)
        module = build_module(raw, text, filename, known_computations=known)
        from ..ir.serial import serialize_module
        return serialize_module(module)
    except Exception:  # the sequential parse will report it properly
        return b""


def usable() -> bool:
    """Fork is possible, and a core is free: on a busy machine the worker only competes with this
    process for the same core, and shipping its half back (serializing, then decoding it here) makes
    the parse slower than a sequential one."""
    cpus = os.cpu_count() or 1
    if cpus < 2 or "fork" not in multiprocessing.get_all_start_methods() or os.environ.get("HLO_NO_PARALLEL"):
        return False
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):       # no load average on this platform: assume a free core
        return True
    return load <= cpus - 1


def parse_parallel(text: str, filename: str):
    """The Module, or None when the text should be parsed sequentially."""
    from dataclasses import replace

    from .builder import build_module
    from .frontend import parse_raw
    cut = _cut(text)
    if cut is None:
        return None
    first, second = text[:cut], text[cut:]
    # computations must be defined before they are referenced: the second part may call those of the
    # first, never the other way round
    names = set(_COMP_NAME.findall(first))
    # keep line numbers: the second part starts on the same line it had in the whole text
    second = "\n" * first.count("\n") + second
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(1) as pool:
        pending = pool.apply_async(_worker, ((second, filename, names),))
        try:
            raw = parse_raw(first, filename)
            head = build_module(raw, first, filename)
        except Exception:
            return None
        data = pending.get()
    if not data:
        return None
    from ..ir.serial import deserialize_module
    comps = deserialize_module(data).computations
    all_comps = head.computations + comps
    entries = [c for c in all_comps if c.is_entry]
    if len(entries) > 1:
        return None
    entry = entries[0].name if entries else all_comps[-1].name
    if len({c.name for c in all_comps}) != len(all_comps):
        return None
    return replace(head, computations=all_comps, entry=entry)
