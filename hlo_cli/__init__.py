"""hlo: read XLA's HLO text, check it, and run it."""
__version__ = "0.1.0"

from .errors import HloError, HloEvalError, HloInputError, HloShapeError, HloSyntaxError  # noqa: E402


def parse(text: str, filename: str = "<string>"):
    """Parse HLO text into a Module (see hlo_cli.ir.module)."""
    from .parser import parse as _parse
    return _parse(text, filename)


def parse_file(path: str, *, use_cache: bool = True):
    """Parse an HLO file ('-' for standard input)."""
    from .parser import parse_file as _parse_file
    return _parse_file(path, use_cache=use_cache)


def run(module_or_text, *args, hook=None, **options):
    """Run a module (or HLO text) on arrays and return the result (see hlo_cli.interpreter.run)."""
    from .interpreter import run as _run
    return _run(module_or_text, *args, hook=hook, **options)


__all__ = ["run", "__version__", "parse", "parse_file", "HloError", "HloSyntaxError", "HloShapeError",
           "HloEvalError", "HloInputError"]
