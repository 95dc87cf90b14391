"""`hlo check`'s work: every module of a file checked (XLA's shape, layout and type rules, and the
custom-call targets hlo cannot run), one Result per module, a verdict cached per text and options.
Never raises for a bad file or module: one must not stop the others from being checked.
cli/check.py prints the Results."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import Diagnostic, ExitCode, HloError

OK, ERRORS, UNREADABLE, INTERNAL = "ok", "errors", "unreadable", "internal error"
# the worst status decides the exit code
_RANK = {OK: 0, ERRORS: 1, UNREADABLE: 2, INTERNAL: 3}
EXIT_CODES = {OK: ExitCode.OK, ERRORS: ExitCode.FAILURE, UNREADABLE: ExitCode.USAGE, INTERNAL: ExitCode.INTERNAL}
UNUSED = "W201"           # the checker's "the result is never used"


@dataclass
class Result:
    """What checking one module of a file (or an unusable file) found."""
    file: str
    label: str                       # its row in the summary table
    diags: list[Diagnostic]
    status: str
    instructions: int | None = None  # None: not parsed
    name: str | None = None
    index: int | None = None         # which module of its file (None: the file could not be used)
    line: int | None = None
    count: int = 1                   # modules in its file
    skipped_graphs: list = field(default_factory=list)   # the file's saved graphs not in HLO text


def check_file(path: str, use_cache: bool, layout_sensitive: bool, warnings: bool,
                devices: tuple[int | None, int | None] = (None, None), module: str | None = None) -> list[Result]:
    """One Result per module of PATH, or one for a file that cannot be used.  Never raises: one bad
    file or module must not stop the others from being checked."""
    from ..sources import read_modules
    if path != "-" and Path(path).is_dir():
        d = Diagnostic("no HLO module text in this directory (*.hlo, *.hlotxt, or *.txt files with a line "
                       "starting with 'HloModule')", path, code="E017")
        return [Result(path, path, [d], UNREADABLE)]
    try:
        fm = read_modules(path, use_cache)
    except HloError as e:
        return [Result(path, path, e.diagnostics or [Diagnostic(str(e), path, code="E014")], UNREADABLE)]
    out = []
    try:
        chosen = fm.modules if module is None else (fm.select(module),)
    except HloError as e:
        return [Result(path, path, e.diagnostics or [Diagnostic(str(e), path, code="E082")], UNREADABLE)]
    for src in chosen:
        r = check_source(src, use_cache, layout_sensitive, warnings, devices)
        r.skipped_graphs = list(fm.skipped) if src.index == 0 else []
        out.append(r)
    return out


def check_source(src, use_cache: bool, layout_sensitive: bool, warnings: bool,
                  devices: tuple[int | None, int | None] = (None, None)) -> Result:
    r = Result(src.file, src.label, [], ERRORS, name=src.name, index=src.index, line=src.line, count=src.count)
    # the verdict depends on the text, its file name and these options alone: a repeat reads it
    # from the cache, without the module
    what = json.dumps(["check", layout_sensitive, warnings, devices[0], devices[1]])
    if use_cache:
        from ..sources.cache import load_derived
        hit = load_derived(src.text, src.file, what)
        if isinstance(hit, dict) and hit.get("status") in (OK, ERRORS):
            try:
                r.diags = [Diagnostic(**d) for d in hit["diags"]]
                r.name, r.instructions, r.status = hit["name"], hit["instructions"], hit["status"]
                return r
            except (TypeError, KeyError):
                r.diags = []
    if src.module is None and _check_in_two(r, src, use_cache, layout_sensitive, warnings, devices):
        return _finish(r, src, use_cache, what)
    from ..checker import check_module
    from ..sources import parse_module
    try:
        module = parse_module(src, use_cache)
    except HloError as e:
        r.diags = e.diagnostics or [Diagnostic(str(e), src.file, code="E000")]
        return r
    except RecursionError:
        r.diags = [Diagnostic("the module is nested too deeply to process", src.file, code="E099")]
        return r
    r.name = module.name
    r.instructions = sum(len(c.instructions) for c in module.computations)
    try:
        r.diags = check_module(module, src.text, layout_sensitive=layout_sensitive, warnings=warnings,
                               replicas=devices[0], partitions=devices[1])
    except Exception as e:  # a bug of ours: say so for this module, check the others
        import os
        if os.environ.get("HLO_DEBUG"):
            raise
        r.diags = [Diagnostic(f"internal error while checking: {type(e).__name__}: {e} (this is a bug in hlo; "
                              "rerun with HLO_DEBUG=1 for a traceback and please report it)", src.file,
                              code="C199")]
        r.status = INTERNAL
        return r
    if warnings:
        r.diags += _unrunnable_warnings(module, src)
    return _finish(r, src, use_cache, what)


def _finish(r: Result, src, use_cache: bool, what: str) -> Result:
    """The status of a checked module, its verdict cached."""
    r.status = ERRORS if any(d.severity == "error" for d in r.diags) else OK
    if use_cache:
        from dataclasses import asdict

        from ..sources.cache import store_derived
        store_derived(src.text, src.file, what, {"name": r.name, "instructions": r.instructions, "status": r.status,
                                                 "diags": [asdict(d) for d in r.diags]})
    return r


def _check_in_two(r: Result, src, use_cache: bool, layout_sensitive: bool, warnings: bool, devices) -> bool:
    """A large module parsed and checked on two cores (checker/pieces.py), its findings into `r`;
    False when it is not large, the machine has no core free, the parse cache holds the module
    (loading it is faster), or the parts cannot stand for the whole (then the module is checked in
    one process, as any other).  With the cache on, the tail's IR comes back and the joined module
    goes to the parse cache, as a one-process check leaves it there (a later `hlo info` or `run`
    of the file loads it); with --no-cache it stays in the processes that checked its parts."""
    from ..parser import two_cores
    if not two_cores(src.text):
        return False
    if use_cache:
        from ..sources.cache import holds_module
        if holds_module(src.text, src.file):
            return False
    from ..checker.pieces import check_text
    try:
        found = check_text(src.text, src.file, layout_sensitive=layout_sensitive, warnings=warnings,
                           replicas=devices[0], partitions=devices[1],
                           whole_if="" if use_cache else "custom-call" if warnings else None)
    except Exception:       # noqa: BLE001 -- the one-process check reports what went wrong
        import os
        if os.environ.get("HLO_DEBUG"):
            raise
        return False
    if found is None:
        return False
    r.name, r.instructions, r.diags, module = found
    if module is not None and warnings:     # (which custom calls hlo cannot run is asked of the whole module)
        r.diags += _unrunnable_warnings(module, src)
    if module is not None and use_cache:
        from ..sources.cache import store_module
        store_module(src.text, src.file, module)
    return True


UNRUNNABLE = "W300"       # a custom-call target hlo cannot run: `hlo run` refuses the module (exit 7)


def _unrunnable_warnings(module, src) -> list[Diagnostic]:
    """A warning per distinct custom-call target hlo cannot run (asked of the custom-call registry),
    at its first call, with the number of calls: the module is valid, but `hlo run` will refuse it."""
    if not any(i.opcode == "custom-call" for c in module.computations for i in c.instructions):
        return []       # (asking the registry loads the interpreter: most of a cold check of a small module)
    try:
        from ..pipeline.support import describe_use, unrunnable
        bad = unrunnable(module)
    except Exception as e:  # noqa: BLE001 -- a bug of ours must not hide the checker's findings
        import os
        if os.environ.get("HLO_DEBUG"):
            raise
        return [Diagnostic(f"internal error while asking which custom calls run: {type(e).__name__}: {e}",
                           src.file, severity="warning", code="C199")]
    if not bad:
        return []
    from ..checker.positions import SourceIndex
    index = SourceIndex(src.text)
    out = []
    for u in bad:
        i = u.first
        more = f" ({u.count} calls)" if u.count > 1 else ""
        out.append(Diagnostic(f"%{i.name}: {describe_use(u)}{more}, which hlo cannot run: `hlo run` refuses this "
                              f"module (exit 7; `hlo info` lists its custom calls)", i.loc.file, i.loc.line,
                              i.loc.column, "warning", UNRUNNABLE, i.name,
                              index.line_text(i.loc.line) if i.loc.line else None))
    return out


def worst_status(statuses) -> str:
    return max(statuses, key=_RANK.__getitem__, default=OK)
