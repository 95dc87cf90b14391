"""HLO text -> IR.  The parser knows nothing of files or caches (hlo_cli.sources reads files and
keeps the on-disk cache of parsed modules).  Importing this package is cheap: Lark loads on the first
parse (grammar.py, for one, is read without it).

    module = parse(text, "m.hlo")      # raises HloSyntaxError (and friends) with located diagnostics

frontend.py is the Lark front end (text -> raw records; its scanner, `scan_module`, makes the same
records for a module in the common form without Lark's parser, and leaves anything else, errors
included, to Lark), builder.py turns the records into the IR, parallel.py parses and checks a
large text on two cores (`hlo check` only: checking is the work the two processes share out)."""

import os

__all__ = ["parse", "two_cores", "PARALLEL_MIN_BYTES"]

PARALLEL_MIN_BYTES = 4 << 20      # texts this large are parsed on two cores where that is possible
# (HLO_PARALLEL_MIN_BYTES overrides it, for tests: parallel.min_bytes)


def two_cores(text: str) -> bool:
    """Whether `text` is worth parsing (and checking) on two cores, and this machine has a core free
    (parallel.py: HLO_PARALLEL=1, HLO_NO_PARALLEL=1 and HLO_PARALLEL_MIN_BYTES decide for tests)."""
    if len(text) < PARALLEL_MIN_BYTES and "HLO_PARALLEL_MIN_BYTES" not in os.environ:
        return False
    from . import parallel
    return parallel.wanted(text)


def parse(text: str, filename: str = "<string>"):
    """Parse HLO text into a Module.  Raises HloSyntaxError with located diagnostics."""
    from ..ir.gcpause import NoGC
    from .builder import build_module
    from .frontend import parse_raw
    # (in one process: shipping a second part's IR back from a child costs more than parsing it here)
    with NoGC(promote=True):
        raw = parse_raw(text, filename)
        return build_module(raw, text, filename)
