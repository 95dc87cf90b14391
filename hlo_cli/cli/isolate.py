"""`hlo isolate MODULE`: which instruction do hlo and XLA compute differently?

The library does the work (hlo_cli/tools/isolate.py); this module reads options, the module and
its inputs, and prints.
"""
from __future__ import annotations

import json
import sys

import click

from ..errors import ExitCode, HloReferenceError
from .common import report_errors
from .toolopts import PhaseLine, arguments, input_options, load_checked, run_options


@click.command("isolate")
@click.argument("module_file", metavar="MODULE", type=str)
@input_options
@click.option("--rtol", type=click.FloatRange(min=0), default=1e-3, show_default=True,
              help="Relative tolerance: hlo's value agrees with XLA's when |hlo - xla| <= atol + rtol * |xla|.")
@click.option("--atol", type=click.FloatRange(min=0), default=1e-3, show_default=True, help="Absolute tolerance.")
@click.option("--into-fusions", is_flag=True,
              help="Run once more and isolate the instructions inside each mismatching fusion.")
@click.option("--filter-opcode", metavar="REGEX", default=None, help="Isolate only instructions whose opcode matches.")
@click.option("--filter-name", metavar="REGEX", default=None, help="Isolate only instructions whose name matches.")
@click.option("--shard", metavar="I/N", default=None,
              help="Isolate only every N-th instruction from the I-th (in execution order): split the work over N jobs.")
@click.option("--executions", type=click.IntRange(min=1), default=1, show_default=True,
              help="Isolate the first N executions of each instruction (loop bodies).")
@click.option("--batch", "batch_size", type=click.IntRange(min=1), default=200, show_default=True,
              help="Instructions compiled together as one XLA module.")
@click.option("--reference-module", metavar="FILE", default=None,
              help="XLA runs each instruction as FILE writes it (the same computation and name): which edits of "
                   "MODULE change values.")
@click.option("--expect", metavar="REF.npz", default=None,
              help="Also compare hlo's results with recorded ones (keys out0, out1, ...; a snapshot given as MODULE "
                   "brings its own) and tie each cause to the mismatching results it reaches.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True,
              help="json: one document (counts, causes, symptoms, instructions, and `pairs` in the form of "
                   "`hlo diff --format json`, which `hlo graph --overlay` draws).")
@click.option("--show", type=click.IntRange(min=1), default=10, show_default=True,
              help="How many causes and symptoms the text report lists.")
@click.option("--no-progress", is_flag=True,
              help="No status line on stderr (shown on a terminal with --format text: what is being done, the batch).")
@report_errors
def isolate(module_file, inputs, inputs_npz, random_inputs, seed, module_choice, max_iterations,
            allow_elided_constants, no_check, no_cache, rtol, atol, into_fusions, filter_opcode, filter_name, shard,
            executions, batch_size, reference_module, expect, fmt, show, no_progress):
    """Run MODULE, then run each instruction alone on XLA CPU on hlo's own operand values (a fusion
    as one unit) and compare it with hlo's value.

    The report lists the causes (instructions whose value differs from XLA's while their operands
    agreed and nothing inside them differed), then the symptoms, with file:line, metadata, the
    largest difference and where; and counts MATCHED / MISMATCH / XLA-REFUSED / SKIPPED.
    Identical instructions (the same text over the same operand bits) run once; many instructions
    make one XLA compile (--batch).  A program on several devices is isolated per device.

    Exit codes: 0 no instruction differs (and the results match --expect); 1 an instruction differs
    from XLA (or the results differ from --expect); 2 usage error or unreadable input; 3 a bug in
    hlo; 4 out of memory; 6 XLA cannot be used (JAX missing, or XLA refused every instruction).
    """
    from ..tools.isolate import compare_results, parse_shard, recorded_results
    from ..tools.isolate import isolate as run_isolate
    shard_t = parse_shard(shard)
    module, _ = load_checked(module_file, module_choice, no_check, allow_elided_constants, no_cache)
    ref_mod = None
    if reference_module is not None:
        ref_mod, _ = load_checked(reference_module, None, True, allow_elided_constants, no_cache)
    from ..tools.reference import require_jax
    require_jax()
    args, snap = arguments(module, module_file, inputs, inputs_npz, random_inputs, seed)
    recorded, expect = recorded_results(module, module_file, expect, snap)
    with PhaseLine(not no_progress and fmt == "text") as line:
        report = run_isolate(module, args, rtol, atol,
                             options=run_options(seed, max_iterations, allow_elided_constants),
                             into_fusions=into_fusions, filter_name=filter_name, filter_opcode=filter_opcode,
                             shard=shard_t, executions=executions, batch_size=batch_size, reference_module=ref_mod,
                             path=module_file, on_phase=line.set)
    outputs_ok = compare_results(report, recorded, expect, rtol, atol)
    counts = report.counts()
    if fmt == "json":
        click.echo(json.dumps(report.to_json(), indent=1, default=str))
    else:
        click.echo(format_text(report, show))
    if counts["MISMATCH"] or not outputs_ok:
        sys.exit(ExitCode.FAILURE)
    if counts["XLA-REFUSED"] and not counts["MATCHED"]:
        raise HloReferenceError("XLA refused every isolated instruction: nothing could be compared")


