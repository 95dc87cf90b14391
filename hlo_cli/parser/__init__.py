"""HLO text -> IR.  The parser knows nothing of files or caches (hlo_cli.sources reads files and
keeps the on-disk cache of parsed modules).  `parse` loads Lark on first use: importing this package
(for grammar.py, or for the ir's gcpause) stays cheap."""

__all__ = ["parse"]


def __getattr__(name):
    if name == "parse":
        from .frontend import parse
        return parse
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
