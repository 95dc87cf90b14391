"""`hlo info`: a summary of a module."""
from __future__ import annotations

import json
import sys

import click

from ..tools.info import cached_summary, dump_modules, error_entry, module_entries, stage_rows
from .common import module_option, no_cache_option, report_errors, resolve_stage, stage_option


@click.command("info")
@click.argument("file", type=str)
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True,
              help="Output format.")
@module_option
@stage_option
@no_cache_option
@report_errors
def info(file, fmt, module_choice, stage, no_cache):
    """Summarize FILE ('-' for standard input): module name, entry signature, computations and
    instructions counted, the inputs' total size, the memory a run is estimated to need (the peak
    of live values along the interpreter's schedule, parameters included, where it is reached, the
    largest single value; what `hlo run --max-memory` compares), an opcode histogram, and the
    source files named by its stack frames.
    A multi-device module also gets its devices (replicas x partitions, Shardy meshes), its
    collectives with their group sizes, and its parameters' shardings with global and per-device
    shapes.

    A file that holds several modules (an XLA lit test with '// -----' between modules, a
    PyTorch/XLA XLA_SAVE_TENSORS_FILE) is listed module by module; --module N|NAME summarizes one.

    An XLA dump directory (--xla_dump_to=DIR, with --xla_dump_hlo_pass_re=.* a dump after every pass)
    is listed module by module; --module NAME|NNNN lists one module's stages in pass order (which
    changed the text, and what --stage takes to pick each); --stage summarizes that stage.
    """
    from ..errors import HloError
    try:
        if stage is None and _dump_listing(file, fmt, module_choice):
            return
        file, module_choice = resolve_stage(file, module_choice, stage)
        _info(file, fmt, module_choice, no_cache)
    except HloError as e:
        if fmt == "json":
            click.echo(json.dumps(error_entry("<stdin>" if file == "-" else file, None, e), indent=2))
        raise


def _info(file, fmt, module_choice, no_cache):
    from ..sources import read_modules
    fm = read_modules(file, not no_cache)
    if len(fm.modules) > 1 and module_choice is None:
        return _list_modules(fm, fmt, not no_cache)
    src = fm.select(module_choice)
    size = fm.size if len(fm.modules) == 1 else len(src.own_text.encode("utf-8", "replace"))
    s = cached_summary(src, size, not no_cache)
    if len(fm.modules) > 1:
        s.update(index=src.index, line=src.line)
    if fmt == "json":
        click.echo(json.dumps(s, indent=2))
        return
    _print_summary(s)


def _console():
    from .common import stdout_console
    return stdout_console(160)      # a file or a pipe: fewer folded rows


def _print_summary(s: dict):
    from rich.table import Table
    from rich.text import Text
    con = _console()
    head = Table.grid(padding=(0, 2))
    head.add_column(style="bold", no_wrap=True)
    head.add_column()
    head.add_row("module", Text(s["module"]))
    where = f"{s['file']} ({s['bytes']:,} bytes)"
    if "index" in s:
        where = f"{s['file']}, module #{s['index']} at line {s['line']} ({s['bytes']:,} bytes)"
    head.add_row("file", Text(where))
    head.add_row("entry", Text(f"{s['entry']} {s['signature']}"))
    head.add_row("computations", Text(f"{s['computations']} ({s['fusion_computations']} fused)"))
    head.add_row("instructions", Text(f"{s['instructions']:,}"))
    _memory_rows(head, s)
    con.print(head)
    if s["header"]:
        attrs = Table(title="module attributes", title_justify="left", show_edge=False, show_header=False)
        attrs.add_column(no_wrap=True)
        attrs.add_column()
        for k, v in s["header"].items():
            attrs.add_row(Text(k), Text(v if len(v) <= 200 else v[:197] + "..."))
        con.print(attrs)
    ops = Table(title="opcodes", title_justify="left", show_edge=False)
    ops.add_column("opcode")
    ops.add_column("count", justify="right")
    for name, n in s["opcodes"].items():
        ops.add_row(Text(name), str(n))
    con.print(ops)
    if s.get("custom_calls"):
        cc = Table(title="custom calls", title_justify="left", show_edge=False)
        for col in ("target", "calls", "runs", "what", "first call"):
            cc.add_column(col, justify="right" if col == "calls" else "left")
        for e in s["custom_calls"]:
            cc.add_row(Text(e["target"] or "(empty)"), str(e["count"]),
                       Text("yes" if e["runnable"] else "no", style="green" if e["runnable"] else "red"),
                       Text(e["what"] or ("" if e["runnable"] else "not a target hlo knows")),
                       Text(f"%{e['instruction']} line {e['first'].rsplit(':', 2)[-2]}"))
        con.print(cc)
        bad = sum(1 for e in s["custom_calls"] if not e["runnable"])
        if bad:
            con.print(Text(f"hlo cannot run {bad} of these targets: `hlo run` refuses the "
                           f"module (exit 7) and says what to do instead"))
    if "devices" in s:
        _print_devices(con, s["devices"])
    if s["sources"]:
        src = Table(title="source files", title_justify="left", show_edge=False)
        src.add_column("file")
        src.add_column("instructions", justify="right")
        for e in s["sources"]:
            src.add_row(Text(e["file"]), str(e["instructions"]))
        con.print(src)


