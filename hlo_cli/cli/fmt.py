"""`hlo fmt`: print modules in XLA's canonical text form."""
from __future__ import annotations

import sys

import click

from .common import module_option, no_cache_option, report_errors, resolve_stage, stage_option


@click.command("fmt")
@click.argument("file", type=str)
@click.option("--no-percent", is_flag=True, help="Print names without the leading '%' (as JAX's as_text does).")
@click.option("--operand-shapes", is_flag=True, help="Print each operand with its shape: add(f32[4] %x, ...).")
@click.option("--no-metadata", is_flag=True, help="Leave out metadata={...}.")
@click.option("--check", is_flag=True,
              help="Print nothing; exit 1 if FILE is not already in canonical form (for CI).")
@module_option
@stage_option
@no_cache_option
@report_errors
def fmt(file, no_percent, operand_shapes, no_metadata, check, module_choice, stage, no_cache):
    """Print FILE ('-' for standard input) in XLA's canonical HLO text form.

    Parsing the output gives back the same module, and formatting is idempotent.  A file that holds
    several modules is printed whole, its modules separated the way they came ('// -----' between
    the modules of an XLA lit test; '## BEGIN_GRAPH' / '## END_GRAPH' around saved graphs; the text
    around them is left out); --module N|NAME prints one.  Nothing is printed if a module has errors.
    In an XLA dump directory, --stage (and --module) picks the module and stage to print.
    """
    from ..tools.fmt import format_file
    file, module_choice = resolve_stage(file, module_choice, stage)
    res = format_file(file, module_choice, percent=not no_percent, operand_shapes=operand_shapes,
                      metadata=not no_metadata, use_cache=not no_cache)
    fm, chosen, texts, out, original = res.file, res.chosen, res.texts, res.text, res.original
    if check:
        if original.replace("\r\n", "\n") != out:
            which = ""
            if len(chosen) > 1:
                bad = [s.describe() for s, t in zip(chosen, texts) if s.own_text.replace("\r\n", "\n").strip() != t.strip()]
                which = (" (modules " + ", ".join(bad) + ")") if bad else " (the text between its modules)"
            click.echo(f"{fm.file}: not in canonical form{which} (run `hlo fmt {file}`)", err=True)
            sys.exit(1)
        return
    sys.stdout.write(out)
    sys.stdout.flush()
