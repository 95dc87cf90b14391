"""hlo: read XLA's HLO text, check it, and run it."""
from .version import __version__  # noqa: E402

from .errors import (HloError, HloEvalError, HloInputError, HloMemoryLimitError,  # noqa: E402
                     HloReferenceError, HloResourceError, HloShapeError, HloSyntaxError, HloUnsupportedError)


def parse(text: str, filename: str = "<string>"):
    """Parse HLO text into a Module (see hlo_cli.ir.module)."""
    from .parser import parse as _parse
    return _parse(text, filename)


def parse_file(path: str, *, use_cache: bool = True, module: str | int | None = None):
    """Parse an HLO file ('-' for standard input).  A file holding several modules (an XLA lit test,
    a PyTorch/XLA saved-graph file, pasted dumps) needs `module`: its 0-based number or its name
    (HloInputError otherwise, listing them); parse_modules gives them all."""
    from .sources import load
    return load(path, None if module is None else str(module), use_cache)[0]


def parse_modules(path: str, *, use_cache: bool = True) -> list:
    """Every module of an HLO file, in file order (see hlo_cli.sources)."""
    from .sources import parse_module, read_modules
    return [parse_module(m, use_cache) for m in read_modules(path).modules]


def run(module_or_text, *args, hook=None, **options):
    """Run a module (or HLO text) on arrays and return the result (see hlo_cli.interpreter.run)."""
    from .interpreter import run as _run
    return _run(module_or_text, *args, hook=hook, **options)


__all__ = ["run", "__version__", "parse", "parse_file", "parse_modules", "HloError", "HloSyntaxError",
           "HloShapeError", "HloEvalError", "HloInputError", "HloResourceError", "HloMemoryLimitError",
           "HloReferenceError", "HloUnsupportedError"]
