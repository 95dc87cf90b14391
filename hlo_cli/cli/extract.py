"""`hlo extract MODULE --instruction NAME`: a small module computing NAME, with the run's real values.

The library does the work (hlo_cli/tools/extract.py); this module reads options and prints.
"""
from __future__ import annotations

import json
import sys

import click

from ..errors import ExitCode
from .common import report_errors
from .toolopts import arguments, input_options, load_checked, run_options


@click.command("extract")
@click.argument("module_file", metavar="MODULE", type=str)
@click.option("--instruction", "instruction", required=True, metavar="NAME", help="The instruction to extract.")
@click.option("--computation", metavar="NAME", default=None,
              help="The computation holding it, when several have an instruction of that name.")
@click.option("--height", type=click.IntRange(min=0), default=0, show_default=True,
              help="Take the operands this many levels up (0: the instruction alone on its operands).")
@click.option("--depth", type=click.IntRange(min=0), default=0, show_default=True,
              help="Take its users this many levels down (the ROOT becomes the tuple of what nothing else uses).")
@click.option("--execution", type=click.IntRange(min=1), default=1, show_default=True,
              help="Which execution of the instruction (in a loop body) gives the values.")
@click.option("--cut", "cut_as", type=click.Choice(["parameters", "constants", "zeros", "random"]),
              default="parameters", show_default=True,
              help="What a value read from outside the piece becomes: a parameter with its real value saved, a "
                   "constant holding it, or a parameter given zeros or random values.")
@click.option("--values-from", "values_from", metavar="RUN_DUMP", default=None,
              help="Take the values from an `hlo run --dump-dir` directory instead of running the module.")
@click.option("--output", "-o", metavar="OUT.hlo", default=None,
              help="Where to write the module (default: NAME.extract.hlo); its inputs go to OUT.inputs.npz and the "
                   "expected value to OUT.expected.npz.")
@click.option("--force", is_flag=True, help="Replace existing output files.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@input_options
@report_errors
def extract(module_file, instruction, computation, height, depth, execution, cut_as, values_from, output, force, fmt,
            inputs, inputs_npz, random_inputs, seed, module_choice, max_iterations, allow_elided_constants, no_check,
            no_cache):
    """Cut the instruction NAME out of MODULE into a self-contained module: NAME computed from its
    operands HEIGHT levels up (and its users DEPTH levels down), the computations it calls taken
    along, every value read from outside as a parameter whose real value (from this run, or from
    --values-from) is saved beside it, and the expected value.  `hlo run OUT.hlo --inputs
    OUT.inputs.npz --expect OUT.expected.npz --rtol 0 --atol 0` reproduces it bit for bit; this
    command checks that it does.

    Exit codes: 0 written, and it reproduces the value; 1 the extracted module does not reproduce it
    (written anyway), or the run fails; 2 usage error, unreadable input, an output file that exists
    (without --force); 3 a bug in hlo.
    """
    from ..tools.extract import extract as run_extract, verify, write
    module, _ = load_checked(module_file, module_choice, no_check, allow_elided_constants, no_cache)
    args = None
    if values_from is None:
        args, _ = arguments(module, module_file, inputs, inputs_npz, random_inputs, seed)
    options = run_options(seed, max_iterations, allow_elided_constants)
    out = output or f"{instruction.lstrip('%')}.extract.hlo"
    ex = run_extract(module, instruction, args=args, computation=computation, height=height, depth=depth,
                     execution=execution, cut_as=cut_as, values_from=values_from, options=options, seed=seed)
    paths = write(ex, out, force)
    check = verify(ex, options)
    n = sum(1 for i in ex.module.entry_computation.instructions if i.opcode != "parameter")
    if fmt == "json":
        click.echo(json.dumps({"files": paths, "instructions": n, "piece": ex.piece, "cut": ex.cut, "root": ex.root,
                               "execution": ex.execution, "per_device": ex.per_device,
                               "reproduces": check["identical"], "check": check["rows"],
                               "notes": ex.notes}, indent=1, default=str))
    else:
        click.echo(f"wrote {paths['module']} ({n} instructions besides {len(ex.inputs)} parameters; ROOT %{ex.root})")
        if "inputs" in paths:
            click.echo(f"  inputs: {paths['inputs']} ({', '.join(ex.inputs)})")
        click.echo(f"  expected: {paths['expected']}")
        for note in ex.notes:
            click.echo(f"  note: {note}")
        if check["identical"]:
            click.echo("  reproduces the value bit for bit: hlo run " + paths["module"]
                       + (f" --inputs {paths['inputs']}" if "inputs" in paths else "")
                       + f" --expect {paths['expected']} --rtol 0 --atol 0" + (" --per-device" if ex.per_device else ""))
        else:
            click.echo("  error: the extracted module does NOT reproduce the value bit for bit", err=True)
    if not check["identical"]:
        sys.exit(ExitCode.FAILURE)
