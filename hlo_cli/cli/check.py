"""`hlo check`: XLA's shape, layout and type rules for every instruction, with located diagnostics."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from ..errors import Diagnostic, ExitCode, HloError
from .common import report_errors

_SUFFIXES = (".hlo", ".txt", ".hlotxt")

OK, ERRORS, UNREADABLE, INTERNAL = "ok", "errors", "unreadable", "internal error"


def _expand(paths) -> list[str]:
    """Files as given; a directory stands for the HLO files under it (sorted, recursively)."""
    out = []
    for p in paths:
        if p != "-" and Path(p).is_dir():
            found = sorted(str(f) for f in Path(p).rglob("*") if f.is_file() and f.suffix in _SUFFIXES
                           and not any(part.startswith(".") for part in f.relative_to(p).parts))
            out.extend(found)
            if not found:
                out.append(p)     # reported as "no HLO files in directory"
        else:
            out.append(p)
    return out


def _check_one(path: str, use_cache: bool, layout_sensitive: bool, warnings: bool):
    """(diagnostics, status, module or None) for one file; status is one of OK, ERRORS, UNREADABLE,
    INTERNAL.  Never raises: one bad file must not stop the others from being checked."""
    from ..checker import check_module
    from ..parser import parse, read_source
    if path != "-" and Path(path).is_dir():
        d = Diagnostic("no HLO files (*.hlo, *.txt, *.hlotxt) in this directory", path, code="E017")
        return [d], UNREADABLE, None
    try:
        text, name = read_source(path)
    except HloError as e:
        return e.diagnostics or [Diagnostic(str(e), path, code="E014")], UNREADABLE, None
    try:
        if use_cache:
            from ..cache import cached_parse
            module = cached_parse(text, name)
        else:
            module = parse(text, name)
    except HloError as e:
        return e.diagnostics or [Diagnostic(str(e), name, code="E000")], ERRORS, None
    except RecursionError:
        return [Diagnostic("the module is nested too deeply to process", name, code="E099")], ERRORS, None
    try:
        diags = check_module(module, text, layout_sensitive=layout_sensitive, warnings=warnings)
    except Exception as e:  # a bug of ours: say so for this file, check the others
        import os
        if os.environ.get("HLO_DEBUG"):
            raise
        return [Diagnostic(f"internal error while checking: {type(e).__name__}: {e} (this is a bug in hlo; "
                           "rerun with HLO_DEBUG=1 for a traceback and please report it)", name, code="C199")], \
            INTERNAL, module
    status = ERRORS if any(d.severity == "error" for d in diags) else OK
    return diags, status, module


@click.command("check")
@click.argument("files", nargs=-1, required=True)
@click.option("--layout-sensitive", is_flag=True,
              help="Compare layouts too: entry_computation_layout, and instructions that cannot change "
                   "layout (elementwise ops, slices, tuples, calls...) must keep their operands' layouts.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True,
              help="json: one object per diagnostic (file, line, column, severity, code, instruction, "
                   "message) on stdout, for CI.")
@click.option("--no-warnings", is_flag=True, help="Report errors only.")
@click.option("--no-cache", is_flag=True, help="Do not read or write the parse cache.")
@report_errors
def check(files, layout_sensitive, fmt, no_warnings, no_cache):
    """Check FILES (HLO files, directories of dumps, or '-' for stdin) against XLA's shape, layout and
    type rules, and report every problem as FILE:LINE:COL with the offending line and a caret.
    Several files are summarized in a table.

    Exit codes: 0 no errors; 1 a module has errors; 2 usage error or unreadable input.
    """
    results = []
    for path in _expand(files):
        diags, status, module = _check_one(path, not no_cache, layout_sensitive, not no_warnings)
        results.append((path, diags, status, module))
    if fmt == "json":
        out = []
        for path, diags, _status, _ in results:
            for d in diags:
                out.append({"file": d.file or path, "line": d.line, "column": d.column, "severity": d.severity,
                            "code": d.code, "instruction": d.instruction, "message": d.message})
        click.echo(json.dumps(out, indent=2))
    else:
        for _path, diags, _status, _ in results:
            for d in diags:
                click.echo(_format(d), err=True)
        if len(results) > 1:
            _summary(results)
        elif results and results[0][2] == OK:
            path, diags, _, module = results[0]
            n = sum(1 for d in diags if d.severity == "warning")
            count = sum(len(c.instructions) for c in module.computations)
            click.echo(f"{path}: ok ({count} instructions checked" + (f", {n} warning{'s' if n != 1 else ''}"
                                                                    if n else "") + ")")
    statuses = {r[2] for r in results}
    if INTERNAL in statuses:
        sys.exit(ExitCode.INTERNAL)
    if UNREADABLE in statuses:
        sys.exit(ExitCode.USAGE)
    if ERRORS in statuses:
        sys.exit(ExitCode.FAILURE)


def _format(d: Diagnostic) -> str:
    """FILE:LINE:COL: severity: first line of the message, the source line with a caret, then the
    message's notes (its further lines)."""
    head, sep, notes = d.message.partition("\n")
    if not sep:
        return d.format()
    from dataclasses import replace
    return replace(d, message=head).format() + "\n" + notes


def _summary(results):
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text
    t = Table(title="hlo check", title_justify="left", show_edge=False)
    for col in ("file", "status", "errors", "warnings", "instructions"):
        t.add_column(col, justify="right" if col in ("errors", "warnings", "instructions") else "left",
                     no_wrap=col == "file", overflow="fold")
    counts = {OK: 0, ERRORS: 0, UNREADABLE: 0, INTERNAL: 0}
    for path, diags, status, module in results:
        e = sum(1 for d in diags if d.severity == "error")
        w = sum(1 for d in diags if d.severity == "warning")
        n = sum(len(c.instructions) for c in module.computations) if module is not None else 0
        counts[status] += 1
        style = {OK: "green", ERRORS: "red", UNREADABLE: "yellow", INTERNAL: "magenta"}[status]
        t.add_row(Text(path), Text(status, style=style), str(e), str(w), str(n) if module is not None else "-")
    console = Console(highlight=False)
    if not console.is_terminal:
        # keep whole paths on one line when the output is a file or a pipe
        console = Console(highlight=False, width=max(100, max(len(r[0]) for r in results) + 50))
    console.print(t)
    parts = [f"{counts[OK]} ok", f"{counts[ERRORS]} with errors"]
    if counts[UNREADABLE]:
        parts.append(f"{counts[UNREADABLE]} unreadable")
    if counts[INTERNAL]:
        parts.append(f"{counts[INTERNAL]} internal errors")
    console.print(Text(f"{len(results)} files: " + ", ".join(parts)))
