"""`hlo graph`: draw a module as a graph (DOT, SVG, a self-contained HTML page, Model Explorer JSON)."""
from __future__ import annotations

import itertools
from pathlib import Path

import click

from ..errors import HloInputError
from ..tools.graphfiles import check_output, explorer_node_data, format_of, write
from .common import load_module, module_option, no_cache_option, report_errors, resolve_stage, stage_option

@click.command("graph", epilog="""Examples:

\b
  hlo graph model.hlo -o model.html                      # pan, zoom, search, click for details
  hlo graph model.hlo --around dot.12 --depth 2 -o near.svg
  hlo graph model.hlo --computation region_0.2 -o body.dot
  hlo run model.hlo --random-inputs --dump-dir run/; hlo graph model.hlo --overlay run/ -o nan.html
  hlo run model.hlo --random-inputs --profile --format json > prof.json
  hlo graph model.hlo --overlay prof.json -o time.svg
  hlo diff before.hlo after.hlo --random-inputs --format json > d.json
  hlo graph after.hlo --overlay d.json -o where.html       # where the values start to differ
""")
@click.argument("module_file", metavar="MODULE", type=str)
@click.option("--output", "-o", metavar="OUT", default="-", show_default=True,
              help="Where to write: a .dot/.gv, .svg, .html or .json (Model Explorer) file, or - for standard "
                   "output (DOT unless --format says otherwise).  An existing file is never replaced "
                   "without --force.")
@click.option("--format", "fmt", type=click.Choice(["dot", "svg", "html", "explorer"]), default=None,
              help="The drawing (default: by the suffix of --output).  dot: Graphviz text; svg: laid out by "
                   "Graphviz's `dot` program (exit 2 when it is not installed); html: one self-contained page "
                   "with the SVG and a small script (pan, zoom, search by name, click a node for its details "
                   "and overlay values; without `dot`, the page holds the DOT text and says how to get a "
                   "layout); explorer: the graph JSON Google's Model Explorer loads.")
@click.option("--computation", "-c", metavar="NAME", default=None,
              help="Draw this computation (and the computations it calls) instead of the entry.")
@click.option("--around", metavar="INSTRUCTION", default=None,
              help="Draw only the neighbourhood of this instruction (NAME or COMPUTATION/NAME): what lies "
                   "within --depth edges of it, upstream and downstream, across calls and loop bodies (not "
                   "on through nodes of more than 16 edges, such as a weight every layer reads).  A fused "
                   "instruction opens its fusion.")
@click.option("--depth", type=click.IntRange(min=0), default=3, show_default=True,
              help="How many edges from --around to draw.")
@click.option("--expand-fusions", is_flag=True,
              help="Draw fusions as boxes holding their fused computation (default: one node per fusion, "
                   "with its kind, size and opcodes).")
@click.option("--show-constants", is_flag=True,
              help="Draw scalar constants as nodes (default: written inside the nodes that use them).")
@click.option("--overlay", "overlays", multiple=True, metavar="DIR_OR_JSON",
              help="Values on the nodes, coloured with a legend and listed in the details: an `hlo run "
                   "--dump-dir` directory (min/max/mean, NaN/Inf counts; the first non-finite value stands "
                   "out), `hlo run --profile --format json` output (time per instruction) or `hlo diff "
                   "--format json` output (where the modules diverge).  Repeatable: drawings are coloured by "
                   "the first, the HTML page switches between them.")
@click.option("--max-nodes", type=click.IntRange(min=0), default=4000, show_default=True,
              help="The most nodes Graphviz is asked to lay out (svg, html; a layout of thousands of nodes takes "
                   "minutes): above it SVG is refused (exit 2) and the HTML page holds no drawing.  0: no limit.")
