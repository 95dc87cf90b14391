"""What every command shares: reading modules, reporting errors, exit codes."""
from __future__ import annotations

import errno
import functools
import io
import os
import signal
import sys

import click

from ..errors import ExitCode, HloError


# the errors of a write that could not be made: no space, over quota, file too large, reader gone
_WRITE_FAILED = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EPIPE}


def _drop_stdout():
    """Point standard output at /dev/null, so that what is still buffered for it does not fail
    again when the interpreter exits."""
    try:
        fd = os.open(os.devnull, os.O_WRONLY)
        os.dup2(fd, sys.stdout.fileno())
        os.close(fd)
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
        pass


def stdout_console(width: int = 160):
    """A rich Console on standard output (`width` columns when it is a file or a pipe) whose
    closed pipe is reported as every other failed write is (exit 2), not by rich's SystemExit(1)."""
    from rich.console import Console

    class _Console(Console):
        def on_broken_pipe(self):
            self.quiet = True
            raise BrokenPipeError(errno.EPIPE, "the reader of standard output went away")

    con = _Console(highlight=False)
    if not con.is_terminal:
        con = _Console(highlight=False, width=width)
    return con


class Terminated(BaseException):
    """SIGTERM or SIGHUP arrived: unwinds like Ctrl-C (KeyboardInterrupt), so that every output
    writer removes its temporary file on the way out."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def _on_signal(signum, frame):
    for name in ("SIGTERM", "SIGHUP"):          # a second signal must not cut the cleanup short
        sig = getattr(signal, name, None)
        if sig is not None:
            signal.signal(sig, signal.SIG_IGN)
    raise Terminated(signum)


def _catch_termination() -> list:
    """SIGTERM and SIGHUP raise Terminated (where they would kill the process outright; a signal
    the caller ignores, as under nohup, stays ignored).  Returns what to restore."""
    previous = []
    for name in ("SIGTERM", "SIGHUP"):
        sig = getattr(signal, name, None)
        try:
            if sig is not None and signal.getsignal(sig) == signal.SIG_DFL:
                signal.signal(sig, _on_signal)
                previous.append(sig)
        except (ValueError, OSError):           # not the main thread, or an embedding that forbids it
            pass
    return previous


def _restore(previous: list):
    for sig in previous:
        try:
            signal.signal(sig, signal.SIG_DFL)
        except (ValueError, OSError):
            pass


def report_errors(fn):
    """Turn HloErrors into located messages on stderr and documented exit codes; never a traceback."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        previous = _catch_termination()
        try:
            return guarded(*args, **kwargs)
        finally:
            _restore(previous)

    def guarded(*args, **kwargs):
        try:
            result = fn(*args, **kwargs)
            sys.stdout.flush()          # a write that fails fails here, not at exit (exit 120)
            return result
        except HloError as e:
            click.echo(e.format(), err=True)
            sys.exit(e.exit_code)
        except click.exceptions.ClickException:
            raise
        except click.exceptions.Exit:
            raise
        except SystemExit as e:
            # what is still buffered for standard output is written now, not when the interpreter
            # exits (a failure there would turn the exit status into 120)
            try:
                sys.stdout.flush()
            except (OSError, ValueError) as err:
                _drop_stdout()
                if not e.code:
                    click.echo(f"error: cannot write the output: {getattr(err, 'strerror', None) or err}", err=True)
                    sys.exit(ExitCode.USAGE)
            raise
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            sys.exit(130)
        except Terminated as e:
            click.echo("terminated", err=True)
            sys.exit(128 + e.signum)
        except BrokenPipeError:
            # the reader went away (hlo fmt x | head): the output could not be written (exit 2, like
            # a full disk), said without a message (the reader wanted no more)
            _drop_stdout()
            sys.exit(ExitCode.USAGE)
        except OSError as e:
            if e.errno not in _WRITE_FAILED:
                _internal(e)
            # a write to an output failed (standard output on a full disk, /dev/full): exit 2
            _drop_stdout()
            click.echo(f"error: cannot write the output: {e.strerror or e}", err=True)
            sys.exit(ExitCode.USAGE)
        except RecursionError:
            click.echo("error: the module is nested too deeply to process", err=True)
            sys.exit(ExitCode.FAILURE)
        except MemoryError:
            click.echo("error: out of memory", err=True)
            sys.exit(ExitCode.OUT_OF_MEMORY)
        except Exception as e:  # a bug of ours: say so plainly
            _internal(e)

    return wrapper


def _internal(e: BaseException):
    if os.environ.get("HLO_DEBUG"):
        raise e
    click.echo(f"internal error: {type(e).__name__}: {e}\n"
               "This is a bug in hlo; rerun with HLO_DEBUG=1 for a traceback and please report it.",
               err=True)
    sys.exit(ExitCode.INTERNAL)


def load_module(path: str, use_cache: bool = True, with_text: bool = False, module: str | None = None,
                option: str = "--module"):
    """Read PATH ('-' for stdin) and parse its module `module` (a 0-based index or a module name;
    None: the file must hold exactly one).  with_text=True also returns the text the module was parsed
    from: the file's text with the lines before the module blanked, so positions are the file's."""
    from ..sources import load
    mod, src = load(path, module, use_cache, option)
    return (mod, src.text) if with_text else mod


max_iterations_option = click.option("--max-iterations", type=click.IntRange(min=0), default=None,
                                     help="Fail a while loop that runs more iterations than this.")
elided_constants_option = click.option("--allow-elided-constants", type=click.Choice(["zeros", "random"]),
                                       default=None,
                                       help="Run modules whose dump elided constants ({...}), filling them this way.")
no_cache_option = click.option("--no-cache", is_flag=True, help="Do not read or write the parse cache.")
module_option = click.option("--module", "-m", "module_choice", metavar="N|NAME", default=None,
                             help="Which module of a file that holds several (an XLA lit test with "
                                  "'// -----', a PyTorch/XLA saved-graph file): its 0-based number or its "
                                  "name.  `hlo info FILE` lists them.")


stage_option = click.option("--stage", "stage", metavar="STAGE", default=None,
                            help="In an XLA dump directory (--xla_dump_to=DIR): the stage to read, with --module "
                                 "NAME|NNNN choosing the module when it holds several: before_optimizations, "
                                 "after_optimizations, a step number SSSS of the file names, or a pass name "
                                 "([PIPELINE:]PASS, the dump after it ran; PASS#K its K-th occurrence, PASS#last "
                                 "the last).  `hlo info DIR` lists the modules and their stages.")


def resolve_stage(path: str, module_choice: str | None, stage: str | None, stage_option: str = "--stage",
                  module_option: str = "--module") -> tuple[str, str | None]:
    """pipeline.prepare.resolve_stage, its note on stderr."""
    from ..pipeline.prepare import resolve_stage as resolve
    return resolve(path, module_choice, stage, stage_option, module_option,
                   note=lambda text: click.echo(text, err=True))


def stderr_is_terminal() -> bool:
    """The progress display is for a person watching: only when stderr is a terminal."""
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError, OSError):
        return False
