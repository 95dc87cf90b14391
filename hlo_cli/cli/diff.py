"""`hlo diff A B`: run two modules on the same inputs and compare every matched value.

The library does the work (hlo_cli/diff/files.py: the modules and the inputs read as `hlo run` reads
them, then hlo_cli/diff/core.py); this module maps the options to a DiffRequest and prints the report.
"""
from __future__ import annotations

import json
import sys

import click

from ..errors import ExitCode
from .common import (elided_constants_option, max_iterations_option, no_cache_option, report_errors,
                     resolve_stage, stderr_is_terminal)


@click.command("diff")
@click.argument("module_a", metavar="A", type=str)
@click.argument("module_b", metavar="B", type=str)
@click.option("--input", "-i", "inputs", multiple=True, metavar="[NAME=]FILE.npy",
              help="An input array, as for `hlo run`: in parameter order, or bound to A's parameter NAME (or argN). "
                   "B gets the same arrays by parameter position.")
@click.option("--inputs", "inputs_npz", metavar="ARGS.npz",
              help="An .npz archive of inputs keyed by A's parameter names or arg0, arg1, ... (by position); "
                   "or an HloSnapshot .pb: the arguments of the execution it recorded (without inputs given, "
                   "A's or B's when one is a snapshot).")
@click.option("--random-inputs", is_flag=True, help="Fill every parameter with deterministic random values.")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True,
              help="Seed for --random-inputs and rng.")
@click.option("--rtol", type=click.FloatRange(min=0), default=1e-3, show_default=True,
              help="Relative tolerance: a value of B agrees with A's when |b - a| <= atol + rtol * |a|.")
@click.option("--atol", type=click.FloatRange(min=0), default=1e-3, show_default=True, help="Absolute tolerance.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True,
              help="json: one JSON document on stdout (verdict, results_agree, summary, results, "
                   "first_differences with their chains, pairs, only_in_a, only_in_b, a, b).")
@click.option("--show", type=click.IntRange(min=1), default=5, show_default=True,
              help="How many first differing instructions the text report details.")
@click.option("--module-a", "module_a_choice", metavar="N|NAME", default=None,
              help="Which module of A, when its file holds several.")
@click.option("--module-b", "module_b_choice", metavar="N|NAME", default=None,
              help="Which module of B, when its file holds several.")
@click.option("--stage-a", "stage_a", metavar="STAGE", default=None,
              help="When A is an XLA dump directory: its stage (as `hlo run --stage`: before_optimizations, "
                   "after_optimizations, a step number, [PIPELINE:]PASS[#K|#last]); --module-a picks the module.")
@click.option("--stage-b", "stage_b", metavar="STAGE", default=None,
              help="When B is an XLA dump directory: its stage; --module-b picks the module.  A and B may be "
                   "the same directory: `hlo diff DIR DIR --stage-a cse --stage-b fusion`.")
@click.option("--output-sharding", metavar="SHARDING", default=None,
              help="How the per-device results of a module on several devices make the global arrays, when "
                   "compared with a module whose results are global and neither ROOT says it (a JAX function "
                   "leaves its output sharding to XLA), e.g. {devices=[4,2]<=[8]}; a tuple sharding for "
                   "several results.")
@click.option("--executions", "max_executions", type=click.IntRange(min=1), default=None, metavar="N",
              help="Compare only the first N executions of each instruction (loop bodies): A's values of later "
                   "executions are not kept. Default: all.")
@click.option("--keep-memory", "keep_memory", metavar="SIZE", default="1G", show_default=True,
              help="Memory for A's values waiting for their comparison (e.g. 512M, 4G; none: no limit); beyond "
                   "it they go to a temporary directory.")
@max_iterations_option
@elided_constants_option
@click.option("--numerics", type=click.Choice(["auto", "cpu", "gpu"]), default="auto", show_default=True,
              help="Whose arithmetic both runs reproduce, as `hlo run --numerics`; auto: gpu when A or B was "
                   "compiled for a GPU.")
@click.option("--no-check", is_flag=True, help="Do not check the modules (hlo check's rules) before running them.")
@click.option("--no-progress", is_flag=True,
              help="No progress display (a status line on stderr, on a terminal and with --format text, as "
                   "`hlo run` shows: which module runs, the instruction, a loop's iteration).")
