"""`hlo fmt`: print a module in XLA's canonical text form."""
from __future__ import annotations

import sys

import click

from .common import load_module, no_cache_option, report_errors


@click.command("fmt")
@click.argument("file", type=str)
@click.option("--no-percent", is_flag=True, help="Print names without the leading '%' (as JAX's as_text does).")
@click.option("--operand-shapes", is_flag=True, help="Print each operand with its shape: add(f32[4] %x, ...).")
@click.option("--no-metadata", is_flag=True, help="Leave out metadata={...}.")
@click.option("--check", is_flag=True,
              help="Print nothing; exit 1 if FILE is not already in canonical form (for CI).")
@no_cache_option
@report_errors
def fmt(file, no_percent, operand_shapes, no_metadata, check, no_cache):
    """Print FILE ('-' for standard input) in XLA's canonical HLO text form.

    Parsing the output gives back the same module, and formatting is idempotent.
    """
    from ..ir.printer import format_module
    module, original = load_module(file, use_cache=not no_cache, with_text=True)
    text = format_module(module, percent=not no_percent, operand_shapes=operand_shapes,
                         metadata=not no_metadata)
    if check:
        if original.replace("\r\n", "\n") != text:
            click.echo(f"{file}: not in canonical form (run `hlo fmt {file}`)", err=True)
            sys.exit(1)
        return
    sys.stdout.write(text)
    sys.stdout.flush()
