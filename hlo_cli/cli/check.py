"""`hlo check`: XLA's shape, layout and type rules for every instruction, with located diagnostics."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from ..errors import Diagnostic
from ..pipeline.core import diagnostic_dict
from ..pipeline.prepare import format_diagnostic
from ..tools.check import ERRORS, EXIT_CODES, INTERNAL, OK, UNREADABLE, UNUSED, Result, check_file, worst_status
from .common import report_errors, resolve_stage, stage_option


@click.command("check")
@click.argument("files", nargs=-1, required=True)
@click.option("--layout-sensitive", is_flag=True,
              help="Compare layouts too: entry_computation_layout, and instructions that cannot change "
                   "layout (elementwise ops, slices, tuples, calls...) must keep their operands' layouts.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True,
              help="json: one document on stdout for CI: an entry per module of every file (status, "
                   "counts, diagnostics with file, line, column, severity, code, instruction, message), "
                   "clean ones included, and the files skipped.")
@click.option("--no-warnings", is_flag=True, help="Report errors only.")
@click.option("--verbose", "-v", is_flag=True,
              help="List every instruction whose result is never used (by default one line counts them) "
                   "and the files and saved graphs that were skipped.")
@click.option("--replicas", type=click.IntRange(min=1), default=None, metavar="N",
              help="Check against N replicas instead of the header's replica_count (replica groups, "
                   "source-target pairs, collectives' per-device shapes).")
@click.option("--partitions", type=click.IntRange(min=1), default=None, metavar="M",
              help="Check against M partitions instead of the header's num_partitions (also the device "
                   "count shardings are checked against).")
@click.option("--module", "-m", "module_choice", metavar="N|NAME", default=None,
              help="Check one module: of a file that holds several, its 0-based number or name; of an XLA dump "
                   "directory, its name or number NNNN (every stage of it, or the one --stage names).")
@stage_option
@click.option("--no-cache", is_flag=True, help="Do not read or write the parse cache.")
@report_errors
def check(files, layout_sensitive, fmt, no_warnings, verbose, replicas, partitions, module_choice, stage, no_cache):
    """Check FILES (HLO files, directories of dumps, or '-' for stdin) against XLA's shape, layout and
    type rules, and report every problem as FILE:LINE:COL with the offending line and a caret.

    A file may hold several modules (an XLA lit test with '// -----' between modules, a PyTorch/XLA
    XLA_SAVE_TENSORS_FILE): each is checked.  A directory stands for its *.hlo and *.hlotxt files and
    the *.txt files that hold HLO module text (a line starting with 'HloModule'); XLA's other dump
    files (buffer assignments, live ranges, memory reports...) are skipped.  Several modules are
    summarized in a table.

    Multi-device modules are checked against their devices: replica_count x num_partitions from the
    header (--replicas / --partitions override them): every replica group names each id of its mode
    once, groups have equal sizes, source-target pairs stay in range, collectives' per-device shapes
    fit their group sizes, and shardings fit the shape and the device count.

    In an XLA dump directory, --module NAME checks every stage of one module and --stage one stage
    (`hlo info DIR` lists them).

    A custom call hlo cannot run (its target is not in hlo's custom-call registry: compiled device code,
    an unknown kernel) is a warning (W300), one per target at its first call: the module is valid,
    but `hlo run` will refuse it (exit 7).

    Exit codes: 0 no errors (warnings included); 1 a module has errors; 2 usage error or unreadable
    input.
    """
    from ..sources import expand
    files, file_module = _dump_stages(files, module_choice, stage)
    paths, skipped = expand(files)
    results = [r for p in paths
               for r in check_file(p, not no_cache, layout_sensitive, not no_warnings, (replicas, partitions),
                                    file_module)]
    worst = worst_status(r.status for r in results)
    if fmt == "json":
        click.echo(json.dumps(_json(results, skipped, worst), indent=2))
    else:
        for r in results:
            for d in _shown(r, verbose):
                click.echo(format_diagnostic(d), err=True)
        if verbose:
            for s in skipped:
                click.echo(f"{s.path}: skipped: {s.reason}", err=True)
            for r in results:
                for g in r.skipped_graphs:
                    click.echo(f"{r.file}:{g.line}: skipped: a saved graph in {g.kind}", err=True)
        directories = any(p != "-" and Path(p).is_dir() for p in files)
        if len(results) > 1 or directories:
            _summary(results, skipped, verbose)
        elif results and results[0].status == OK:
            r = results[0]
            n = sum(1 for d in r.diags if d.severity == "warning")
            click.echo(f"{r.label}: ok ({r.instructions} instructions checked"
                       + (f", {n} warning{'s' if n != 1 else ''}" if n else "") + ")")
    if worst != OK:
        sys.exit(EXIT_CODES[worst])


def _dump_stages(files, module_choice, stage):
    """FILES with --module/--stage applied to XLA dump directories: a stage's file, or every stage
    of one module.  Returns (files, the --module choice left for plain files)."""
    if module_choice is None and stage is None:
        return files, None
    from ..sources.dumpdir import is_dump_dir, read_dump_dir
    out = []
    for f in files:
        if stage is not None:
            out.append(resolve_stage(f, module_choice, stage)[0])
        elif f != "-" and Path(f).is_dir() and is_dump_dir(f):
            out.extend(s.path for s in read_dump_dir(f).module(module_choice).stages)
        else:
            out.append(f)
    return out, (None if stage is not None else module_choice)


def _shown(r: Result, verbose: bool) -> list[Diagnostic]:
    """The diagnostics to print: without --verbose, a module's unused results are one line."""
    unused = [d for d in r.diags if d.code == UNUSED]
    if verbose or len(unused) < 2:
        return r.diags
    n = len(unused)
    where = {"file": r.file}
    if r.count > 1:
        where.update(line=r.line, column=1)
    note = Diagnostic(f"{n} instructions' results are never used; --verbose lists them", severity="warning",
                      code=UNUSED, **where)
    out, placed = [], False
    for d in r.diags:
        if d.code != UNUSED:
            out.append(d)
        elif not placed:
            out.append(note)
            placed = True
    return out


