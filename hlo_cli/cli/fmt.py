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
    import json

    from ..sources.cache import load_derived, store_derived
    from ..errors import HloError, HloSyntaxError
    from ..sources import parse_module, read_modules
    file, module_choice = resolve_stage(file, module_choice, stage)
    fm = read_modules(file)
    chosen = [fm.select(module_choice)] if module_choice is not None or len(fm.modules) == 1 else list(fm.modules)
    texts, errors = [], []
    # the printed text depends on the module's text, its file name and these options alone: a
    # repeat reads it from the cache, without the module
    what = json.dumps(["fmt", no_percent, operand_shapes, no_metadata])
    for src in chosen:
        hit = None if no_cache else load_derived(src.text, src.file, what)
        if isinstance(hit, str):
            texts.append(hit)
            continue
        try:
            module = parse_module(src, not no_cache)
        except HloError as e:
            errors.append(e)
            continue
        from ..ir.printer import format_module
        texts.append(format_module(module, percent=not no_percent, operand_shapes=operand_shapes,
                                   metadata=not no_metadata))
        if not no_cache:
            store_derived(src.text, src.file, what, texts[-1])
    if errors:
        if len(errors) == 1:
            raise errors[0]
        raise HloSyntaxError(f"{len(errors)} modules have errors", [d for e in errors for d in e.diagnostics])
    if len(chosen) == 1:
        out = texts[0]
        original = chosen[0].own_text if len(fm.modules) > 1 else fm.text
    else:
        before, between, after = fm.separator()
        out = before + between.join(texts) + after
        original = fm.text
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
