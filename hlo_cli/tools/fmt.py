"""`hlo fmt`'s work: the modules of a file printed in XLA's canonical text form (the printed text
cached per module text and options), put back together as the file held them."""
from __future__ import annotations

import json
from dataclasses import dataclass


@dataclass
class Formatted:
    """A file's modules formatted: `text` (what `hlo fmt` prints), `original` (what it replaces, for
    --check), the modules chosen and their texts."""
    file: object            # sources' FileModules
    chosen: list
    texts: list
    text: str
    original: str


def format_file(path: str, module_choice: str | None = None, *, percent: bool = True, operand_shapes: bool = False,
                metadata: bool = True, use_cache: bool = True) -> Formatted:
    """PATH ('-': standard input) in canonical form: every module of it (their separators kept), or
    MODULE_CHOICE's.  Raises the module's HloError (HloSyntaxError naming all when several fail)."""
    from ..sources.cache import load_derived, store_derived
    from ..errors import HloError, HloSyntaxError
    from ..sources import parse_module, read_modules
    fm = read_modules(path, use_cache)
    chosen = [fm.select(module_choice)] if module_choice is not None or len(fm.modules) == 1 else list(fm.modules)
    texts, errors = [], []
    # the printed text depends on the module's text, its file name and these options alone: a
    # repeat reads it from the cache, without the module
    what = json.dumps(["fmt", not percent, operand_shapes, not metadata])
    for src in chosen:
        hit = load_derived(src.text, src.file, what) if use_cache else None
        if isinstance(hit, str):
            texts.append(hit)
            continue
        try:
            module = parse_module(src, use_cache)
        except HloError as e:
            errors.append(e)
            continue
        from ..ir.printer import format_module          # (a cache hit needs neither it nor NumPy)
        texts.append(format_module(module, percent=percent, operand_shapes=operand_shapes, metadata=metadata))
        if use_cache:
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
    return Formatted(fm, chosen, texts, out, original)
