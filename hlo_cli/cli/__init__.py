"""The `hlo` command: a click group with one module per command.

Commands are imported only when they run, so `hlo --help` stays instant.
"""
from __future__ import annotations

import gc
import importlib
import os

import click

from .. import __version__

# The hlo program's collector: a command allocates mostly acyclic objects (IR, arrays) that reference
# counting frees, yet Python's default (a collection per 700 net new containers) ran ~100
# collections over the objects of its imports in a 0.5 s run, 25-50 ms of CPU; at 20000 a run
# makes two or three, at the same peak memory (benchmarks/results/regress_2026-11-29.json).
gc.set_threshold(20000, 10, 10)

_COMMANDS = {
    "bisect": ("hlo_cli.cli.bisect", "bisect", "Find the first XLA pass after which a module's results change."),
    "check": ("hlo_cli.cli.check", "check", "Check modules against XLA's shape, layout and type rules."),
    "diff": ("hlo_cli.cli.diff", "diff", "Run two modules on the same inputs and compare every value."),
    "extract": ("hlo_cli.cli.extract", "extract", "Cut an instruction out into a small module with its real values."),
    "fmt": ("hlo_cli.cli.fmt", "fmt", "Print a module in XLA's canonical text form."),
    "graph": ("hlo_cli.cli.graph", "graph", "Draw a module as a graph: DOT, SVG, HTML, Model Explorer JSON."),
    "info": ("hlo_cli.cli.info", "info", "Summarize a module: entry signature, counts, opcodes, sources."),
    "isolate": ("hlo_cli.cli.isolate", "isolate", "Run each instruction alone on XLA: where do hlo and XLA differ?"),
    "run": ("hlo_cli.cli.run", "run", "Run a module on inputs with the NumPy interpreter."),
    "shrink": ("hlo_cli.cli.shrink", "shrink", "Reduce a module while a condition (a NaN, a mismatch...) holds."),
}


class _LazyGroup(click.Group):
    def list_commands(self, ctx):
        return list(_COMMANDS)

    def get_command(self, ctx, name):
        if name not in _COMMANDS:
            return None
        mod, attr, _ = _COMMANDS[name]
        return getattr(importlib.import_module(mod), attr)

    def main(self, args=None, *rest, **kwargs):
        """As click's, but a command run from the command line (no `args` given: sys.argv) ends
        without tearing down the interpreter's objects one by one (a large module's IR: ~0.1 s)
        once its output is flushed, its threads have ended and the exit handlers have run.  A caller
        passing `args` (click's test runner, a library) gets click's own behaviour."""
        if args is not None or rest or not kwargs.get("standalone_mode", True) or os.environ.get("HLO_SLOW_EXIT"):
            return super().main(args, *rest, **kwargs)
        try:
            super().main(args, *rest, **kwargs)
            code = 0
        except SystemExit as e:
            code = e.code
        _quick_exit(code)

    def format_commands(self, ctx, formatter):
        rows = [(name, help_) for name, (_, _, help_) in _COMMANDS.items()]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


def _quick_exit(code) -> None:
    """Leave with `code` (SystemExit's: None, an int, or a message for stderr) as the interpreter's
    own exit would, minus freeing every object: the standard streams flushed, threading's exit
    hooks run and the other non-daemon threads waited for (threading._shutdown, which the
    interpreter itself calls: joining a thread pool's idle worker before its hook tells it to stop
    waits for ever), the atexit handlers run.  Where a stream cannot be flushed (a closed pipe)
    the ordinary exit takes over, with its own reporting."""
    import atexit
    import sys
    import threading
    if code is None:
        status = 0
    elif isinstance(code, int):
        status = code
    else:
        raise SystemExit(code)          # a message: the ordinary exit prints it
    try:
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:
                stream.flush()
    except (OSError, ValueError):
        raise SystemExit(status)
    # as the interpreter's own exit does: threading's exit hooks first (they tell a thread pool's
    # idle workers to stop), then every other non-daemon thread joined
    shutdown = getattr(threading, "_shutdown", None)
    if shutdown is not None:
        shutdown()
    else:                                   # pragma: no cover -- (every CPython from 3.4 has it)
        raise SystemExit(status)
    atexit._run_exitfuncs()
    try:
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:
                stream.flush()
    except (OSError, ValueError):
        pass
    os._exit(status & 0xFF if status >= 0 else 1)


EPILOG = """Exit codes: 0 success; 1 the module is wrong (syntax or shape error, failed run,
mismatch); 2 usage error or unreadable input; 3 internal error in hlo (please report);
4 out of memory (the message names the instruction and the bytes asked for);
5 hlo run refused: the estimated memory is above --max-memory; 6 the reference run could not be
made (--reference xla: JAX missing, XLA refused or crashed on the module); 7 hlo cannot run the
module (an instruction it has no implementation of, such as a compiled Triton kernel: not a fault of the
module; hlo diff: nothing differed up to where it stopped); 8 hlo bisect undecided (stages that
could not be run leave the verdict open).
Set HLO_DEBUG=1 to see Python tracebacks of internal errors."""


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]}, epilog=EPILOG)
@click.version_option(__version__, "-V", "--version", prog_name="hlo")
def main():
    """Read XLA's HLO text, check it, and run it."""
    _show_hlo_warnings()


def _show_hlo_warnings():
    """Library HloWarnings print as `warning: MESSAGE` on stderr (once each), not Python's form."""
    import warnings

    from ..errors import HloWarning
    shown = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None):
        if issubclass(category, HloWarning):
            click.echo(f"warning: {message}", err=True)
        else:
            shown(message, category, filename, lineno, file, line)
    warnings.showwarning = show


__all__ = ["main"]
