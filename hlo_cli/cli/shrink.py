"""`hlo shrink MODULE --until CONDITION`: reduce a module while a condition holds.

The library does the work (hlo_cli/tools/shrink.py); this module reads options and prints.
"""
from __future__ import annotations

import json
import sys

import click

from ..errors import ExitCode
from .common import report_errors
from .toolopts import arguments, input_options, load_checked, run_options


@click.command("shrink")
@click.argument("module_file", metavar="MODULE", type=str)
@click.option("--nan", "until_nan", is_flag=True,
              help="Until: the run makes a NaN or Inf, first at the same instruction (--check-finite's judgement).")
@click.option("--mismatch", "until_mismatch", type=click.Choice(["xla"]), default=None,
              help="Until: hlo's results differ from XLA CPU's (--rtol/--atol).")
@click.option("--error", "until_error", metavar="TEXT", default=None,
              help="Until: checking or running the module fails with a message containing TEXT.")
@click.option("--expect", "until_expect", metavar="REF.npz", default=None,
              help="Until: the results differ from these recorded ones (keys out0... of the original results).")
@click.option("--until-command", "until_command", metavar="'CMD {}'", default=None,
              help="Until: the shell command exits 0 ({} is the candidate module's path, {inputs} its inputs' .npz).")
@click.option("--rtol", type=click.FloatRange(min=0), default=1e-3, show_default=True)
@click.option("--atol", type=click.FloatRange(min=0), default=1e-3, show_default=True)
@click.option("--time-budget", type=click.FloatRange(min=0), default=600, show_default=True, metavar="SECONDS",
              help="Stop trying after this many seconds (the smallest module found so far is written).")
@click.option("--output", "-o", metavar="OUT.hlo", default=None,
              help="Where to write the result (default: MODULE's name + .shrunk.hlo in the current directory); its "
                   "inputs go to OUT.inputs.npz.")
@click.option("--constants", is_flag=True,
              help="At the end, make the parameters constants holding their values (a module that needs no inputs), "
                   "when the condition still holds.")
@click.option("--log", "log_path", metavar="FILE.json", default=None, help="Write every attempt here.")
@click.option("--force", is_flag=True, help="Replace existing output files.")
@click.option("--verbose", "-v", is_flag=True, help="Print every attempt on stderr as it is made.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@input_options
@report_errors
def shrink(module_file, until_nan, until_mismatch, until_error, until_expect, until_command, rtol, atol, time_budget,
           output, constants, log_path, force, verbose, fmt, inputs, inputs_npz, random_inputs, seed, module_choice,
           max_iterations, allow_elided_constants, no_check, no_cache):
    """Reduce MODULE while a condition holds: cut what comes before the trouble into parameters
    holding their real values, lower the ROOT, remove outputs, inline calls and fusions, cut loops
    to fewer trips, turn instructions into parameters; unused instructions, parameters and
    computations go.  Deterministic; every attempt is logged (--log); --time-budget bounds it.

    Give exactly one condition: --nan, --mismatch xla, --error TEXT, --expect REF.npz or
    --until-command 'CMD {}'.

    Exit codes: 0 a smaller module was written (the condition holds on it); 1 nothing could be
    removed (MODULE is written as it is), or the module fails its check; 2 usage error, unreadable
    input, an output that exists (without --force), a condition that does not hold on MODULE
    itself; 6 --mismatch xla without XLA.
    """
    from ..tools import shrink as lib
    given = [x for x in (until_nan or None, until_mismatch, until_error, until_expect, until_command) if x is not None]
    if len(given) != 1:
        raise click.UsageError("give exactly one condition: --nan, --mismatch xla, --error TEXT, --expect REF.npz "
                               "or --until-command 'CMD {}'")
    out, out_inputs = lib.output_paths(module_file, output, force, log_path)
    module, _ = load_checked(module_file, module_choice, no_check, allow_elided_constants, no_cache)
    args, _ = arguments(module, module_file, inputs, inputs_npz, random_inputs, seed)
    options = run_options(seed, max_iterations, allow_elided_constants)
    cond = lib.condition(module, options, rtol, atol, until_nan, until_mismatch, until_error, until_expect,
                         until_command)

    def step(e):
        if verbose:
            click.echo(f"  {e['step']:4d} {e['kind']:<15} {'kept' if e['kept'] else 'no  '} {e['instructions']:7d}  "
                       f"{e['tried']}", err=True)
    try:
        res = lib.shrink(module, args, cond, time_budget=time_budget, options=options, on_step=step,
                         constants=constants)
    finally:
        cond.close()
    paths = lib.write(res, str(out), str(out_inputs), force, log_path)
    doc = {"files": paths, "condition": res.condition, "instructions_before": res.start_size,
           "instructions_after": res.candidate.size, "attempts": len(res.log),
           "kept": sum(1 for e in res.log if e["kept"]), "seconds": round(res.seconds, 3),
           "time_budget_spent": res.budget_spent}
    if fmt == "json":
        doc["log"] = res.log
        click.echo(json.dumps(doc, indent=1, default=str))
    else:
        click.echo(f"{res.start_size} -> {res.candidate.size} instructions ({doc['attempts']} attempts, {doc['kept']} "
                   f"kept, {res.seconds:.1f} s{'; the time budget ran out' if res.budget_spent else ''}); still: "
                   f"{res.condition}")
        click.echo(f"wrote {paths['module']}" + (f" and {paths['inputs']}" if paths.get("inputs") else "")
                   + (f"; log: {paths['log']}" if paths.get("log") else ""))
    if res.candidate.size >= res.start_size:
        sys.exit(ExitCode.FAILURE)
