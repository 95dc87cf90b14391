"""What `hlo isolate`, `hlo extract` and `hlo shrink` share: reading the module and its inputs as
`hlo run` and `hlo diff` do."""
from __future__ import annotations

import click

from .common import elided_constants_option, max_iterations_option


def input_options(fn):
    """--input/--inputs/--random-inputs/--seed, as `hlo run` takes them."""
    for opt in reversed([
        click.option("--input", "-i", "inputs", multiple=True, metavar="[NAME=]FILE.npy",
                     help="An input array, as for `hlo run`: in parameter order, or bound to parameter NAME (or argN)."),
        click.option("--inputs", "inputs_npz", metavar="ARGS.npz",
                     help="An .npz archive of inputs keyed by parameter names or arg0, arg1, ...; or an HloSnapshot "
                          ".pb (without it, a snapshot given as MODULE supplies its own arguments)."),
        click.option("--random-inputs", is_flag=True, help="Fill every parameter with deterministic random values."),
        click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True,
                     help="Seed for --random-inputs and rng."),
        click.option("--module", "-m", "module_choice", metavar="N|NAME", default=None,
                     help="Which module of a file that holds several."),
        max_iterations_option,
        elided_constants_option,
        click.option("--no-check", is_flag=True, help="Do not check the module (hlo check's rules) before running it."),
        click.option("--no-cache", is_flag=True, help="Do not read or write the parse cache."),
    ]):
        fn = opt(fn)
    return fn


def load_checked(path: str, choice, no_check: bool, allow_elided, no_cache: bool):
    """The module of PATH (and its text), checked as `hlo run` checks it before running."""
    from ..pipeline.prepare import load_checked as load
    return load(path, choice, not no_check, allow_elided, not no_cache)


def arguments(module, path: str, inputs, inputs_npz, random_inputs, seed):
    """(the arguments, the snapshot PATH is or None): read as `hlo diff` reads them; a snapshot
    given as the module supplies its arguments when no inputs are given."""
    from ..pipeline.inputs import arguments_of
    return arguments_of(module, path, inputs, inputs_npz, random_inputs, seed,
                        note=lambda text: click.echo(text, err=True))


def run_options(seed, max_iterations, allow_elided_constants):
    from ..interpreter import RunOptions
    return RunOptions(seed=seed, max_iterations=max_iterations, elided_constants=allow_elided_constants)


class PhaseLine:
    """A status line on stderr (progress.Display) when SHOW and stderr is a terminal; `set(text)` says
    what is being done.  A context manager: the line goes away at the end."""

    def __init__(self, show: bool):
        from .common import stderr_is_terminal
        self.display = None
        if show and stderr_is_terminal():
            from .progress import Display
            self.display = Display()

    def __enter__(self):
        if self.display is not None:
            self.display.start()
        return self

    def set(self, text: str):
        if self.display is not None:
            self.display.phase = text

    def __exit__(self, *exc):
        if self.display is not None:
            self.display.stop()
