"""HLO text -> IR."""
from .frontend import parse, parse_file, read_source

__all__ = ["parse", "parse_file", "read_source"]