def _memory_rows(head, s: dict):
    """The input size and the memory estimate, as rows of the summary's grid."""
    from rich.text import Text

    from ..ir.units import human
    n = len(s["parameters"])
    m = s.get("memory")
    each = " on each device" if m is not None and m["devices"] > 1 else ""
    head.add_row("inputs", Text(f"{human(s['inputs_bytes'])} in {n} parameter{'s' * (n != 1)}{each}"))
    if m is None:
        return
    per = f" x {m['devices']} devices" if m["devices"] > 1 else ""

    def at(w):
        if not w:
            return ""
        where = f"line {w['line']}" if w["line"] else w["file"]
        return f" at {w['instruction']} ({w['opcode']} {w['shape']} in {w['computation']}, {where})"
    head.add_row("memory", Text(f"{human(m['total_bytes'])}: a run's estimated peak (what hlo run "
                                f"--max-memory compares)"))
    head.add_row("  peak live", Text(f"{human(m['peak_live_bytes'])}{' per device' + per if per else ''}"
                                     f"{at(m['peak_at'])}"))
    if m["largest_at"]:
        head.add_row("  largest value", Text(f"{human(m['largest_bytes'])}{at(m['largest_at'])}"))
    if m["temporaries_bytes"]:
        head.add_row("  temporaries", Text(f"{human(m['temporaries_bytes'])} (one instruction's scratch, at most)"))
    if m["constants_bytes"]:
        head.add_row("  constants", Text(human(m["constants_bytes"])))
    for note in m["notes"]:
        head.add_row("  note", Text(note))


def _print_devices(con, d: dict):
    from rich.table import Table
    from rich.text import Text
    head = Table.grid(padding=(0, 2))
    head.add_column(style="bold", no_wrap=True)
    head.add_column()
    head.add_row("devices", Text(f"{d['count']} = {d['replicas']} replica{'s' * (d['replicas'] != 1)} x "
                                 f"{d['partitions']} partition{'s' * (d['partitions'] != 1)} ({d['from']})"))
    for m in d["meshes"]:
        axes = ", ".join(f"{a}={n}" for a, n in m["axes"].items())
        head.add_row("mesh", Text(f"@{m['name']} [{axes}] ({m['size']} devices)"))
    con.print(head)
    if d["collectives"]:
        t = Table(title="collectives", title_justify="left", show_edge=False)
        t.add_column("opcode")
        t.add_column("count", justify="right")
        t.add_column("group sizes (devices)", justify="right")
        for k in d["collectives"]:
            t.add_row(Text(k["opcode"]), str(k["count"]), ", ".join(map(str, k["group_sizes"])) or "-")
        con.print(t)
    if d["parameters"]:
        t = Table(title="parameter shardings", title_justify="left", show_edge=False)
        for col in ("#", "parameter", "sharding", "global shape", "per-device shape"):
            t.add_column(col, justify="right" if col == "#" else "left")
        for p in d["parameters"]:
            t.add_row(str(p["number"]), Text(p["name"]), Text(p["sharding"]), Text(p.get("global_shape", "-")),
                      Text(p.get("per_device_shape", "-")))
        con.print(t)