def _line(e: dict) -> str:
    where = f" at {e['where']}" if e.get("where") is not None else ""
    dev = f" (device {e['device']})" if e.get("device") is not None else ""
    s = (f"{e['location']}: %{e['instruction']} = {e['shape']} {e['opcode']}  [{e['computation']}]{dev}\n"
         f"    max |diff| {e['max_abs_diff']:.4g}, max rel {e['max_rel_diff']:.4g}; "
         f"{e.get('mismatched')}/{e.get('size')} elements differ; largest{where}: hlo {e.get('hlo_value')} "
         f"vs XLA {e.get('xla_value')}")
    if e.get("execution", 1) and e.get("execution", 1) > 1:
        s += f" (execution {e['execution']})"
    if e.get("op_name") or e.get("source"):
        s += "\n    " + "  ".join(x for x in (e.get("op_name"), e.get("source")) if x)
    if e.get("inside"):
        s += f"\n    inside fusion %{e['inside']}"
    return s


def format_text(report, show: int) -> str:
    doc = report.to_json()
    c = doc["counts"]
    out = []
    if doc["causes"]:
        out.append(f"first causes ({len(doc['causes'])}): hlo and XLA differ here while the operands agreed")
        out += ["  " + _line(e).replace("\n", "\n  ") for e in doc["causes"][:show]]
    if doc["symptoms"]:
        out.append(f"symptoms ({len(doc['symptoms'])}): differ after an operand (or an instruction inside) did")
        for e in doc["symptoms"][:show]:
            out.append("  " + _line(e).replace("\n", "\n  ") + "\n      after " + ", ".join(
                "%" + a for a in e["after"]))
    refused = [e for e in doc["instructions"] if e["status"] == "XLA-REFUSED"]
    if refused:
        out.append(f"XLA refused {len(refused)} instruction{'s' if len(refused) != 1 else ''}, e.g. "
                   f"%{refused[0]['instruction']} ({refused[0]['opcode']}): {refused[0].get('note')}")
    if doc.get("outputs"):
        o = doc["outputs"]
        bad = [r["key"] for r in o["rows"] if r.get("status") != "ok"]
        out.append(f"results vs {o['reference']}: " + ("all match" if not bad else "differ: " + ", ".join(bad)))
        loc = doc.get("localized")
        if loc:
            out.append("  " + loc["how"])
            for x in loc["causes"]:
                out.append(f"  %{x['instruction']} reaches {', '.join(x['reaches']) or 'none of them'}")
            if loc["unexplained_outputs"]:
                out.append(f"  not explained by an isolated difference: {', '.join(loc['unexplained_outputs'])}")
    st = doc["stats"]
    out.append(f"MATCHED {c['MATCHED']}, MISMATCH {c['MISMATCH']}, XLA-REFUSED {c['XLA-REFUSED']}, SKIPPED "
               f"{c['SKIPPED']}" + (f"; {doc['filtered_out']} filtered out" if doc['filtered_out'] else "")
               + (f"; shard {doc['shard']}" if doc.get('shard') else ""))
    out.append(f"{st['jobs']} isolated runs ({st['identical']} identical to an earlier one), {st['xla_modules']} XLA "
               f"modules; hlo {st['hlo_run_s']:.2f} s, XLA compile {st['xla_compile_s']:.2f} s, total "
               f"{st['total_s']:.2f} s")
    if not doc["causes"] and not doc["symptoms"]:
        out.insert(0, "no instruction differs from XLA")
    return "\n".join(out)
