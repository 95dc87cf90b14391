"""What every command shares: reading modules, reporting errors, exit codes."""
from __future__ import annotations

import functools
import os
import sys

import click

from ..errors import ExitCode, HloError


def report_errors(fn):
    """Turn HloErrors into located messages on stderr and documented exit codes; never a traceback."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except HloError as e:
            click.echo(e.format(), err=True)
            sys.exit(e.exit_code)
        except click.exceptions.ClickException:
            raise
        except click.exceptions.Exit:
            raise
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            sys.exit(130)
        except BrokenPipeError:
            # the reader went away (hlo fmt x | head): not an error of ours
            try:
                sys.stdout = open(os.devnull, "w")
            except OSError:
                pass
            sys.exit(ExitCode.OK)
        except RecursionError:
            click.echo("error: the module is nested too deeply to process", err=True)
            sys.exit(ExitCode.FAILURE)
        except MemoryError:
            click.echo("error: out of memory", err=True)
            sys.exit(ExitCode.FAILURE)
        except Exception as e:  # a bug of ours: say so plainly
            if os.environ.get("HLO_DEBUG"):
                raise
            click.echo(f"internal error: {type(e).__name__}: {e}\n"
                       "This is a bug in hlo; rerun with HLO_DEBUG=1 for a traceback and please report it.",
                       err=True)
            sys.exit(ExitCode.INTERNAL)

    return wrapper


def load_module(path: str, use_cache: bool = True, with_text: bool = False):
    """Read and parse PATH ('-' for stdin); with_text=True also returns the source text."""
    from ..source import read_source
    text, name = read_source(path)
    if use_cache:
        from ..cache import cached_parse
        module = cached_parse(text, name)
    else:
        from ..parser import parse
        module = parse(text, name)
    return (module, text) if with_text else module


no_cache_option = click.option("--no-cache", is_flag=True, help="Do not read or write the parse cache.")