def _list_modules(fm, fmt: str, use_cache: bool):
    """Every module of a file that holds several: a row each (a JSON entry each); a module that does
    not parse is an error row, its diagnostics on stderr, exit 1."""
    from ..errors import ExitCode
    entries, failed = module_entries(fm, use_cache)
    skipped = [{"line": g.line, "kind": g.kind} for g in fm.skipped]
    if fmt == "json":
        click.echo(json.dumps({"file": fm.file, "bytes": fm.size, "layout": fm.layout, "modules": entries,
                               "skipped_graphs": skipped}, indent=2))
    else:
        _print_listing(fm, entries, skipped)
    for e in failed:
        click.echo(e.format(), err=True)
    if failed:
        sys.exit(max(int(e.exit_code) for e in failed) or ExitCode.FAILURE)


_LAYOUTS = {"lit": "modules separated by '// -----' (an XLA lit test)",
            "saved-graphs": "graphs between '## BEGIN_GRAPH' and '## END_GRAPH' (PyTorch/XLA XLA_SAVE_TENSORS_FILE)",
            "concatenated": "several 'HloModule' texts one after another"}


def _print_listing(fm, entries, skipped):
    from rich.table import Table
    from rich.text import Text
    con = _console()
    head = Table.grid(padding=(0, 2))
    head.add_column(style="bold", no_wrap=True)
    head.add_column()
    head.add_row("file", Text(f"{fm.file} ({fm.size:,} bytes)"))
    head.add_row("holds", Text(f"{len(entries)} modules: {_LAYOUTS.get(fm.layout, fm.layout)}"))
    con.print(head)
    t = Table(title="modules (hlo ... --module N|NAME picks one)", title_justify="left", show_edge=False)
    for col in ("#", "module", "line", "computations", "instructions", "entry"):
        t.add_column(col, justify="right" if col in ("#", "line", "computations", "instructions") else "left")
    for e in entries:
        if e["status"] == "ok":
            t.add_row(str(e["index"]), Text(e["module"]), str(e["line"]), str(e["computations"]),
                      f"{e['instructions']:,}", Text(f"{e['entry']} {e['signature']}"))
        else:
            t.add_row(str(e["index"]), Text(e["module"] or "?"), str(e["line"]), "-", "-",
                      Text("error: " + e["diagnostics"][0]["message"].partition("\n")[0], style="red"))
    con.print(t)
    if skipped:
        kinds = ", ".join(sorted({g["kind"] for g in skipped}))
        con.print(Text(f"{len(skipped)} saved graph{'s' if len(skipped) != 1 else ''} skipped: not HLO text "
                       f"({kinds})"))


# ----------------------------------------------------------------------------- XLA dump directories

def _dump_listing(path: str, fmt: str, module_choice) -> bool:
    """List an XLA dump directory's modules, or one module's stages; False when PATH is not one."""
    from pathlib import Path

    from ..sources.dumpdir import is_dump_dir, read_dump_dir
    if path == "-" or not Path(path).is_dir() or not is_dump_dir(path):
        return False
    dd = read_dump_dir(path)
    if module_choice is None and len(dd.modules) > 1:
        mods = dump_modules(dd)
        if fmt == "json":
            click.echo(json.dumps({"directory": dd.path, "kind": "xla-dump", "modules": mods,
                                   "ignored_files": len(dd.ignored)}, indent=2))
        else:
            _print_dump_modules(dd, mods)
        return True
    m = dd.module(module_choice)
    rows = stage_rows(m)
    if fmt == "json":
        click.echo(json.dumps({"directory": dd.path, "kind": "xla-dump", "module": {"key": m.key, "id": m.id,
                               "name": m.name, "timestamp": m.timestamp, "snapshots": list(m.snapshots)},
                               "stages": rows}, indent=2))
    else:
        _print_dump_stages(dd, m, rows)
    return True