def _json(results: list[Result], skipped, worst: str) -> dict:
    entries = []
    for r in results:
        entries.append({
            "file": r.file, "module": r.name, "index": r.index, "line": r.line, "status": r.status,
            "errors": sum(1 for d in r.diags if d.severity == "error"),
            "warnings": sum(1 for d in r.diags if d.severity == "warning"),
            "instructions": r.instructions,
            "diagnostics": [dict(diagnostic_dict(d), file=d.file or r.file) for d in r.diags]})
    skipped_out = [{"file": s.path, "line": None, "reason": s.reason, "kind": s.kind} for s in skipped]
    skipped_out += [{"file": r.file, "line": g.line, "reason": f"a saved graph in {g.kind}"}
                    for r in results for g in r.skipped_graphs]
    counts = _counts(results)
    return {"status": worst, "exit_code": int(EXIT_CODES[worst]),
            "summary": {"files": len({r.file for r in results}), "modules": sum(1 for r in results if r.index is not None),
                        "ok": counts[OK], "with_errors": counts[ERRORS], "unreadable": counts[UNREADABLE],
                        "internal_errors": counts[INTERNAL], "skipped": len(skipped_out)},
            "files": entries, "skipped": skipped_out}


def _counts(results) -> dict:
    counts = {OK: 0, ERRORS: 0, UNREADABLE: 0, INTERNAL: 0}
    for r in results:
        counts[r.status] += 1
    return counts


_PLURAL = {"report": "reports", "config": "configs", "compiler output": "compiler outputs", "graph": "graphs",
           "snapshot": "snapshots", "compile input": "compile inputs", "compressed module": "compressed modules",
           "other": "others"}


def _kinds(skipped) -> str:
    """' (24 configs, 9 reports, ...)': the skipped files by kind, when XLA's dump files are among them."""
    counts: dict = {}
    for s in skipped:
        counts[s.kind] = counts.get(s.kind, 0) + 1
    if set(counts) <= {"other"}:
        return ""
    parts = [f"{n} {_PLURAL.get(k, k) if n != 1 else k}" for k, n in sorted(counts.items(), key=lambda kv: -kv[1])]
    return " (" + ", ".join(parts) + ")"


def _summary(results: list[Result], skipped, verbose: bool):
    from rich.table import Table
    from rich.text import Text
    t = Table(title="hlo check", title_justify="left", show_edge=False)
    for col in ("file", "status", "errors", "warnings", "instructions"):
        t.add_column(col, justify="right" if col in ("errors", "warnings", "instructions") else "left",
                     no_wrap=col == "file", overflow="fold")
    for r in results:
        e = sum(1 for d in r.diags if d.severity == "error")
        w = sum(1 for d in r.diags if d.severity == "warning")
        style = {OK: "green", ERRORS: "red", UNREADABLE: "yellow", INTERNAL: "magenta"}[r.status]
        t.add_row(Text(r.label), Text(r.status, style=style), str(e), str(w),
                  str(r.instructions) if r.instructions is not None else "-")
    from .common import stdout_console
    # keep whole paths on one line when the output is a file or a pipe
    console = stdout_console(max(100, max((len(r.label) for r in results), default=0) + 50))
    console.print(t)
    counts = _counts(results)
    parts = [f"{counts[OK]} ok", f"{counts[ERRORS]} with errors"]
    if counts[UNREADABLE]:
        parts.append(f"{counts[UNREADABLE]} unreadable")
    if counts[INTERNAL]:
        parts.append(f"{counts[INTERNAL]} internal errors")
    n_files = len({r.file for r in results})
    if len(results) == n_files:
        head = f"{n_files} file{'s' if n_files != 1 else ''}: "
    else:
        head = f"{len(results)} modules in {n_files} file{'s' if n_files != 1 else ''}: "
    line = head + ", ".join(parts)
    graphs = sum(len(r.skipped_graphs) for r in results)
    later = "" if verbose else " (--verbose lists them)"
    if skipped:
        line += f"; {len(skipped)} other file{'s' if len(skipped) != 1 else ''} skipped{_kinds(skipped)}{later}"
    if graphs:
        line += f"; {graphs} saved graph{'s' if graphs != 1 else ''} not in HLO text skipped{later}"
    console.print(Text(line), soft_wrap=True)