@no_cache_option
@report_errors
def diff(module_a, module_b, inputs, inputs_npz, random_inputs, seed, rtol, atol, fmt, show, module_a_choice,
         module_b_choice, stage_a, stage_b, output_sharding, max_executions, keep_memory, max_iterations, allow_elided_constants, no_check, no_progress,
         no_cache, numerics="auto"):
    """Run modules A and B on the same inputs and compare every value, not only the results.

    Instructions are matched across the two texts as a compiler engineer would: the same name; else
    the same op_name and source line in the metadata; else structure (the same opcode over matched
    operands, from the parameters, matched by position, and constants). Fused computations are
    matched through their fusion instructions, so a text before XLA's optimizations can be diffed
    against the text after them; copies, reshapes and bitcasts that keep the elements' order stand
    for their operand, and values of another shape with the same element count are compared after a
    reshape (row-major). A is the reference.

    The report: the results; the first instructions (in B's execution order) whose values differ
    beyond the tolerance while their operands agree, with both names, computations, source lines,
    metadata, shapes, the largest difference and where it is, and the operands that still agreed;
    the instructions only one module has; the counts.

    Both runs go instruction by instruction (no compiled fast path), and A's values wait in memory
    (up to 1 GiB, then in a temporary directory) until B's matching instruction has run.

    Modules on several devices (replica_count x num_partitions) take global input arrays, split by
    each parameter's sharding, and run on the same devices; values held one per device are compared
    per device, and a module before SPMD partitioning against the partitioned one compares the
    results as global arrays (reassembled by the ROOT's sharding of either module); values held
    differently (global in A, per device in B) are reported as not comparable.

    A module with an instruction hlo cannot run (a custom-call target it has no implementation of)
    runs up to it: every value before it is compared, and the report says where each module stopped.

    Exit codes: 0 the results agree (intermediate values may differ: see the report); 1 the results
    differ or cannot all be compared, a value differs before a run stopped, or a module fails its
    check or its run; 2 usage error or unreadable input (also modules whose parameters differ); 3 a
    bug in hlo; 4 out of memory; 7 a module stopped at an instruction hlo cannot run and no value
    compared up to there differs (the results were not compared).
    """
    from ..diff import format_text
    from ..diff.files import DiffRequest, prepare
    from ..diff.files import run as run_diff
    from ..interpreter.memory import parse_size
    try:
        keep = parse_size(keep_memory)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="'--keep-memory'") from None
    if keep is None:                  # none: never spill
        keep = 1 << 62
    elif keep == "auto":
        keep = None                   # the library's default
    if not (rtol >= 0 and atol >= 0):
        raise click.UsageError("--rtol and --atol must not be negative or NaN")
    module_a, module_a_choice = resolve_stage(module_a, module_a_choice, stage_a, "--stage-a", "--module-a")
    module_b, module_b_choice = resolve_stage(module_b, module_b_choice, stage_b, "--stage-b", "--module-b")
    if module_a == module_b == "-":
        raise click.UsageError("only one of A and B can be standard input")
    plan = prepare(DiffRequest(module_a, module_b, module_a_choice, module_b_choice, tuple(inputs), inputs_npz,
                               random_inputs, seed, rtol, atol, output_sharding, max_executions, keep, max_iterations,
                               allow_elided_constants, not no_check, not no_cache, numerics),
                   note=lambda text: click.echo(text, err=True))
    display = None
    if not no_progress and fmt == "text" and stderr_is_terminal():
        from .progress import Display
        display = Display().start()

    def phase(text):
        if display is not None:
            display.phase = text
    try:
        report = run_diff(plan, on_phase=phase)
    finally:
        if display is not None:
            display.stop()
    if fmt == "json":
        click.echo(json.dumps(report.to_json(), indent=1))
    else:
        click.echo(format_text(report, max_first=show))
    if report.verdict == "incomplete":
        sys.exit(ExitCode.UNSUPPORTED)      # hlo stopped at an instruction it cannot run; nothing differed
    if not report.results_agree:
        sys.exit(ExitCode.FAILURE)