def _print_dump_modules(dd, mods):
    from rich.table import Table
    from rich.text import Text
    con = _console()
    head = Table.grid(padding=(0, 2))
    head.add_column(style="bold", no_wrap=True)
    head.add_column()
    head.add_row("directory", Text(f"{dd.path} (an XLA dump: {len(mods)} modules; {len(dd.ignored)} other files"
                                   f"{_ignored_kinds(dd)})"))
    con.print(head)
    t = Table(title=f"modules (hlo info {dd.path} --module NAME|NNNN lists a module's stages)", title_justify="left",
              show_edge=False)
    snaps = any(r["snapshots"] for r in mods)
    for col in ("module", "name", "stages", "after passes") + (("snapshots",) if snaps else ()):
        t.add_column(col, justify="left" if col in ("module", "name") else "right")
    for r in mods:
        t.add_row(Text(r["key"]), Text(r["name"] or "-"), str(r["stages"]), str(r["pass_stages"]),
                  *((str(len(r["snapshots"])),) if snaps else ()))
    con.print(t)
    if not any(r["pass_stages"] for r in mods):
        named = any(r["stages"] > 2 for r in mods)
        con.print(Text("no dumps between passes: XLA writes them with --xla_dump_hlo_pass_re=.* ("
                       + ("hlo bisect runs the stages XLA dumps by name; those make it name a pass)" if named
                          else "hlo bisect needs them)")))


def _ignored_kinds(dd) -> str:
    """': 33 configs, 24 reports, ...': XLA's other files by kind."""
    from pathlib import Path

    from ..sources.dumpdir import dump_file_kind
    counts: dict = {}
    for f in dd.ignored:
        kind = (dump_file_kind(Path(f.path).name) or ("other",))[0]
        counts[kind] = counts.get(kind, 0) + 1
    if not counts:
        return ""
    return ": " + ", ".join(f"{n} {k}{'s' if n != 1 else ''}" for k, n in sorted(counts.items(), key=lambda kv: -kv[1]))


def _print_dump_stages(dd, m, rows):
    from rich.table import Table
    from rich.text import Text
    con = _console()
    head = Table.grid(padding=(0, 2))
    head.add_column(style="bold", no_wrap=True)
    head.add_column()
    head.add_row("directory", Text(dd.path))
    head.add_row("module", Text(m.title))
    if m.snapshots:
        head.add_row("snapshots", Text(", ".join(m.snapshots) + " (executions' arguments: hlo bisect uses them)"))
    changed = sum(1 for r in rows if r["changed"])
    head.add_row("stages", Text(f"{len(rows)} in pass order, {changed} with a new text (the others repeat the "
                                f"stage before them)"))
    con.print(head)
    which = f" --module {dd.choice(m)}" if len(dd.modules) > 1 else ""
    t = Table(title=f"stages (hlo run/check/fmt/info DIR{which} --stage STAGE picks one; hlo bisect DIR{which} "
                    "runs them)",
              title_justify="left", show_edge=False)
    for col in ("#", "step", "pipeline", "after", "new text", "--stage"):
        t.add_column(col, justify="right" if col in ("#", "step") else "left", no_wrap=col != "pipeline")
    for r in rows:
        after = r["pass"] if r["kind"] == "pass" else (f"{r['pass']}: {r['step']}" if r["kind"] == "during_pass"
                                                         else r["label"])
        if r["kind"] == "pass" and r["pass"] == "pipeline-start":
            after = "(pipeline start)"
        t.add_row(str(r["index"]), "" if r["number"] is None else f"{r['number']:04d}", Text(r["pipeline"] or ""),
                  Text(after), "yes" if r["changed"] else "", Text(r["selector"]))
    con.print(t)