@click.option("--force", is_flag=True, help="Replace an existing --output file.")
@module_option
@stage_option
@no_cache_option
@report_errors
def graph(module_file, output, fmt, computation, around, depth, expand_fusions, show_constants, overlays, max_nodes,
          force, module_choice, stage, no_cache):
    """Draw MODULE as a graph: computations as nested boxes (while bodies and conditions, branches,
    calls, fusions when expanded), one node per instruction with its opcode, shape, key attributes,
    op_name and source line, edges carrying shapes (control edges dashed; operands passed into a
    called computation and its result dotted).  Reducers and other applied computations are written
    on the node that applies them.

    Large modules stay readable with --computation, --around/--depth and collapsed fusions; scalar
    constants are written inside their users, and in graphs of more than 60 nodes an operand drawn
    far above its user appears next to it as a small dashed copy (\u2197 name; in the HTML page,
    click it to go to the operand).  A graph of more than 1,500 nodes gets a warning saying how to
    narrow it.  In an XLA dump directory, --stage (and --module) picks the module and stage to draw."""
    from ..graph import build_graph
    from ..graph.overlays import load_overlays
    from ..graph.render import GraphvizMissing, HOW_TO_GET_DOT, dot_program, to_dot, to_html, to_svg
    fmt = fmt or format_of(output)
    module_file, module_choice = resolve_stage(module_file, module_choice, stage)
    dest = None if output == "-" else Path(output)
    if dest is not None:
        check_output(dest, output, force, module_file)
    if fmt == "svg" and dot_program() is None:
        raise GraphvizMissing("--format svg needs a layout and Graphviz's `dot` was not found. " + HOW_TO_GET_DOT + ".")
    module = load_module(module_file, use_cache=not no_cache, module=module_choice)
    g = build_graph(module, computation=computation, around=around, depth=depth, expand_fusions=expand_fusions,
                    fold_constants=not show_constants)
    ovs = []
    for path in overlays:
        if not path.strip():
            raise click.UsageError("--overlay needs a path: an `hlo run --dump-dir` directory, or a --profile or "
                                   "`hlo diff` JSON file")
        ovs.extend(load_overlays(path, module))
    for w in list(g.warnings) + [w for ov in ovs for w in ov.warnings]:
        click.echo(f"warning: {w}", err=True)
    too_big = bool(max_nodes) and len(g.nodes) > max_nodes
    if fmt == "dot":
        data = to_dot(g, ovs)
    elif fmt == "svg":
        if too_big:
            raise HloInputError(f"the graph has {len(g.nodes):,} nodes, more than --max-nodes {max_nodes:,}: "
                                f"Graphviz would take very long to lay it out. Narrow it (--computation NAME, "
                                f"--around INSTRUCTION --depth K), raise --max-nodes (0: no limit), or write DOT")
        data = to_svg(to_dot(g, ovs))
    elif fmt == "html":
        if too_big:
            click.echo(f"note: the graph has {len(g.nodes):,} nodes, more than --max-nodes {max_nodes:,}: the page "
                       f"holds the DOT text and a searchable list of the nodes, not a drawing", err=True)
        elif dot_program() is None:
            click.echo("note: Graphviz's `dot` was not found: the page holds the DOT text and a list of the nodes, "
                       "not a drawing. " + HOW_TO_GET_DOT + ".", err=True)
        data = to_html(g, ovs, layout=not too_big,
                       no_layout_reason=(f"the graph has {len(g.nodes):,} nodes, more than --max-nodes "
                                         f"{max_nodes:,} (narrow it with --computation or --around, or raise "
                                         f"--max-nodes)") if too_big else None)
    else:
        try:
            from ..explorer import to_explorer_json
        except ImportError:
            raise HloInputError("--format explorer: this version of hlo has no Model Explorer support "
                                "(hlo_cli.explorer)") from None
        import json
        doc = to_explorer_json(g, ovs, module)
        # written chunk by chunk: the whole text at once would hold it twice more (json.dumps joins
        # its chunks, then .encode copies them)
        data = itertools.chain(json.JSONEncoder(indent=1).iterencode(doc), ("\n",))
        node_data = explorer_node_data(g, ovs, dest, output, force, module_file,
                                       note=lambda text: click.echo(text, err=True))
    write(dest, data)
    if fmt == "explorer":
        for path, text in node_data:
            write(path, text)
            click.echo(f"wrote {path} (Model Explorer node data: model-explorer {output} "
                       f"--node_data_paths={path})", err=True)
    if dest is not None:
        first = []
        for ov in ovs:
            if ov.first:
                what = {"stats": "first non-finite value", "diff": "first difference"}.get(ov.kind, "first")
                shown = g.nodes.get(ov.first) or g.nodes.get(g.represented_by.get(ov.first, ""))
                where = "" if ov.first in g.nodes else (f" (inside {shown.name})" if shown else " (not drawn)")
                first.append(f"{what}: {ov.first}{where}")
        click.echo(f"wrote {output}: {len(g.nodes):,} nodes, {len(g.edges):,} edges, {len(g.groups):,} "
                   f"computation{'s' if len(g.groups) != 1 else ''}"
                   + (f" ({g.omitted_nodes:,} nodes further than --depth {depth} left out)" if around else "")
                   + ("".join(f"; {f}" for f in first)), err=True)
