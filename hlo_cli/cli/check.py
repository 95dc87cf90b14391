"""`hlo check`: XLA's shape, layout and type rules for every instruction, with located diagnostics."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from ..errors import Diagnostic, ExitCode, HloError
from .common import report_errors

_SUFFIXES = (".hlo", ".txt", ".hlotxt")


def _expand(paths) -> list[str]:
    out = []
    for p in paths:
        if p != "-" and Path(p).is_dir():
            found = sorted(str(f) for f in Path(p).rglob("*") if f.is_file() and f.suffix in _SUFFIXES
                           and not f.name.startswith("."))
            out.extend(found)
            if not found:
                out.append(p)     # reported as "no HLO files in directory"
        else:
            out.append(p)
    return out


def _check_one(path: str, use_cache: bool, layout_sensitive: bool, warnings: bool):
    """(diagnostics, status) with status one of ok / errors / unreadable."""
    from ..checker import check_module
    from ..parser import parse, read_source
    if path != "-" and Path(path).is_dir():
        d = Diagnostic("no HLO files (*.hlo, *.txt) in this directory", path, code="E017")
        return [d], "unreadable", None
    try:
        text, name = read_source(path)
    except HloError as e:
        return e.diagnostics or [Diagnostic(str(e), path)], "unreadable", None
    try:
        if use_cache:
            from ..cache import cached_parse
            module = cached_parse(text, name)
        else:
            module = parse(text, name)
    except HloError as e:
        return e.diagnostics, "errors", None
    diags = check_module(module, text, layout_sensitive=layout_sensitive, warnings=warnings)
    status = "errors" if any(d.severity == "error" for d in diags) else "ok"
    return diags, status, module


@click.command("check")
@click.argument("files", nargs=-1, required=True)
@click.option("--layout-sensitive", is_flag=True, help="Compare layouts too, not only dimensions and types.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option("--no-warnings", is_flag=True, help="Report errors only.")
@click.option("--no-cache", is_flag=True, help="Do not read or write the parse cache.")
@report_errors
def check(files, layout_sensitive, fmt, no_warnings, no_cache):
    """Check FILES (HLO files, directories of dumps, or '-' for stdin) against XLA's shape, layout and
    type rules, and report every problem as FILE:LINE:COL.

    Exit codes: 0 no errors; 1 a module has errors; 2 usage error or unreadable input.
    """
    results = []
    for path in _expand(files):
        diags, status, module = _check_one(path, not no_cache, layout_sensitive, not no_warnings)
        results.append((path, diags, status, module))
    if fmt == "json":
        out = []
        for path, diags, status, _ in results:
            for d in diags:
                out.append({"file": d.file or path, "line": d.line, "column": d.column, "severity": d.severity,
                            "code": d.code, "instruction": d.instruction, "message": d.message})
        click.echo(json.dumps(out, indent=2))
    else:
        for path, diags, status, _ in results:
            for d in diags:
                click.echo(d.format(), err=d.severity == "error" or status == "unreadable")
        if len(results) > 1:
            _summary(results)
        elif results and results[0][2] == "ok":
            path, diags, _, module = results[0]
            n = sum(1 for d in diags if d.severity == "warning")
            count = sum(len(c.instructions) for c in module.computations)
            click.echo(f"{path}: ok ({count} instructions checked" + (f", {n} warning{'s' if n != 1 else ''}"
                                                                    if n else "") + ")")
    if any(r[2] == "unreadable" for r in results):
        sys.exit(ExitCode.USAGE)
    if any(r[2] == "errors" for r in results):
        sys.exit(ExitCode.FAILURE)


def _summary(results):
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text
    t = Table(title="hlo check", title_justify="left", show_edge=False)
    for col in ("file", "status", "errors", "warnings", "instructions"):
        t.add_column(col, justify="right" if col in ("errors", "warnings", "instructions") else "left")
    for path, diags, status, module in results:
        e = sum(1 for d in diags if d.severity == "error")
        w = sum(1 for d in diags if d.severity == "warning")
        n = sum(len(c.instructions) for c in module.computations) if module is not None else 0
        t.add_row(Text(path), Text(status), str(e), str(w), str(n))
    Console(highlight=False).print(t)
