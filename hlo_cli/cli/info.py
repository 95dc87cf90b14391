"""`hlo info`: a summary of a module."""
from __future__ import annotations

import json
from collections import Counter

import click

from .common import load_module, no_cache_option, report_errors


def summarize(module, path: str, size: int) -> dict:
    entry = module.entry_computation
    params = entry.parameters
    counts = Counter(i.opcode for _, i in module.instructions())
    n_instr = sum(counts.values())
    called_by_fusion = {c for _, i in module.instructions() if i.opcode == "fusion"
                        for c in i.called_computations}
    frames = module.stack_frames
    # instructions whose metadata resolves to each source file
    per_file: Counter = Counter()
    source_of: dict = {}          # metadata text -> source file (the same texts repeat many times)
    for _, inst in module.instructions():
        md = inst.attrs.get("metadata")
        if md is None:
            continue
        src = source_of.get(md.text, False)
        if src is False:
            src = None
            fid = md.stack_frame_id
            if fid and frames:
                stack = frames.resolve(fid)
                if stack:
                    src = stack[0][0]
            if src is None and md.source_file:
                src = md.source_file
            source_of[md.text] = src
        if src is not None:
            per_file[src] += 1
    sources = sorted(set(frames.file_names.values()) | set(per_file))
    return {
        "file": path,
        "bytes": size,
        "module": module.name,
        "entry": entry.name,
        "parameters": [{"name": p.name, "number": p.parameter_number, "shape": str(p.shape)} for p in params],
        "result": str(entry.root_instruction.shape),
        "signature": "(" + ", ".join(f"{p.name}: {p.shape.to_str(False)}" for p in params) + ") -> "
                     + entry.root_instruction.shape.to_str(False),
        "computations": len(module.computations),
        "fusion_computations": len(called_by_fusion),
        "instructions": n_instr,
        "header": {k: _text(v) for k, v in module.attrs.items()},
        "opcodes": dict(counts.most_common()),
        "sources": [{"file": f, "instructions": per_file.get(f, 0)} for f in sources],
    }


def _text(v):
    from ..ir.attributes import attr_text
    return attr_text(v)


@click.command("info")
@click.argument("file", type=str)
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True,
              help="Output format.")
@no_cache_option
@report_errors
def info(file, fmt, no_cache):
    """Summarize FILE ('-' for standard input): module name, entry signature, computations and
    instructions counted, an opcode histogram, and the source files named by its stack frames."""
    module, text = load_module(file, use_cache=not no_cache, with_text=True)
    s = summarize(module, "<stdin>" if file == "-" else file, len(text.encode("utf-8", "replace")))
    if fmt == "json":
        click.echo(json.dumps(s, indent=2))
        return
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text
    con = Console(highlight=False)
    head = Table.grid(padding=(0, 2))
    head.add_column(style="bold", no_wrap=True)
    head.add_column()
    head.add_row("module", Text(s["module"]))
    head.add_row("file", Text(f"{s['file']} ({s['bytes']:,} bytes)"))
    head.add_row("entry", Text(f"{s['entry']} {s['signature']}"))
    head.add_row("computations", Text(f"{s['computations']} ({s['fusion_computations']} fused)"))
    head.add_row("instructions", Text(f"{s['instructions']:,}"))
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
    if s["sources"]:
        src = Table(title="source files", title_justify="left", show_edge=False)
        src.add_column("file")
        src.add_column("instructions", justify="right")
        for e in s["sources"]:
            src.add_row(Text(e["file"]), str(e["instructions"]))
        con.print(src)
