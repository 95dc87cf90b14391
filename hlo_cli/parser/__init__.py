"""HLO text -> IR.  The parser knows nothing of files or caches (hlo_cli.sources reads files and
keeps the on-disk cache of parsed modules).  Importing this package is cheap: Lark loads on the first
parse (grammar.py, for one, is read without it).

    module = parse(text, "m.hlo")      # raises HloSyntaxError (and friends) with located diagnostics

frontend.py is the Lark front end (text -> raw records; its scanner, `scan_module`, makes the same
records for a module in the common form without Lark's parser, and leaves anything else, errors
included, to Lark), builder.py turns the records into the IR, parallel.py parses a large text on two
cores."""

__all__ = ["parse", "PARALLEL_MIN_BYTES"]

PARALLEL_MIN_BYTES = 4 << 20      # texts this large are parsed on two cores where that is possible


def parse(text: str, filename: str = "<string>"):
    """Parse HLO text into a Module.  Raises HloSyntaxError with located diagnostics."""
    from ..ir.gcpause import NoGC
    from .builder import build_module
    from .frontend import parse_raw
    with NoGC(promote=True):
        if len(text) >= PARALLEL_MIN_BYTES:
            from . import parallel
            if parallel.usable():
                module = parallel.parse_parallel(text, filename)
                if module is not None:
                    return module
        raw = parse_raw(text, filename)
        return build_module(raw, text, filename)
